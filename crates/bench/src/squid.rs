//! Squid (Debian's `squid`) as a caching reverse proxy (accel mode) in
//! front of an HTTP origin: a memory cache only (no `cache_dir`), sized like
//! the other servers' budgets, started cold and stopped by the bench.
//!
//! Squid refuses to run as root and switches to its effective user
//! (`proxy`) after reading the config, so nothing it opens later may sit in
//! a private work directory: it logs to stderr (a file the bench opened),
//! writes no pid file, access log or core dumps. Each instance gets its own
//! service name (`-n`), which names its shared-memory segments: two Squids
//! with the default name collide in /dev/shm.

use crate::{BenchError, io_err, procs::ServerProc};
use std::{net::TcpStream, path::Path, process::Stdio, time::Duration};

const BIN: &str = "/usr/sbin/squid";

/// Whether Squid is installed; the bench skips it otherwise.
pub fn installed() -> bool {
    Path::new(BIN).exists()
}

/// squid.conf for an accelerator on `listen` (HOST:PORT) in front of
/// `origin` (HOST:PORT) with `mem` bytes of memory cache.
pub fn config(listen: &str, origin: &str, mem: u64) -> String {
    let (host, port) = origin.rsplit_once(':').unwrap_or((origin, "80"));
    format!(
        "http_port {listen} accel defaultsite=origin no-vhost\n\
         cache_peer {host} parent {port} 0 no-query no-digest originserver name=origin\n\
         cache_peer_access origin allow all\n\
         # Everything goes to the origin peer: without this Squid may first\n\
         # try to resolve the site name itself and answer 502.\n\
         never_direct allow all\n\
         http_access allow all\n\
         cache_mem {mb} MB\n\
         # The default (512 KB) would keep the 1 MiB objects out of memory.\n\
         maximum_object_size_in_memory 2 MB\n\
         maximum_object_size 2 MB\n\
         cache_effective_user proxy\n\
         access_log none\n\
         cache_log /dev/null\n\
         pid_filename none\n\
         coredump_dir none\n\
         netdb_filename none\n\
         pinger_enable off\n\
         # Stop within the bench's 5 s grace instead of the default 30 s.\n\
         shutdown_lifetime 1 seconds\n",
        mb = mem >> 20,
    )
}

impl ServerProc {
    /// Squid listening on `host` (port found free on loopback), run through
    /// `wrap` (see [`ServerProc::circus_at`]); `log` receives its stderr.
    pub fn squid(origin: &str, log: &Path, mem: u64, host: &str, wrap: &[String]) -> Result<ServerProc, BenchError> {
        if !installed() {
            return Err(BenchError::Setup("squid is not installed: apt-get install -y squid".into()));
        }
        let port = crate::procs::free_port()?;
        let addr = format!("{host}:{port}");
        let conf = log.with_extension("conf");
        std::fs::write(&conf, config(&addr, origin, mem)).map_err(io_err("writing squid.conf"))?;
        let stderr = std::fs::File::create(log).map_err(io_err(format!("creating {}", log.display())))?;
        // Squid reads the config as root, before it drops privileges.
        let name = format!("circus{}x{port}", std::process::id());
        let child = crate::procs::wrapped(wrap, BIN.as_ref())
            .args(["-N", "-d", "1", "-n", &name, "-f"])
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(io_err("starting squid"))?;
        for _ in 0..200 {
            if TcpStream::connect(&addr).is_ok() {
                return Ok(ServerProc { name: "squid".into(), child, addr, admin: None });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(ServerProc { name: "squid".into(), child, addr, admin: None });
        Err(BenchError::Setup(format!("squid did not start listening within 10 s: see {}", log.display())))
    }
}

/// Removes the shared-memory segments of Squids of earlier runs that were
/// killed before they could (names from [`ServerProc::squid`]).
pub fn remove_stale_segments() {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else { return };
    for e in dir.filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        let pid = name.strip_prefix("circus").and_then(|r| r.split_once('x')).and_then(|(p, _)| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_points_at_the_origin_with_a_memory_cache_only() {
        let c = config("10.150.0.1:4000", "10.150.250.1:5000", 256 << 20);
        for want in [
            "http_port 10.150.0.1:4000 accel",
            "cache_peer 10.150.250.1 parent 5000 0",
            "originserver",
            "cache_mem 256 MB",
            "never_direct allow all",
        ] {
            assert!(c.contains(want), "{want:?} missing in\n{c}");
        }
        assert!(!c.contains("cache_dir"), "no disk cache: {c}");
    }
}
