//! Runs every distinct configuration of a set of figures once, on worker
//! threads, and hands back one report per configuration.

use super::{FigureError, spec::FigureSpec};
use crate::{SimConfig, SimConfigError, SimReport};
use circus_sched::PolicyKind;
use std::{
    collections::HashMap,
    num::NonZero,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        mpsc,
    },
    thread,
};

/// The distinct runs behind a set of figures.
#[derive(Debug)]
pub(super) struct Plan {
    pub configs: Vec<SimConfig>,
    /// A progress label per config: the first figure run that needs it.
    pub labels: Vec<String>,
    /// The figure each label names.
    pub figures: Vec<u32>,
    /// Per figure, per run: the index of its config.
    pub index: Vec<Vec<usize>>,
}

/// Validates every run and merges equal configs (Figures 7-10 share theirs;
/// sequential references recur across Figures 14-17).
pub(super) fn plan(specs: &[FigureSpec]) -> Result<Plan, FigureError> {
    let mut plan = Plan { configs: vec![], labels: vec![], figures: vec![], index: vec![] };
    let mut seen: HashMap<String, usize> = HashMap::new();
    for spec in specs {
        let mut index = Vec::with_capacity(spec.runs.len());
        for run in &spec.runs {
            run.cfg.validate().map_err(|source| FigureError::Config { figure: spec.number, source })?;
            // Debug prints every field, floats exactly: equal text, equal run.
            let key = format!("{:?}", run.cfg);
            let i = *seen.entry(key).or_insert_with(|| {
                plan.configs.push(run.cfg.clone());
                plan.figures.push(spec.number);
                plan.labels.push(format!("fig {} {} {} {} {}", spec.number, run.panel, run.series, spec.x_name, run.x));
                plan.configs.len() - 1
            });
            index.push(i);
        }
        plan.index.push(index);
    }
    Ok(plan)
}

/// Re-run when downloads average more than this much over their ideal time.
const STRETCH_ABOVE: f64 = 1.2;
/// Longest stretch of the default windows (bounds the cost of a re-run).
const MAX_STRETCH: f64 = 12.0;

/// Mean download time over the ideal one (TCP-limited rates), estimated by
/// Little's law from throughput: each of the `clients` slots downloads one
/// file at a time, so the mean download takes clients x file / throughput.
/// Unlike the measured mean it needs no completed download.
fn slowdown(cfg: &SimConfig, r: &SimReport) -> f64 {
    let classes = &cfg.links.0;
    let ideal_secs_per_byte =
        classes.iter().map(|c| 1.0 / cfg.tcp.rate(c.rate().bytes_per_sec())).sum::<f64>() / classes.len() as f64;
    r.clients as f64 / (r.net_bytes_per_s * ideal_secs_per_byte)
}

/// One run with the default windows (one slowest ideal download of warm-up,
/// two measured). Where downloads are much slower than ideal (a
/// disk-bound sequential server) those windows miss most completions and
/// catch the start-up transient, so the run is repeated with both windows
/// stretched by the estimated slowdown (at most twice, up to 12x). Explicit
/// windows in the base config are kept. Returns the report (wall time summed
/// over the passes) and the stretch factor.
fn run_one(cfg: &SimConfig) -> Result<(SimReport, f64), SimConfigError> {
    let mut report = crate::run(cfg, &mut |_| {})?;
    let mut wall = report.wall_s;
    let mut factor = 1.0;
    if cfg.warmup_secs.is_none() && cfg.measure_secs.is_none() {
        for _ in 0..2 {
            let s = slowdown(cfg, &report).min(MAX_STRETCH);
            // NaN (nothing sent) compares false: take the cap.
            let s = if s.is_nan() { MAX_STRETCH } else { s };
            if s <= STRETCH_ABOVE * factor || factor >= MAX_STRETCH {
                break;
            }
            factor = s;
            let mut longer = cfg.clone();
            longer.warmup_secs = Some(cfg.warmup() * factor);
            longer.measure_secs = Some(cfg.measure() * factor);
            report = crate::run(&longer, &mut |_| {})?;
            wall += report.wall_s;
        }
    }
    report.wall_s = wall;
    Ok((report, factor))
}

/// Rough cost of a run (blocks sent): offered bytes, capped by the TCP
/// model, over the simulated time, per block; sequential runs usually get
/// re-run with longer windows.
fn cost(cfg: &SimConfig) -> f64 {
    let classes = &cfg.links.0;
    let tcp_share = classes
        .iter()
        .map(|c| {
            let rate = c.rate().bytes_per_sec();
            cfg.tcp.rate(rate) / rate
        })
        .sum::<f64>()
        / classes.len() as f64;
    let bytes = cfg.load * cfg.server_link.bytes_per_sec() * tcp_share * (cfg.warmup() + cfg.measure());
    let reruns = if cfg.sched.policy == PolicyKind::Sequential { 3.0 } else { 1.0 };
    reruns * bytes / f64::from(cfg.sched.block_size)
}

/// Runs `plan`'s configs, costliest first, on one thread per core; logs one
/// line per finished run. Each run is independent and seeded by its config,
/// so results do not depend on scheduling.
pub(super) fn execute(plan: &Plan, log: &mut dyn FnMut(&str)) -> Result<Vec<SimReport>, FigureError> {
    let n = plan.configs.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| cost(&plan.configs[b]).total_cmp(&cost(&plan.configs[a])));
    let workers = thread::available_parallelism().map_or(2, NonZero::get).clamp(1, n.max(1));
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let mut reports: Vec<Option<SimReport>> = vec![None; n];
    let mut failure = None;
    thread::scope(|s| {
        let (tx, rx) = mpsc::channel();
        for _ in 0..workers {
            let tx = tx.clone();
            let (order, next, stop) = (&order, &next, &stop);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Some(&i) = order.get(next.fetch_add(1, Ordering::Relaxed)) else { break };
                    if tx.send((i, run_one(&plan.configs[i]))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        for (done, (i, result)) in rx.iter().enumerate() {
            match result {
                Ok((r, factor)) => {
                    let stretched = if factor > 1.0 { format!(" (windows x{factor:.1})") } else { String::new() };
                    log(&format!(
                        "[{}/{n}] {}: {:.1} MB/s net, miss {:.3}, {:.1} s{stretched}",
                        done + 1,
                        plan.labels[i],
                        r.net_bytes_per_s / 1e6,
                        r.miss_ratio,
                        r.wall_s
                    ));
                    reports[i] = Some(r);
                }
                Err(source) => {
                    stop.store(true, Ordering::Relaxed);
                    failure.get_or_insert(FigureError::Config { figure: plan.figures[i], source });
                }
            }
        }
    });
    if let Some(err) = failure {
        return Err(err);
    }
    Ok(reports.into_iter().map(|r| r.expect("every run reported")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(policy: PolicyKind) -> SimConfig {
        let mut cfg = SimConfig { file_size: 16 << 20, load: 0.3, ..SimConfig::default() };
        cfg.sched.policy = policy;
        cfg.sched.cache_bytes = 4 << 20;
        cfg.sched.active_len = 1 << 20;
        cfg
    }

    #[test]
    fn circus_runs_once_and_disk_bound_sequential_is_stretched() {
        let cfg = small(PolicyKind::Circus);
        let (r, factor) = run_one(&cfg).unwrap();
        assert_eq!(factor, 1.0);
        assert!((slowdown(&cfg, &r) - 1.0).abs() < 0.1, "{}", slowdown(&cfg, &r));

        let cfg = small(PolicyKind::Sequential);
        let (r, factor) = run_one(&cfg).unwrap();
        assert!(factor > STRETCH_ABOVE, "{factor}");
        assert!((r.warmup_s - cfg.warmup() * factor).abs() < 1e-6);
        assert!(r.clients_completed > 0);

        let fixed = SimConfig { measure_secs: Some(cfg.measure()), ..cfg };
        assert_eq!(run_one(&fixed).unwrap().1, 1.0);
    }
}
