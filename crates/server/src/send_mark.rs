//! How much unsent data a cleartext connection may keep in the kernel
//! (TCP_NOTSENT_LOWAT), chosen per response.
//!
//! The scheduler counts a block sent when the connection takes it; the
//! smaller the unsent backlog the kernel may hold, the closer "sent" is to
//! "on the wire" and the better the scheduler knows each client's pace. A
//! plain download of a file larger than the cache needs that most: which
//! blocks stay in memory for the readers behind depends on where every
//! reader really is (rule C14). There a small mark (16 KiB) cut a crowd's
//! storage reads by a sixth; elsewhere it only adds wake-ups, so other
//! responses keep the connection's base mark (`--send-lowat`). HTTPS
//! connections keep the system default throughout (see `config.rs`).

use crate::config::ServeConfig;

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
    pub fn base(&self) -> u32 {
        self.base
    }

    /// The mark for an HTTP/1.x response carrying a file of `size` bytes.
    pub fn for_file(&self, size: u64) -> u32 {
        if size > self.cache_bytes { self.uncached } else { self.base }
    }
}

/// Sets `socket`'s mark (0: the system default).
pub(crate) fn apply(socket: &tokio::net::TcpStream, mark: u32) {
    // A failure leaves the previous mark, which only costs precision.
    let _ = socket2::SockRef::from(socket).set_tcp_notsent_lowat(mark);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_files_larger_than_the_cache_take_the_small_mark_and_https_takes_none() {
        let mut cfg = ServeConfig::new("/".into());
        cfg.sched.cache_bytes = 64 << 20;
        let marks = SendMarks::new(&cfg, false);
        assert_eq!(marks.base(), 128 * 1024);
        assert_eq!(marks.for_file(64 << 20), 128 * 1024);
        assert_eq!(marks.for_file((64 << 20) + 1), 16 * 1024);
        let tls = SendMarks::new(&cfg, true);
        assert_eq!((tls.base(), tls.for_file(1 << 40)), (0, 0));
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
