//! The built binary as a child process, shared by the end-to-end tests.

use std::{
    collections::HashMap,
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
};

/// How much of a server's log a failing test shows: its last 64 KiB.
const LOG_TAIL: usize = 64 << 10;

/// A running `circus serve`, killed when dropped however the test ends.
pub struct ServerProc {
    pub child: Child,
    /// The content listener.
    pub addr: String,
    /// The admin listener (/metrics, /status, purge, prefetch).
    #[allow(dead_code, reason = "each test file compiles this module; only some read metrics")]
    pub admin: String,
    /// The tail of the server's log (stderr), shown when the test fails.
    log: Arc<Mutex<Vec<u8>>>,
}

impl ServerProc {
    /// What the server has logged so far (its last [`LOG_TAIL`] bytes).
    #[allow(dead_code, reason = "each test file compiles this module; only some read the log")]
    pub fn log_text(&self) -> String {
        String::from_utf8_lossy(&self.log.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
            eprintln!("--- the log of circus serve on {} (last {LOG_TAIL} bytes) ---", self.addr);
            eprintln!("{}", String::from_utf8_lossy(&log));
        }
    }
}

/// Keeps the last [`LOG_TAIL`] bytes of `from` in `into` until EOF.
fn keep_tail(mut from: impl Read, into: Arc<Mutex<Vec<u8>>>) {
    let mut buf = [0; 8192];
    while let Ok(n @ 1..) = from.read(&mut buf) {
        let mut log = into.lock().unwrap_or_else(|e| e.into_inner());
        log.extend_from_slice(&buf[..n]);
        let over = log.len().saturating_sub(LOG_TAIL);
        log.drain(..over);
    }
}

/// `circus serve ARGS... --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0`,
/// once it prints both addresses. Its later output is drained so that a
/// print can never block or fail.
#[allow(dead_code, reason = "each test file compiles this module; some pass an environment instead")]
pub fn serve(args: &[&str]) -> ServerProc {
    serve_env(args, &[])
}

/// [`serve`] with extra environment variables (credentials, say).
#[allow(dead_code, reason = "each test file compiles this module; only some pass an environment")]
pub fn serve_env(args: &[&str], env: &[(&str, &str)]) -> ServerProc {
    serve_on("127.0.0.1:0", args, env)
}

/// [`serve_env`] listening on `listen` (a cluster's members must know
/// each other's addresses before they start).
#[allow(dead_code, reason = "each test file compiles this module; only some choose the address")]
pub fn serve_on(listen: &str, args: &[&str], env: &[(&str, &str)]) -> ServerProc {
    serve_via(&[], listen, args, env)
}

#[allow(dead_code, reason = "each test file compiles this module; only some wrap the server")]
/// As `serve_on`, the server started by `wrapper` (a command that ends by
/// exec'ing its arguments, so the child is the server itself).
pub fn serve_via(wrapper: &[&str], listen: &str, args: &[&str], env: &[(&str, &str)]) -> ServerProc {
    let bin = env!("CARGO_BIN_EXE_circus");
    let mut command = match wrapper.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    let mut child = command
        .arg("serve")
        .args(args)
        .args(["--listen", listen, "--admin-listen", "127.0.0.1:0"])
        .env("CIRCUS_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start circus serve");
    let log = Arc::new(Mutex::new(Vec::new()));
    let stderr = child.stderr.take().expect("piped stderr");
    let tail = log.clone();
    std::thread::spawn(move || keep_tail(stderr, tail));
    let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut lines = [String::new(), String::new()];
    for line in &mut lines {
        stdout.read_line(line).expect("address line");
    }
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let addr = lines[0].trim().strip_prefix("circus listening on http://").unwrap_or_else(|| panic!("{lines:?}"));
    let admin = lines[1].trim().strip_prefix("circus admin on http://").unwrap_or_else(|| panic!("{lines:?}"));
    ServerProc { child, addr: addr.to_owned(), admin: admin.to_owned(), log }
}

/// Reads a response head from `r`: the status and the fields, names
/// lowercased; a field sent twice fails the test. EOF ends the head.
#[allow(dead_code, reason = "each test binary compiles this module; not all read raw responses")]
pub fn read_head(r: &mut BufReader<TcpStream>) -> (u16, HashMap<String, String>) {
    let (status, fields) = read_fields(r);
    let mut headers = HashMap::new();
    for (n, v) in fields {
        assert!(headers.insert(n.clone(), v).is_none(), "{n} twice");
    }
    (status, headers)
}

/// Reads a response head from `r`: the status and the fields in order,
/// names lowercased. EOF ends the head.
#[allow(dead_code, reason = "each test binary compiles this module; not all read raw responses")]
pub fn read_fields(r: &mut impl BufRead) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut fields = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap_or(0) == 0 {
            break;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((n, v)) = h.split_once(':') {
            fields.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    (status, fields)
}

/// Sends `GET path` with `connection: close` and the `extra` fields, and
/// reads the response head; the body is left to read from the reader.
#[allow(dead_code, reason = "each test binary compiles this module; not all read raw responses")]
pub fn get_head(
    addr: &str,
    path: &str,
    extra: &[(&str, &str)],
) -> (BufReader<TcpStream>, u16, HashMap<String, String>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n");
    for (n, v) in extra {
        req += &format!("{n}: {v}\r\n");
    }
    s.write_all(format!("{req}\r\n").as_bytes()).unwrap();
    let mut r = BufReader::new(s);
    let (status, headers) = read_head(&mut r);
    (r, status, headers)
}

/// Reads one response from `r`: status, headers, body (none for HEAD).
#[allow(dead_code, reason = "each test binary compiles this module; not all read raw responses")]
pub fn read_response(r: &mut BufReader<TcpStream>, head: bool) -> (u16, HashMap<String, String>, Vec<u8>) {
    let (status, headers) = read_head(r);
    let len: usize = if head { 0 } else { headers["content-length"].parse().unwrap() };
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).unwrap();
    (status, headers, body)
}

/// The value of the Prometheus sample `name` (no labels) in `admin`'s
/// `/metrics`; the test fails if there is none.
#[allow(dead_code, reason = "each test binary compiles this module; not all read metrics")]
pub fn metric(admin: &str, name: &str) -> f64 {
    let (mut r, status, _) = get_head(admin, "/metrics", &[]);
    assert_eq!(status, 200, "/metrics on {admin}");
    let mut text = String::new();
    r.read_to_string(&mut text).unwrap();
    let line = text.lines().find(|l| l.split_whitespace().next() == Some(name));
    line.and_then(|l| l.split_whitespace().nth(1)?.parse().ok()).unwrap_or_else(|| panic!("no {name} in\n{text}"))
}
