//! Signature curves (Martin's method for SPECsfs): response time against
//! delivered operations per second as offered load rises, one curve per
//! added one-way latency L, per-request host overhead o, or link
//! bandwidth; circus and nginx in the same run, on the same emulated
//! network and the same content-server mix ([`mix`]).
//!
//! The servers run in a network namespace behind a veth pair; every packet
//! between them and the load generator passes the NFQUEUE line of
//! [`crate::delay`], at every point including the baseline, so that only
//! the swept parameter differs between curves. L is added to packets from
//! the server; o is CPU the host spends, one request at a time, on each
//! request packet; bandwidth is the HTB rate of the server's link.
//!
//! Offered load follows one ladder for both servers: fractions of the
//! higher of their capacities at the baseline, found first by doubling the
//! rate until a step saturates, or of twice what a slower link carries. A step
//! lasts `--seconds`, longer where the rate is low (a slow link), so that
//! it offers a few hundred requests. A curve stops once two steps deliver under
//! 85% of what was offered; then each server's knee is narrowed by
//! bisection between the highest rate it kept up with and the next, so
//! that a saturation point is not the ladder's step (where the curve falls
//! early, as at WAN latencies, one step is a fifth of the baseline's
//! capacity).

mod mix;
mod openloop;
mod plot;
mod sensitivity;

use crate::{
    BenchError, BenchOptions, Report, Row,
    delay::LineSpec,
    io_err, make_file,
    netem::{NetPlan, Network},
    procs::ServerProc,
};
use mix::Mix;
use openloop::{Step, Target};
use sensitivity::{class_latency_sensitivity, insensitive_edge, latency_sensitivity, latency_sensitivity_error, slope};
use std::time::Duration;

/// What a sweep varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sweep {
    Latency,
    Overhead,
    Bandwidth,
}

impl Sweep {
    pub fn name(self) -> &'static str {
        match self {
            Sweep::Latency => "latency",
            Sweep::Overhead => "overhead",
            Sweep::Bandwidth => "bandwidth",
        }
    }

    /// The values swept, in the unit of [`Sweep::unit`]; the first is the
    /// baseline.
    pub fn values(self) -> &'static [f64] {
        match self {
            // One-way, microseconds: the LAN range, then WAN.
            Sweep::Latency => &[0.0, 10.0, 50.0, 150.0, 500.0, 1000.0, 4000.0, 10_000.0, 20_000.0, 40_000.0],
            // Per request, microseconds.
            Sweep::Overhead => &[0.0, 5.0, 10.0, 20.0, 50.0, 100.0],
            // The server's link, Mbit/s.
            Sweep::Bandwidth => &[40_000.0, 10_000.0, 1000.0, 100.0],
        }
    }

    /// The values a run measures: the baseline, then those of `at` (every
    /// value when `at` is empty); a value the sweep does not have is an error.
    pub fn measured(self, at: &[f64]) -> Result<Vec<f64>, BenchError> {
        if let Some(bad) = at.iter().find(|a| !self.values().contains(a)) {
            return Err(BenchError::Setup(format!(
                "--at {bad}: signature-{} measures {:?} ({})",
                self.name(),
                self.values(),
                self.unit()
            )));
        }
        Ok(self
            .values()
            .iter()
            .enumerate()
            .filter(|&(i, v)| i == 0 || at.is_empty() || at.contains(v))
            .map(|(_, &v)| v)
            .collect())
    }

    pub fn unit(self) -> &'static str {
        match self {
            Sweep::Latency => "L (us, one-way)",
            Sweep::Overhead => "o (us per request)",
            Sweep::Bandwidth => "link (Mbit/s)",
        }
    }

    fn line(self, value: f64) -> LineSpec {
        let us = |v: f64| Duration::from_secs_f64(v / 1e6);
        match self {
            Sweep::Latency => LineSpec { delay: us(value), super_packets: true, ..LineSpec::default() },
            Sweep::Overhead => LineSpec { overhead: us(value), super_packets: true, ..LineSpec::default() },
            Sweep::Bandwidth => LineSpec { super_packets: true, ..LineSpec::default() },
        }
    }

    fn link_bps(self, value: f64) -> f64 {
        match self {
            Sweep::Bandwidth => value * 1e6,
            _ => Sweep::Bandwidth.values()[0] * 1e6,
        }
    }

    /// The rates offered at `value`: [`LADDER`] of the baseline capacity
    /// `top`, or of twice what the link carries where that is less
    /// (requests of `mean_bytes` back to back at the link's rate), so that
    /// a slow link's curve has steps below its knee too. Twice: past the
    /// link's rate its 16 MiB downloads stretch while the many small
    /// answers still come, and requests are delivered well beyond it.
    pub fn ladder(self, value: f64, top: f64, mean_bytes: f64) -> Vec<f64> {
        let link = self.link_bps(value) / 8.0 / mean_bytes;
        let full = top.min(LINK_HEADROOM * link);
        LADDER.iter().map(|f| (f * full).round().max(1.0)).collect()
    }
}

/// Fractions of the capacity offered, in order. Coarse near the top: the
/// knee steps narrow it.
const LADDER: [f64; 8] = [0.1, 0.3, 0.5, 0.7, 0.85, 1.0, 1.15, 1.3];

/// How far past what a link carries its ladder climbs ([`Sweep::ladder`]).
const LINK_HEADROOM: f64 = 2.0;

/// A step lasts long enough to offer this many requests (the `--seconds`
/// it is given, longer on a slow link), up to [`LONGEST_STEP`].
const STEP_REQUESTS: f64 = 400.0;
const LONGEST_STEP: Duration = Duration::from_secs(10);

/// How long a step offering `rate` lasts: at least `step_for`.
fn step_time(rate: f64, step_for: Duration) -> Duration {
    let wanted = (STEP_REQUESTS / rate.max(f64::MIN_POSITIVE)).min(LONGEST_STEP.as_secs_f64());
    step_for.max(Duration::from_secs_f64(wanted))
}

/// A step delivering under this share of its offered load is past saturation.
const KEEPS_UP: f64 = 0.85;

/// Steps that narrow each curve's knee after the ladder, each halving the
/// interval where it lies.
const KNEE_STEPS: usize = 2;

/// One server's curve at one value of the sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    pub server: String,
    pub value: f64,
    /// The ladder's steps, in its order.
    pub steps: Vec<Step>,
    /// The steps that narrowed the knee, in the order they ran.
    pub knee: Vec<Step>,
}

impl Curve {
    /// The most responses per second any step delivered.
    pub fn saturation(&self) -> f64 {
        self.steps.iter().chain(&self.knee).map(|s| s.delivered).fold(0.0, f64::max)
    }

    /// Whether the step offering the most delivered it (within
    /// [`KEEPS_UP`]): the curve's top is then the ladder's, not a
    /// saturation point (a lighter step that fell short, a few requests
    /// on a slow link, does not change that). On a link-bound curve the
    /// 16 MiB downloads stretch while the many small answers still come,
    /// so response time, not the delivered rate, shows the knee.
    pub fn kept_up_at_top(&self) -> bool {
        self.by_offered().last().is_some_and(|s| s.delivered >= KEEPS_UP * s.offered)
    }

    /// Every step, the ladder's and the knee's, by offered rate.
    pub fn by_offered(&self) -> Vec<&Step> {
        let mut all: Vec<&Step> = self.steps.iter().chain(&self.knee).collect();
        all.sort_by(|a, b| a.offered.total_cmp(&b.offered));
        all
    }

    /// Mean response time at the lightest step, ms.
    pub fn light_mean_ms(&self) -> f64 {
        self.steps.first().map_or(f64::NAN, |s| s.mean_ms)
    }

    /// The 95th percentile response time of class `class` at the lightest
    /// step, ms.
    pub fn light_class_p95_ms(&self, class: usize) -> f64 {
        self.steps.first().and_then(|s| s.class_p95_ms.get(class).copied()).unwrap_or(f64::NAN)
    }

    /// Mean response time of class `class` at the lightest step, ms.
    pub fn light_class_ms(&self, class: usize) -> f64 {
        self.steps.first().and_then(|s| s.class_mean_ms.get(class).copied()).unwrap_or(f64::NAN)
    }

    pub fn light_p95_ms(&self) -> f64 {
        self.steps.first().map_or(f64::NAN, |s| s.p95_ms)
    }

    /// Mean response time of class `class` at the step offering half the
    /// ladder's full rate (its third), ms.
    pub fn half_load_class_ms(&self, class: usize) -> f64 {
        self.half_load().and_then(|s| s.class_mean_ms.get(class).copied()).unwrap_or(f64::NAN)
    }

    /// The step offering half the ladder's full rate (its third).
    pub fn half_load(&self) -> Option<&Step> {
        self.steps.get(2)
    }
}

/// Where the knee of `steps` lies: the highest rate offered that the
/// server kept up with, and the lowest above it that it did not; `None`
/// when it kept up with every step or with none.
pub fn knee(steps: &[&Step]) -> Option<(f64, f64)> {
    let keeps_up = |s: &&&Step| s.delivered >= KEEPS_UP * s.offered;
    let low = steps
        .iter()
        .filter(keeps_up)
        .map(|s| s.offered)
        .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))))?;
    let high = steps
        .iter()
        .filter(|s| !keeps_up(s) && s.offered > low)
        .map(|s| s.offered)
        .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.min(r))))?;
    Some((low, high))
}

pub async fn run(sweep: Sweep, opts: &BenchOptions, log: &mut (dyn FnMut(&str) + Send)) -> Result<Report, BenchError> {
    if !crate::netem::is_root() {
        return Err(BenchError::Setup("signature curves need root (network namespace, NFQUEUE, HTB)".into()));
    }
    let mix = Mix::content_server();
    let root = opts.work.join("signature");
    std::fs::create_dir_all(&root).map_err(io_err("creating data dir"))?;
    for (i, o) in mix.objects().enumerate() {
        make_file(&root.join(&o.name), o.size, opts.seed + i as u64)?;
    }
    let total: u64 = mix.objects().map(|o| o.size).sum();
    let cache = (total / 15 * 16 + (64 << 20)).max(opts.cache);
    let step_for = Duration::from_secs_f64(opts.seconds);
    let mut top: Option<f64> = None;
    let started = std::time::Instant::now();
    let mut log = |line: &str| log(&format!("[{:>4.0} s] {line}", started.elapsed().as_secs_f64()));
    let mut curves: Vec<Curve> = Vec::new();
    let values = sweep.measured(&opts.at)?;
    for (v, &value) in values.iter().enumerate() {
        let plan = NetPlan {
            id: std::process::id(),
            subnet: Network::free_subnet(std::process::id())?,
            server_link_bps: sweep.link_bps(value),
            class_bps: vec![sweep.link_bps(value)],
            per_class: 8,
            loss: 0.0,
            line: Some(sweep.line(value)),
        };
        let net = Network::up(plan)?;
        let host = net.plan.server_ip().to_string();
        let wrap = net.plan.exec_in();
        let mut args = vec!["--cache".to_string(), cache.to_string()];
        args.extend(opts.server_args.iter().cloned());
        let servers = [
            ServerProc::circus_at(&opts.circus, &root, &args, &host, &wrap)?,
            ServerProc::nginx_at(&root, &opts.work, false, &host, &wrap)?,
        ];
        let targets: Vec<Target> = servers
            .iter()
            .map(|s| {
                let server = s.addr.parse().map_err(|e| BenchError::Setup(format!("{}: {e}", s.addr)))?;
                let sources = (0..net.plan.per_class).map(|i| net.plan.client_ip(0, i)).collect();
                Ok(Target { server, sources, max_conns: 2048 })
            })
            .collect::<Result<_, BenchError>>()?;
        for t in &targets {
            openloop::fetch_each(t, &mix).await?;
        }
        let baseline = match top {
            Some(t) => t,
            None => {
                let mut most: f64 = 0.0;
                for (s, t) in servers.iter().zip(&targets) {
                    let c = capacity(t, &mix, opts.seed).await?;
                    log(&format!("{}: capacity about {c:.0} requests/s", s.name));
                    most = most.max(c);
                }
                *top.insert(most)
            }
        };
        let rates = sweep.ladder(value, baseline, mix.mean_bytes());
        for (s, t) in servers.iter().zip(&targets) {
            let mut steps = Vec::new();
            let mut behind = 0;
            for (i, &rate) in rates.iter().enumerate() {
                let st =
                    measured(s, openloop::step(t, &mix, rate, step_time(rate, step_for), opts.seed + i as u64)).await?;
                let by_class: Vec<String> = mix
                    .classes
                    .iter()
                    .zip(st.class_mean_ms.iter().zip(&st.class_p95_ms).zip(&st.class_unanswered))
                    .map(|(c, ((ms, p95), &lost))| {
                        let lost = if lost > 0 { format!(" ({lost} unanswered)") } else { String::new() };
                        format!("{} {ms:.2} p95 {p95:.2}{lost}", c.label)
                    })
                    .collect();
                log(&format!(
                    "{} {} = {value}: offered {rate:.0}/s delivered {:.0}/s mean {:.3} ms p95 {:.3} ms ({} ms){}{}{}",
                    s.name,
                    sweep.name(),
                    st.delivered,
                    st.mean_ms,
                    st.p95_ms,
                    by_class.join(", "),
                    if st.failed > 0 { format!(" ({} failed)", st.failed) } else { String::new() },
                    if st.straggled_s > 0.1 {
                        format!(" (last answer {:.2} s late)", st.straggled_s)
                    } else {
                        String::new()
                    },
                    if st.saturated { " (saturated)" } else { "" },
                ));
                if st.delivered < KEEPS_UP * rate {
                    behind += 1;
                }
                steps.push(st);
                if behind >= 2 {
                    break;
                }
            }
            let mut curve = Curve { server: s.name.clone(), value, steps, knee: Vec::new() };
            for k in 0..KNEE_STEPS {
                let Some((low, high)) = knee(&curve.by_offered()) else { break };
                let rate = ((low + high) / 2.0).round();
                let seed = opts.seed + (LADDER.len() + k) as u64;
                let st = measured(s, openloop::step(t, &mix, rate, step_time(rate, step_for), seed)).await?;
                log(&format!(
                    "{} {} = {value}: knee between {low:.0} and {high:.0}/s: offered {rate:.0}/s delivered {:.0}/s mean {:.3} ms",
                    s.name,
                    sweep.name(),
                    st.delivered,
                    st.mean_ms,
                ));
                curve.knee.push(st);
            }
            curves.push(curve);
        }
        log(&format!("{} {}/{} done", sweep.name(), v + 1, values.len()));
    }
    let plot_path = opts.work.join(format!("signature-{}.svg", sweep.name()));
    plot::write(sweep, &curves, &plot_path)?;
    log(&format!("plot: {}", plot_path.display()));
    Ok(report(sweep, &curves, &mix, opts.seconds, cache))
}

/// `step` with the CPU that `server` and the whole machine spent on it.
async fn measured(
    server: &ServerProc,
    step: impl std::future::Future<Output = Result<Step, BenchError>>,
) -> Result<Step, BenchError> {
    let (server0, machine0) = (server.cpu_seconds_fine(), crate::procs::machine_busy_seconds());
    let mut st = step.await?;
    st.server_cpu_s = server.cpu_seconds_fine() - server0;
    st.machine_cpu_s = crate::procs::machine_busy_seconds() - machine0;
    Ok(st)
}

/// Roughly the highest rate a server keeps up with: the rate doubles from
/// 250/s until a one-second step delivers under [`KEEPS_UP`] of it.
async fn capacity(target: &Target, mix: &Mix, seed: u64) -> Result<f64, BenchError> {
    let mut rate = 250.0;
    let mut best: f64 = 0.0;
    for _ in 0..12 {
        let st = openloop::step(target, mix, rate, Duration::from_secs(1), seed).await?;
        best = best.max(st.delivered);
        if st.delivered < KEEPS_UP * rate || st.saturated {
            break;
        }
        rate *= 2.0;
    }
    Ok(best)
}

fn report(sweep: Sweep, curves: &[Curve], mix: &Mix, step_s: f64, cache: u64) -> Report {
    let shares: Vec<f64> = mix.classes.iter().map(|c| c.share).collect();
    let names: std::collections::BTreeSet<&str> = curves.iter().map(|c| c.server.as_str()).collect();
    let rows = curves
        .iter()
        .map(|c| {
            let row = Row::new(&c.server)
                .with(sweep.name(), c.value)
                .with("saturation_ops_s", c.saturation())
                .with("light_mean_ms", c.light_mean_ms())
                .with("light_mix_mean_ms", c.light_mix_mean_ms(&shares))
                .with("light_mix_mean_se_ms", c.light_mix_mean_se_ms(&shares))
                .with("light_p95_ms", c.light_p95_ms())
                .with("steps", c.steps.len() as f64)
                .with("knee_steps", c.knee.len() as f64)
                .with("kept_up_at_top", f64::from(u8::from(c.kept_up_at_top())))
                .with("half_load_server_cpu_us_per_req", c.half_load().map_or(f64::NAN, Step::server_us_per_req))
                .with("half_load_machine_cpu_us_per_req", c.half_load().map_or(f64::NAN, Step::machine_us_per_req));
            mix.classes.iter().enumerate().fold(row, |r, (i, class)| {
                r.with(&format!("light_{}_ms", class.label), c.light_class_ms(i))
                    .with(&format!("light_{}_p95_ms", class.label), c.light_class_p95_ms(i))
                    .with(&format!("half_load_{}_ms", class.label), c.half_load_class_ms(i))
            })
        })
        .collect();
    let circus: Vec<&Curve> = curves.iter().filter(|c| c.server == "circus").collect();
    let nginx: Vec<&Curve> = curves.iter().filter(|c| c.server != "circus").collect();
    // A curve that kept up at its ladder's top did not saturate on it:
    // its top is not below anything.
    let below: Vec<String> = circus
        .iter()
        .zip(&nginx)
        .filter(|(c, n)| !c.kept_up_at_top() && c.saturation() < n.saturation())
        .map(|(c, n)| format!("{} at {} ({:.0} < {:.0})", sweep.name(), c.value, c.saturation(), n.saturation()))
        .collect();
    let neither = circus.iter().zip(&nginx).any(|(c, n)| c.kept_up_at_top() && n.kept_up_at_top());
    let mut verdict = match (below.is_empty(), neither) {
        (true, false) => format!("circus saturates at or above nginx at every {} tested", sweep.name()),
        (true, true) => format!("circus saturates at or above nginx at every {} where either saturated", sweep.name()),
        (false, _) => format!("circus saturates below nginx at: {}", below.join(", ")),
    };
    for (name, set) in [("circus", &circus), ("nginx", &nginx)] {
        let unsaturated: Vec<String> = set.iter().filter(|c| c.kept_up_at_top()).map(|c| c.value.to_string()).collect();
        if !unsaturated.is_empty() {
            verdict.push_str(&format!(
                "; {name} kept up at its ladder's top at {} {} (not a saturation point)",
                sweep.name(),
                unsaturated.join(", ")
            ));
        }
    }
    // What each server costs per request, apart from the noise of where
    // a curve falls: at half load, both keep up.
    let cost = |f: fn(&Step) -> f64| -> Vec<f64> {
        circus
            .iter()
            .zip(&nginx)
            .filter_map(|(c, n)| Some(f(c.half_load()?) / f(n.half_load()?)))
            .filter(|r| r.is_finite())
            .collect()
    };
    for (what, ratios) in [("server", cost(Step::server_us_per_req)), ("machine", cost(Step::machine_us_per_req))] {
        if let (Some(lo), Some(hi)) = (ratios.iter().copied().reduce(f64::min), ratios.iter().copied().reduce(f64::max))
        {
            verdict.push_str(&format!(
                "; {what} CPU per request at half load, circus / nginx: {lo:.2}-{hi:.2} over the {} values",
                ratios.len()
            ));
        }
    }
    match sweep {
        Sweep::Latency => {
            verdict.push_str(&format!(
                "; the slow-start model: at most {:.2} x (one round trip per window doubling from a fresh initial window)",
                mix.model_latency_slope()
            ));
            for (name, set) in [("circus", &circus), ("nginx", &nginx)] {
                let by_class: Vec<String> = mix
                    .classes
                    .iter()
                    .enumerate()
                    .map(|(i, class)| format!("{} {:.2}", class.label, class_latency_sensitivity(set, i)))
                    .collect();
                verdict.push_str(&format!(
                    "; {name}: light-load response (the mix's mean) grows {:.2} x (standard error within the run \
                     {:.2}) the added latency from 1 ms ({}), insensitive up to {} us",
                    latency_sensitivity(set, &shares),
                    latency_sensitivity_error(set, &shares),
                    by_class.join(", "),
                    insensitive_edge(set, &shares),
                ));
            }
        }
        Sweep::Overhead => {
            for (name, set) in [("circus", &circus), ("nginx", &nginx)] {
                let points: Vec<(f64, f64)> = set.iter().map(|c| (c.value, c.saturation())).collect();
                verdict.push_str(&format!(
                    "; {name}: saturation changes {:.0} requests/s per us of overhead",
                    slope(&points)
                ));
            }
        }
        Sweep::Bandwidth => {}
    }
    Report {
        scenario: format!("signature-{}", sweep.name()),
        setup: format!(
            "servers in a network namespace, every packet through an NFQUEUE line; open-loop Poisson load of \
             the content-server mix ({:.0} KiB per request on average; small/medium/large {}), offered in steps \
             of {} s (longer where the rate is low, to offer {STEP_REQUESTS} requests) on one ladder for both servers; nginx {} workers (sendfile, tcp_nopush, open_file_cache), \
             circus defaults + --cache {cache}; servers: {}",
            mix.mean_bytes() / 1024.0,
            mix.classes.iter().map(|c| format!("{:.0}%", c.share * 100.0)).collect::<Vec<_>>().join("/"),
            step_s,
            crate::procs::nginx_workers(),
            names.into_iter().collect::<Vec<_>>().join(", "),
        ),
        verdict,
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_knee_lies_between_the_highest_rate_kept_up_with_and_the_next_one_missed() {
        let step = |offered: f64, delivered: f64| Step { offered, delivered, ..Step::default() };
        // Kept up at 100 and 300, fell behind at 500, kept up again at 400
        // (a knee step), fell behind at 700.
        let steps = [step(100.0, 99.0), step(300.0, 290.0), step(500.0, 380.0), step(700.0, 400.0), step(400.0, 395.0)];
        assert_eq!(knee(&steps.iter().collect::<Vec<_>>()), Some((400.0, 500.0)));
        // A noisy step below the knee that fell behind does not count.
        let steps = [step(100.0, 50.0), step(300.0, 290.0), step(500.0, 100.0)];
        assert_eq!(knee(&steps.iter().collect::<Vec<_>>()), Some((300.0, 500.0)));
        // Kept up with everything, or with nothing: no knee to narrow.
        assert_eq!(knee(&[&step(100.0, 100.0), &step(200.0, 200.0)]), None);
        assert_eq!(knee(&[&step(100.0, 10.0), &step(200.0, 20.0)]), None);
    }

    #[test]
    fn the_saturation_counts_the_knee_steps_and_the_curve_is_drawn_by_offered_rate() {
        let step = |offered: f64, delivered: f64| Step { offered, delivered, ..Step::default() };
        let curve = Curve {
            server: "circus".into(),
            value: 0.0,
            steps: vec![step(100.0, 100.0), step(300.0, 200.0)],
            knee: vec![step(200.0, 198.0), step(250.0, 240.0)],
        };
        assert_eq!(curve.saturation(), 240.0);
        let offered: Vec<f64> = curve.by_offered().iter().map(|s| s.offered).collect();
        assert_eq!(offered, [100.0, 200.0, 250.0, 300.0]);
    }

    #[test]
    fn a_curve_that_kept_up_at_its_ladders_top_is_not_called_saturated_below_the_other() {
        let step = |offered: f64, delivered: f64| Step { offered, delivered, ..Step::default() };
        let curve =
            |server: &str, steps: Vec<Step>| Curve { server: server.into(), value: 1000.0, steps, knee: vec![] };
        // Link-bound: both kept up to the ladder's top, nginx's window a
        // little luckier, circus's lightest step a few requests short.
        let circus = curve("circus", vec![step(6.0, 5.0), step(767.0, 734.0)]);
        let nginx = curve("nginx", vec![step(6.0, 6.0), step(767.0, 745.0)]);
        assert!(circus.kept_up_at_top() && nginx.kept_up_at_top());
        let mix = Mix::content_server();
        let verdict = report(Sweep::Bandwidth, &[circus.clone(), nginx], &mix, 1.5, 0).verdict;
        assert!(verdict.starts_with("circus saturates at or above nginx at every bandwidth where either"), "{verdict}");
        assert!(verdict.contains("circus kept up at its ladder's top at bandwidth 1000"), "{verdict}");
        // A curve that fell behind below the other's is below it.
        let fell = curve("circus", vec![step(100.0, 99.0), step(767.0, 500.0)]);
        let nginx = curve("nginx", vec![step(100.0, 99.0), step(767.0, 600.0)]);
        assert!(!fell.kept_up_at_top());
        let verdict = report(Sweep::Bandwidth, &[fell, nginx.clone()], &mix, 1.5, 0).verdict;
        assert!(verdict.starts_with("circus saturates below nginx at: bandwidth at 1000 (500 < 600)"), "{verdict}");
        // Both saturating, circus higher: every value compared.
        let verdict =
            report(Sweep::Bandwidth, &[curve("circus", vec![step(767.0, 640.0)]), nginx], &mix, 1.5, 0).verdict;
        assert!(verdict.starts_with("circus saturates at or above nginx at every bandwidth tested"), "{verdict}");
    }

    #[test]
    fn every_sweep_starts_at_its_baseline_and_passes_every_packet_through_the_line() {
        for sweep in [Sweep::Latency, Sweep::Overhead, Sweep::Bandwidth] {
            let first = sweep.values()[0];
            let line = sweep.line(first);
            assert_eq!((line.delay, line.overhead), (Duration::ZERO, Duration::ZERO), "{sweep:?}");
            assert!(line.super_packets);
            assert_eq!(sweep.link_bps(first), 40e9, "{sweep:?}");
        }
        assert_eq!(Sweep::Latency.line(4000.0).delay, Duration::from_millis(4));
        assert_eq!(Sweep::Overhead.line(20.0).overhead, Duration::from_micros(20));
        assert_eq!(Sweep::Bandwidth.link_bps(100.0), 100e6);
    }

    #[test]
    fn a_slow_link_gets_a_ladder_of_what_it_can_carry_and_steps_long_enough_to_offer_a_sample() {
        let (top, mean) = (8000.0, 200_000.0);
        // 40 and 10 Gbit/s carry the baseline's capacity: its ladder.
        let baseline: Vec<f64> = LADDER.iter().map(|f| (f * top).round()).collect();
        assert_eq!(Sweep::Bandwidth.ladder(40_000.0, top, mean), baseline);
        assert_eq!(Sweep::Latency.ladder(40_000.0, top, mean), baseline);
        // 100 Mbit/s carries 62.5 requests of 200 kB a second: the ladder
        // climbs to 1.3 times twice that.
        let slow = Sweep::Bandwidth.ladder(100.0, top, mean);
        assert_eq!(slow.first(), Some(&13.0));
        assert_eq!(slow.last(), Some(&163.0));
        // 10 Gbit/s, twice 6,250 a second, is above the baseline's 8,000.
        assert_eq!(Sweep::Bandwidth.ladder(10_000.0, top, mean), baseline);
        let two = Duration::from_secs(2);
        assert_eq!(step_time(5000.0, two), two);
        assert_eq!(step_time(100.0, two), Duration::from_secs(4));
        assert_eq!(step_time(6.0, two), LONGEST_STEP);
        assert_eq!(step_time(0.0, two), LONGEST_STEP);
    }

    #[test]
    fn a_run_at_chosen_values_measures_the_baseline_first_and_refuses_values_the_sweep_lacks() {
        assert_eq!(Sweep::Latency.measured(&[]).unwrap(), Sweep::Latency.values());
        assert_eq!(Sweep::Latency.measured(&[20_000.0, 10.0]).unwrap(), [0.0, 10.0, 20_000.0]);
        assert_eq!(Sweep::Bandwidth.measured(&[100.0]).unwrap(), [40_000.0, 100.0]);
        let err = Sweep::Overhead.measured(&[7.0]).unwrap_err().to_string();
        assert!(err.contains("--at 7") && err.contains("o (us per request)"), "{err}");
    }
}
