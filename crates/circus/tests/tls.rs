//! `circus serve --tls-cert --tls-key` speaking HTTPS to curl: the
//! certificate for the name the client asks for (SNI), h2 and http/1.1 by
//! ALPN, and no plain HTTP on the TLS port. Certificates are made by the
//! test with openssl; curl is the client (both installed by CI).

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Output, Stdio},
};

struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e} (CI installs openssl and curl)"))
}

/// A self-signed certificate for `name` in `dir`: (cert, key).
fn certificate(dir: &Path, name: &str) -> (String, String) {
    let (cert, key) = (dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")));
    let out = run(Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args(["-subj", &format!("/CN={name}"), "-addext", &format!("subjectAltName=DNS:{name}")])
        // An end-entity certificate (rustls refuses a CA as the server's own).
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (cert.to_str().unwrap().to_owned(), key.to_str().unwrap().to_owned())
}

/// `circus serve ROOT` with the certificates, and its port.
fn serve(root: &Path, pairs: &[&(String, String)]) -> (Served, u16) {
    serve_with(root, pairs, &[])
}

/// [`serve`] with more flags.
fn serve_with(root: &Path, pairs: &[&(String, String)], extra: &[&str]) -> (Served, u16) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_circus"));
    cmd.arg("serve").arg(root).args(["--listen", "127.0.0.1:0", "--admin-listen", "off"]).args(extra);
    for (cert, key) in pairs {
        cmd.args(["--tls-cert", cert, "--tls-key", key]);
    }
    let mut child = cmd.env("CIRCUS_LOG", "warn").stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let addr = line.trim().strip_prefix("circus listening on https://").unwrap_or_else(|| panic!("{line:?}"));
    (Served(child), addr.rsplit(':').next().unwrap().parse().unwrap())
}

/// curl for `https://NAME:PORT/PATH` (NAME resolved to 127.0.0.1),
/// trusting only `ca`: the body and the HTTP version, or curl's error.
fn curl(name: &str, port: u16, path: &str, ca: &str, extra: &[&str]) -> Result<(String, String), String> {
    let out = run(Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert", ca, "--resolve", &format!("{name}:{port}:127.0.0.1")])
        .args(extra)
        .args(["-w", "\n%{http_version}", &format!("https://{name}:{port}{path}")]));
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let text = String::from_utf8(out.stdout).unwrap();
    let (body, version) = text.rsplit_once('\n').unwrap();
    Ok((body.to_owned(), version.to_owned()))
}

#[test]
fn each_name_gets_its_certificate_over_http1_and_h2() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("f.txt"), "over tls\n").unwrap();
    let (a, b) = (certificate(dir.path(), "a.test"), certificate(dir.path(), "b.test"));
    let (_server, port) = serve(&root, &[&a, &b]);
    for (name, pair) in [("a.test", &a), ("b.test", &b)] {
        let got = curl(name, port, "/f.txt", &pair.0, &["--http1.1"]);
        assert_eq!(got, Ok(("over tls\n".to_owned(), "1.1".to_owned())), "{name}");
        let got = curl(name, port, "/f.txt", &pair.0, &["--http2"]);
        assert_eq!(got, Ok(("over tls\n".to_owned(), "2".to_owned())), "{name}");
    }
    // The other name's certificate is not trusted for this one.
    assert!(curl("b.test", port, "/f.txt", &a.0, &[]).is_err());
    // An unknown name gets the first certificate.
    assert!(curl("c.test", port, "/f.txt", &a.0, &["--insecure"]).is_ok());
    // No plain HTTP on the TLS port.
    let plain = run(Command::new("curl").args(["-sS", "--max-time", "5", &format!("http://127.0.0.1:{port}/f.txt")]));
    assert!(!plain.status.success() || !String::from_utf8_lossy(&plain.stdout).contains("over tls"));
}

/// Pipelined requests on one TLS connection: resident hits (the hit lane,
/// over TLS), then a range (hyper, after the lane hands the connection
/// over with what it read), then a plain GET: every answer in order.
#[test]
fn pipelined_requests_over_tls_are_answered_in_order_across_the_lane_and_hyper() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("f.txt"), "over tls\n").unwrap();
    let a = certificate(dir.path(), "a.test");
    let (_server, port) = serve(&root, &[&a]);
    // Once through the full path, so that the file is resident for the lane.
    assert!(curl("a.test", port, "/f.txt", &a.0, &["--http1.1"]).is_ok());
    let get = "GET /f.txt HTTP/1.1\r\nHost: a.test\r\n\r\n";
    let range = "GET /f.txt HTTP/1.1\r\nHost: a.test\r\nRange: bytes=0-3\r\n\r\n";
    let last = "GET /f.txt HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n";
    let mut client = Command::new("openssl")
        .args(["s_client", "-quiet", "-verify_return_error", "-alpn", "http/1.1", "-servername", "a.test"])
        .args(["-CAfile", &a.0, "-connect", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let requests = [get, get, range, last].concat();
    client.stdin.take().unwrap().write_all(requests.as_bytes()).unwrap();
    let out = client.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let answers: Vec<&str> = text.split("HTTP/1.1 ").skip(1).collect();
    let statuses: Vec<&str> = answers.iter().map(|a| &a[..3]).collect();
    assert_eq!(statuses, ["200", "200", "206", "200"], "{text}");
    let bodies: Vec<&str> = answers.iter().map(|a| a.split("\r\n\r\n").nth(1).unwrap_or("")).collect();
    assert_eq!(bodies, ["over tls\n", "over tls\n", "over", "over tls\n"], "{text}");
}

/// Connections that never finish (or never start) their TLS handshake are
/// closed after the header timeout, and meanwhile others are served.
#[test]
fn a_client_that_never_finishes_its_handshake_is_closed_and_blocks_no_one() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("f.txt"), "over tls\n").unwrap();
    let a = certificate(dir.path(), "a.test");
    let (_server, port) = serve_with(&root, &[&a], &["--header-timeout", "1s"]);
    let started = std::time::Instant::now();
    // 50 that send nothing, 50 that send half a ClientHello.
    let mut stalled: Vec<std::net::TcpStream> = (0..100)
        .map(|i| {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            if i % 2 == 1 {
                s.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00]).unwrap();
            }
            s
        })
        .collect();
    let got = curl("a.test", port, "/f.txt", &a.0, &[]);
    assert_eq!(got.map(|(body, _)| body), Ok("over tls\n".to_owned()), "served beside 100 stalled handshakes");
    assert!(started.elapsed() < std::time::Duration::from_secs(1), "the download waited for the stalled ones");
    for s in &mut stalled {
        s.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        let mut byte = [0u8; 1];
        // Closed by the server: EOF (or a reset), not the 5 s timeout.
        let closed = match s.read(&mut byte) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::TimedOut,
        };
        assert!(closed, "a stalled handshake was left open");
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(4), "closed late: {:?}", started.elapsed());
}

#[test]
fn sighup_reloads_the_certificates_without_dropping_a_download() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let big: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(root.join("big.bin"), &big).unwrap();
    let old = certificate(dir.path(), "a.test");
    let kept_ca = dir.path().join("old-ca.pem");
    std::fs::copy(&old.0, &kept_ca).unwrap();
    let (server, port) = serve(&root, &[&old]);
    // A slow download under the old certificate, running across the reload.
    let out = dir.path().join("got.bin");
    let mut download = Command::new("curl")
        .args(["-sS", "--max-time", "30", "--limit-rate", "1M", "--cacert", kept_ca.to_str().unwrap()])
        .args(["--resolve", &format!("a.test:{port}:127.0.0.1"), "-o", out.to_str().unwrap()])
        .arg(format!("https://a.test:{port}/big.bin"))
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(800));
    // New key and certificate under the same file names, then SIGHUP.
    let new_dir = dir.path().join("new");
    std::fs::create_dir(&new_dir).unwrap();
    let new = certificate(&new_dir, "a.test");
    std::fs::copy(&new.0, &old.0).unwrap();
    std::fs::copy(&new.1, &old.1).unwrap();
    let hup = run(Command::new("kill").args(["-HUP", &server.0.id().to_string()]));
    assert!(hup.status.success());
    std::thread::sleep(std::time::Duration::from_millis(300));
    let got = curl("a.test", port, "/big.bin", &new.0, &["-o", "/dev/null"]);
    assert!(got.is_ok(), "the new certificate is served after SIGHUP: {got:?}");
    assert!(curl("a.test", port, "/big.bin", kept_ca.to_str().unwrap(), &["-o", "/dev/null"]).is_err());
    assert!(download.wait().unwrap().success(), "the download across the reload failed");
    assert!(std::fs::read(&out).unwrap() == big, "the download across the reload is not the file");
}

/// `circus get https://` trusting the test's CA: the native stream (verified
/// blocks) over TLS; without that CA the certificate is refused, never
/// downgraded to plain HTTP.
#[test]
fn circus_get_downloads_natively_over_https_and_refuses_an_untrusted_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("files");
    std::fs::create_dir(&root).unwrap();
    let data: Vec<u8> = (0..(3u32 << 20) + 777).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    std::fs::write(root.join("big.bin"), &data).unwrap();
    let pair = certificate(dir.path(), "localhost");
    let (_server, port) = serve(&root, &[&pair]);
    let url = format!("https://localhost:{port}/big.bin");
    let get = |out: &Path, extra: &[&str]| {
        run(Command::new(env!("CARGO_BIN_EXE_circus"))
            .args(["get", "--retries", "1", "--timeout", "10s", "-o"])
            .arg(out)
            .args(extra)
            .arg(&url))
    };
    // The first native request may find the index still being built and
    // get the plain stream; once built, downloads are native.
    let mut native = false;
    for attempt in 0..20 {
        let out = dir.path().join(format!("got{attempt}"));
        let done = get(&out, &["--cacert", &pair.0]);
        let said = String::from_utf8_lossy(&done.stderr);
        assert!(done.status.success(), "{said}");
        assert!(std::fs::read(&out).unwrap() == data, "the file differs");
        if said.contains("native") {
            native = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(native, "never a native download over https");
    let refused = get(&dir.path().join("untrusted"), &[]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert!(said.contains("certificate"), "{said}");
    assert!(!dir.path().join("untrusted").exists());
}

/// `--redirect-listen`: plain HTTP is answered with a redirect to the
/// same target over https, which curl follows to the file. The metrics
/// say how records are encrypted, at start and for the connection served:
/// by the kernel where it has kTLS, by rustls in user space where it has
/// not (as on this project's CI machines).
#[test]
fn the_cleartext_listener_redirects_to_https_and_the_send_path_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f.txt"), b"over tls").unwrap();
    // Several blocks, sent from the block cache (with `sendfile` where the
    // kernel encrypts).
    let big: Vec<u8> = (0..3 * 1024 * 1024 + 777).map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(dir.path().join("big.bin"), &big).unwrap();
    let (cert, key) = certificate(dir.path(), "localhost");
    let mut child = Command::new(env!("CARGO_BIN_EXE_circus"))
        .arg("serve")
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--redirect-listen", "127.0.0.1:0"])
        .args(["--tls-cert", &cert, "--tls-key", &key])
        .env("CIRCUS_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let _served = Served(child);
    let mut lines = [String::new(), String::new(), String::new()];
    for line in &mut lines {
        out.read_line(line).unwrap();
    }
    let port = |prefix: &str, line: &str| -> u16 {
        let rest = line.trim().strip_prefix(prefix).unwrap_or_else(|| panic!("{lines:?}"));
        rest.split_whitespace().next().unwrap().rsplit(':').next().unwrap().parse().unwrap()
    };
    let https = port("circus listening on https://", &lines[0]);
    let admin = port("circus admin on http://", &lines[1]);
    let plain = port("circus redirecting http://", &lines[2]);
    let head = run(Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code} %{redirect_url}"])
        .arg(format!("http://localhost:{plain}/f.txt?x=1")));
    assert_eq!(String::from_utf8_lossy(&head.stdout), format!("308 https://localhost:{https}/f.txt?x=1"));
    let followed = run(Command::new("curl")
        .args(["-sS", "-L", "--cacert", &cert, "--resolve", &format!("localhost:{https}:127.0.0.1")])
        .arg(format!("http://localhost:{plain}/f.txt")));
    assert_eq!(String::from_utf8_lossy(&followed.stdout), "over tls", "{}", String::from_utf8_lossy(&followed.stderr));
    for version in ["--http1.1", "--http2"] {
        let got = run(Command::new("curl")
            .args(["-sS", version, "--cacert", &cert, "--resolve", &format!("localhost:{https}:127.0.0.1")])
            .arg(format!("https://localhost:{https}/big.bin")));
        assert!(got.stdout == big, "{version}: {} bytes of {}", got.stdout.len(), big.len());
    }
    let metrics = run(Command::new("curl").args(["-sS"]).arg(format!("http://127.0.0.1:{admin}/metrics")));
    let metrics = String::from_utf8_lossy(&metrics.stdout);
    let kernel = circus_server::ktls_probe::KernelTls::probe() == circus_server::ktls_probe::KernelTls::Available;
    let (path, available) = if kernel { ("ktls", 1) } else { ("userspace", 0) };
    eprintln!("the kernel {} kTLS: expecting path {path}", if kernel { "has" } else { "has no" });
    assert!(metrics.contains(&format!("circus_tls_send_path{{path=\"{path}\"}} 1")), "{metrics}");
    assert!(metrics.contains(&format!("circus_ktls_available {available}")), "{metrics}");
    assert!(metrics.contains(&format!("circus_tls_connections_total{{path=\"{path}\"}} 3")), "{metrics}");
    assert!(!metrics.contains("path=\"ktls_refused\""), "{metrics}");
}
