//! How much unsent data a cleartext connection may keep in the kernel
//! (TCP_NOTSENT_LOWAT), chosen per response.
//!
//! The scheduler counts a block sent when the connection takes it; the
//! smaller the unsent backlog the kernel may hold, the closer "sent" is to
//! "on the wire" and the better the scheduler knows each client's pace. A
//! plain download of a file larger than the cache needs that most: which
//! blocks stay in memory for the readers behind depends on where every
//! reader really is (rule C14). There the mark starts small (16 KiB) and
//! is paced: raised to [`SLACK_NANOS`] of the connection's delivery rate,
//! so that the link never idles while the server is late to refill it.
//! Native downloads over HTTP/1.x keep the connection's base mark
//! (`--send-lowat`); other responses, and HTTP/2 connections, keep it
//! raised to one bandwidth-delay product of the connection (its delivery
//! rate times its minimum round trip): the kernel sends unsent bytes as
//! acknowledgements open the congestion window, and a window's worth can
//! open at once; a backlog smaller than that leaves the rest of the window
//! idle until the server wakes to refill it. On loopback and a 1 Gbit/s
//! LAN the product is under the base mark, which stands (a 10 Gbit/s link
//! at 100 us raises it to about 128 KiB); across a WAN it is megabytes (at
//! 20 ms one-way, a fixed 128 KiB made 16 MiB downloads at half load take
//! 1.6-2.2 times nginx's time). The kernel's send buffer bounds it as it
//! bounds any server's (`tcp_wmem`).
//! HTTPS connections keep the system default throughout (see `config.rs`).
//!
//! A long body also corks the socket (TCP_CORK) until its last bytes are
//! written, as nginx's `tcp_nopush` does. The mark makes the kernel push
//! each write as it comes, and a block is not a whole number of segments
//! (64 KiB against 45 segments of 1,448 bytes on a 1,500-byte link), so
//! without the cork every block leaves a short packet of its own behind
//! it: a third more packets, each a trip through both ends' TCP stacks.
//! Corked, the short remainder waits for the next write to fill it.

use crate::config::ServeConfig;
use std::time::{Duration, Instant};

/// What a response asks of its connection's send mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Mark {
    /// The TCP_NOTSENT_LOWAT to keep at least (0: the system default).
    pub floor: u32,
    /// What raises it above the floor ([`paced`]).
    pub pace: Pace,
    /// Whether to send whole segments only (TCP_CORK): asked by a long
    /// body until its last write.
    pub cork: bool,
}

/// What a mark follows above its floor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Pace {
    /// Nothing: it stays at its floor.
    #[default]
    Fixed,
    /// One bandwidth-delay product of the connection: what a window's worth
    /// of acknowledgements may let the kernel send at once.
    RoundTrip,
    /// [`SLACK_NANOS`] of the connection's delivery rate: how late the
    /// server may be to refill the socket before the link idles.
    Slack,
}

impl Pace {
    fn bits(self) -> u64 {
        match self {
            Pace::Fixed => 0,
            Pace::RoundTrip => 1,
            Pace::Slack => 2,
        }
    }

    fn from_bits(bits: u64) -> Pace {
        match bits & 3 {
            1 => Pace::RoundTrip,
            2 => Pace::Slack,
            _ => Pace::Fixed,
        }
    }
}

impl Mark {
    /// As one word, for an atomic.
    pub fn pack(self) -> u64 {
        u64::from(self.floor) | (self.pace.bits() << 32) | (u64::from(self.cork) << 34)
    }

    pub fn unpack(word: u64) -> Mark {
        Mark { floor: word as u32, pace: Pace::from_bits(word >> 32), cork: word & (1 << 34) != 0 }
    }

    /// Whether it moves with the connection's pace (a mark of 0, the
    /// system default, does not).
    pub fn is_paced(self) -> bool {
        self.pace != Pace::Fixed && self.floor != 0
    }

    /// The same mark, corked or not.
    pub fn corked(self, cork: bool) -> Mark {
        Mark { cork, ..self }
    }
}

/// The marks a server's connections take. 0 stands for the system default.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SendMarks {
    base: u32,
    uncached: u32,
    cache_bytes: u64,
}

impl SendMarks {
    pub fn new(cfg: &ServeConfig, tls: bool) -> Self {
        let (base, uncached) = match tls {
            true => (0, 0),
            false => (cfg.send_lowat.unwrap_or(0), cfg.send_lowat_uncached.unwrap_or(0)),
        };
        SendMarks { base, uncached, cache_bytes: cfg.sched.cache_bytes }
    }

    /// What a connection starts with.
    pub fn base(&self) -> Mark {
        Mark { floor: self.base, pace: Pace::RoundTrip, cork: false }
    }

    /// The mark for a native download: the base mark, not raised. The
    /// server picks each block a native client gets next by what it has
    /// taken, so the backlog stays small at every round trip (its
    /// downloads keep 97% of their throughput at 80 ms added: `bench
    /// rtt`).
    pub fn native(&self) -> Mark {
        Mark { pace: Pace::Fixed, ..self.base() }
    }

    /// The mark for an HTTP/1.x response carrying a file of `size` bytes.
    /// A file larger than the cache is paced: its readers share blocks
    /// only while they keep their pace, and a download whose link idles
    /// waiting for a refill falls behind the others.
    pub fn for_file(&self, size: u64) -> Mark {
        if size > self.cache_bytes {
            Mark { floor: self.uncached, pace: Pace::Slack, cork: false }
        } else {
            self.base()
        }
    }
}

/// Sets `socket`'s mark (0: the system default); whether it took. A
/// failure leaves the previous mark, which only costs precision.
pub(crate) fn apply(socket: &tokio::net::TcpStream, mark: u32) -> bool {
    socket2::SockRef::from(socket).set_tcp_notsent_lowat(mark).is_ok()
}

/// Corks or uncorks `socket`; whether it took. Uncorking sends what the
/// cork held at once.
pub(crate) fn apply_cork(socket: &tokio::net::TcpStream, cork: bool) -> bool {
    socket2::SockRef::from(socket).set_tcp_cork(cork).is_ok()
}

/// How long a connection's unsent backlog should last at the rate the
/// network takes its bytes: the time the server may be late to refill it
/// without the link going idle. A fixed mark of a few kilobytes lasts
/// half a millisecond at 40 MB/s, and on a busy machine a task waits
/// longer than that for a core: the link idles, the download falls
/// behind its pace, and readers that shared blocks drift apart (50 curl
/// downloads behind emulated links read their file 11-14 times with
/// 16 KiB, 2.6 with 1 MiB; 20 ms of slack still left them 19% slower
/// than their links). The scheduler's view of a reader is then off by
/// about this long more (plus what is in flight), small beside the
/// seconds a cache's worth of blocks lasts.
const SLACK_NANOS: u64 = 100_000_000;

/// The largest mark the slack may ask for: 4 MiB, 100 ms at 40 MB/s,
/// about what the kernel's send buffer grows to on its own.
const MAX_PACED_MARK: u32 = 4 << 20;

/// The mark for a connection whose pace is `sample` (the delivery rate
/// held as [`HeldRate`] keeps it): `floor`, raised as `pace` asks, up to
/// [`MAX_PACED_MARK`]. 0 (the system default) stays 0.
pub(crate) fn paced(floor: u32, pace: Pace, sample: PaceSample) -> u32 {
    if floor == 0 {
        return 0;
    }
    let raised = match pace {
        Pace::Fixed => 0,
        Pace::RoundTrip => (u128::from(sample.delivery_rate) * sample.min_rtt.as_nanos() / 1_000_000_000)
            .min(u128::from(u64::MAX)) as u64,
        Pace::Slack => sample.delivery_rate.saturating_mul(SLACK_NANOS) / 1_000_000_000,
    };
    raised.min(u64::from(MAX_PACED_MARK)).max(u64::from(floor)) as u32
}

/// How long a higher delivery rate seen is remembered: the time constant
/// of its decay (see [`HeldRate`]).
const RATE_MEMORY: Duration = Duration::from_secs(1);

/// The delivery rate a paced mark follows: the highest sample, decaying
/// with a time constant of [`RATE_MEMORY`]. A sample taken while the
/// server was late to refill the socket reads below the link's rate and
/// must not shrink the slack that was lacking; a link that really slows
/// down is followed within a few seconds.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct HeldRate {
    rate: u64,
    at: Option<Instant>,
}

impl HeldRate {
    /// Takes a sample taken at `now`; the rate to follow.
    pub fn sample(&mut self, rate: u64, now: Instant) -> u64 {
        let held = self.at.map_or(0, |at| {
            let left = RATE_MEMORY.saturating_sub(now.saturating_duration_since(at));
            (u128::from(self.rate) * left.as_nanos() / RATE_MEMORY.as_nanos()) as u64
        });
        self.rate = rate.max(held);
        self.at = Some(now);
        self.rate
    }
}

/// What the kernel says of a connection's pace (TCP_INFO).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct PaceSample {
    /// Bytes per second at which the peer most recently acknowledged data
    /// (`tcpi_delivery_rate`).
    pub delivery_rate: u64,
    /// The shortest round trip seen on the connection (`tcpi_min_rtt`).
    pub min_rtt: Duration,
}

/// `socket`'s pace; `None` where the kernel does not say. Neither socket2
/// nor rustix reads TCP_INFO.
pub(crate) fn pace_sample(socket: &tokio::net::TcpStream) -> Option<PaceSample> {
    use std::os::fd::AsRawFd;
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    #[allow(unsafe_code)]
    // SAFETY: `tcp_info` is a C struct of integers, for which all zero
    // bytes are a valid value; the kernel writes at most `len` bytes of it.
    let (rc, info) = unsafe {
        let mut info: libc::tcp_info = std::mem::zeroed();
        let rc = libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        );
        (rc, info)
    };
    let whole = len as usize >= std::mem::offset_of!(libc::tcp_info, tcpi_delivery_rate) + size_of::<u64>();
    (rc == 0 && whole).then(|| PaceSample {
        delivery_rate: info.tcpi_delivery_rate,
        // All ones until a round trip was measured.
        min_rtt: match info.tcpi_min_rtt {
            u32::MAX => Duration::ZERO,
            us => Duration::from_micros(u64::from(us)),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_files_larger_than_the_cache_take_the_small_mark_native_downloads_a_fixed_one_and_https_none() {
        let mut cfg = ServeConfig::new("/".into());
        cfg.sched.cache_bytes = 64 << 20;
        let marks = SendMarks::new(&cfg, false);
        assert_eq!(marks.base(), Mark { floor: 128 * 1024, pace: Pace::RoundTrip, cork: false });
        assert_eq!(marks.for_file(64 << 20), Mark { floor: 128 * 1024, pace: Pace::RoundTrip, cork: false });
        assert_eq!(marks.for_file((64 << 20) + 1), Mark { floor: 16 * 1024, pace: Pace::Slack, cork: false });
        assert_eq!(marks.native(), Mark { floor: 128 * 1024, pace: Pace::Fixed, cork: false });
        let tls = SendMarks::new(&cfg, true);
        assert_eq!((tls.base().floor, tls.for_file(1 << 40).floor), (0, 0));
        for mark in [marks.base(), marks.for_file(1 << 40), Mark::default(), marks.for_file(1 << 40).corked(true)] {
            assert_eq!(Mark::unpack(mark.pack()), mark);
        }
    }

    /// A sample of `rate` bytes/s over a path of `rtt_ms` minimum round trip.
    fn pace(rate: u64, rtt_us: u64) -> PaceSample {
        PaceSample { delivery_rate: rate, min_rtt: Duration::from_micros(rtt_us) }
    }

    #[test]
    fn the_slack_mark_lasts_a_tenth_of_a_second_between_the_floor_and_4_mib() {
        let slack = |floor, rate| paced(floor, Pace::Slack, pace(rate, 50));
        assert_eq!(slack(16 * 1024, 0), 16 * 1024);
        assert_eq!(slack(16 * 1024, 10_000_000), 1_000_000);
        assert_eq!(slack(16 * 1024, 40_000_000), 4_000_000);
        assert_eq!(slack(16 * 1024, 5_000_000_000), 4 << 20);
        assert_eq!(slack(128 * 1024, 1_000_000), 128 * 1024);
        assert_eq!(slack(0, 40_000_000), 0);
    }

    #[test]
    fn the_round_trip_mark_holds_one_bandwidth_delay_product_above_its_floor() {
        let trip = |rate, rtt_us| paced(128 * 1024, Pace::RoundTrip, pace(rate, rtt_us));
        // A LAN: gigabytes a second over tens of microseconds, a few
        // hundred kilobytes at most.
        assert_eq!(trip(2_000_000_000, 20), 128 * 1024);
        assert_eq!(trip(2_000_000_000, 100), 200_000);
        // A WAN: 100 MB/s over 40 ms is 4 MB.
        assert_eq!(trip(100_000_000, 40_000), 4_000_000);
        assert_eq!(trip(1_000_000_000, 40_000), 4 << 20);
        // Nothing measured yet.
        assert_eq!(trip(0, 0), 128 * 1024);
        assert_eq!(paced(0, Pace::RoundTrip, pace(100_000_000, 40_000)), 0);
        assert_eq!(paced(128 * 1024, Pace::Fixed, pace(100_000_000, 40_000)), 128 * 1024);
    }

    #[test]
    fn a_held_rate_keeps_the_highest_sample_and_lets_it_fade_over_a_second() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut held = HeldRate::default();
        assert_eq!(held.sample(40_000_000, t0), 40_000_000);
        // A low sample (the server was late) does not pull it down at once.
        assert_eq!(held.sample(1_000_000, ms(100)), 36_000_000);
        assert_eq!(held.sample(50_000_000, ms(200)), 50_000_000);
        // After a second without a higher one, only the samples count.
        assert_eq!(held.sample(1_000_000, ms(1_200)), 1_000_000);
    }

    #[tokio::test]
    async fn a_connection_that_carried_bytes_has_a_delivery_rate_and_a_round_trip() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        let sent = vec![7u8; 4 << 20];
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; 4 << 20];
            client.read_exact(&mut got).await.unwrap();
        });
        server.write_all(&sent).await.unwrap();
        reader.await.unwrap();
        let sample = pace_sample(&server).expect("TCP_INFO has tcpi_delivery_rate");
        assert!(sample.delivery_rate > 1_000_000, "4 MiB over loopback: {sample:?}");
        assert!(sample.min_rtt > Duration::ZERO && sample.min_rtt < Duration::from_millis(50), "{sample:?}");
    }

    #[tokio::test]
    async fn the_mark_reaches_the_socket() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        apply(&client, 16 * 1024);
        assert_eq!(socket2::SockRef::from(&client).tcp_notsent_lowat().unwrap(), 16 * 1024);
        apply(&client, 0);
        assert_eq!(socket2::SockRef::from(&client).tcp_notsent_lowat().unwrap(), 0);
    }
}
