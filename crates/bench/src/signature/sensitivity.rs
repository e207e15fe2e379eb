//! What the curves say about sensitivity: how light-load response grows
//! with added latency (Martin's d(response)/dL), where it starts to grow,
//! and the least-squares slopes these take.
//!
//! Light load is read from the mix's mean: each class's mean at the
//! lightest step, weighted by its share of the mix, so that the figure is
//! the mix's whatever the step drew (a 1.5 s light step draws about a dozen
//! 16 MiB downloads, and each of those weighs as much as a few hundred
//! small answers). Its standard error is the sampling error within the run:
//! each class's spread of response times over its count. It does not cover
//! what moves from run to run (the machine's state), nor how far the points
//! lie from a straight line.

use super::Curve;

impl Curve {
    /// Mean response time at the lightest step with each class weighted by
    /// its share of the mix (`shares`), ms. The plain mean where the step
    /// has no classes' means (it kept none); NaN where a class drew no
    /// answer, whose share no mean can stand for.
    pub fn light_mix_mean_ms(&self, shares: &[f64]) -> f64 {
        let Some(step) = self.steps.first() else { return f64::NAN };
        if step.class_mean_ms.len() != shares.len() {
            return step.mean_ms;
        }
        shares.iter().zip(&step.class_mean_ms).map(|(share, ms)| share * ms).sum()
    }

    /// The standard error of [`Curve::light_mix_mean_ms`], ms: each
    /// class's own, weighted by its share. NaN where the mix's mean is not
    /// the classes' weighted (see there) or a class's error is unknown.
    pub fn light_mix_mean_se_ms(&self, shares: &[f64]) -> f64 {
        let Some(step) = self.steps.first() else { return f64::NAN };
        if step.class_mean_ms.len() != shares.len() || step.class_mean_se_ms.len() != shares.len() {
            return f64::NAN;
        }
        shares.iter().zip(&step.class_mean_se_ms).map(|(share, se)| (share * se).powi(2)).sum::<f64>().sqrt()
    }
}

/// The least-squares slope of `y` against `x`; NaN without two distinct `x`.
pub fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let (mx, my) = points.iter().fold((0.0, 0.0), |(a, b), &(x, y)| (a + x / n, b + y / n));
    let (num, den) = points.iter().fold((0.0, 0.0), |(a, b), &(x, y)| (a + (x - mx) * (y - my), b + (x - mx).powi(2)));
    if den == 0.0 { f64::NAN } else { num / den }
}

/// The standard error of [`slope`] from each point's own (`se`, of its
/// `y`, in order): the slope is a sum of the `y`s, each weighted by how far
/// its `x` lies from the mean, over the sum of those squared distances.
/// NaN where the slope is.
pub fn slope_error(points: &[(f64, f64)], se: &[f64]) -> f64 {
    assert_eq!(points.len(), se.len(), "one standard error a point");
    let n = points.len() as f64;
    let mx = points.iter().map(|&(x, _)| x / n).sum::<f64>();
    let sxx: f64 = points.iter().map(|&(x, _)| (x - mx).powi(2)).sum();
    if sxx == 0.0 {
        return f64::NAN;
    }
    points.iter().zip(se).map(|(&(x, _), e)| ((x - mx) / sxx * e).powi(2)).sum::<f64>().sqrt()
}

/// The largest added latency (us) whose light-load mean response (the
/// mix's) is within 10% of the baseline's: the edge of the insensitive
/// region.
pub fn insensitive_edge(curves: &[&Curve], shares: &[f64]) -> f64 {
    let base = curves.first().map_or(f64::NAN, |c| c.light_mix_mean_ms(shares));
    curves.iter().take_while(|c| c.light_mix_mean_ms(shares) <= base * 1.1).last().map_or(0.0, |c| c.value)
}

/// Response time added per unit of added one-way latency, at light load
/// (the mix's mean), over the points from 1 ms up (the linear region).
pub fn latency_sensitivity(curves: &[&Curve], shares: &[f64]) -> f64 {
    slope(&linear_region(curves, |c| c.light_mix_mean_ms(shares)))
}

/// The standard error of [`latency_sensitivity`] within the run.
pub fn latency_sensitivity_error(curves: &[&Curve], shares: &[f64]) -> f64 {
    let points = linear_region(curves, |c| c.light_mix_mean_ms(shares));
    let se: Vec<f64> = linear_region(curves, |c| c.light_mix_mean_se_ms(shares)).iter().map(|&(_, e)| e).collect();
    slope_error(&points, &se)
}

/// The same for one class of the mix alone.
pub fn class_latency_sensitivity(curves: &[&Curve], class: usize) -> f64 {
    slope(&linear_region(curves, |c| c.light_class_ms(class)))
}

/// (added latency in us, `light_ms` in us) of the curves from 1 ms up.
fn linear_region(curves: &[&Curve], light_ms: impl Fn(&Curve) -> f64) -> Vec<(f64, f64)> {
    curves.iter().filter(|c| c.value >= 1000.0).map(|c| (c.value, light_ms(c) * 1e3)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::openloop::Step;

    const SHARES: [f64; 3] = [0.85, 0.14, 0.01];

    /// A curve at `value` whose light step has the plain mean `mean_ms`
    /// and, when given, these classes' means and errors.
    fn light(value: f64, mean_ms: f64, classes: Option<(Vec<f64>, Vec<f64>)>) -> Curve {
        let (class_mean_ms, class_mean_se_ms) = classes.unwrap_or_default();
        let step =
            Step { offered: 100.0, delivered: 100.0, mean_ms, class_mean_ms, class_mean_se_ms, ..Step::default() };
        Curve { server: "circus".into(), value, steps: vec![step], knee: vec![] }
    }

    #[test]
    fn the_slope_of_a_line_is_its_gradient_and_its_error_follows_each_points() {
        assert!((slope(&[(0.0, 1.0), (1.0, 4.0), (2.0, 7.0)]) - 3.0).abs() < 1e-9);
        assert!(slope(&[(1.0, 1.0)]).is_nan());
        // x = 0, 1, 3: mean 4/3, Sxx = 14/3; weights (x - mean) / Sxx =
        // -2/7, -1/14, 5/14. Errors 1, 2, 4: sqrt(4/49 + 4/196 + 400/196).
        let points = [(0.0, 0.0), (1.0, 5.0), (3.0, 2.0)];
        let expected = (4.0f64 / 49.0 + 4.0 / 196.0 + 400.0 / 196.0).sqrt();
        assert!((slope_error(&points, &[1.0, 2.0, 4.0]) - expected).abs() < 1e-12);
        // Reversed errors weigh the far point less.
        assert!(slope_error(&points, &[4.0, 2.0, 1.0]) < expected);
        // Equal errors: the textbook sigma / sqrt(Sxx).
        assert!((slope_error(&points, &[1.0; 3]) - (3.0f64 / 14.0).sqrt()).abs() < 1e-12);
        // No slope, no error.
        assert!(slope_error(&[], &[]).is_nan());
        assert!(slope_error(&[(1.0, 1.0), (1.0, 2.0)], &[1.0, 1.0]).is_nan());
    }

    #[test]
    fn latency_sensitivity_and_the_insensitive_edge_come_from_light_load() {
        // 0.3 ms flat up to 150 us, then 3 x the added latency; no class
        // means kept: the plain mean.
        let curves: Vec<Curve> = [0.0, 10.0, 150.0, 1000.0, 4000.0, 10_000.0]
            .iter()
            .map(|&l| light(l, if l <= 150.0 { 0.3 } else { 0.3 + 3.0 * l / 1e3 }, None))
            .collect();
        let refs: Vec<&Curve> = curves.iter().collect();
        assert!((latency_sensitivity(&refs, &SHARES) - 3.0).abs() < 1e-9);
        assert_eq!(insensitive_edge(&refs, &SHARES), 150.0);
        assert!(latency_sensitivity_error(&refs, &SHARES).is_nan());
    }

    #[test]
    fn the_light_load_mean_weights_each_class_by_its_share_not_by_what_the_step_drew() {
        // Small answers take 1 ms + L, medium 2 ms + 2 L, large 100 ms +
        // 10 L; the step drew twice the large share, so its plain mean
        // runs high and its slope with it.
        let curves: Vec<Curve> = [0.0, 1000.0, 10_000.0, 40_000.0]
            .iter()
            .map(|&l| {
                let ms = l / 1e3;
                let means = vec![1.0 + ms, 2.0 + 2.0 * ms, 100.0 + 10.0 * ms];
                let drawn = [0.84, 0.14, 0.02];
                let plain = drawn.iter().zip(&means).map(|(d, m)| d * m).sum();
                light(l, plain, Some((means, vec![0.1, 1.0, 10.0])))
            })
            .collect();
        let refs: Vec<&Curve> = curves.iter().collect();
        // 0.85 x 1 + 0.14 x 2 + 0.01 x 10 = 1.23; the draw would say 1.32.
        assert!((latency_sensitivity(&refs, &SHARES) - 1.23).abs() < 1e-9);
        assert!((curves[1].light_mix_mean_ms(&SHARES) - (0.85 * 2.0 + 0.14 * 4.0 + 0.01 * 110.0)).abs() < 1e-9);
        assert!((class_latency_sensitivity(&refs, 2) - 10.0).abs() < 1e-9);
        // Each light mean's error: sqrt(0.085^2 + 0.14^2 + 0.1^2) =
        // 0.191899 ms; over x = 1, 10, 40 ms (Sxx = 834 ms^2) the slope's
        // is that over sqrt(Sxx): 0.191899 / 28.8791 = 0.0066449.
        let se = (0.085f64.powi(2) + 0.14f64.powi(2) + 0.1f64.powi(2)).sqrt();
        assert!((curves[1].light_mix_mean_se_ms(&SHARES) - se).abs() < 1e-12);
        assert!((latency_sensitivity_error(&refs, &SHARES) - 0.0066449).abs() < 1e-6);
        // A class that drew nothing: no mix's mean, and no error.
        let sparse = light(1000.0, 5.0, Some((vec![2.0, 4.0, f64::NAN], vec![0.1, 1.0, f64::NAN])));
        assert!(sparse.light_mix_mean_ms(&SHARES).is_nan());
        assert!(sparse.light_mix_mean_se_ms(&SHARES).is_nan());
    }
}
