//! A figure's runs as CSV rows and as an SVG grid of panels.

use super::{
    FigureError,
    spec::{Extra, FigureSpec, PanelSpec, RunSpec},
};
use crate::SimReport;
use circus_plot::{Chart, Scale, Series};
use std::{fmt::Write as _, path::Path};

pub(super) const CSV_HEADER: &str = "figure,panel,series,x,net_bytes_per_s,disk_bytes_per_s,miss_ratio,\
download_mean_s,download_p95_s,download_ideal_s,clients,clients_completed,warmup_s,measured_s,wall_s";

/// One row per run, in the figure's order: panel, series, x.
pub(super) fn csv(spec: &FigureSpec, reports: &[&SimReport]) -> String {
    let mut out = format!("{CSV_HEADER}\n");
    for (run, r) in spec.runs.iter().zip(reports) {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.3}",
            spec.number,
            field(&run.panel),
            field(&run.series),
            run.x,
            r.net_bytes_per_s,
            r.disk_bytes_per_s,
            r.miss_ratio,
            r.download_mean_s,
            r.download_p95_s,
            r.download_ideal_s,
            r.clients,
            r.clients_completed,
            r.warmup_s,
            r.measured_s,
            r.wall_s,
        );
    }
    out
}

/// Quotes a CSV field when it needs it.
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_owned() }
}

pub(super) fn write_csv(path: &Path, spec: &FigureSpec, reports: &[&SimReport]) -> Result<(), FigureError> {
    std::fs::write(path, csv(spec, reports)).map_err(|source| FigureError::Io { path: path.to_owned(), source })
}

pub(super) fn write_svg(path: &Path, spec: &FigureSpec, reports: &[&SimReport]) -> Result<(), FigureError> {
    let charts: Vec<Chart> = spec.panels.iter().map(|p| chart(spec, p, reports)).collect();
    circus_plot::write_grid_svg(path, &charts, spec.columns)?;
    Ok(())
}

fn chart(spec: &FigureSpec, panel: &PanelSpec, reports: &[&SimReport]) -> Chart {
    let runs: Vec<(&RunSpec, &SimReport)> =
        spec.runs.iter().zip(reports.iter().copied()).filter(|(run, _)| run.panel == panel.group).collect();
    let sweep = runs.iter().filter(|(run, _)| !run.reference).map(|(run, _)| run.x);
    let (lo, hi) = sweep.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| (lo.min(x), hi.max(x)));
    let mut labels: Vec<&str> = vec![];
    for (run, _) in &runs {
        if !labels.contains(&run.series.as_str()) {
            labels.push(&run.series);
        }
    }
    let mut series: Vec<Series> = labels
        .iter()
        .map(|&label| {
            let mut points = vec![];
            for (run, r) in runs.iter().filter(|(run, _)| run.series == label) {
                let y = panel.metric.value(r);
                if run.reference && lo <= hi {
                    points.extend([(lo, y), (hi, y)]);
                } else {
                    points.push((run.x, y));
                }
            }
            Series::new(label, points)
        })
        .collect();
    let circus = runs.iter().filter(|(run, _)| run.series == "circus");
    match panel.extra {
        Extra::None => {}
        Extra::Ideal => series.push(Series::new("ideal", circus.map(|(run, r)| (run.x, r.download_ideal_s)))),
        Extra::Offered => {
            series.push(Series::new("offered", circus.map(|(run, r)| (run.x, r.offered_bytes_per_s / 1e6))))
        }
    }
    // A log axis labels only powers of ten: within one decade it would show
    // no numbers at all, so such a panel falls back to linear.
    let ys = series.iter().flat_map(|s| &s.points).map(|p| p.1).filter(|y| y.is_finite() && *y > 0.0);
    let (y_lo, y_hi) = ys.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let y_scale = if panel.y_scale == Scale::Log10 && y_hi < 10.0 * y_lo { Scale::Linear } else { panel.y_scale };
    Chart {
        title: panel.title.clone(),
        x_label: spec.x_label.clone(),
        y_label: panel.metric.axis_label().to_owned(),
        x_scale: spec.x_scale,
        y_scale,
        y_from_zero: y_scale == Scale::Linear,
        series,
    }
}
