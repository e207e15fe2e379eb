//! The figure of a circus-against-nginx run: the ratio against object size,
//! one line per way of driving the load, with the target and this
//! machine's ceiling beside it; and each server's CPU per byte.

use crate::{
    BenchError,
    versus::{Drive, Load, LoadFigures},
};
use circus_plot::{Chart, Scale, Series};
use std::path::Path;

/// The line a load belongs to.
fn family(load: &Load) -> &'static str {
    match load.drive {
        Drive::Wrk { close: false, .. } => "HTTP/1.1 keep-alive",
        Drive::Wrk { close: true, .. } => "HTTP/1.1 new connection",
        Drive::H2 { .. } => "h2, 100 streams",
        Drive::Downloads { .. } => "concurrent curl downloads",
    }
}

/// Writes the two panels to `path` (SVG).
pub(crate) fn write(loads: &[Load], figures: &[LoadFigures], title: &str, path: &Path) -> Result<(), BenchError> {
    let kib = |load: &Load| load.size as f64 / 1024.0;
    let mut families: Vec<&str> = loads.iter().map(family).collect();
    families.dedup();
    let line = |label: String, pick: &dyn Fn(&Load, &LoadFigures) -> Option<f64>| {
        let points = loads.iter().zip(figures).filter_map(|(l, f)| Some((kib(l), pick(l, f)?)));
        Series::new(label, points.collect::<Vec<_>>())
    };
    let mut ratio_lines: Vec<Series> =
        families.iter().map(|fam| line(fam.to_string(), &|l, f| (family(l) == *fam).then_some(f.ratio))).collect();
    let keep_alive = |l: &Load| matches!(l.drive, Drive::Wrk { close: false, .. } | Drive::Downloads { .. });
    ratio_lines.push(line("target".into(), &|l, _| keep_alive(l).then_some(l.target)));
    ratio_lines.push(line("ceiling (HTTP/1.1)".into(), &|l, f| keep_alive(l).then_some(f.ceiling)));
    let cpu_lines = ["circus", "nginx"]
        .into_iter()
        .enumerate()
        .map(|(s, server)| line(format!("{server}, HTTP/1.1"), &|l, f| keep_alive(l).then_some(f.cpu_s_per_gb[s])))
        .collect();
    // Log y axes: ratios from a half to many times, CPU per byte over
    // three orders of magnitude from 1 KiB to 1 GiB.
    let chart = |name: &str, y_label: &str, y_scale, series| Chart {
        title: format!("{title}: {name}"),
        x_label: "object size (KiB)".into(),
        y_label: y_label.into(),
        x_scale: Scale::Log2,
        y_scale,
        series,
        ..Chart::default()
    };
    let charts = [
        chart("circus / nginx", "ratio (median of rounds)", Scale::Log2, ratio_lines),
        chart("server CPU per byte", "CPU s per GB of bodies", Scale::Log10, cpu_lines),
    ];
    circus_plot::write_grid_svg(path, &charts, 2).map_err(|e| BenchError::Setup(format!("plot: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_way_of_driving_the_load_is_a_line_beside_the_target_and_the_ceiling() {
        let load = |name: &str, drive, size| Load { name: name.into(), drive, size, target: 1.5 };
        let loads = [
            load("1KiB keep-alive", Drive::Wrk { object: "1k.bin", conns: 64, close: false }, 1 << 10),
            load("1MiB keep-alive", Drive::Wrk { object: "1m.bin", conns: 16, close: false }, 1 << 20),
            load("1KiB new conn", Drive::Wrk { object: "1k.bin", conns: 64, close: true }, 1 << 10),
            load("1KiB h2", Drive::H2 { object: "1k.bin", conns: 16, streams: 100 }, 1 << 10),
        ];
        let figures: Vec<LoadFigures> =
            (0..4).map(|i| LoadFigures { ratio: 0.5 + f64::from(i), ceiling: 2.0, cpu_s_per_gb: [1.0, 2.0] }).collect();
        let dir = std::env::temp_dir().join(format!("circus-versus-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("defaults.svg");
        write(&loads, &figures, "test run", &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        for label in
            ["HTTP/1.1 keep-alive", "HTTP/1.1 new connection", "h2, 100 streams", "target", "ceiling (HTTP/1.1)"]
        {
            assert!(svg.contains(label), "legend lacks {label}");
        }
        assert!(svg.contains("test run: circus / nginx") && svg.contains("nginx, HTTP/1.1"));
    }
}
