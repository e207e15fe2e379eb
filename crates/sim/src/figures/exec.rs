//! Runs every distinct configuration of a set of figures once, on worker
//! threads, and hands back one report per configuration.

use super::{FigureError, spec::FigureSpec};
use crate::{SimConfig, SimReport};
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

/// Rough cost of a run (blocks sent): offered bytes, capped by the TCP
/// model, over the simulated time, per block.
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
    bytes / f64::from(cfg.sched.block_size)
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
                    if tx.send((i, crate::run(&plan.configs[i], &mut |_| {}))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        for (done, (i, result)) in rx.iter().enumerate() {
            match result {
                Ok(r) => {
                    log(&format!(
                        "[{}/{n}] {}: {:.1} MB/s net, miss {:.3}, {:.1} s",
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
