//! An open-loop load: requests arrive as a Poisson process at a set rate,
//! whether or not earlier ones were answered (as SPECsfs offers load, and
//! unlike wrk, whose connections wait for each answer and so slow down
//! with the server). Each request takes an idle keep-alive connection, or
//! opens one, up to a cap; past the cap it waits for one, and that wait
//! counts in its response time.
//!
//! Arrivals are released on the runtime's timer ticks (1 ms): response
//! time counts from release, so the timer's lateness is not in it. A step
//! whose backlog passes a second of arrivals is saturated: it stops
//! offering and reports what was delivered.

use super::mix::Mix;
use crate::{BenchError, loadgen::parse_head};
use rand::{Rng, SeedableRng};
use std::{
    net::{Ipv4Addr, SocketAddr},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpSocket, TcpStream},
    sync::Semaphore,
};

/// Where the load goes, and the addresses it comes from (round-robin).
#[derive(Debug, Clone)]
pub struct Target {
    pub server: SocketAddr,
    pub sources: Vec<Ipv4Addr>,
    /// Most connections open at once.
    pub max_conns: usize,
}

/// What one step of offered load delivered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Step {
    /// Requests per second offered.
    pub offered: f64,
    /// Responses per second delivered: those that arrived within a window
    /// as long as the offering, starting the step's median response time
    /// after it started, over the offering's time. A late straggler (a SYN
    /// or a segment retransmitted after a timeout) counts in the response
    /// times, not in this rate: measured to the last answer instead, one
    /// answer a second late took a third off a two-second step's rate.
    pub delivered: f64,
    /// How long after the window's end the last answer came, seconds; 0
    /// when none was later.
    pub straggled_s: f64,
    pub mean_ms: f64,
    pub p95_ms: f64,
    /// Mean response time of each class of the mix, in its order, over
    /// the requests answered.
    pub class_mean_ms: Vec<f64>,
    /// The standard error of each class's mean, ms (NaN under two answers).
    pub class_mean_se_ms: Vec<f64>,
    /// Each class's 95th percentile response time, ms.
    pub class_p95_ms: Vec<f64>,
    /// Requests of each class that failed or were never answered: a
    /// class's mean leaves them out.
    pub class_unanswered: Vec<u64>,
    /// Requests that failed or were still unanswered at the end.
    pub failed: u64,
    /// The backlog passed a second of arrivals: offering stopped early.
    pub saturated: bool,
    /// Responses received.
    pub answered: u64,
    /// CPU seconds the server spent over the step (its offering and its
    /// drain), set by the caller, who knows the server.
    pub server_cpu_s: f64,
    /// CPU seconds the whole machine spent over the step: server, load
    /// generator, the line and the kernel's network work.
    pub machine_cpu_s: f64,
}

impl Step {
    /// Server CPU per response, microseconds.
    pub fn server_us_per_req(&self) -> f64 {
        self.server_cpu_s * 1e6 / self.answered.max(1) as f64
    }

    /// Machine CPU per response, microseconds.
    pub fn machine_us_per_req(&self) -> f64 {
        self.machine_cpu_s * 1e6 / self.answered.max(1) as f64
    }
}

/// How long answers may take after the step's offering ends.
const DRAIN: Duration = Duration::from_secs(10);

struct Pool {
    target: Target,
    idle: Mutex<Vec<TcpStream>>,
    permits: Semaphore,
    next_source: AtomicUsize,
}

impl Pool {
    async fn take(&self) -> Result<TcpStream, BenchError> {
        if let Some(c) = self.idle.lock().expect("pool lock").pop() {
            return Ok(c);
        }
        let n = self.next_source.fetch_add(1, Ordering::Relaxed);
        let source = self.target.sources[n % self.target.sources.len()];
        let fail = |e: std::io::Error| BenchError::Client(format!("connecting to {}: {e}", self.target.server));
        let socket = TcpSocket::new_v4().map_err(fail)?;
        socket.bind(SocketAddr::from((source, 0))).map_err(fail)?;
        let stream = socket.connect(self.target.server).await.map_err(fail)?;
        stream.set_nodelay(true).map_err(fail)?;
        Ok(stream)
    }

    fn give_back(&self, c: TcpStream) {
        self.idle.lock().expect("pool lock").push(c);
    }
}

/// Offers `rate` requests per second of `mix` for `duration`.
pub async fn step(target: &Target, mix: &Mix, rate: f64, duration: Duration, seed: u64) -> Result<Step, BenchError> {
    let pool = Arc::new(Pool {
        target: target.clone(),
        idle: Mutex::new(Vec::new()),
        permits: Semaphore::new(target.max_conns),
        next_source: AtomicUsize::new(0),
    });
    let requests: Arc<Vec<(String, Vec<u8>)>> = Arc::new(
        mix.objects()
            .map(|o| (o.name.clone(), format!("GET /{} HTTP/1.1\r\nHost: bench\r\n\r\n", o.name).into_bytes()))
            .collect(),
    );
    let index = |name: &str| requests.iter().position(|(n, _)| n == name).expect("object of the mix");
    let classes = mix.classes.len();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Option<Duration>, Instant)>();
    let mut tasks = tokio::task::JoinSet::new();
    let start = Instant::now();
    let mut next_at = 0.0;
    let (mut released, mut answered) = (0u64, 0u64);
    let mut latencies: Vec<Duration> = Vec::new();
    // When each answer arrived, seconds from the start.
    let mut arrivals: Vec<f64> = Vec::new();
    let mut by_class = vec![Tally::default(); classes];
    let mut released_by_class = vec![0u64; classes];
    let mut failed = 0u64;
    let mut saturated = false;
    loop {
        next_at += -(1.0 - rng.random::<f64>()).ln() / rate;
        if next_at >= duration.as_secs_f64() {
            break;
        }
        tokio::time::sleep_until((start + Duration::from_secs_f64(next_at)).into()).await;
        while let Ok((class, outcome, at)) = rx.try_recv() {
            answered += 1;
            record(class, outcome, &mut latencies, &mut by_class, &mut failed);
            arrivals.extend(outcome.map(|_| (at - start).as_secs_f64()));
        }
        if (released - answered) as f64 > rate {
            saturated = true;
            break;
        }
        let (pool, requests, tx) = (pool.clone(), requests.clone(), tx.clone());
        let (class, object) = mix.pick(&mut rng);
        let which = index(&object.name);
        released += 1;
        released_by_class[class] += 1;
        // Response time counts from release, not from when the task first runs.
        let t = Instant::now();
        tasks.spawn(async move {
            let ok = exchange(&pool, &requests[which].1).await.is_ok();
            let _ = tx.send((class, ok.then(|| t.elapsed()), Instant::now()));
        });
    }
    drop(tx);
    let offered_for = start.elapsed();
    let drain_until = tokio::time::Instant::now() + DRAIN;
    while answered < released {
        match tokio::time::timeout_at(drain_until, rx.recv()).await {
            Ok(Some((class, outcome, at))) => {
                answered += 1;
                record(class, outcome, &mut latencies, &mut by_class, &mut failed);
                arrivals.extend(outcome.map(|_| (at - start).as_secs_f64()));
            }
            Ok(None) | Err(_) => break,
        }
    }
    failed += released - answered;
    tasks.abort_all();
    latencies.sort_unstable();
    // Answers are counted over a window as long as the offering, shifted
    // by the median response time: at a steady rate it holds one
    // offering's worth of them, and past saturation what the server
    // answers in that long, never more.
    let median = latencies.get(latencies.len() / 2).map_or(0.0, Duration::as_secs_f64);
    let offered_for = if saturated { offered_for.as_secs_f64() } else { duration.as_secs_f64() };
    let window = (median, offered_for + median);
    let in_window = arrivals.iter().filter(|&&a| a > window.0 && a <= window.1).count();
    let last = arrivals.iter().copied().fold(0.0, f64::max);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mean_ms = latencies.iter().map(|&d| ms(d)).sum::<f64>() / latencies.len().max(1) as f64;
    let p95_ms = p95_rank(latencies.len()).map_or(0.0, |i| ms(latencies[i]));
    let class_mean_ms = by_class.iter().map(Tally::mean).collect();
    let class_mean_se_ms = by_class.iter().map(Tally::standard_error).collect();
    let class_p95_ms = by_class.iter().map(Tally::p95).collect();
    let class_unanswered = released_by_class.iter().zip(&by_class).map(|(r, t)| r - t.count()).collect();
    Ok(Step {
        offered: rate,
        delivered: in_window as f64 / offered_for.max(f64::MIN_POSITIVE),
        straggled_s: (last - window.1).max(0.0),
        mean_ms,
        p95_ms,
        class_mean_ms,
        class_mean_se_ms,
        class_p95_ms,
        class_unanswered,
        failed,
        saturated,
        answered: latencies.len() as u64,
        server_cpu_s: 0.0,
        machine_cpu_s: 0.0,
    })
}

/// One class's response times, ms.
#[derive(Debug, Clone, Default)]
struct Tally {
    times: Vec<f64>,
}

impl Tally {
    fn add(&mut self, ms: f64) {
        self.times.push(ms);
    }

    fn count(&self) -> u64 {
        self.times.len() as u64
    }

    fn mean(&self) -> f64 {
        if self.times.is_empty() { f64::NAN } else { self.times.iter().sum::<f64>() / self.times.len() as f64 }
    }

    /// The sample standard deviation over the root of the count.
    fn standard_error(&self) -> f64 {
        let n = self.times.len() as f64;
        if n < 2.0 {
            return f64::NAN;
        }
        let mean = self.mean();
        let variance = self.times.iter().map(|t| (t - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (variance / n).sqrt()
    }

    fn p95(&self) -> f64 {
        let mut sorted = self.times.clone();
        sorted.sort_unstable_by(f64::total_cmp);
        p95_rank(sorted.len()).map_or(f64::NAN, |i| sorted[i])
    }
}

/// The index of the 95th percentile in `len` sorted values, by nearest
/// rank (the smallest value with at least 95% of them at or below it).
fn p95_rank(len: usize) -> Option<usize> {
    (len > 0).then(|| (len * 95).div_ceil(100) - 1)
}

/// Counts one answer: its response time overall and in its class's tally
/// (ms), or a failure.
fn record(
    class: usize,
    outcome: Option<Duration>,
    latencies: &mut Vec<Duration>,
    by_class: &mut [Tally],
    failed: &mut u64,
) {
    match outcome {
        Some(l) => {
            latencies.push(l);
            by_class[class].add(l.as_secs_f64() * 1e3);
        }
        None => *failed += 1,
    }
}

/// Fetches every object of `mix` once (the servers' caches warm).
pub async fn fetch_each(target: &Target, mix: &Mix) -> Result<(), BenchError> {
    let pool = Pool {
        target: target.clone(),
        idle: Mutex::new(Vec::new()),
        permits: Semaphore::new(1),
        next_source: AtomicUsize::new(0),
    };
    for o in mix.objects() {
        let request = format!("GET /{} HTTP/1.1\r\nHost: bench\r\n\r\n", o.name);
        exchange(&pool, request.as_bytes())
            .await
            .map_err(|e| BenchError::Client(format!("warming up /{}: {e}", o.name)))?;
    }
    Ok(())
}

/// One request on a pooled connection: the whole response read, the
/// connection given back for the next.
async fn exchange(pool: &Pool, request: &[u8]) -> Result<(), BenchError> {
    let _permit = pool.permits.acquire().await.map_err(|_| BenchError::Client("pool closed".into()))?;
    let mut c = pool.take().await?;
    let fail = |e: std::io::Error| BenchError::Client(format!("exchange: {e}"));
    c.write_all(request).await.map_err(fail)?;
    let mut buf = vec![0u8; 32 << 10];
    let mut have = 0;
    let (status, head, len) = loop {
        let n = c.read(&mut buf[have..]).await.map_err(fail)?;
        if n == 0 {
            return Err(BenchError::Client("closed before the response".into()));
        }
        have += n;
        if let Some(parsed) = parse_head(&buf[..have])? {
            break parsed;
        }
        if have == buf.len() {
            return Err(BenchError::Client("response head over 32 KiB".into()));
        }
    };
    if status != 200 {
        return Err(BenchError::Client(format!("status {status}")));
    }
    let mut left = (head + len).checked_sub(have).ok_or_else(|| BenchError::Client("more than the body".into()))?;
    while left > 0 {
        let n = c.read(&mut buf).await.map_err(fail)?;
        if n == 0 || n > left {
            return Err(BenchError::Client("body cut short or overlong".into()));
        }
        left -= n;
    }
    pool.give_back(c);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::mix::{Class, Object};

    #[test]
    fn a_tally_gives_the_mean_and_its_standard_error() {
        let mut t = Tally::default();
        assert!(t.mean().is_nan() && t.standard_error().is_nan());
        for ms in [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0] {
            t.add(ms);
        }
        assert_eq!(t.mean(), 5.0);
        // Sample variance 32 / 7, over 8 answers.
        assert!((t.standard_error() - (32.0f64 / 7.0 / 8.0).sqrt()).abs() < 1e-12);
        assert_eq!(t.p95(), 9.0);
        // Nearest rank: of 1..=20, the 19th; of 1..=100, the 95th.
        let mut t = Tally::default();
        (1..=20).for_each(|v| t.add(f64::from(v)));
        assert_eq!(t.p95(), 19.0);
        (21..=100).for_each(|v| t.add(f64::from(v)));
        assert_eq!(t.p95(), 95.0);
        assert_eq!(p95_rank(0), None);
        assert_eq!(p95_rank(1), Some(0));
    }

    /// A server on loopback answering every request at once, but the
    /// tenth after `late`.
    async fn server_with_one_late_answer(late: Duration) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(AtomicUsize::new(0));
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let mut have = Vec::new();
                    loop {
                        let Ok(n) = conn.read(&mut buf).await else { return };
                        if n == 0 {
                            return;
                        }
                        have.extend_from_slice(&buf[..n]);
                        while let Some(end) = have.windows(4).position(|w| w == b"\r\n\r\n") {
                            have.drain(..end + 4);
                            if seen.fetch_add(1, Ordering::SeqCst) == 10 {
                                tokio::time::sleep(late).await;
                            }
                            let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx";
                            if conn.write_all(answer).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn one_late_answer_counts_in_the_response_times_and_not_in_the_rate() {
        let server = server_with_one_late_answer(Duration::from_millis(1500)).await;
        let target = Target { server, sources: vec![Ipv4Addr::LOCALHOST], max_conns: 64 };
        let object = Object { name: "a.bin".into(), size: 1 };
        let mix = Mix { classes: vec![Class { label: "one", share: 1.0, objects: vec![object] }] };
        let st = step(&target, &mix, 200.0, Duration::from_secs(1), 7).await.unwrap();
        assert_eq!(st.failed, 0);
        assert!(st.answered > 150, "{st:?}");
        // Measured to the last answer, the rate would be about 130/s.
        assert!(st.delivered > 170.0 && st.delivered < 230.0, "one straggler dragged the rate: {st:?}");
        assert!(st.straggled_s > 0.3, "{st:?}");
        let total_ms = st.mean_ms * st.answered as f64;
        assert!(total_ms > 1500.0, "the late answer is in the response times: {st:?}");
    }

    #[tokio::test]
    async fn past_saturation_the_rate_is_what_the_server_answers_not_more() {
        // One connection answering 100 a second, each 10 ms after the last.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut buf = vec![0u8; 4096];
                let mut have = Vec::new();
                while let Ok(n) = conn.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    have.extend_from_slice(&buf[..n]);
                    while let Some(end) = have.windows(4).position(|w| w == b"\r\n\r\n") {
                        have.drain(..end + 4);
                        tick.tick().await;
                        let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx").await;
                    }
                }
            }
        });
        let target = Target { server, sources: vec![Ipv4Addr::LOCALHOST], max_conns: 1 };
        let object = Object { name: "a.bin".into(), size: 1 };
        let mix = Mix { classes: vec![Class { label: "one", share: 1.0, objects: vec![object] }] };
        // Offered twice what it answers: the backlog and the median response
        // time grow through the step.
        let st = step(&target, &mix, 200.0, Duration::from_millis(800), 3).await.unwrap();
        assert!(st.delivered > 80.0 && st.delivered < 115.0, "the server answers 100/s: {st:?}");
    }
}
