//! Files written per run: JSON lines, CSV and an SVG of the main figures.

use crate::{BenchError, io_err, scenarios::Scenario};
use circus_plot::{Chart, Scale, Series};
use serde_json::{Map, Value};
use std::{fmt::Write as _, path::Path};

/// Writes `NAME.json` (one object per line), `NAME.csv` and `NAME.svg` into `dir`.
pub fn write_all(dir: &Path, scenario: &Scenario, rows: &[Map<String, Value>]) -> Result<(), BenchError> {
    std::fs::create_dir_all(dir).map_err(io_err(format!("creating {}", dir.display())))?;
    let name = scenario.name;
    std::fs::write(dir.join(format!("{name}.json")), json_lines(rows)).map_err(io_err("writing JSON"))?;
    std::fs::write(dir.join(format!("{name}.csv")), csv(rows)).map_err(io_err("writing CSV"))?;
    let charts = charts(scenario, rows);
    circus_plot::write_grid_svg(&dir.join(format!("{name}.svg")), &charts, 2)
        .map_err(|e| BenchError::Setup(format!("writing the plot: {e}")))
}

pub fn json_lines(rows: &[Map<String, Value>]) -> String {
    rows.iter().map(|r| format!("{}\n", Value::Object(r.clone()))).collect()
}

/// Columns are the union of the rows' keys: scenario, x and server first,
/// then the rest in name order.
pub fn csv(rows: &[Map<String, Value>]) -> String {
    let first = ["scenario", "x", "server"];
    let mut cols: Vec<&String> = Vec::new();
    for r in rows {
        for k in r.keys() {
            if !cols.contains(&k) {
                cols.push(k);
            }
        }
    }
    cols.sort_by_key(|c| (first.iter().position(|f| f == c).unwrap_or(first.len()), c.as_str()));
    let mut out = cols.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(",");
    out.push('\n');
    for r in rows {
        let cells: Vec<String> = cols
            .iter()
            .map(|c| match r.get(*c) {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) if s.contains([',', '"']) => format!("\"{}\"", s.replace('"', "\"\"")),
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
            })
            .collect();
        let _ = writeln!(out, "{}", cells.join(","));
    }
    out
}

fn charts(scenario: &Scenario, rows: &[Map<String, Value>]) -> Vec<Chart> {
    let panel = |title: &str, y_label: &str, key: &str, scale: f64| {
        let mut series = Vec::new();
        for server in scenario.servers.iter().map(|s| s.name()) {
            let pts = points(rows, server, key, scale);
            if !pts.is_empty() {
                series.push(Series::new(server, pts));
            }
            let sim = points(rows, server, &format!("sim_{key}"), scale);
            if !sim.is_empty() {
                series.push(Series::new(format!("{server} (sim)"), sim));
            }
        }
        Chart {
            title: format!("{}: {title}", scenario.title),
            x_label: scenario.x_label.into(),
            y_label: y_label.into(),
            x_scale: if scenario.log2_x { Scale::Log2 } else { Scale::Linear },
            y_from_zero: true,
            series,
            ..Chart::default()
        }
    };
    vec![
        panel("network throughput", "MB/s", "net_bytes_per_s", 1e-6),
        panel("storage throughput", "MB/s", "storage_bytes_per_s", 1e-6),
        panel("miss ratio", "storage bytes / sent bytes", "miss_ratio", 1.0),
        panel("mean download time", "s", "download_mean_s", 1.0),
    ]
}

fn points(rows: &[Map<String, Value>], server: &str, key: &str, scale: f64) -> Vec<(f64, f64)> {
    rows.iter()
        .filter(|r| r.get("server").and_then(Value::as_str) == Some(server))
        .filter_map(|r| Some((r.get("x")?.as_f64()?, r.get(key)?.as_f64()? * scale)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn csv_has_the_union_of_columns_and_blank_nulls() {
        let rows: Vec<Map<String, Value>> = [
            json!({"server": "circus", "x": 0.4, "sim_miss_ratio": 0.1}),
            json!({"server": "nginx, sendfile", "x": 0.4, "miss_ratio": null}),
        ]
        .into_iter()
        .map(|v| v.as_object().unwrap().clone())
        .collect();
        let text = csv(&rows);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "x,server,miss_ratio,sim_miss_ratio");
        assert_eq!(lines[1], "0.4,circus,,0.1");
        assert_eq!(lines[2], "0.4,\"nginx, sendfile\",,");
    }
}
