//! Drawing one chart panel onto an SVG drawing area.

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::axis::{axis_range, min_max, plottable, tick_formatter};
use crate::{Chart, PlotError, Scale};

pub(crate) type Area<'a, CT = Shift> = DrawingArea<SVGBackend<'a>, CT>;

const FONT: &str = "sans-serif";
// plotters' SVG backend writes `font-size = size / 1.24`, so these are a bit
// larger than the pixel sizes that end up in the document.
const TITLE_SIZE: f64 = 22.0;
const DESC_SIZE: f64 = 17.0;
const TICK_SIZE: f64 = 15.0;
const LEGEND_SIZE: f64 = 15.0;
/// Rough average glyph width as a fraction of the rendered font size.
const GLYPH_WIDTH: f64 = 0.6;
const LEGEND_ROW: u32 = 20;
const LEGEND_SWATCH: i32 = 26;
const LEGEND_GAP: i32 = 18;
const MARGIN: u32 = 12;

/// Tableau 10: distinct, colour-blind friendly-ish series colours.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];
const MARKER_KINDS: usize = 6;

pub(crate) fn draw_err(e: impl std::fmt::Display) -> PlotError {
    PlotError::Draw(e.to_string())
}

fn series_color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// The chart's series with non-plottable points removed.
fn clean_series(chart: &Chart) -> Vec<Vec<(f64, f64)>> {
    chart
        .series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .copied()
                .filter(|&(x, y)| plottable(chart.x_scale, x) && plottable(chart.y_scale, y))
                .collect()
        })
        .collect()
}

/// Draws `chart` into `area` (which must already be filled with a background).
pub(crate) fn draw_chart(area: &Area<'_>, chart: &Chart) -> Result<(), PlotError> {
    let data = clean_series(chart);
    let all = || data.iter().flatten();
    let (Some((x_lo, x_hi)), Some((y_lo, y_hi))) = (min_max(all().map(|p| p.0)), min_max(all().map(|p| p.1))) else {
        return Err(PlotError::NoData { title: chart.title.clone() });
    };
    let x = axis_range(chart.x_scale, x_lo, x_hi, false);
    let y = axis_range(chart.y_scale, y_lo, y_hi, chart.y_from_zero);

    let (width, height) = area.dim_in_pixel();
    let labels: Vec<&str> = chart.series.iter().map(|s| s.label.as_str()).collect();
    let legend = legend_layout(&labels, width.saturating_sub(2 * MARGIN));
    let legend_height = legend.rows * LEGEND_ROW + if legend.rows > 0 { MARGIN } else { 0 };
    let (plot_area, legend_area) = area.split_vertically(height.saturating_sub(legend_height));

    let panel = Panel { chart, data: &data, x, y };
    match chart.x_scale {
        Scale::Linear => panel.with_x(&plot_area, x.0..x.1)?,
        Scale::Log2 => panel.with_x(&plot_area, (x.0..x.1).log_scale().base(2.0))?,
        Scale::Log10 => panel.with_x(&plot_area, (x.0..x.1).log_scale())?,
    }
    draw_legend(&legend_area, &legend)
}

/// Draws the title and a framed "no data" message.
pub(crate) fn draw_no_data(area: &Area<'_>, title: &str) -> Result<(), PlotError> {
    let inner = area.margin(MARGIN, MARGIN, MARGIN, MARGIN).titled(title, (FONT, TITLE_SIZE)).map_err(draw_err)?;
    let (w, h) = inner.dim_in_pixel();
    let (w, h) = (w as i32, h as i32);
    inner.draw(&Rectangle::new([(0, 0), (w - 1, h - 1)], BLACK.mix(0.3))).map_err(draw_err)?;
    let grey = BLACK.mix(0.6);
    let style = TextStyle::from((FONT, DESC_SIZE)).color(&grey).pos(Pos::new(HPos::Center, VPos::Center));
    inner.draw_text("no data", &style, (w / 2, h / 2)).map_err(draw_err)
}

struct Panel<'c> {
    chart: &'c Chart,
    data: &'c [Vec<(f64, f64)>],
    x: (f64, f64),
    y: (f64, f64),
}

impl Panel<'_> {
    fn with_x<X>(&self, area: &Area<'_>, x_spec: X) -> Result<(), PlotError>
    where
        X: AsRangedCoord<Value = f64>,
        X::CoordDescType: ValueFormatter<f64>,
    {
        let y = self.y;
        match self.chart.y_scale {
            Scale::Linear => self.draw(area, x_spec, y.0..y.1),
            Scale::Log2 => self.draw(area, x_spec, (y.0..y.1).log_scale().base(2.0)),
            Scale::Log10 => self.draw(area, x_spec, (y.0..y.1).log_scale()),
        }
    }

    fn draw<X, Y>(&self, area: &Area<'_>, x_spec: X, y_spec: Y) -> Result<(), PlotError>
    where
        X: AsRangedCoord<Value = f64>,
        Y: AsRangedCoord<Value = f64>,
        X::CoordDescType: ValueFormatter<f64>,
        Y::CoordDescType: ValueFormatter<f64>,
    {
        let chart = self.chart;
        let x_fmt = tick_formatter(chart.x_scale, self.x.0, self.x.1);
        let y_fmt = tick_formatter(chart.y_scale, self.y.0, self.y.1);
        let y_label_width = [self.y.0, self.y.1].iter().map(|v| text_width(&y_fmt(v), TICK_SIZE)).fold(0, i32::max);
        // Room for half of the last x tick label, which is centred on the axis end.
        let right_margin = (text_width(&x_fmt(&self.x.1), TICK_SIZE) / 2 + 4).max(MARGIN as i32);
        let (width, height) = area.dim_in_pixel();

        let mut ctx = ChartBuilder::on(area)
            .caption(&chart.title, (FONT, TITLE_SIZE))
            .margin(MARGIN)
            .margin_right(right_margin)
            .x_label_area_size(48)
            .y_label_area_size((y_label_width + 34).clamp(48, 120))
            .build_cartesian_2d(x_spec, y_spec)
            .map_err(draw_err)?;
        ctx.configure_mesh()
            .x_desc(chart.x_label.as_str())
            .y_desc(chart.y_label.as_str())
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .x_labels((width / 90).clamp(3, 12) as usize)
            .y_labels((height / 45).clamp(3, 12) as usize)
            .label_style((FONT, TICK_SIZE))
            .axis_desc_style((FONT, DESC_SIZE))
            .light_line_style(BLACK.mix(0.04))
            .draw()
            .map_err(draw_err)?;

        for (i, points) in self.data.iter().enumerate() {
            let color = series_color(i);
            ctx.draw_series(LineSeries::new(points.iter().copied(), color.stroke_width(2))).map_err(draw_err)?;
            let plot = ctx.plotting_area();
            for &p in points {
                draw_marker(plot, p, i)?;
            }
        }
        Ok(())
    }
}

/// Draws the marker of series `i` centred on `at` (in `area`'s coordinates).
fn draw_marker<CT>(area: &Area<'_, CT>, at: CT::From, i: usize) -> Result<(), PlotError>
where
    CT: CoordTranslate,
{
    let color = series_color(i);
    let filled = color.filled();
    let outline = color.stroke_width(2);
    let square = |style: ShapeStyle| Rectangle::new([(-4, -4), (4, 4)], style);
    let result = match (i / PALETTE.len() + i) % MARKER_KINDS {
        0 => area.draw(&Circle::new(at, 4, filled)),
        1 => area.draw(&(EmptyElement::at(at) + square(filled))),
        2 => area.draw(&TriangleMarker::new(at, 5, filled)),
        3 => area.draw(&Cross::new(at, 4, outline)),
        4 => area.draw(&Circle::new(at, 4, outline)),
        _ => area.draw(&(EmptyElement::at(at) + square(outline))),
    };
    result.map_err(draw_err)
}

/// Estimated rendered width of `text` in pixels.
fn text_width(text: &str, size: f64) -> i32 {
    (text.chars().count() as f64 * size / 1.24 * GLYPH_WIDTH).ceil() as i32
}

struct LegendLayout<'s> {
    /// (label, x offset, row) for each series, in series order.
    entries: Vec<(&'s str, i32, u32)>,
    rows: u32,
}

/// Flows legend entries left to right into rows no wider than `width`.
fn legend_layout<'s>(labels: &[&'s str], width: u32) -> LegendLayout<'s> {
    let width = width as i32;
    let mut entries = Vec::with_capacity(labels.len());
    let (mut x, mut row) = (0, 0);
    for &label in labels {
        let w = LEGEND_SWATCH + 6 + text_width(label, LEGEND_SIZE);
        if x > 0 && x + w > width {
            x = 0;
            row += 1;
        }
        entries.push((label, x, row));
        x += w + LEGEND_GAP;
    }
    let rows = if labels.is_empty() { 0 } else { row + 1 };
    LegendLayout { entries, rows }
}

/// Draws the legend strip: line + marker + label per series, centred rows.
fn draw_legend(area: &Area<'_>, legend: &LegendLayout<'_>) -> Result<(), PlotError> {
    let (width, _) = area.dim_in_pixel();
    let style = TextStyle::from((FONT, LEGEND_SIZE)).pos(Pos::new(HPos::Left, VPos::Center));
    for row in 0..legend.rows {
        let in_row = || legend.entries.iter().enumerate().filter(|e| e.1.2 == row);
        let row_width = in_row()
            .map(|(_, &(label, x, _))| x + LEGEND_SWATCH + 6 + text_width(label, LEGEND_SIZE))
            .max()
            .unwrap_or(0);
        let left = ((width as i32 - row_width) / 2).max(MARGIN as i32);
        let y = (row * LEGEND_ROW + LEGEND_ROW / 2) as i32;
        for (i, &(label, x, _)) in in_row() {
            let x = left + x;
            let line = PathElement::new(vec![(x, y), (x + LEGEND_SWATCH, y)], series_color(i).stroke_width(2));
            area.draw(&line).map_err(draw_err)?;
            draw_marker(area, (x + LEGEND_SWATCH / 2, y), i)?;
            area.draw_text(label, &style, (x + LEGEND_SWATCH + 6, y)).map_err(draw_err)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legend_wraps_long_label_lists() {
        let one = legend_layout(&["a", "b"], 600);
        assert_eq!(one.rows, 1);
        let labels = ["a fairly long policy name"; 6];
        let many = legend_layout(&labels, 400);
        assert!(many.rows >= 3, "rows = {}", many.rows);
        assert!(many.entries.iter().all(|e| e.1 >= 0));
        assert_eq!(legend_layout(&[], 400).rows, 0);
    }

    #[test]
    fn series_styles_are_distinct() {
        let styles: std::collections::HashSet<_> = (0..30)
            .map(|i| {
                let c = series_color(i);
                ((c.0, c.1, c.2), (i / PALETTE.len() + i) % MARKER_KINDS)
            })
            .collect();
        assert_eq!(styles.len(), 30);
    }
}
