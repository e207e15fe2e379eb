//! The run's figure: one panel per measure, phase on the x axis, a line
//! per server.

use crate::{BenchError, Row};
use circus_plot::{Chart, Series};
use std::path::Path;

pub fn write(rows: &[Row], scenario: &str, path: &Path) -> Result<(), BenchError> {
    let mut servers: Vec<&str> = Vec::new();
    for r in rows {
        let s = r.server.split(' ').next().unwrap_or_default();
        if !servers.contains(&s) {
            servers.push(s);
        }
    }
    let chart = |title: &str, y: &str, figure: &str, scale: f64| Chart {
        title: format!("{scenario}: {title}"),
        x_label: "phase (1 cold, 2 repeats)".into(),
        y_label: y.into(),
        y_from_zero: true,
        series: servers
            .iter()
            .map(|&s| {
                let points = rows.iter().filter(|r| r.server.split(' ').next() == Some(s)).filter_map(|r| {
                    let phase = if r.server.ends_with("phase1-cold") { 1.0 } else { 2.0 };
                    Some((phase, r.get(figure)? * scale))
                });
                Series::new(s, points.collect::<Vec<_>>())
            })
            .collect(),
        ..Chart::default()
    };
    let charts = [
        chart("mean latency", "s", "latency_mean_s", 1.0),
        chart("mean time to first byte, new objects", "s", "ttfb_new_mean_s", 1.0),
        chart("hit ratio", "hits / requests", "hit_ratio", 1.0),
        chart("byte hit ratio", "1 - origin bytes / bytes served", "byte_hit_ratio", 1.0),
        chart("throughput", "MB/s", "throughput_bytes_per_s", 1e-6),
        chart("server CPU", "CPU s per phase", "server_cpu_s", 1.0),
    ];
    circus_plot::write_grid_svg(path, &charts, 2).map_err(|e| BenchError::Setup(format!("plot: {e}")))
}
