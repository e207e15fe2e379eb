//! `circus serve --acme NAME` against Pebble, Let's Encrypt's ACME test
//! server, on loopback: a fresh server gets a certificate by itself
//! (TLS-ALPN-01, answered on its own HTTPS listener) and answers HTTPS
//! within 10 s; a restart serves the kept certificate at once; a renewal
//! happens while downloads run and drops none of them. Pebble resolves
//! the test's name through pebble-challtestsrv's DNS (every name is
//! 127.0.0.1). CI installs pebble, openssl and curl; a missing one fails
//! the test.

use std::{
    io::{BufRead, BufReader},
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

const NAME: &str = "circus.test";

/// A child process killed when dropped, however the test ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e} (CI installs openssl, curl and pebble)"))
}

fn spawn(cmd: &mut Command) -> Killed {
    Killed(cmd.spawn().unwrap_or_else(|e| panic!("{cmd:?}: {e} (CI installs pebble)")))
}

/// A port nobody listens on now (Pebble must be told the server's port
/// before either starts).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Waits until something listens on `port`, or `child` exits first (a
/// port it was given was taken meanwhile: false).
fn listening_within_10_s(port: u16, child: &mut Killed) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if child.0.try_wait().unwrap().is_some() || Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// Pebble with a certificate validity of `validity_secs`, validating
/// TLS-ALPN-01 on `tls_port`: its directory URL, its HTTPS certificate
/// (to trust for the directory) and its management port.
struct Pebble {
    _dns: Killed,
    _ca: Killed,
    directory: String,
    https_cert: PathBuf,
    management: u16,
}

/// Pebble, started afresh (with new ports) up to three times: the ports
/// are picked free but are only bound when Pebble starts, so another
/// process may take one in between, and Pebble then exits.
fn pebble(dir: &Path, tls_port: u16, validity_secs: u64) -> Pebble {
    let (cert, key) = (dir.join("pebble.pem"), dir.join("pebble.key"));
    let out = run(Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args(["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for attempt in 1..=3 {
        match start_pebble(dir, &cert, &key, tls_port, validity_secs) {
            Ok(pebble) => return pebble,
            Err(log) => eprintln!("WARNING: Pebble did not start (attempt {attempt} of 3); its log:\n{log}"),
        }
    }
    panic!("Pebble did not start in three attempts (its logs are above)");
}

/// One start of pebble-challtestsrv (the DNS) and Pebble on fresh ports;
/// the logs of both when either exits or does not listen within 10 s.
fn start_pebble(dir: &Path, cert: &Path, key: &Path, tls_port: u16, validity_secs: u64) -> Result<Pebble, String> {
    let log_of = |name: &str| {
        let file = std::fs::File::create(dir.join(name)).unwrap();
        (Stdio::from(file.try_clone().unwrap()), Stdio::from(file))
    };
    let read_logs = || {
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        format!("pebble-challtestsrv:\n{}\npebble:\n{}", read("dns.log"), read("pebble.log"))
    };
    let (dns_log, pebble_log) = (log_of("dns.log"), log_of("pebble.log"));
    let (dns, dns_management) = (free_port(), free_port());
    let mut dns_server = spawn(
        Command::new("pebble-challtestsrv")
            .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
            .args(["-dns01", &format!("127.0.0.1:{dns}"), "-management", &format!("127.0.0.1:{dns_management}")])
            .args(["-http01", "", "-https01", "", "-tlsalpn01", ""])
            .stdout(dns_log.0)
            .stderr(dns_log.1),
    );
    if !listening_within_10_s(dns_management, &mut dns_server) {
        return Err(read_logs());
    }
    let (listen, management) = (free_port(), free_port());
    let config = serde_json::json!({ "pebble": {
        "listenAddress": format!("127.0.0.1:{listen}"),
        "managementListenAddress": format!("127.0.0.1:{management}"),
        "certificate": cert, "privateKey": key,
        "httpPort": free_port(), "tlsPort": tls_port,
        "ocspResponderURL": "", "externalAccountBindingRequired": false,
        "certificateValidityPeriod": validity_secs,
    }});
    let config_path = dir.join("pebble.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let mut ca = spawn(
        Command::new("pebble")
            .arg("-config")
            .arg(&config_path)
            .args(["-dnsserver", &format!("127.0.0.1:{dns}")])
            // No random pause before validating, no nonces refused at random.
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .stdout(pebble_log.0)
            .stderr(pebble_log.1),
    );
    if !listening_within_10_s(listen, &mut ca) || !listening_within_10_s(management, &mut ca) {
        return Err(read_logs());
    }
    Ok(Pebble {
        _dns: dns_server,
        _ca: ca,
        directory: format!("https://127.0.0.1:{listen}/dir"),
        https_cert: cert.to_owned(),
        management,
    })
}

/// `circus serve ROOT --acme NAME` on `port`, once it says it listens.
fn serve(root: &Path, port: u16, pebble: &Pebble, state: &Path) -> Killed {
    let mut child = Command::new(env!("CARGO_BIN_EXE_circus"))
        .arg("serve")
        .arg(root)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--admin-listen", "off", "--acme", NAME])
        .args(["--acme-directory", &pebble.directory, "--acme-ca"])
        .arg(&pebble.https_cert)
        .arg("--acme-state")
        .arg(state)
        .env("CIRCUS_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    assert_eq!(line.trim(), format!("circus listening on https://127.0.0.1:{port}"));
    Killed(child)
}

/// The serial number of the certificate served for NAME on `port`, if a
/// handshake trusting only `root` succeeds.
fn served_serial(port: u16, root: &Path) -> Option<String> {
    let out = run(Command::new("curl")
        .args(["-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{certs}", "--cacert"])
        .arg(root)
        .args(["--resolve", &format!("{NAME}:{port}:127.0.0.1"), &format!("https://{NAME}:{port}/small.txt")]));
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).unwrap();
    let serial = text.lines().find_map(|l| l.strip_prefix("Serial Number:"));
    Some(serial.unwrap_or_else(|| panic!("no serial in curl's %{{certs}}: {text}")).trim().to_owned())
}

#[test]
fn a_fresh_server_gets_a_certificate_keeps_it_and_renews_it_without_dropping_a_download() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("small.txt"), "hello over acme\n").unwrap();
    // Large enough that downloads at curl's --limit-rate 200K span the
    // renewal at about 20 s: curl's limiter lets h2 through at up to
    // 290 KB/s when the server writes 64 KiB at a time (5 MiB took 18 s).
    let big: Vec<u8> = (0..8u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    std::fs::write(root.join("big.bin"), &big).unwrap();
    let state = dir.path().join("acme");
    let port = free_port();
    // Certificates live 30 s: renewal is due 20 s after issuance.
    let pebble = pebble(dir.path(), port, 30);
    let root_pem = dir.path().join("pebble-root.pem");
    let fetched = run(Command::new("curl")
        .args(["-sS", "--fail", "--insecure", "-o"])
        .arg(&root_pem)
        .arg(format!("https://127.0.0.1:{}/roots/0", pebble.management)));
    assert!(fetched.status.success(), "pebble's root: {}", String::from_utf8_lossy(&fetched.stderr));

    // A fresh server: no account, no certificate.
    let started = Instant::now();
    let server = serve(&root, port, &pebble, &state);
    let first = loop {
        if let Some(serial) = served_serial(port, &root_pem) {
            break serial;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "no trusted certificate within 10 s");
        std::thread::sleep(Duration::from_millis(100));
    };
    let issued_in = started.elapsed();
    eprintln!("certificate {first} served {issued_in:?} after start");
    let small = run(Command::new("curl").args(["-sS", "--cacert"]).arg(&root_pem).args([
        "--resolve",
        &format!("{NAME}:{port}:127.0.0.1"),
        &format!("https://{NAME}:{port}/small.txt"),
    ]));
    assert_eq!(String::from_utf8_lossy(&small.stdout), "hello over acme\n");
    let kept: Vec<_> = std::fs::read_dir(&state).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(kept.len(), 3, "an account, a certificate and its key: {kept:?}");

    // A restart serves the kept certificate at once.
    drop(server);
    let restarted = Instant::now();
    let server = serve(&root, port, &pebble, &state);
    assert_eq!(served_serial(port, &root_pem).as_deref(), Some(first.as_str()), "the kept certificate");
    assert!(restarted.elapsed() < Duration::from_secs(2));

    // Slow downloads across the renewal.
    let mut downloads: Vec<_> = (0..4)
        .map(|i| {
            let out = dir.path().join(format!("got{i}.bin"));
            let child = Command::new("curl")
                .args(["-sS", "--max-time", "120", "--limit-rate", "200K", "--cacert"])
                .arg(&root_pem)
                .args(["--resolve", &format!("{NAME}:{port}:127.0.0.1"), "-o"])
                .arg(&out)
                .arg(format!("https://{NAME}:{port}/big.bin"))
                .spawn()
                .unwrap();
            (Killed(child), out)
        })
        .collect();
    let renewed = loop {
        match served_serial(port, &root_pem) {
            Some(serial) if serial != first => break serial,
            _ => {}
        }
        assert!(started.elapsed() < Duration::from_secs(50), "no renewal 50 s after start");
        std::thread::sleep(Duration::from_millis(250));
    };
    eprintln!("renewed: {renewed}, {:?} after start", started.elapsed());
    for (download, _) in &mut downloads {
        assert!(download.0.try_wait().unwrap().is_none(), "a download ended before the renewal: too fast a test");
    }
    for (mut download, out) in downloads {
        assert!(download.0.wait().unwrap().success(), "a download across the renewal failed");
        assert!(std::fs::read(&out).unwrap() == big, "a download across the renewal is not the file");
    }
    drop(server);
}
