//! The discrete-event loop: clients, links and disks around the very
//! scheduler the server runs.

use crate::{
    config::{SimConfig, SimConfigError},
    disk::{Disk, Request},
    link::LinkClass,
    report::{ClassReport, SimReport},
};
use circus_core::{BlockIdx, BlockLayout, ClientId, FileId};
use circus_sched::{Action, Event, Scheduler};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rustc_hash::FxHashMap;
use std::{cmp::Reverse, collections::BinaryHeap, collections::VecDeque, time::Instant};

const NS: f64 = 1e9;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// A download slot starts a new download.
    Start(usize),
    ReadDone(usize),
    SendDone(ClientId),
}

#[derive(Debug)]
struct SimClient {
    slot: usize,
    class: LinkClass,
    /// Sustained rate after the TCP model, bytes per second.
    rate: f64,
    started: u64,
    /// Blocks the scheduler said to send, in order.
    ready: VecDeque<(FileId, BlockIdx)>,
    sending: Option<BlockIdx>,
    /// A plain HTTP download: it puts blocks on the wire in file order
    /// only, `next` first.
    in_order: bool,
    next: BlockIdx,
}

/// Progress callback: fraction of simulated time done.
pub type Progress<'a> = &'a mut dyn FnMut(f64);

pub fn run(cfg: &SimConfig, progress: Progress<'_>) -> Result<SimReport, SimConfigError> {
    cfg.validate()?;
    Ok(Sim::new(cfg).run(progress))
}

struct Sim<'a> {
    cfg: &'a SimConfig,
    sched: Scheduler,
    rng: ChaCha8Rng,
    queue: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
    now: u64,
    clients: FxHashMap<ClientId, SimClient>,
    next_id: u64,
    disks: Vec<Disk>,
    serving: Vec<Option<Request>>,
    layout: BlockLayout,
    server_free_at: u64,
    server_ns_per_byte: f64,
    measure_from: u64,
    end: u64,
    /// When the last cohort client finished.
    last_finish: u64,
    stats: Stats,
}

#[derive(Debug, Default)]
struct Stats {
    net_bytes: u64,
    disk_bytes: u64,
    disk_busy_ns: u64,
    /// (class, duration s, ideal s) of downloads finished in the window.
    downloads: Vec<(LinkClass, f64, f64)>,
    /// Plain downloads of a cohort: when each started and its rate, for
    /// the fewest reads any cache could have served them with.
    plain: Vec<crate::bound::Reader>,
    /// A cohort download was native.
    native_in_cohort: bool,
    failed: u64,
    events: u64,
}

impl<'a> Sim<'a> {
    fn new(cfg: &'a SimConfig) -> Self {
        let warm = (cfg.warmup() * NS) as u64;
        Self {
            cfg,
            sched: Scheduler::new(cfg.sched.clone()),
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            queue: BinaryHeap::new(),
            seq: 0,
            now: 0,
            clients: FxHashMap::default(),
            next_id: 0,
            disks: (0..cfg.disk.disks).map(|_| Disk::default()).collect(),
            serving: vec![None; cfg.disk.disks as usize],
            layout: BlockLayout::new(cfg.file_size, cfg.sched.block_size),
            server_free_at: 0,
            server_ns_per_byte: NS / cfg.server_link.bytes_per_sec(),
            measure_from: warm,
            end: warm + (cfg.measure() * NS) as u64,
            last_finish: 0,
            stats: Stats::default(),
        }
    }

    fn at(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((t, self.seq, ev)));
    }

    fn measuring(&self) -> bool {
        self.now >= self.measure_from
    }

    fn run(mut self, progress: Progress<'_>) -> SimReport {
        let wall = Instant::now();
        // Stagger the first downloads over one download time of their class
        // so the run does not start in lock-step; a cohort starts together.
        let (slots, spread) = match self.cfg.cohort {
            Some(n) => (n, 0.5),
            None => (self.cfg.clients(), self.cfg.slowest_ideal_secs()),
        };
        for slot in 0..slots {
            let t = self.rng.random_range(0.0..spread);
            self.at((t * NS) as u64, Ev::Start(slot));
        }
        let tick = (self.end / 100).max(1);
        let mut next_report = tick;
        while let Some(Reverse((t, _, ev))) = self.queue.pop() {
            if t > self.end {
                break;
            }
            self.now = t;
            self.stats.events += 1;
            if t >= next_report {
                progress(t as f64 / self.end as f64);
                next_report = t + tick;
            }
            match ev {
                Ev::Start(slot) => self.start(slot),
                Ev::ReadDone(disk) => self.read_done(disk),
                Ev::SendDone(client) => self.send_done(client),
            }
        }
        progress(1.0);
        self.report(wall.elapsed().as_secs_f64())
    }

    fn start(&mut self, slot: usize) {
        let links = &self.cfg.links.0;
        let class = links[self.rng.random_range(0..links.len())];
        let file = FileId(self.rng.random_range(0..u64::from(self.cfg.files)));
        let id = ClientId(self.next_id);
        self.next_id += 1;
        let rate = self.cfg.tcp.rate(class.rate().bytes_per_sec());
        // Drawn only when some downloads are plain, so runs without them
        // see the same random sequence as before plain clients existed.
        let in_order = self.cfg.plain_share > 0.0 && self.rng.random_range(0.0..1.0) < self.cfg.plain_share;
        if self.cfg.cohort.is_some() {
            if in_order {
                self.stats.plain.push(crate::bound::Reader::whole(self.now as f64 / NS, rate));
            } else {
                self.stats.native_in_cohort = true;
            }
        }
        let ready = VecDeque::new();
        let client = SimClient { slot, class, rate, started: self.now, ready, sending: None, in_order, next: 0 };
        self.clients.insert(id, client);
        self.feed(Event::Join { client: id, file, len: self.cfg.file_size, have: None, in_order });
    }

    /// Hands an event to the scheduler and carries out what it asks.
    fn feed(&mut self, ev: Event) {
        let actions: Vec<Action> = self.sched.on_event(self.now, ev).collect();
        for a in actions {
            match a {
                Action::Read { file, block } => {
                    let disk = self.cfg.disk.disk_of(file, block);
                    self.disks[disk].enqueue(Request { file, block, bytes: self.layout.block_len(block) });
                    self.serve_next(disk);
                }
                Action::Send { client, file, block } => {
                    let c = self.clients.get_mut(&client).expect("scheduler sends only to live clients");
                    c.ready.push_back((file, block));
                    self.send_next(client);
                }
                Action::Evict { .. } => {}
                Action::Complete { client } => self.finish(client, true),
                Action::Fail { client, .. } => self.finish(client, false),
            }
        }
    }

    fn serve_next(&mut self, disk: usize) {
        if self.serving[disk].is_some() {
            return;
        }
        if let Some((req, secs)) = self.disks[disk].next(&self.cfg.disk) {
            let ns = (secs * NS) as u64;
            if self.measuring() {
                self.stats.disk_busy_ns += ns;
            }
            self.serving[disk] = Some(req);
            self.at(self.now + ns, Ev::ReadDone(disk));
        }
    }

    fn read_done(&mut self, disk: usize) {
        let req = self.serving[disk].take().expect("a disk completes only what it serves");
        if self.measuring() {
            self.stats.disk_bytes += u64::from(req.bytes);
        }
        self.feed(Event::Loaded { file: req.file, block: req.block });
        self.serve_next(disk);
    }

    /// Starts the client's next transmission: the block crosses the server
    /// link (shared, first come first served) and the client's own link,
    /// pipelined, so it takes as long as the slower of the two.
    fn send_next(&mut self, id: ClientId) {
        let c = self.clients.get_mut(&id).expect("live client");
        if c.sending.is_some() {
            return;
        }
        let at = if c.in_order { c.ready.iter().position(|&(_, b)| b == c.next) } else { Some(0) };
        let Some((_, block)) = at.and_then(|i| c.ready.remove(i)) else { return };
        c.sending = Some(block);
        c.next = block + 1;
        let bytes = f64::from(self.layout.block_len(block));
        let server_start = self.server_free_at.max(self.now);
        self.server_free_at = server_start + (bytes * self.server_ns_per_byte) as u64;
        let client_done = self.now + (bytes / c.rate * NS) as u64;
        let done = client_done.max(self.server_free_at);
        self.at(done, Ev::SendDone(id));
    }

    fn send_done(&mut self, id: ClientId) {
        let Some(c) = self.clients.get_mut(&id) else { return };
        let block = c.sending.take().expect("a send completes only once");
        if self.measuring() {
            self.stats.net_bytes += u64::from(self.layout.block_len(block));
        }
        self.feed(Event::Sent { client: id, block });
        if self.clients.contains_key(&id) {
            self.send_next(id);
        }
    }

    /// A download ended; its slot starts the next one at once.
    fn finish(&mut self, id: ClientId, ok: bool) {
        let c = self.clients.remove(&id).expect("finished client was live");
        if self.measuring() {
            if ok {
                let took = (self.now - c.started) as f64 / NS;
                let ideal = self.cfg.file_size as f64 / c.class.rate().bytes_per_sec();
                self.stats.downloads.push((c.class, took, ideal));
            } else {
                self.stats.failed += 1;
            }
        }
        if self.cfg.cohort.is_none() {
            self.at(self.now, Ev::Start(c.slot));
        } else {
            self.last_finish = self.now;
        }
    }

    fn report(self, wall_s: f64) -> SimReport {
        let end = if self.cfg.cohort.is_some() && self.clients.is_empty() { self.last_finish } else { self.end };
        let secs = (end - self.measure_from).max(1) as f64 / NS;
        let s = &self.stats;
        let mut times: Vec<f64> = s.downloads.iter().map(|d| d.1).collect();
        times.sort_by(f64::total_cmp);
        let mean = |v: &[f64]| if v.is_empty() { f64::NAN } else { v.iter().sum::<f64>() / v.len() as f64 };
        let p95 = times.get(((times.len() as f64 * 0.95).ceil() as usize).saturating_sub(1)).copied();
        let ideals: Vec<f64> = s.downloads.iter().map(|d| d.2).collect();
        let mut classes = self.cfg.links.0.clone();
        classes.dedup();
        let per_class = classes
            .iter()
            .map(|&class| {
                let of: Vec<_> = s.downloads.iter().filter(|d| d.0 == class).collect();
                ClassReport {
                    class: class.to_string(),
                    completed: of.len() as u64,
                    download_mean_s: mean(&of.iter().map(|d| d.1).collect::<Vec<_>>()),
                    download_ideal_s: mean(&of.iter().map(|d| d.2).collect::<Vec<_>>()),
                }
            })
            .collect();
        let cfg = self.cfg;
        SimReport {
            policy: format!("{:?}", cfg.sched.policy).to_lowercase(),
            links: cfg.links.to_string(),
            load: cfg.load,
            files: cfg.files,
            file_size: cfg.file_size,
            block_size: cfg.sched.block_size,
            cache_bytes: cfg.sched.cache_bytes,
            clients: cfg.cohort.unwrap_or_else(|| cfg.clients()),
            seed: cfg.seed,
            warmup_s: self.measure_from as f64 / NS,
            measured_s: secs,
            offered_bytes_per_s: cfg.load * cfg.server_link.bytes_per_sec(),
            net_bytes_per_s: s.net_bytes as f64 / secs,
            disk_bytes_per_s: s.disk_bytes as f64 / secs,
            miss_ratio: if s.net_bytes == 0 { f64::NAN } else { s.disk_bytes as f64 / s.net_bytes as f64 },
            amplification: s.disk_bytes as f64 / cfg.file_size as f64,
            amplification_bound: (!s.plain.is_empty() && !s.native_in_cohort).then(|| {
                let blocks = (cfg.sched.cache_bytes / u64::from(cfg.sched.block_size)) as usize;
                crate::bound::fewest_reads(&s.plain, self.layout, blocks) as f64 / f64::from(self.layout.blocks())
            }),
            plain_share: cfg.plain_share,
            download_mean_s: mean(&times),
            download_p95_s: p95.unwrap_or(f64::NAN),
            download_ideal_s: mean(&ideals),
            clients_completed: s.downloads.len() as u64,
            clients_failed: s.failed,
            per_class,
            disk_busy_fraction: s.disk_busy_ns as f64 / (secs * NS * f64::from(cfg.disk.disks)),
            scheduler: self.sched.counters(),
            events: s.events,
            wall_s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use circus_sched::PolicyKind;

    fn cohort(links: &str, policy: PolicyKind) -> SimReport {
        let mut cfg =
            SimConfig { file_size: 16 << 20, cohort: Some(20), links: links.parse().unwrap(), ..SimConfig::default() };
        cfg.sched.policy = policy;
        cfg.sched.cache_bytes = 4 << 20;
        cfg.sched.active_len = 1 << 20;
        run(&cfg, &mut |_| {}).unwrap()
    }

    #[test]
    fn a_cohort_runs_until_everyone_finishes() {
        let r = cohort("10T", PolicyKind::Circus);
        assert_eq!(r.clients_completed, 20);
        // Same-speed clients starting together share one pass over the file.
        assert!((1.0..1.05).contains(&r.amplification), "amplification {}", r.amplification);
    }

    #[test]
    fn mixed_speed_cohort_reads_more_but_circus_no_more_than_sequential() {
        let circus = cohort("10T+T3", PolicyKind::Circus);
        let sequential = cohort("10T+T3", PolicyKind::Sequential);
        assert_eq!(circus.clients_completed, 20);
        assert!(circus.amplification > 1.2, "a 4.5x speed spread must cost extra reads: {}", circus.amplification);
        assert!(
            circus.amplification <= sequential.amplification,
            "{} vs {}",
            circus.amplification,
            sequential.amplification
        );
    }

    #[test]
    fn a_plain_cohort_reads_no_less_than_the_best_cache_could_and_circus_no_more_than_lru() {
        let run_plain = |policy| {
            let mut cfg = SimConfig {
                file_size: 64 << 20,
                cohort: Some(12),
                links: "10T+T3".parse().unwrap(),
                plain_share: 1.0,
                server_link: circus_core::BitRate(10e9),
                ..SimConfig::default()
            };
            cfg.sched.policy = policy;
            cfg.sched.cache_bytes = 4 << 20;
            cfg.sched.active_len = 1 << 20;
            run(&cfg, &mut |_| {}).unwrap()
        };
        let (circus, lru) = (run_plain(PolicyKind::Circus), run_plain(PolicyKind::Sequential));
        assert_eq!(circus.clients_completed, 12);
        let best = circus.amplification_bound.expect("an all-plain cohort gets its bound");
        // The bound takes every client at its link rate from its start;
        // queueing at the disk shifts reads a little, so allow for that.
        assert!(circus.amplification >= best * 0.97, "{} below the offline optimum {best}", circus.amplification);
        assert!(circus.amplification <= lru.amplification, "{} vs LRU's {}", circus.amplification, lru.amplification);
        // Plain downloads at their link rates: as fast as their links allow.
        assert!(circus.slowdown() < 1.01, "{}", circus.slowdown());
    }
}
