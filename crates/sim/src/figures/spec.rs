//! What each figure runs and draws: the paper's sweeps over a base config.

use super::Figure;
use crate::{SimConfig, SimReport, link::LinkMix};
use circus_plot::Scale;
use circus_sched::PolicyKind;

const MIB: u64 = 1 << 20;
const POLICIES: [PolicyKind; 2] = [PolicyKind::Circus, PolicyKind::Sequential];
const LOADS: [f64; 8] = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8];
const QUICK_LOADS: [f64; 2] = [0.2, 0.4];
/// Figures 14-17 run these loads; Figure 13 runs 0.1 and 0.3.
const SENSITIVITY_LOADS: [f64; 2] = [0.2, 0.4];
const SENSITIVITY_LINKS: &str = "10T+T3";

/// One simulation behind one CSV row.
#[derive(Debug, Clone)]
pub(super) struct RunSpec {
    /// The run group (the CSV `panel` column): link classes, or the link
    /// classes of a panel when panels split by class.
    pub panel: String,
    pub series: String,
    pub x: f64,
    pub cfg: SimConfig,
    /// Drawn as a horizontal line across the panel: a reference value (such
    /// as sequential at the default setting), not a sweep point.
    pub reference: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Metric {
    Net,
    Disk,
    Miss,
    Download,
}

impl Metric {
    /// The plotted value: MB/s (1 MB = 1e6 bytes), a ratio, or seconds.
    pub fn value(self, r: &SimReport) -> f64 {
        match self {
            Metric::Net => r.net_bytes_per_s / 1e6,
            Metric::Disk => r.disk_bytes_per_s / 1e6,
            Metric::Miss => r.miss_ratio,
            Metric::Download => r.download_mean_s,
        }
    }

    pub fn axis_label(self) -> &'static str {
        match self {
            Metric::Net => "network throughput (MB/s)",
            Metric::Disk => "disk throughput (MB/s)",
            Metric::Miss => "miss ratio (disk bytes / sent bytes)",
            Metric::Download => "mean download time (s)",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Metric::Net => "network throughput",
            Metric::Disk => "disk throughput",
            Metric::Miss => "miss ratio",
            Metric::Download => "download time",
        }
    }
}

/// A derived series drawn in addition to the runs' own series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Extra {
    None,
    /// Ideal download time (file size / link rate) of the circus runs.
    Ideal,
    /// Offered load (load x server link) of the circus runs.
    Offered,
}

#[derive(Debug, Clone)]
pub(super) struct PanelSpec {
    pub title: String,
    /// Which runs ([`RunSpec::panel`]) the panel draws.
    pub group: String,
    pub metric: Metric,
    pub extra: Extra,
    pub y_scale: Scale,
}

#[derive(Debug, Clone)]
pub(super) struct FigureSpec {
    pub number: u32,
    /// Short name of x for progress lines ("load", "block KiB").
    pub x_name: &'static str,
    pub x_label: String,
    pub x_scale: Scale,
    pub columns: usize,
    pub panels: Vec<PanelSpec>,
    pub runs: Vec<RunSpec>,
}

impl FigureSpec {
    fn new(number: u32, x_name: &'static str, x_label: &str, x_scale: Scale, columns: usize) -> Self {
        Self { number, x_name, x_label: x_label.to_owned(), x_scale, columns, panels: vec![], runs: vec![] }
    }

    /// A panel titled "Fig N (letter) what" drawing `metric` of `group`.
    fn panel(&mut self, what: &str, group: &str, metric: Metric, extra: Extra) {
        let letter = char::from(b'a' + self.panels.len() as u8);
        self.panels.push(PanelSpec {
            title: format!("Fig {} ({letter}) {what}: {}", self.number, metric.name()),
            group: group.to_owned(),
            metric,
            extra,
            y_scale: Scale::Linear,
        });
    }

    fn run(&mut self, panel: &str, series: String, x: f64, cfg: SimConfig) {
        self.runs.push(RunSpec { panel: panel.to_owned(), series, x, cfg, reference: false });
    }
}

pub(super) fn build(fig: Figure, base: &SimConfig, quick: bool) -> FigureSpec {
    let mut base = base.clone();
    if quick {
        base.file_size = 32 * MIB;
        base.sched.cache_bytes = 8 * MIB;
        base.sched.active_len = 2 * MIB;
    }
    match fig.number() {
        n @ 7..=10 => load_figure(n, &base, quick),
        11 => file_size(&base, quick),
        12 => files(&base, quick),
        13 => delay_loss(&base, quick),
        n => sensitivity(n, &base, quick),
    }
}

fn policy_name(p: PolicyKind) -> &'static str {
    match p {
        PolicyKind::Circus => "circus",
        PolicyKind::Sequential => "sequential",
    }
}

fn pct(load: f64) -> String {
    format!("{:.0}%", load * 100.0)
}

fn with(base: &SimConfig, links: &str, load: f64, policy: PolicyKind) -> SimConfig {
    let mut cfg = base.clone();
    cfg.links = links.parse::<LinkMix>().expect("figure link mixes parse");
    cfg.load = load;
    cfg.sched.policy = policy;
    cfg
}

/// The whole sweep, or in quick mode its first, default and last points.
fn points<T: Copy + PartialEq>(full: &[T], default: T, quick: bool) -> Vec<T> {
    if !quick {
        return full.to_vec();
    }
    let ends = [full[0], full[full.len() - 1]];
    full.iter().copied().filter(|v| ends.contains(v) || *v == default).collect()
}

/// Figures 7-10: one metric vs load, a panel per link class.
fn load_figure(n: u32, base: &SimConfig, quick: bool) -> FigureSpec {
    let (metric, extra) = match n {
        7 => (Metric::Download, Extra::Ideal),
        8 => (Metric::Net, Extra::Offered),
        9 => (Metric::Disk, Extra::None),
        _ => (Metric::Miss, Extra::None),
    };
    let mut spec = FigureSpec::new(n, "load", "system load (offered / server link)", Scale::Linear, 2);
    let loads: &[f64] = if quick { &QUICK_LOADS } else { &LOADS };
    for links in ["T1", "10T", "T3", "mix"] {
        let what = if links == "mix" { "mix of T1, 10T, T3".to_owned() } else { format!("{links} clients") };
        spec.panel(&what, links, metric, extra);
        for policy in POLICIES {
            for &load in loads {
                spec.run(links, policy_name(policy).into(), load, with(base, links, load, policy));
            }
        }
    }
    spec
}

/// Figure 11: file size, T3 clients at 40% load.
fn file_size(base: &SimConfig, quick: bool) -> FigureSpec {
    let sizes: Vec<u64> = if quick { vec![16, 32, 64] } else { vec![256, 512, 768, 1024] };
    let mut spec = FigureSpec::new(11, "MiB", "file size (MiB)", Scale::Linear, 3);
    spec.panel("T3, 40% load", "T3", Metric::Net, Extra::None);
    spec.panel("T3, 40% load", "T3", Metric::Disk, Extra::None);
    spec.panel("T3, 40% load", "T3", Metric::Download, Extra::Ideal);
    for policy in POLICIES {
        for &mib in &sizes {
            let mut cfg = with(base, "T3", 0.4, policy);
            cfg.file_size = mib * MIB;
            spec.run("T3", policy_name(policy).into(), mib as f64, cfg);
        }
    }
    spec
}

/// Figure 12: number of distinct files, 10T clients at 40% load.
fn files(base: &SimConfig, quick: bool) -> FigureSpec {
    let mut spec = FigureSpec::new(12, "files", "distinct files (equally popular)", Scale::Log2, 3);
    for metric in [Metric::Net, Metric::Disk, Metric::Miss] {
        spec.panel("10T, 40% load", "10T", metric, Extra::None);
    }
    for policy in POLICIES {
        for files in points(&[1u32, 2, 4, 8, 16], 1, quick) {
            let mut cfg = with(base, "10T", 0.4, policy);
            cfg.files = files;
            spec.run("10T", policy_name(policy).into(), f64::from(files), cfg);
        }
    }
    spec
}

/// Figure 13: round-trip delay and packet loss, T1 and T3, loads 10%, 30%.
fn delay_loss(base: &SimConfig, quick: bool) -> FigureSpec {
    // (rtt s, loss): base, delay, loss, both.
    const CONDITIONS: [(f64, f64); 4] = [(0.0, 0.0), (0.075, 0.0), (0.0, 0.1), (0.075, 0.1)];
    let x_label = "condition: 0 base, 1 delay 75 ms, 2 loss 10%, 3 both";
    let mut spec = FigureSpec::new(13, "condition", x_label, Scale::Linear, 2);
    for metric in [Metric::Download, Metric::Miss] {
        for links in ["T1", "T3"] {
            spec.panel(&format!("{links} clients"), links, metric, Extra::None);
        }
    }
    // Download times span 100 s to hours: a log axis shows the ten-fold jump.
    for panel in spec.panels.iter_mut().filter(|p| p.metric == Metric::Download) {
        panel.y_scale = Scale::Log10;
    }
    let conditions = points(&[0usize, 1, 2, 3], 0, quick);
    for links in ["T1", "T3"] {
        for policy in POLICIES {
            for load in [0.1, 0.3] {
                let series = format!("{} {}", policy_name(policy), pct(load));
                for &c in &conditions {
                    let mut cfg = with(base, links, load, policy);
                    (cfg.tcp.rtt_secs, cfg.tcp.loss) = CONDITIONS[c];
                    spec.run(links, series.clone(), c as f64, cfg);
                }
            }
        }
    }
    spec
}

/// Figures 14-17: scheduler parameters, 10T+T3 at 20% and 40% load.
fn sensitivity(n: u32, base: &SimConfig, quick: bool) -> FigureSpec {
    let links = SENSITIVITY_LINKS;
    let (x_name, x_label, scale, full, default): (_, _, _, &[f64], f64) = match n {
        14 => ("block KiB", "block size (KiB)", Scale::Log2, &[4., 8., 16., 32., 64., 128., 256., 512., 1024.], 64.),
        15 => ("queue", "queue length limit (blocks)", Scale::Log2, &[1., 2., 5., 10., 20., 50.], 5.),
        16 => (
            "threshold",
            "client threshold (fraction received)",
            Scale::Linear,
            &[0., 0.25, 0.5, 0.6, 0.75, 0.9, 1.],
            0.75,
        ),
        _ => (
            "leapfront",
            "leapfront factor (leapfront distance / active length)",
            Scale::Log2,
            &[1., 1.25, 1.5, 2., 4., 8.],
            1.,
        ),
    };
    let mut spec = FigureSpec::new(n, x_name, x_label, scale, if n == 14 || n == 17 { 2 } else { 3 });
    let what = "10T+T3, 20% and 40% load";
    spec.panel(what, links, Metric::Net, Extra::None);
    spec.panel(what, links, Metric::Miss, Extra::None);
    if n == 15 || n == 16 {
        spec.panel(what, links, Metric::Download, Extra::None);
    }
    let set = |mut cfg: SimConfig, x: f64| {
        match n {
            14 => cfg.sched.block_size = (x * 1024.0) as u32,
            15 => cfg.sched.queue_len = x as u32,
            16 => cfg.sched.threshold = x,
            _ => cfg.sched.leapfront = x,
        }
        cfg
    };
    // Block size compares both policies; the rest tune circus only.
    let policies: &[PolicyKind] = if n == 14 { &POLICIES } else { &POLICIES[..1] };
    for &policy in policies {
        for load in SENSITIVITY_LOADS {
            let series = format!("{} {}", policy_name(policy), pct(load));
            for x in points(full, default, quick) {
                spec.run(links, series.clone(), x, set(with(base, links, load, policy), x));
            }
        }
    }
    if n != 14 {
        // Sequential at the default setting, drawn as a horizontal line.
        for load in SENSITIVITY_LOADS {
            let cfg = set(with(base, links, load, PolicyKind::Sequential), default);
            let series = format!("sequential {} (reference)", pct(load));
            spec.runs.push(RunSpec { panel: links.into(), series, x: default, cfg, reference: true });
        }
    }
    spec
}
