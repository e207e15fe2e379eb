//! Renders a sample 2x2 grid of charts: `cargo run -p circus-plot --example sample_grid [PATH]`.

use circus_plot::{Chart, Scale, Series, write_grid_svg};

fn main() -> Result<(), circus_plot::PlotError> {
    let path = std::env::args().nth(1).unwrap_or_else(|| "/tmp/plot-sample.svg".to_owned());
    let loads: Vec<f64> = (1..=9).map(|i| f64::from(i) / 10.0).collect();
    let policies = ["fifo", "deficit round robin", "lottery", "stride", "earliest deadline"];
    let throughput = Chart {
        title: "Network throughput vs system load".into(),
        x_label: "system load".into(),
        y_label: "throughput (Gbit/s)".into(),
        y_from_zero: true,
        series: policies
            .iter()
            .enumerate()
            .map(|(k, p)| {
                let cap = 6.0 + k as f64 * 0.8;
                Series::new(*p, loads.iter().map(|&l| (l, cap * (1.0 - (-3.0 * l).exp()))))
            })
            .collect(),
        ..Chart::default()
    };
    let sizes: Vec<f64> = (12..=20).map(|p| f64::from(1u32 << p)).collect();
    let sweep = Chart {
        title: "Read latency vs block size".into(),
        x_label: "block size (bytes)".into(),
        y_label: "p99 latency (us)".into(),
        x_scale: Scale::Log2,
        y_scale: Scale::Log10,
        series: vec![
            Series::new("direct", sizes.iter().map(|&s| (s, 20.0 + s / 100.0))),
            Series::new("cached", sizes.iter().map(|&s| (s, 5.0 + s / 800.0))),
            Series::new("not measured", []),
        ],
        ..Chart::default()
    };
    let single = Chart {
        title: "Single point".into(),
        x_label: "x".into(),
        y_label: "y".into(),
        series: vec![Series::new("one", [(3.0, 7.0)])],
        ..Chart::default()
    };
    let empty = Chart { title: "Not run yet".into(), ..Chart::default() };
    let bytes = Chart {
        title: "Bytes moved vs clients".into(),
        x_label: "clients".into(),
        y_label: "bytes/s".into(),
        series: vec![
            Series::new("a", (1..=8).map(|c| (f64::from(c), 3e8 * f64::from(c)))),
            Series::new("b", (1..=8).map(|c| (f64::from(c), 2.9e8 * f64::from(c).sqrt()))),
        ],
        ..Chart::default()
    };
    let tiny = Chart {
        title: "Queueing delay vs arrival rate".into(),
        x_label: "arrival rate (1/s)".into(),
        y_label: "delay (s)".into(),
        x_scale: Scale::Log10,
        series: vec![Series::new("m/m/1", (0..12).map(|i| (0.01 * 2f64.powi(i), 1e-4 * (1.0 + f64::from(i)))))],
        ..Chart::default()
    };
    let charts = [throughput, sweep, bytes, single, tiny, empty];
    write_grid_svg(std::path::Path::new(&path), &charts, 3)?;
    println!("wrote {path}");
    Ok(())
}
