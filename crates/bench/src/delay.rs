//! Added round-trip time without netem: an NFQUEUE delay line.
//!
//! An iptables rule on the clients' side of the veth sends every packet
//! from the server to a netfilter queue; this thread holds each one for
//! the configured delay and then accepts it, in arrival order. Only the
//! server-to-client direction is delayed, so the added RTT equals the
//! delay. The rule uses `--queue-bypass` and the queue is fail-open, so if
//! this thread is gone (or the queue overflows) packets flow undelayed
//! rather than being dropped.

use crate::BenchError;
use std::{
    collections::VecDeque,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

/// A running delay line; stops (releasing every held packet) when dropped.
#[derive(Debug)]
pub struct DelayLine {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl DelayLine {
    /// Binds netfilter queue `queue` and delays its packets by `delay`.
    pub fn start(queue: u16, delay: Duration) -> Result<DelayLine, BenchError> {
        let setup = |e: std::io::Error| {
            BenchError::Setup(format!("NFQUEUE {queue}: {e} (needs root and the NFQUEUE netfilter target)"))
        };
        let mut q = nfq::Queue::open().map_err(setup)?;
        q.bind(queue).map_err(setup)?;
        q.set_fail_open(queue, true).map_err(setup)?;
        q.set_copy_range(queue, 0).map_err(setup)?;
        q.set_queue_max_len(queue, 1 << 16).map_err(setup)?;
        q.set_nonblocking(true);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("delay-{queue}"))
            .spawn(move || {
                let mut held: VecDeque<(Instant, nfq::Message)> = VecDeque::new();
                while !flag.load(Ordering::Relaxed) {
                    // Take everything waiting, then release what is due.
                    while let Ok(msg) = q.recv() {
                        held.push_back((Instant::now() + delay, msg));
                    }
                    let now = Instant::now();
                    while held.front().is_some_and(|(due, _)| *due <= now) {
                        let (_, mut msg) = held.pop_front().expect("front exists");
                        msg.set_verdict(nfq::Verdict::Accept);
                        let _ = q.verdict(msg);
                    }
                    let next =
                        held.front().map_or(Duration::from_millis(1), |(due, _)| due.saturating_duration_since(now));
                    std::thread::sleep(next.min(Duration::from_micros(500)));
                }
                for (_, mut msg) in held {
                    msg.set_verdict(nfq::Verdict::Accept);
                    let _ = q.verdict(msg);
                }
                let _ = q.unbind(queue);
            })
            .map_err(|e| BenchError::Setup(format!("starting the delay thread: {e}")))?;
        Ok(DelayLine { stop, thread: Some(thread) })
    }
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
