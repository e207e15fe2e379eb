//! Whether the kernel can encrypt TLS records itself (kTLS, the `tls`
//! upper-layer protocol), probed once at start on loopback connections.
//!
//! Where it can, rustls does each handshake and hands the record keys to
//! the socket (`ktls_stream`), after which `sendfile` from the block cache
//! works over HTTPS as it does in the clear. Where the kernel lacks the
//! module (`setsockopt` fails with `ENOENT`), takes none of the cipher
//! suites, or the probe fails for any other reason, HTTPS is encrypted in
//! user space by rustls. The outcome is logged and exported as
//! `circus_tls_send_path{path=...}`, and each connection is counted by the
//! path it took (`circus_tls_connections_total{path=...}`).

use std::{
    io,
    net::{Ipv4Addr, TcpListener, TcpStream},
    os::fd::AsRawFd,
};

/// What the probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelTls {
    /// The `tls` ULP attached to a TCP socket.
    Available,
    /// It did not: why.
    Unavailable(String),
}

impl KernelTls {
    /// The probe: attach the `tls` ULP to one end of a loopback connection.
    pub fn probe() -> Self {
        match attach_on_loopback() {
            Ok(()) => KernelTls::Available,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                KernelTls::Unavailable("the kernel has no tls module (modprobe tls)".into())
            }
            Err(e) => KernelTls::Unavailable(e.to_string()),
        }
    }
}

/// The cipher suites whose records the kernel takes, when it takes any:
/// then every HTTPS connection that negotiates one of them has its records
/// encrypted by the kernel.
pub async fn kernel_records() -> Result<ktls::CompatibleCiphers, String> {
    if let KernelTls::Unavailable(why) = KernelTls::probe() {
        return Err(why);
    }
    let ciphers = ktls::CompatibleCiphers::new().await.map_err(|e| format!("probing cipher suites: {e}"))?;
    let any = |v: &ktls::CompatibleCiphersForVersion| v.aes_gcm_128 || v.aes_gcm_256 || v.chacha20_poly1305;
    if any(&ciphers.tls13) || any(&ciphers.tls12) {
        Ok(ciphers)
    } else {
        Err("the kernel's tls module takes none of the cipher suites".into())
    }
}

fn attach_on_loopback() -> io::Result<()> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let client = TcpStream::connect(listener.local_addr()?)?;
    let (server, _) = listener.accept()?;
    drop(client);
    set_tcp_ulp(&server, b"tls\0")
}

fn set_tcp_ulp(socket: &TcpStream, name: &[u8]) -> io::Result<()> {
    // No safe wrapper (rustix, socket2) sets TCP_ULP.
    // SAFETY: a valid socket descriptor, and a pointer and length that
    // describe `name`, which outlives the call.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_TCP,
            libc::TCP_ULP,
            name.as_ptr().cast(),
            (name.len() - 1) as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a kernel without the module (this project's CI machines) the
    /// probe says so; with it, the ULP attaches. Either way it answers
    /// rather than failing, and an unknown ULP is refused by the kernel.
    #[test]
    fn the_probe_answers_and_an_unknown_ulp_is_refused() {
        let modules = std::fs::read_to_string("/proc/modules").unwrap_or_default();
        let builtin = std::fs::read_to_string(format!(
            "/lib/modules/{}/modules.builtin",
            std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim()
        ))
        .unwrap_or_default();
        let probed = KernelTls::probe();
        if modules.lines().any(|l| l.starts_with("tls ")) || builtin.contains("/tls.ko") {
            assert_eq!(probed, KernelTls::Available);
        } else {
            eprintln!("kTLS probe: {probed:?}");
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let _client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        assert!(set_tcp_ulp(&server, b"no-such-ulp\0").is_err());
    }
}
