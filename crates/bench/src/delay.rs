//! Added latency and per-message overhead without netem: an NFQUEUE line.
//!
//! iptables rules on the clients' side of the veth send packets to a
//! netfilter queue, which this thread serves:
//! - packets from the server are held for the configured delay and then
//!   accepted, in arrival order. Only the server-to-client direction is
//!   delayed, so the added RTT equals the delay;
//! - packets to the server that carry data (requests; not bare ACKs) cost
//!   the configured overhead first: the thread spins for it, so the host
//!   spends that much CPU per message, one message at a time, as the
//!   network interface's handler did where the overhead was first
//!   measured this way (Martin's LogGP study).
//!
//! The rules use `--queue-bypass` and the queue is fail-open, so if this
//! thread is gone (or the queue overflows) packets flow undelayed rather
//! than being dropped. With `super_packets`, the queue takes a segmentation
//! offload's packets whole (up to 64 KiB), so the line can keep up with
//! loopback-class rates; otherwise each is one MTU.
//!
//! The thread polls: while packets flow it sleeps 20 us at a time (its
//! timer slack set to 1 us), so a packet waits about that long beyond its
//! delay; after 10 ms without traffic it sleeps 200 us at a time.

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

/// What the line does to the packets queued to it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LineSpec {
    /// Added to every packet from the server.
    pub delay: Duration,
    /// CPU spent on every packet to the server that carries data.
    pub overhead: Duration,
    /// Take offloaded packets whole instead of one MTU each.
    pub super_packets: bool,
}

/// A running delay line; stops (releasing every held packet) when dropped.
#[derive(Debug)]
pub struct DelayLine {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Poll intervals while packets flow and after a quiet spell.
const BUSY_POLL: Duration = Duration::from_micros(20);
const IDLE_POLL: Duration = Duration::from_micros(200);
const QUIET: Duration = Duration::from_millis(10);

/// Bytes of each packet copied to the line: the IPv4 and TCP headers.
const HEADERS: u16 = 120;

impl DelayLine {
    /// Binds netfilter queue `queue` and serves its packets as `spec` says.
    pub fn start(queue: u16, spec: LineSpec) -> Result<DelayLine, BenchError> {
        let setup = |e: std::io::Error| {
            BenchError::Setup(format!("NFQUEUE {queue}: {e} (needs root and the NFQUEUE netfilter target)"))
        };
        let mut q = nfq::Queue::open().map_err(setup)?;
        q.bind(queue).map_err(setup)?;
        q.set_fail_open(queue, true).map_err(setup)?;
        q.set_copy_range(queue, HEADERS).map_err(setup)?;
        q.set_queue_max_len(queue, 1 << 16).map_err(setup)?;
        if spec.super_packets {
            q.set_recv_gso(queue, true).map_err(setup)?;
        }
        q.set_nonblocking(true);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("delay-{queue}"))
            .spawn(move || {
                // Sleeps of 20 us would otherwise end up to 50 us late.
                // SAFETY: PR_SET_TIMERSLACK takes an integer argument and
                // affects only the calling thread.
                #[allow(unsafe_code)]
                unsafe {
                    libc::prctl(libc::PR_SET_TIMERSLACK, 1000);
                }
                let mut held: VecDeque<(Instant, nfq::Message)> = VecDeque::new();
                let mut last_packet = Instant::now();
                while !flag.load(Ordering::Relaxed) {
                    // Take everything waiting, then release what is due.
                    while let Ok(mut msg) = q.recv() {
                        last_packet = Instant::now();
                        if msg.get_indev() == 0 {
                            // Leaving for the server.
                            if carries_data(msg.get_payload()) {
                                spin(spec.overhead);
                            }
                            msg.set_verdict(nfq::Verdict::Accept);
                            let _ = q.verdict(msg);
                        } else {
                            held.push_back((last_packet + spec.delay, msg));
                        }
                    }
                    let now = Instant::now();
                    while held.front().is_some_and(|(due, _)| *due <= now) {
                        let (_, mut msg) = held.pop_front().expect("front exists");
                        msg.set_verdict(nfq::Verdict::Accept);
                        let _ = q.verdict(msg);
                    }
                    let poll = if now - last_packet < QUIET { BUSY_POLL } else { IDLE_POLL };
                    let next = held.front().map_or(poll, |(due, _)| due.saturating_duration_since(now));
                    std::thread::sleep(next.min(poll));
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

/// Busy for `d` (the host's per-message work, not a sleep).
fn spin(d: Duration) {
    if d.is_zero() {
        return;
    }
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// Whether an IPv4 TCP packet (its headers at least) carries data beyond
/// its headers: a request or a body, not a bare ACK.
fn carries_data(packet: &[u8]) -> bool {
    let Some(&first) = packet.first() else { return false };
    let ip_header = usize::from(first & 0x0f) * 4;
    if first >> 4 != 4 || packet.len() < ip_header + 13 || packet[9] != 6 {
        return false;
    }
    let total = usize::from(u16::from_be_bytes([packet[2], packet[3]]));
    let tcp_header = usize::from(packet[ip_header + 12] >> 4) * 4;
    // An offloaded packet may leave its total length 0: it is data.
    total == 0 || total > ip_header + tcp_header
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 TCP packet of `data` bytes after 20 + 32 bytes of headers.
    fn packet(data: usize) -> Vec<u8> {
        let total = (20 + 32 + data) as u16;
        let mut p = vec![0u8; 20 + 32 + data];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p[9] = 6;
        p[20 + 12] = 8 << 4;
        p
    }

    #[test]
    fn requests_carry_data_and_bare_acks_do_not() {
        assert!(carries_data(&packet(80)));
        assert!(!carries_data(&packet(0)));
        let mut udp = packet(80);
        udp[9] = 17;
        assert!(!carries_data(&udp), "not TCP");
        assert!(!carries_data(&packet(0)[..20]), "headers cut short");
        // Only the headers are copied to the line: the length field decides.
        assert!(carries_data(&packet(1000)[..HEADERS as usize]));
    }

    #[test]
    fn spinning_takes_the_overhead() {
        let t = Instant::now();
        spin(Duration::from_micros(300));
        assert!(t.elapsed() >= Duration::from_micros(300));
    }
}
