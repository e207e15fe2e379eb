//! Axis ranges (padding, degenerate data) and tick-label formatting.

use crate::Scale;

/// Fraction of the data span added on each side of an axis.
const PAD_FRACTION: f64 = 0.05;

/// Whether `v` can be placed on an axis with the given scale.
pub(crate) fn plottable(scale: Scale, v: f64) -> bool {
    v.is_finite() && (scale == Scale::Linear || v > 0.0)
}

/// Minimum and maximum of `values`, or `None` when empty.
pub(crate) fn min_max(values: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    values.into_iter().fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

/// Axis range for data spanning `lo..=hi` (all values plottable on `scale`).
///
/// The range is padded by ~5% of the span (in log space for log scales).
/// A zero span is widened so plotters always gets a non-empty range.
/// `from_zero` pulls a linear range out to include 0 (ignored for log scales).
pub(crate) fn axis_range(scale: Scale, lo: f64, hi: f64, from_zero: bool) -> (f64, f64) {
    match scale {
        Scale::Linear => linear_range(lo, hi, from_zero),
        Scale::Log2 | Scale::Log10 => log_range(lo, hi),
    }
}

fn linear_range(lo: f64, hi: f64, from_zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = if from_zero { (lo.min(0.0), hi.max(0.0)) } else { (lo, hi) };
    let span = hi - lo;
    if span > 0.0 && span.is_finite() {
        let pad = span * PAD_FRACTION;
        // Do not pad past zero when the axis is anchored there.
        lo = if from_zero && lo == 0.0 { 0.0 } else { lo - pad };
        hi = if from_zero && hi == 0.0 { 0.0 } else { hi + pad };
    } else {
        let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        lo -= pad;
        hi += pad;
    }
    (lo, hi)
}

fn log_range(lo: f64, hi: f64) -> (f64, f64) {
    let (llo, lhi) = (lo.ln(), hi.ln());
    let span = lhi - llo;
    if span > 0.0 && span.is_finite() {
        let pad = span * PAD_FRACTION;
        ((llo - pad).exp(), (lhi + pad).exp())
    } else {
        (lo / 2.0, hi * 2.0)
    }
}

/// Formats tick values for an axis showing `lo..hi` on `scale`.
pub(crate) fn tick_formatter(scale: Scale, lo: f64, hi: f64) -> impl Fn(&f64) -> String {
    move |v: &f64| match scale {
        Scale::Linear => format_linear(*v, lo, hi),
        Scale::Log2 | Scale::Log10 => format_log(*v),
    }
}

/// Number of decimals so that ticks over `span` stay distinct.
fn decimals_for_span(span: f64) -> usize {
    if span > 0.0 && span.is_finite() { (2.0 - span.log10().floor()).clamp(0.0, 10.0) as usize } else { 2 }
}

fn format_linear(v: f64, lo: f64, hi: f64) -> String {
    let span = (hi - lo).abs();
    if v.abs() <= span * 1e-9 {
        return "0".to_owned();
    }
    let max_abs = lo.abs().max(hi.abs());
    if !(1e-3..1e6).contains(&max_abs) {
        // Scientific: enough mantissa digits to tell neighbouring ticks apart.
        let mag = |x: f64| x.log10().floor();
        let digits = (mag(max_abs) - mag(span) + 1.0).clamp(0.0, 6.0) as usize;
        return trim_sci(&format!("{v:.digits$e}"));
    }
    let decimals = decimals_for_span(span);
    trim_fixed(&format!("{v:.decimals$}"))
}

fn format_log(v: f64) -> String {
    let a = v.abs();
    if (1.0..1e7).contains(&a) {
        let r = v.round();
        if (v - r).abs() <= 1e-6 * a {
            return format!("{r:.0}");
        }
    }
    if (1e-4..1e7).contains(&a) {
        // Four significant digits.
        let decimals = (3.0 - a.log10().floor()).clamp(0.0, 10.0) as usize;
        trim_fixed(&format!("{v:.decimals$}"))
    } else {
        trim_sci(&format!("{v:.2e}"))
    }
}

/// "12.500" -> "12.5", "3.000" -> "3", "-0.00" -> "0".
fn trim_fixed(s: &str) -> String {
    let t = if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.') } else { s };
    if t == "-0" { "0".to_owned() } else { t.to_owned() }
}

/// "1.50e9" -> "1.5e9", "2.00e-3" -> "2e-3".
fn trim_sci(s: &str) -> String {
    match s.split_once('e') {
        Some((mantissa, exp)) => format!("{}e{exp}", trim_fixed(mantissa)),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_range_pads_five_percent() {
        let (lo, hi) = axis_range(Scale::Linear, 10.0, 20.0, false);
        assert!((lo - 9.5).abs() < 1e-9 && (hi - 20.5).abs() < 1e-9);
    }

    #[test]
    fn linear_range_from_zero_starts_at_zero() {
        let (lo, hi) = axis_range(Scale::Linear, 10.0, 20.0, true);
        assert_eq!(lo, 0.0);
        assert!((hi - 21.0).abs() < 1e-9);
    }

    #[test]
    fn degenerate_ranges_are_widened() {
        for (scale, v) in [(Scale::Linear, 0.0), (Scale::Linear, -3.0), (Scale::Log2, 4096.0), (Scale::Log10, 1e-3)] {
            let (lo, hi) = axis_range(scale, v, v, false);
            assert!(lo < v && v < hi, "{scale:?} {v}: {lo}..{hi}");
            assert!(scale == Scale::Linear || lo > 0.0);
        }
    }

    #[test]
    fn log_range_stays_positive() {
        let (lo, hi) = axis_range(Scale::Log2, 4096.0, 1_048_576.0, true);
        assert!(lo > 0.0 && lo < 4096.0 && hi > 1_048_576.0);
    }

    #[test]
    fn tick_labels_are_readable() {
        let log2 = tick_formatter(Scale::Log2, 3000.0, 2e6);
        assert_eq!(log2(&4096.000000001), "4096");
        assert_eq!(log2(&65536.0), "65536");
        assert_eq!(log2(&1_048_576.0), "1048576");
        assert_eq!(log2(&0.5), "0.5");
        let lin = tick_formatter(Scale::Linear, 0.0, 1.0);
        assert_eq!(lin(&0.30000000000000004), "0.3");
        assert_eq!(lin(&1.0), "1");
        assert_eq!(lin(&-1e-17), "0");
        let big = tick_formatter(Scale::Linear, 0.0, 2.5e9);
        assert_eq!(big(&1.5e9), "1.5e9");
    }
}
