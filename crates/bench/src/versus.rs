//! circus against nginx, load by load, in alternating rounds: each round
//! runs every load against one server and then the other, so slow drift of
//! a shared machine lands on both. A ratio is the median of the rounds'
//! ratios, shown with their spread, beside each server's CPU time per
//! gigabyte of bodies served.

use crate::{
    BenchError, Row,
    external::{self, ClientTls, Endpoint},
    procs::ServerProc,
};

/// What drives one load.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Drive {
    /// wrk over HTTP/1.1; `close` asks for a new connection per request.
    Wrk { object: &'static str, conns: usize, close: bool },
    /// h2load over h2.
    H2 { object: &'static str, conns: usize, streams: usize },
    /// `clients` concurrent curl downloads of the whole object.
    Downloads { object: &'static str, clients: usize },
}

/// One measured load: its name, what drives it, the size of the object
/// and the ratio it should reach.
#[derive(Debug, Clone)]
pub(crate) struct Load {
    pub name: String,
    pub drive: Drive,
    pub size: u64,
    pub target: f64,
}

impl Load {
    /// What the ratio compares: requests for small objects, bytes for
    /// whole downloads.
    fn unit(&self) -> &'static str {
        match self.drive {
            Drive::Downloads { .. } => "bytes/s",
            _ if self.size >= 1 << 20 => "bytes/s",
            _ => "req/s",
        }
    }
}

/// A server and how clients reach it over HTTP/1.1 and over h2 (nginx in
/// clear speaks h2 on a port of its own).
pub(crate) struct Contender<'a> {
    pub server: &'a ServerProc,
    pub h1: Endpoint,
    pub h2: Endpoint,
}

impl<'a> Contender<'a> {
    /// `server` speaking both protocols on its one port, over TLS when
    /// `tls` says how clients trust it.
    pub fn one_port(server: &'a ServerProc, tls: Option<&ClientTls>) -> Self {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let to = Endpoint { base: format!("{scheme}://{}", server.addr), tls: tls.cloned() };
        Contender { server, h1: to.clone(), h2: to }
    }
}

/// Rows (each server's median with min and max, CPU per GB; then the
/// ratio) and one verdict phrase per load.
pub(crate) struct Outcome {
    pub rows: Vec<Row>,
    pub verdicts: Vec<String>,
    /// Loads where circus spent more server CPU per byte than nginx.
    pub cpu_worse: Vec<CpuWorse>,
    /// Per load, in the order given: the figures the plot draws.
    pub figures: Vec<LoadFigures>,
}

/// A load where circus's server spent more CPU per byte than nginx's.
pub(crate) struct CpuWorse {
    pub load: String,
    /// Server CPU per byte, circus over nginx.
    pub server: f64,
    /// Server and clients together, circus over nginx.
    pub with_clients: f64,
}

/// One load's headline figures.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LoadFigures {
    /// circus / nginx, the median of the rounds.
    pub ratio: f64,
    pub ceiling: f64,
    /// Server CPU seconds per gigabyte of bodies: circus, nginx.
    pub cpu_s_per_gb: [f64; 2],
}

/// Runs every load `rounds` times against `circus` then `nginx`, each
/// timed load `seconds` long.
pub(crate) async fn alternate(
    circus: &Contender<'_>,
    nginx: &Contender<'_>,
    loads: &[Load],
    rounds: usize,
    seconds: f64,
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<Outcome, BenchError> {
    let contenders = [circus, nginx];
    // rates[load][server][round]; cpu and body bytes summed over rounds.
    let mut rates = vec![[Vec::new(), Vec::new()]; loads.len()];
    let mut cpu = vec![[0.0; 2]; loads.len()];
    // The servers' system (kernel) CPU, and the load generators' CPU.
    let mut system = vec![[0.0; 2]; loads.len()];
    let mut clients = vec![[0.0; 2]; loads.len()];
    let mut bytes = vec![[0.0; 2]; loads.len()];
    for round in 1..=rounds {
        for (l, load) in loads.iter().enumerate() {
            for (s, c) in contenders.iter().enumerate() {
                let before = c.server.cpu_split();
                let clients_before = crate::procs::finished_children_cpu_seconds();
                let started = std::time::Instant::now();
                let requests = measure(c, load, seconds).await?;
                let elapsed = started.elapsed().as_secs_f64();
                let after = c.server.cpu_split();
                cpu[l][s] += after.0 + after.1 - before.0 - before.1;
                system[l][s] += after.1 - before.1;
                clients[l][s] += crate::procs::finished_children_cpu_seconds() - clients_before;
                let (rate, served) = match load.drive {
                    Drive::Downloads { .. } => (requests, requests * elapsed),
                    _ => {
                        let body = requests * load.size as f64;
                        (if load.unit() == "bytes/s" { body } else { requests }, body * seconds.ceil())
                    }
                };
                bytes[l][s] += served;
                log(&format!("round {round}/{rounds}: {}: {}: {rate:.0} {}", load.name, c.server.name, load.unit()));
                rates[l][s].push(rate);
            }
        }
    }
    let mut out = Outcome { rows: Vec::new(), verdicts: Vec::new(), cpu_worse: Vec::new(), figures: Vec::new() };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    for (l, load) in loads.iter().enumerate() {
        let per_gb = [0, 1].map(|s| cpu[l][s] / (bytes[l][s] / 1e9));
        // On loopback the receiver's TCP work runs in the context of
        // whichever process transmits (see `Ceiling`): what a server spends
        // alone depends on how it writes, what it and its clients spend
        // together does not.
        let with_clients = [0, 1].map(|s| (cpu[l][s] + clients[l][s]) / (bytes[l][s] / 1e9));
        let with_clients_ratio = with_clients[0] / with_clients[1];
        let ceiling = Ceiling {
            cores,
            floor_s_per_gb: [0, 1]
                .map(|s| (clients[l][s] + system[l][s]) / (bytes[l][s] / 1e9))
                .into_iter()
                .fold(f64::MAX, f64::min),
            nginx_gb_per_s: median(&rates[l][1]) * if load.unit() == "bytes/s" { 1.0 } else { load.size as f64 } / 1e9,
        };
        for (s, c) in contenders.iter().enumerate() {
            let r = &rates[l][s];
            out.rows.push(
                Row::new(format!("{} | {}", c.server.name, load.name))
                    .with(&format!("median_{}", load.unit().replace('/', "_per_")), median(r))
                    .with("min", min(r))
                    .with("max", max(r))
                    .with("cpu_s_per_gb", per_gb[s])
                    .with("system_cpu_s_per_gb", system[l][s] / (bytes[l][s] / 1e9))
                    .with("client_cpu_s_per_gb", clients[l][s] / (bytes[l][s] / 1e9)),
            );
        }
        let ratios: Vec<f64> = rates[l][0].iter().zip(&rates[l][1]).map(|(c, n)| c / n).collect();
        let ratio = median(&ratios);
        out.rows.push(
            Row::new(format!("ratio | {}", load.name))
                .with("circus_over_nginx", ratio)
                .with("min", min(&ratios))
                .with("max", max(&ratios))
                .with("target", load.target)
                .with("ceiling", ceiling.ratio())
                .with("cpu_per_byte_over_nginx", per_gb[0] / per_gb[1])
                .with("cpu_with_clients_per_byte_over_nginx", with_clients_ratio),
        );
        out.figures.push(LoadFigures { ratio, ceiling: ceiling.ratio(), cpu_s_per_gb: per_gb });
        let beyond = if ratio < load.target && ceiling.ratio() < load.target {
            format!(", beyond this machine's ceiling of {:.2}", ceiling.ratio())
        } else {
            String::new()
        };
        out.verdicts.push(format!(
            "{}: {ratio:.2} (target {:.1}: {}{beyond})",
            load.name,
            load.target,
            if ratio >= load.target { "met" } else { "NOT met" }
        ));
        if per_gb[0] > per_gb[1] {
            out.cpu_worse.push(CpuWorse {
                load: load.name.clone(),
                server: per_gb[0] / per_gb[1],
                with_clients: with_clients_ratio,
            });
        }
    }
    Ok(out)
}

/// An estimate of the most any server could serve a load at on this
/// machine, over what nginx served. The load generators share the cores
/// with the server, and each byte costs them and the kernel at least what
/// it cost them against the server that needed less: the clients' CPU plus
/// the server's system (kernel) CPU, summed per server because on loopback
/// the receiver's TCP work runs in whichever process's context the packet
/// arrives, so the two shift between client and server from run to run
/// while their sum does not. The server is granted no user-space work at
/// all. A target above it would need the clients or the kernel to do less
/// per byte than either server got them to; on a machine where clients and
/// server share few cores, that is what decides the ratio.
struct Ceiling {
    cores: f64,
    /// Client CPU plus server system CPU per GB, the lesser of the two servers.
    floor_s_per_gb: f64,
    nginx_gb_per_s: f64,
}

impl Ceiling {
    fn ratio(&self) -> f64 {
        let best_gb_per_s = self.cores / self.floor_s_per_gb;
        best_gb_per_s / self.nginx_gb_per_s
    }
}

/// One timed run: requests per second, or bytes per second for downloads.
async fn measure(c: &Contender<'_>, load: &Load, seconds: f64) -> Result<f64, BenchError> {
    let who = &c.server.name;
    match load.drive {
        Drive::Wrk { object, conns, close } => external::wrk(&c.h1, who, object, conns, seconds, close),
        Drive::H2 { object, conns, streams } => external::h2load(&c.h2, who, object, conns, streams, seconds),
        Drive::Downloads { object, clients } => external::downloads(&c.h1, who, object, clients, load.size).await,
    }
}

pub(crate) fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::MAX, f64::min)
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max)
}
