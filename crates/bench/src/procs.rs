//! Server processes under test, started and always stopped by the bench.

use crate::{BenchError, io_err};
use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

pub(crate) const VARNISHD: &str = "/usr/sbin/varnishd";

/// A child server; killed when dropped.
#[derive(Debug)]
pub struct ServerProc {
    pub name: String,
    pub child: Child,
    pub addr: String,
    /// A circus's admin listener (/metrics, /status); `None` for peers.
    pub admin: Option<String>,
}

impl Drop for ServerProc {
    /// SIGTERM first, so nginx's master stops its workers (SIGKILL would
    /// orphan them) and circus drains; SIGKILL if it is still up after 5 s.
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        for _ in 0..100 {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// nginx's `worker_processes auto`: one per core.
pub(crate) fn nginx_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// What an nginx listens for.
enum Speaks<'a> {
    Plain,
    /// HTTP/1.1 on the main port, h2 with prior knowledge on another.
    PlainAndH2c,
    /// HTTPS (h2 and http/1.1) with this certificate and key.
    Tls(&'a Path, &'a Path),
}

impl ServerProc {
    /// `circus serve ROOT --listen 127.0.0.1:0 EXTRA...`.
    pub fn circus(bin: &Path, root: &Path, extra: &[String]) -> Result<ServerProc, BenchError> {
        let mut args = vec![root.to_string_lossy().into_owned()];
        args.extend_from_slice(extra);
        Self::circus_serve(bin, "circus", &args)
    }

    /// `circus serve --listen 127.0.0.1:0 ARGS...`, named `name` in reports.
    pub fn circus_serve(bin: &Path, name: &str, args: &[String]) -> Result<ServerProc, BenchError> {
        Self::circus_serve_at(bin, name, args, "127.0.0.1", &[])
    }

    /// `WRAP... circus serve --listen HOST:0 ROOT EXTRA...`; `wrap` is
    /// empty or runs the server elsewhere (`ip netns exec NS`).
    pub fn circus_at(
        bin: &Path,
        root: &Path,
        extra: &[String],
        host: &str,
        wrap: &[String],
    ) -> Result<ServerProc, BenchError> {
        let mut args = vec![root.to_string_lossy().into_owned()];
        args.extend_from_slice(extra);
        Self::circus_serve_at(bin, "circus", &args, host, wrap)
    }

    /// [`ServerProc::circus_serve`] listening on `host`, run through `wrap`.
    pub fn circus_serve_at(
        bin: &Path,
        name: &str,
        args: &[String],
        host: &str,
        wrap: &[String],
    ) -> Result<ServerProc, BenchError> {
        Self::circus_listening(bin, name, args, &format!("{host}:0"), host, wrap)
    }

    /// [`ServerProc::circus_serve_at`] on the address `listen` (a cluster's
    /// members must know each other's before they start), its admin
    /// listener on `admin_host`.
    pub fn circus_listening(
        bin: &Path,
        name: &str,
        args: &[String],
        listen: &str,
        admin_host: &str,
        wrap: &[String],
    ) -> Result<ServerProc, BenchError> {
        let mut child = wrapped(wrap, bin.as_os_str())
            .args(["serve", "--listen", listen, "--admin-listen", &format!("{admin_host}:0")])
            .args(args)
            .env("CIRCUS_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(io_err(format!("starting {}", bin.display())))?;
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut lines = [String::new(), String::new()];
        for line in &mut lines {
            stdout.read_line(line).map_err(io_err("reading server address"))?;
        }
        let url = |line: &str| line.trim().rsplit("://").next().unwrap_or_default().to_owned();
        let (addr, admin) = (url(&lines[0]), url(&lines[1]));
        if addr.is_empty() || admin.is_empty() {
            let _ = child.kill();
            return Err(BenchError::Setup(format!("circus serve printed no addresses: {lines:?}")));
        }
        Ok(ServerProc { name: name.into(), child, addr, admin: Some(admin) })
    }

    /// nginx serving `root` on a free loopback port, with sendfile, its own
    /// config, pid and logs under `work`.
    pub fn nginx(root: &Path, work: &Path, directio: bool) -> Result<ServerProc, BenchError> {
        Self::nginx_at(root, work, directio, "127.0.0.1", &[])
    }

    /// nginx listening on `host` (a free port found on loopback), run
    /// through `wrap` (see [`ServerProc::circus_at`]). With `directio`,
    /// files over 4 MiB are read with O_DIRECT through 64 KiB output
    /// buffers (the block size of the other servers) instead of sendfile,
    /// by nginx's thread pool (`aio threads`) so reads for many clients can
    /// be outstanding at once, as with circus's I/O pool.
    pub fn nginx_at(
        root: &Path,
        work: &Path,
        directio: bool,
        host: &str,
        wrap: &[String],
    ) -> Result<ServerProc, BenchError> {
        Self::nginx_with(root, work, directio, host, wrap, Speaks::Plain).map(|(server, _)| server)
    }

    /// nginx on loopback as [`ServerProc::nginx`], with a second port
    /// speaking h2 in clear with prior knowledge (nginx cannot speak both
    /// on one cleartext port): the server and that port's address.
    pub fn nginx_with_h2c(root: &Path, work: &Path) -> Result<(ServerProc, String), BenchError> {
        let (server, h2c) = Self::nginx_with(root, work, false, "127.0.0.1", &[], Speaks::PlainAndH2c)?;
        Ok((server, h2c.unwrap_or_default()))
    }

    /// nginx speaking HTTPS (h2 and http/1.1) on loopback with `cert` and
    /// `key`: TLS 1.3, a shared session cache, sendfile on.
    pub fn nginx_https(root: &Path, work: &Path, cert: &Path, key: &Path) -> Result<ServerProc, BenchError> {
        Self::nginx_with(root, work, false, "127.0.0.1", &[], Speaks::Tls(cert, key)).map(|(server, _)| server)
    }

    fn nginx_with(
        root: &Path,
        work: &Path,
        directio: bool,
        host: &str,
        wrap: &[String],
        speaks: Speaks<'_>,
    ) -> Result<(ServerProc, Option<String>), BenchError> {
        let port = free_port()?;
        let direct =
            if directio { "directio 4m; directio_alignment 4k; output_buffers 2 64k; aio threads;" } else { "" };
        let mut h2c = None;
        let (listen_tls, server_tls) = match speaks {
            Speaks::Tls(cert, key) => (
                " ssl http2",
                format!(
                    "ssl_certificate {}; ssl_certificate_key {}; ssl_protocols TLSv1.3; ssl_session_cache shared:SSL:10m; ssl_session_timeout 10m;",
                    cert.display(),
                    key.display()
                ),
            ),
            Speaks::Plain => ("", String::new()),
            Speaks::PlainAndH2c => {
                let addr = format!("{host}:{}", free_port()?);
                let listen = format!("listen {addr} http2;");
                h2c = Some(addr);
                ("", listen)
            }
        };
        let http = format!(
            "{direct} types {{ }} default_type application/octet-stream;\n\
             server {{ listen {host}:{port}{listen_tls}; {server_tls} root {root}; }}",
            root = root.display(),
        );
        let name = if directio { "nginx-directio" } else { "nginx-sendfile" };
        let server = Self::nginx_conf(name, work, host, port, wrap, &http)?;
        Ok((server, h2c))
    }

    /// nginx in front of `origin` (`host:port`) with `proxy_cache` of up to
    /// `max_size` bytes under `work` (revalidating expired entries with
    /// conditional requests, keep-alive connections to the origin), on
    /// loopback: the reference caching tier.
    pub fn nginx_proxy_cache(origin: &str, work: &Path, max_size: u64) -> Result<ServerProc, BenchError> {
        let port = free_port()?;
        // A cache left by an earlier run on the same port would turn misses into hits.
        let _ = std::fs::remove_dir_all(work.join(format!("proxy-cache-{port}")));
        let http = format!(
            "proxy_cache_path {work}/proxy-cache-{port} levels=1:2 keys_zone=tier{port}:16m max_size={max_size} inactive=1d use_temp_path=off;\n\
             upstream origin{port} {{ server {origin}; keepalive 64; }}\n\
             server {{ listen 127.0.0.1:{port}; location / {{ proxy_pass http://origin{port}; proxy_http_version 1.1; \
             proxy_set_header Connection \"\"; proxy_cache tier{port}; proxy_cache_valid 200 1d; proxy_cache_revalidate on; \
             proxy_cache_lock on; }} }}",
            work = work.display(),
        );
        Self::nginx_conf("nginx-proxy-cache", work, "127.0.0.1", port, &[], &http)
    }

    /// nginx serving `root` on loopback as an origin: `server_extra` goes
    /// into its server block (locations with `limit_rate`, `add_header`).
    pub fn nginx_origin(root: &Path, work: &Path, server_extra: &str) -> Result<ServerProc, BenchError> {
        let port = free_port()?;
        let http = format!(
            "types {{ }} default_type application/octet-stream;\n\
             server {{ listen 127.0.0.1:{port}; root {root}; {server_extra} }}",
            root = root.display(),
        );
        Self::nginx_conf("nginx-origin", work, "127.0.0.1", port, &[], &http)
    }

    /// nginx serving `root` on `host` as an origin whose files are fresh for
    /// a day, logging each response's body bytes (one number a line) to
    /// `log`.
    pub fn nginx_counting_origin(root: &Path, work: &Path, host: &str, log: &Path) -> Result<ServerProc, BenchError> {
        let port = free_port()?;
        let http = format!(
            "types {{ }} default_type application/octet-stream;\n\
             log_format body_bytes '$body_bytes_sent';\n\
             server {{ listen {host}:{port}; root {root}; access_log {log} body_bytes; \
             add_header Cache-Control \"public, max-age=86400\"; }}",
            root = root.display(),
            log = log.display(),
        );
        Self::nginx_conf("nginx-origin", work, host, port, &[], &http)
    }

    /// An nginx cache node of the Lancache design in front of `origin`:
    /// proxy_cache of 1 MiB slices (the slice module), each slice fetched
    /// once per node (proxy_cache_lock), up to `max_size` bytes; listens on
    /// `host:port`, run through `wrap`, its files under `work`. Answers the
    /// cluster probe path with 204 so the same front config checks it.
    pub fn nginx_slice_node(
        origin: &str,
        work: &Path,
        host: &str,
        port: u16,
        wrap: &[String],
        max_size: u64,
    ) -> Result<ServerProc, BenchError> {
        let http = format!(
            "proxy_cache_path {work}/slices levels=1:2 keys_zone=slices:16m max_size={max_size} inactive=1d use_temp_path=off;\n\
             upstream origin {{ server {origin}; keepalive 64; }}\n\
             server {{ listen {host}:{port};\n\
               location = /.well-known/circus/peer {{ return 204; }}\n\
               location / {{ slice 1m; proxy_cache slices; proxy_cache_key $uri$slice_range; \
                 proxy_set_header Range $slice_range; proxy_cache_valid 200 206 1d; \
                 proxy_cache_lock on; proxy_cache_lock_timeout 1h; proxy_http_version 1.1; \
                 proxy_set_header Connection \"\"; proxy_pass http://origin; }} }}",
            work = work.display(),
        );
        Self::nginx_conf("nginx-slice", work, host, port, wrap, &http)
    }

    /// Starts nginx with `http_body` inside its `http` block, after the
    /// settings every nginx of the bench shares (2 workers, sendfile,
    /// tcp_nopush, open_file_cache, no access log, long keep-alive), and
    /// waits for `host:port` to listen.
    fn nginx_conf(
        name: &str,
        work: &Path,
        host: &str,
        port: u16,
        wrap: &[String],
        http_body: &str,
    ) -> Result<ServerProc, BenchError> {
        let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .ok_or_else(|| BenchError::Setup("nginx is not installed: apt-get install nginx".into()))?;
        let conf = work.join(format!("nginx-{port}.conf"));
        // As root, nginx's workers would run as nobody, who cannot enter a
        // private work directory (mktemp -d makes it 0700) nor a FUSE mount
        // made without allow_other: keep them root, like the other servers.
        use std::os::unix::fs::MetadataExt;
        let as_root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
        let user = if as_root { "user root;" } else { "" };
        let text = format!(
            "daemon off; {user} worker_processes auto; pid {work}/nginx-{port}.pid; error_log {work}/nginx-error.log warn;\n\
             events {{ worker_connections 16384; }}\n\
             http {{ access_log off; sendfile on; tcp_nopush on; open_file_cache max=10000 inactive=60s; keepalive_timeout 65; keepalive_requests 100000000;\n\
               client_body_temp_path {work}/nb; proxy_temp_path {work}/np; fastcgi_temp_path {work}/nf; uwsgi_temp_path {work}/nu; scgi_temp_path {work}/ns;\n\
               {http_body} }}\n",
            work = work.display(),
        );
        std::fs::write(&conf, text).map_err(io_err("writing nginx config"))?;
        let child = wrapped(wrap, nginx.as_ref())
            .args(["-c", &conf.to_string_lossy(), "-e", &work.join("nginx-error.log").to_string_lossy()])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(io_err("starting nginx"))?;
        let addr = format!("{host}:{port}");
        // Dropped (and so stopped) if it never listens.
        let server = ServerProc { name: name.into(), child, addr, admin: None };
        for _ in 0..100 {
            if TcpStream::connect(&server.addr).is_ok() {
                return Ok(server);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(BenchError::Setup("nginx did not start listening within 5 s".into()))
    }

    /// Varnish (Debian's varnishd) as a caching proxy in front of `origin`,
    /// with `mem` bytes of malloc storage, its state under `work`.
    /// Listens on `host` (port found free on loopback), run through `wrap`
    /// (see [`ServerProc::circus_at`]).
    pub fn varnish(origin: &str, work: &Path, mem: u64, host: &str, wrap: &[String]) -> Result<ServerProc, BenchError> {
        let bin = Path::new(VARNISHD);
        if !bin.exists() {
            return Err(BenchError::Setup("varnishd is not installed: apt-get install -y varnish".into()));
        }
        let port = free_port()?;
        let addr = format!("{host}:{port}");
        let child = wrapped(wrap, bin.as_os_str())
            .args(["-F", "-a", &addr, "-b", origin, "-s", &format!("malloc,{mem}")])
            // The default idle timeout (5 s) runs from when the response is
            // in the kernel's buffers: a 28.8 kbit/s client still reading a
            // 40 KiB body for 11 s then sent its next request on a closed
            // connection. 65 s, like nginx's keepalive_timeout.
            .args(["-p", "timeout_idle=65"])
            .arg("-n")
            .arg(work.join(format!("varnish-{port}")))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(work.join("varnish.log")).map_err(io_err("creating varnish.log"))?)
            .spawn()
            .map_err(io_err("starting varnishd"))?;
        for _ in 0..200 {
            if TcpStream::connect(&addr).is_ok() {
                return Ok(ServerProc { name: "varnish".into(), child, addr, admin: None });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(BenchError::Setup("varnishd did not start listening within 10 s".into()))
    }

    /// Resident memory of the process and its children, counting the pages
    /// of memfds they hold (circus's cache arena is one: its pages are sent
    /// with sendfile and never mapped in, so VmRSS alone would miss them).
    pub fn rss_bytes(&self) -> u64 {
        self.sum_memory("VmRSS:")
    }

    /// Peak resident memory: VmHWM of the process and its children, with
    /// the memfd pages held now in place of the mapped shared memory (an
    /// arena that is never mapped does not show in VmHWM).
    pub fn peak_rss_bytes(&self) -> u64 {
        self.sum_memory("VmHWM:")
    }

    fn sum_memory(&self, key: &str) -> u64 {
        let mut total = 0;
        for pid in self.process_tree() {
            let shmem = status_field(pid, "RssShmem:").unwrap_or(0) * 1024;
            let resident = status_field(pid, key).unwrap_or(0) * 1024;
            total += resident.saturating_sub(shmem) + memfd_bytes(pid).max(shmem);
        }
        total
    }

    /// Bytes the process and its children caused to be read from storage
    /// (`read_bytes` of /proc/PID/io: page-cache hits are not counted).
    pub fn io_read_bytes(&self) -> u64 {
        let mut total = 0;
        for pid in self.process_tree() {
            if let Ok(io) = std::fs::read_to_string(format!("/proc/{pid}/io")) {
                total += io
                    .lines()
                    .find_map(|l| l.strip_prefix("read_bytes:"))
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
        total
    }

    /// User plus system CPU seconds of the process and its children so far.
    pub fn cpu_seconds(&self) -> f64 {
        let (user, system) = self.cpu_split();
        user + system
    }

    /// User and system CPU seconds of the process and its children so far,
    /// apart: the system part is the kernel's work for the server (sends,
    /// receives, polling), the user part the server's own.
    pub fn cpu_split(&self) -> (f64, f64) {
        let (mut user, mut system) = (0.0, 0.0);
        for pid in self.process_tree() {
            if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
                let (u, s) = stat_ticks(&stat, 11, 12);
                user += u / USER_HZ;
                system += s / USER_HZ;
            }
        }
        (user, system)
    }

    /// CPU seconds the process and its children have run so far, to the
    /// nanosecond (every thread's `schedstat`), where [`Self::cpu_seconds`]
    /// counts 10 ms ticks: for costs of microseconds per request.
    pub fn cpu_seconds_fine(&self) -> f64 {
        let mut ns = 0u64;
        for pid in self.process_tree() {
            if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
                for task in tasks.filter_map(Result::ok) {
                    let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
                    ns += stat.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                }
            }
        }
        ns as f64 / 1e9
    }

    /// The process and its descendants, as /proc lists them now.
    fn process_tree(&self) -> Vec<u32> {
        let mut tree = Vec::new();
        let mut pids = vec![self.child.id()];
        while let Some(pid) = pids.pop() {
            tree.push(pid);
            if let Ok(children) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) {
                pids.extend(children.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
            }
        }
        tree
    }

    /// GET a small text resource (metrics, status) over a fresh connection,
    /// from the admin listener where the server has one.
    pub fn get_text(&self, path: &str) -> Result<String, BenchError> {
        let addr = self.admin.as_ref().unwrap_or(&self.addr);
        let mut c = TcpStream::connect(addr).map_err(io_err("connecting to server"))?;
        write!(c, "GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n").map_err(io_err("requesting"))?;
        let mut out = String::new();
        c.read_to_string(&mut out).map_err(io_err("reading response"))?;
        Ok(out.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default())
    }

    /// A counter from `/metrics`, e.g. `circus_storage_read_bytes_total`.
    pub fn metric(&self, name: &str) -> Result<f64, BenchError> {
        let text = self.get_text("/metrics")?;
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
            .ok_or_else(|| BenchError::Setup(format!("metric {name} missing")))
    }
}

/// `program` run directly, or through the `wrap` prefix.
pub(crate) fn wrapped(wrap: &[String], program: &std::ffi::OsStr) -> Command {
    match wrap.split_first() {
        None => Command::new(program),
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(program);
            c
        }
    }
}

fn status_field(pid: u32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find(|l| l.starts_with(key))?.split_whitespace().nth(1)?.parse().ok()
}

pub(crate) fn free_port() -> Result<u16, BenchError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(io_err("finding a free port"))?;
    Ok(l.local_addr().map_err(io_err("finding a free port"))?.port())
}

/// Bytes allocated to the memfds a process holds open.
fn memfd_bytes(pid: u32) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return 0 };
    fds.filter_map(Result::ok)
        .filter(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t.to_string_lossy().starts_with("/memfd:")))
        .filter_map(|fd| std::fs::metadata(fd.path()).ok())
        .map(|m| m.blocks() * 512)
        .sum()
}

/// Clock ticks per second in `/proc/*/stat` (USER_HZ on Linux).
const USER_HZ: f64 = 100.0;

/// Two fields of a `/proc/*/stat` line, counted from the one after the
/// command name (0 is the state).
fn stat_ticks(stat: &str, a: usize, b: usize) -> (f64, f64) {
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let get = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (get(a), get(b))
}

/// CPU seconds the whole machine has been busy so far (user, nice,
/// system, irq and softirq time of every core, from `/proc/stat`): what
/// a server and its clients on the same cores spent together.
pub fn machine_busy_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(cpu) = stat.lines().next().and_then(|l| l.strip_prefix("cpu ")) else { return 0.0 };
    let f: Vec<f64> = cpu.split_whitespace().filter_map(|v| v.parse().ok()).collect();
    // user nice system idle iowait irq softirq ...
    [0, 1, 2, 5, 6].iter().filter_map(|&i| f.get(i)).sum::<f64>() / USER_HZ
}

/// CPU seconds (user plus system) of this process so far, every thread:
/// the bench's own load generators while they run.
pub fn own_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let (user, system) = stat_ticks(&stat, 11, 12);
    (user + system) / USER_HZ
}

/// CPU seconds (user plus system) of this process's children that have
/// been waited for: the load generators (wrk, h2load, curl) once each run
/// ends; servers still running are not in it.
pub fn finished_children_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let (user, system) = stat_ticks(&stat, 13, 14);
    (user + system) / USER_HZ
}
