//! Line charts rendered to SVG for circus simulator and benchmark figures.
//!
//! A [`Chart`] is one panel: a title, axis labels, axis [`Scale`]s and a set
//! of [`Series`] (one line per policy, say). [`render_svg`] turns one chart
//! into an SVG document; [`render_grid_svg`] lays several charts out as a grid
//! of panels in one document, and [`write_grid_svg`] writes such a grid to a
//! file. Rendering is pure (no global state, no system fonts needed: text is
//! emitted as SVG `<text>` elements and laid out with a width estimate).
//!
//! Each series gets its own colour and point marker, drawn over a line
//! through its points in the order given. The legend sits in a strip below
//! the plot so it never covers data. Points that cannot be drawn are skipped:
//! non-finite coordinates, and zero or negative coordinates on a log axis.
//!
//! ```
//! use circus_plot::{Chart, Scale, Series, render_svg};
//!
//! let chart = Chart {
//!     title: "Network throughput vs system load".into(),
//!     x_label: "system load".into(),
//!     y_label: "throughput (Gbit/s)".into(),
//!     y_from_zero: true,
//!     series: vec![
//!         Series::new("fifo", [(0.2, 1.9), (0.5, 4.6), (0.8, 6.1)]),
//!         Series::new("fair-share", [(0.2, 2.0), (0.5, 4.9), (0.8, 7.3)]),
//!     ],
//!     ..Chart::default()
//! };
//! let svg = render_svg(&chart, 640, 420)?;
//! assert!(svg.contains("fair-share"));
//!
//! // Block-size sweeps read best on a log2 x axis (ticks 4096, 8192, ...).
//! let sweep = Chart {
//!     title: "Latency vs block size".into(),
//!     x_scale: Scale::Log2,
//!     series: vec![Series::new("p99", [(4096.0, 1.0), (1_048_576.0, 9.0)])],
//!     ..Chart::default()
//! };
//! let grid = circus_plot::render_grid_svg(&[chart, sweep], 2, 640, 420)?;
//! assert!(grid.starts_with("<svg"));
//! # Ok::<(), circus_plot::PlotError>(())
//! ```

use std::path::{Path, PathBuf};

use plotters::prelude::*;

mod axis;
mod render;

/// Panel width used by [`write_grid_svg`], in pixels.
pub const DEFAULT_PANEL_WIDTH: u32 = 640;
/// Panel height used by [`write_grid_svg`], in pixels.
pub const DEFAULT_PANEL_HEIGHT: u32 = 440;

/// One line on a chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// `(x, y)` points, joined by the line in this order.
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// A series named `label` through `points`.
    pub fn new(label: impl Into<String>, points: impl IntoIterator<Item = (f64, f64)>) -> Self {
        Self { label: label.into(), points: points.into_iter().collect() }
    }
}

/// How values map onto an axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scale {
    /// Evenly spaced values.
    #[default]
    Linear,
    /// Logarithmic, with ticks at powers of two (block sizes, counts).
    Log2,
    /// Logarithmic, with ticks at powers of ten.
    Log10,
}

/// One chart (a panel).
#[derive(Debug, Clone, Default)]
pub struct Chart {
    /// Title drawn above the plot; also names the chart in errors.
    pub title: String,
    /// X axis description.
    pub x_label: String,
    /// Y axis description.
    pub y_label: String,
    /// X axis scale.
    pub x_scale: Scale,
    /// Y axis scale.
    pub y_scale: Scale,
    /// When true the y axis starts at 0 (for linear scale) rather than at the data minimum.
    pub y_from_zero: bool,
    /// The lines; a series without points still gets a legend entry.
    pub series: Vec<Series>,
}

/// Why a chart could not be rendered or written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The chart has no drawable point (all series empty, non-finite, or
    /// non-positive on a log axis).
    #[error("chart {title:?} has no drawable data points")]
    NoData {
        /// Title of the offending chart.
        title: String,
    },
    /// [`render_grid_svg`] was given no charts.
    #[error("no charts to render")]
    NoCharts,
    /// The requested document size is zero or too large.
    #[error("invalid image size {width}x{height}")]
    InvalidSize {
        /// Requested width in pixels.
        width: u32,
        /// Requested height in pixels.
        height: u32,
    },
    /// plotters reported a drawing failure.
    #[error("drawing failed: {0}")]
    Draw(String),
    /// Writing the SVG file failed.
    #[error("cannot write {}: {source}", path.display())]
    Io {
        /// File (or directory) being written.
        path: PathBuf,
        /// Underlying error.
        source: std::io::Error,
    },
}

fn check_size(width: u32, height: u32) -> Result<(), PlotError> {
    if width == 0 || height == 0 {
        return Err(PlotError::InvalidSize { width, height });
    }
    Ok(())
}

/// Render one chart to an SVG document string (width x height pixels).
///
/// Returns [`PlotError::NoData`] (naming the chart title) when the chart has
/// no drawable point.
pub fn render_svg(chart: &Chart, width: u32, height: u32) -> Result<String, PlotError> {
    check_size(width, height)?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(render::draw_err)?;
        render::draw_chart(&root, chart)?;
        root.present().map_err(render::draw_err)?;
    }
    Ok(svg)
}

/// Render several charts as a grid of panels (`columns` per row) into one SVG
/// document; each panel keeps its own title/axes/legend.
///
/// Panels are filled row by row. `columns` is clamped to `1..=charts.len()`.
/// A chart without drawable data does not fail the grid: its panel shows the
/// title and a framed "no data" message instead. An empty `charts` slice is
/// [`PlotError::NoCharts`].
pub fn render_grid_svg(
    charts: &[Chart],
    columns: usize,
    panel_width: u32,
    panel_height: u32,
) -> Result<String, PlotError> {
    if charts.is_empty() {
        return Err(PlotError::NoCharts);
    }
    check_size(panel_width, panel_height)?;
    let columns = columns.clamp(1, charts.len());
    let rows = charts.len().div_ceil(columns);
    let too_big = PlotError::InvalidSize { width: panel_width, height: panel_height };
    let width = u32::try_from(columns).ok().and_then(|c| c.checked_mul(panel_width));
    let height = u32::try_from(rows).ok().and_then(|r| r.checked_mul(panel_height));
    let (Some(width), Some(height)) = (width, height) else {
        return Err(too_big);
    };

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(render::draw_err)?;
        for (panel, chart) in root.split_evenly((rows, columns)).iter().zip(charts) {
            match render::draw_chart(panel, chart) {
                Err(PlotError::NoData { title }) => render::draw_no_data(panel, &title)?,
                other => other?,
            }
        }
        root.present().map_err(render::draw_err)?;
    }
    Ok(svg)
}

/// Convenience: render_grid_svg and write to `path`, creating parent dirs.
///
/// Panels are [`DEFAULT_PANEL_WIDTH`] x [`DEFAULT_PANEL_HEIGHT`] pixels.
pub fn write_grid_svg(path: &Path, charts: &[Chart], columns: usize) -> Result<(), PlotError> {
    let svg = render_grid_svg(charts, columns, DEFAULT_PANEL_WIDTH, DEFAULT_PANEL_HEIGHT)?;
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| PlotError::Io { path, source }
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    }
    std::fs::write(path, svg).map_err(io_err(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn throughput_chart(title: &str) -> Chart {
        Chart {
            title: title.to_owned(),
            x_label: "system load".to_owned(),
            y_label: "network throughput (Gbit/s)".to_owned(),
            y_from_zero: true,
            series: vec![
                Series::new("fifo", [(0.1, 1.0), (0.5, 4.2), (0.9, 5.0)]),
                Series::new("drr", [(0.1, 1.1), (0.5, 4.8), (0.9, 7.5)]),
                Series::new("lottery", [(0.1, 0.9), (0.5, 3.9), (0.9, 6.2)]),
            ],
            ..Chart::default()
        }
    }

    #[test]
    fn svg_contains_title_and_every_label() {
        let svg = render_svg(&throughput_chart("Throughput vs load"), 640, 420).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("Throughput vs load"));
        for label in ["fifo", "drr", "lottery", "system load", "network throughput"] {
            assert!(svg.contains(label), "missing {label}");
        }
    }

    #[test]
    fn non_finite_points_are_skipped() {
        let mut chart = throughput_chart("nan");
        chart.series[0].points.extend([(f64::NAN, 1.0), (0.7, f64::INFINITY), (f64::NEG_INFINITY, f64::NAN)]);
        let svg = render_svg(&chart, 500, 400).unwrap();
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn single_point_and_equal_values_render() {
        for points in [vec![(3.0, 7.0)], vec![(0.0, 0.0)], vec![(1.0, 5.0), (2.0, 5.0)]] {
            let chart =
                Chart { title: "single".to_owned(), series: vec![Series::new("only", points)], ..Chart::default() };
            let svg = render_svg(&chart, 400, 300).unwrap();
            assert!(svg.contains("only"));
        }
    }

    #[test]
    fn empty_series_gets_legend_entry() {
        let mut chart = throughput_chart("with empty");
        chart.series.push(Series::new("not run", []));
        let svg = render_svg(&chart, 640, 420).unwrap();
        assert!(svg.contains("not run"));
    }

    #[test]
    fn log_scale_chart_renders() {
        let sizes = (12..=20).map(|p| f64::from(1u32 << p));
        let chart = Chart {
            title: "Latency vs block size".to_owned(),
            x_label: "block size (bytes)".to_owned(),
            y_label: "latency (us)".to_owned(),
            x_scale: Scale::Log2,
            y_scale: Scale::Log10,
            series: vec![
                Series::new("direct", sizes.clone().map(|s| (s, s / 100.0))),
                // Non-positive values cannot sit on a log axis: skipped.
                Series::new("cached", sizes.map(|s| (s, s / 400.0)).chain([(0.0, 1.0)])),
            ],
            ..Chart::default()
        };
        let svg = render_svg(&chart, 640, 420).unwrap();
        // plotters writes each text node on its own line.
        for tick in ["4096", "65536", "1048576"] {
            assert!(svg.contains(&format!("\n{tick}\n")), "missing tick {tick}");
        }
        assert!(!svg.contains("4096.0"));
    }

    #[test]
    fn empty_chart_is_no_data() {
        let mut chart = Chart { title: "nothing here".to_owned(), ..Chart::default() };
        let err = render_svg(&chart, 400, 300).unwrap_err();
        assert!(matches!(&err, PlotError::NoData { title } if title == "nothing here"));
        assert!(err.to_string().contains("nothing here"));

        chart.series.push(Series::new("nan", [(f64::NAN, 1.0)]));
        chart.x_scale = Scale::Log10;
        chart.series.push(Series::new("neg", [(-1.0, 1.0)]));
        let err = render_svg(&chart, 400, 300).unwrap_err();
        assert!(matches!(err, PlotError::NoData { .. }));
    }

    #[test]
    fn grid_contains_all_panel_titles() {
        let titles = ["panel one", "panel two", "panel three", "panel four"];
        let charts: Vec<Chart> = titles.iter().map(|t| throughput_chart(t)).collect();
        let svg = render_grid_svg(&charts, 2, 500, 350).unwrap();
        assert!(svg.contains(r#"width="1000""#) && svg.contains(r#"height="700""#));
        for title in titles {
            assert!(svg.contains(title), "missing {title}");
        }
    }

    #[test]
    fn grid_draws_no_data_panel() {
        let charts = [throughput_chart("has data"), Chart { title: "empty panel".to_owned(), ..Chart::default() }];
        let svg = render_grid_svg(&charts, 0, 400, 300).unwrap();
        assert!(svg.contains("empty panel") && svg.contains("no data"));
        assert!(matches!(render_grid_svg(&[], 2, 400, 300), Err(PlotError::NoCharts)));
        assert!(matches!(render_svg(&charts[0], 0, 300), Err(PlotError::InvalidSize { .. })));
    }

    #[test]
    fn write_grid_svg_creates_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("figures/nested/grid.svg");
        let charts = [throughput_chart("written")];
        write_grid_svg(&path, &charts, 3).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("written"));
    }
}
