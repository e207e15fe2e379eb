//! The paper's Figures 7–17 as parameter sweeps over a base [`SimConfig`]:
//! for each figure a CSV (`figNN.csv`, one row per run) and an SVG grid of
//! panels (`figNN.svg`, throughput in MB/s, 1 MB = 10^6 bytes).
//!
//! | fig | sweep | setting | panels |
//! |---|---|---|---|
//! | 7–10 | load 0.1–0.8 | 512 MiB file | T1, 10T, T3, mix; download time, network, disk, miss ratio |
//! | 11 | file size 256 MiB–1 GiB | T3, load 0.4 | network, disk, download time |
//! | 12 | 1–16 files | 10T, load 0.4 | network, disk, miss ratio |
//! | 13 | base, 75 ms delay, 10% loss, both | T1 and T3, loads 0.1, 0.3 | download time, miss ratio |
//! | 14 | block size 4 KiB–1 MiB | 10T+T3, loads 0.2, 0.4 | network, miss ratio |
//! | 15 | queue length 1–50 | 10T+T3, circus | network, miss ratio, download time |
//! | 16 | client threshold 0–1 | 10T+T3, circus | network, miss ratio, download time |
//! | 17 | leapfront factor 1–8 | 10T+T3, circus | network, miss ratio |
//!
//! Each figure overrides only what it sweeps or fixes (links, load, policy,
//! the swept parameter); everything else comes from the base config. Equal
//! configs run once per invocation (Figures 7–10 share all their runs).

mod exec;
mod output;
mod spec;

use crate::{SimConfig, SimConfigError};
use std::{
    path::{Path, PathBuf},
    time::Instant,
};

/// One of the paper's Figures 7–17.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Figure(u32);

impl Figure {
    pub const FIRST: u32 = 7;
    pub const LAST: u32 = 17;

    pub fn new(number: u32) -> Option<Self> {
        (Self::FIRST..=Self::LAST).contains(&number).then_some(Self(number))
    }

    pub fn all() -> Vec<Self> {
        (Self::FIRST..=Self::LAST).map(Self).collect()
    }

    pub fn number(self) -> u32 {
        self.0
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FigureError {
    #[error(
        "unknown figure {given:?}: choose from 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, a list such as 7,9, a range such as 7-10, or all"
    )]
    UnknownFigure { given: String },
    #[error("figure {figure}: invalid run settings: {source}")]
    Config { figure: u32, source: SimConfigError },
    #[error("cannot write {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("cannot draw the figure: {0}")]
    Plot(#[from] circus_plot::PlotError),
}

/// Parses "8", "7,9", "7-10" or "all" into figures, sorted and deduplicated.
pub fn select(which: &str) -> Result<Vec<Figure>, FigureError> {
    if which.trim().eq_ignore_ascii_case("all") {
        return Ok(Figure::all());
    }
    let unknown = |given: &str| FigureError::UnknownFigure { given: given.trim().to_owned() };
    let figure = |s: &str| s.trim().parse().ok().and_then(Figure::new).ok_or_else(|| unknown(s));
    let mut figures = vec![];
    for part in which.split(',') {
        match part.split_once('-') {
            Some((from, to)) => {
                let (from, to) = (figure(from)?, figure(to)?);
                if from > to {
                    return Err(unknown(part));
                }
                figures.extend((from.0..=to.0).map(Figure));
            }
            None => figures.push(figure(part)?),
        }
    }
    figures.sort();
    figures.dedup();
    Ok(figures)
}

/// Runs `figures` over `base` (shrunk when `quick`) and writes
/// `figNN.csv` and `figNN.svg` for each into `out`, logging one line per
/// finished run to `log`.
///
/// Quick mode is a smoke test: a 32 MiB file (Figure 11: 16, 32, 64 MiB),
/// an 8 MiB cache and a 2 MiB active region, loads 0.2 and 0.4 for
/// Figures 7–10, and only the first, default and last point of each sweep.
///
/// A run whose downloads average over 1.2x their ideal time (a disk-bound
/// sequential server) is repeated with its warm-up and measured windows
/// stretched by that slowdown, so that it completes downloads at its actual
/// pace; the CSV's `warmup_s` and `measured_s` say what each run used.
pub fn run_figures(
    figures: &[Figure],
    base: &SimConfig,
    out: &Path,
    quick: bool,
    log: &mut dyn FnMut(&str),
) -> Result<(), FigureError> {
    let started = Instant::now();
    let specs: Vec<_> = figures.iter().map(|&f| spec::build(f, base, quick)).collect();
    let plan = exec::plan(&specs)?;
    let total: usize = specs.iter().map(|s| s.runs.len()).sum();
    log(&format!(
        "{} figure(s): {total} runs, {} distinct{}",
        specs.len(),
        plan.configs.len(),
        if quick { " (quick)" } else { "" }
    ));
    let reports = exec::execute(&plan, log)?;
    std::fs::create_dir_all(out).map_err(|source| FigureError::Io { path: out.to_owned(), source })?;
    for (spec, index) in specs.iter().zip(&plan.index) {
        let runs: Vec<_> = index.iter().map(|&i| &reports[i]).collect();
        let stem = out.join(format!("fig{:02}", spec.number));
        let (csv, svg) = (stem.with_extension("csv"), stem.with_extension("svg"));
        output::write_csv(&csv, spec, &runs)?;
        output::write_svg(&svg, spec, &runs)?;
        log(&format!("wrote {} and {}", csv.display(), svg.display()));
    }
    log(&format!("done in {:.1} s wall", started.elapsed().as_secs_f64()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbers(which: &str) -> Vec<u32> {
        select(which).unwrap().into_iter().map(Figure::number).collect()
    }

    #[test]
    fn select_parses_lists_ranges_and_all() {
        assert_eq!(numbers("8"), [8]);
        assert_eq!(numbers("9, 7"), [7, 9]);
        assert_eq!(numbers("7-10,8"), [7, 8, 9, 10]);
        assert_eq!(numbers("all"), (7..=17).collect::<Vec<_>>());
        for bad in ["6", "18", "7,x", "", "10-7"] {
            let err = select(bad).unwrap_err();
            assert!(matches!(err, FigureError::UnknownFigure { .. }), "{bad}");
        }
        let msg = select("6").unwrap_err().to_string();
        assert!(msg.contains("\"6\"") && msg.contains("7, 8") && msg.contains("17") && msg.contains("all"), "{msg}");
    }

    #[test]
    fn shared_runs_are_planned_once() {
        let base = SimConfig::default();
        let specs: Vec<_> = select("7-10").unwrap().into_iter().map(|f| spec::build(f, &base, true)).collect();
        let plan = exec::plan(&specs).unwrap();
        // 4 link panels x 2 policies x 2 loads, drawn by 4 figures.
        assert_eq!(specs.iter().map(|s| s.runs.len()).sum::<usize>(), 64);
        assert_eq!(plan.configs.len(), 16);
        assert!(plan.index.iter().all(|i| *i == plan.index[0]));
    }

    #[test]
    fn full_sweeps_have_the_papers_points() {
        let base = SimConfig::default();
        let runs = |n| spec::build(Figure::new(n).unwrap(), &base, false).runs.len();
        assert_eq!(runs(8), 4 * 2 * 8);
        assert_eq!(runs(11), 2 * 4);
        assert_eq!(runs(13), 2 * 2 * 2 * 4);
        assert_eq!(runs(14), 2 * 2 * 9);
        assert_eq!(runs(15), 2 * 6 + 2);
        assert_eq!(runs(17), 2 * 6 + 2);
    }

    #[test]
    fn invalid_base_names_the_figure() {
        let mut base = SimConfig::default();
        base.sched.queue_len = 0;
        let err = run_figures(&[Figure(12)], &base, Path::new("/nonexistent"), true, &mut |_| {}).unwrap_err();
        assert!(matches!(err, FigureError::Config { figure: 12, .. }), "{err}");
    }

    #[test]
    fn quick_figure_writes_csv_and_svg() {
        let dir = tempfile::tempdir().unwrap();
        let mut lines = vec![];
        run_figures(&[Figure(12)], &SimConfig::default(), dir.path(), true, &mut |l| lines.push(l.to_owned())).unwrap();
        let csv = std::fs::read_to_string(dir.path().join("fig12.csv")).unwrap();
        let rows: Vec<&str> = csv.lines().collect();
        assert_eq!(rows[0], output::CSV_HEADER);
        // Quick: 1 and 16 files, two policies.
        assert_eq!(rows.len(), 1 + 4, "{csv}");
        assert!(rows[1].starts_with("12,10T,circus,1,") && rows[4].starts_with("12,10T,sequential,16,"), "{csv}");
        let svg = std::fs::read_to_string(dir.path().join("fig12.svg")).unwrap();
        for title in ["Fig 12 (a)", "network throughput", "disk throughput", "miss ratio", "sequential"] {
            assert!(svg.contains(title), "missing {title}");
        }
        assert!(lines.iter().any(|l| l.starts_with("[4/4] fig 12 10T ")), "{lines:?}");
    }
}
