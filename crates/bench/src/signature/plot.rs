//! The figures of a sweep: each server's signature curves (mean response
//! time against delivered requests per second, one line per value swept),
//! and the saturation point of both servers against the value.

use super::{Curve, Sweep};
use crate::BenchError;
use circus_plot::{Chart, Scale, Series};
use std::path::Path;

pub(crate) fn write(sweep: Sweep, curves: &[Curve], path: &Path) -> Result<(), BenchError> {
    let mut servers: Vec<&str> = curves.iter().map(|c| c.server.as_str()).collect();
    servers.sort_unstable();
    servers.dedup();
    let mut charts: Vec<Chart> = servers
        .iter()
        .map(|&server| Chart {
            title: format!("{server}: signature curves by {}", sweep.unit()),
            x_label: "delivered requests/s".into(),
            y_label: "mean response time (ms)".into(),
            x_scale: Scale::Linear,
            y_scale: Scale::Log10,
            series: curves
                .iter()
                .filter(|c| c.server == server)
                .map(|c| {
                    Series::new(
                        format!("{} = {}", sweep.name(), c.value),
                        c.by_offered().iter().map(|s| (s.delivered, s.mean_ms)).collect::<Vec<_>>(),
                    )
                })
                .collect(),
            ..Chart::default()
        })
        .collect();
    charts.push(Chart {
        title: format!("saturation by {}", sweep.unit()),
        x_label: sweep.unit().into(),
        y_label: "most requests/s delivered".into(),
        // The baseline of latency and overhead is 0: not on a log axis.
        x_scale: if sweep == Sweep::Bandwidth { Scale::Log10 } else { Scale::Linear },
        y_from_zero: true,
        series: servers
            .iter()
            .map(|&server| {
                let points = curves.iter().filter(|c| c.server == server).map(|c| (c.value, c.saturation()));
                Series::new(server, points.collect::<Vec<_>>())
            })
            .collect(),
        ..Chart::default()
    });
    circus_plot::write_grid_svg(path, &charts, 2).map_err(|e| BenchError::Setup(format!("plot: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::openloop::Step;

    #[test]
    fn each_server_gets_its_curves_and_both_share_the_saturation_panel() {
        let curve = |server: &str, value: f64| Curve {
            server: server.into(),
            value,
            steps: (1..4)
                .map(|i| Step { delivered: 100.0 * i as f64, mean_ms: 0.2 * i as f64, ..Step::default() })
                .collect(),
            knee: Vec::new(),
        };
        let curves: Vec<Curve> =
            ["circus", "nginx-sendfile"].iter().flat_map(|s| [curve(s, 0.0), curve(s, 1000.0)]).collect();
        let dir = std::env::temp_dir().join(format!("circus-signature-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.svg");
        write(Sweep::Latency, &curves, &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        for text in ["circus: signature curves", "nginx-sendfile: signature curves", "latency = 1000", "saturation by"]
        {
            assert!(svg.contains(text), "{text} missing");
        }
    }
}
