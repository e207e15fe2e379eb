//! `circus serve --origin https://…` in front of nginx serving TLS with a
//! certificate from a private CA made by the test (openssl): the tier
//! trusts it only when given the CA, and never falls back to plain HTTP.

mod common;

use std::{
    io::Read,
    net::TcpListener,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e} (CI installs openssl and nginx)"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A CA and a certificate for 127.0.0.1 signed by it, in `dir`.
fn make_certificates(dir: &Path) {
    let p = |f: &str| dir.join(f).to_str().unwrap().to_owned();
    run(Command::new("openssl").args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"]).args([
        "-subj",
        "/CN=circus test CA",
        "-keyout",
        &p("ca.key"),
        "-out",
        &p("ca.pem"),
    ]));
    run(Command::new("openssl").args(["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1"]).args([
        "-keyout",
        &p("server.key"),
        "-out",
        &p("server.csr"),
    ]));
    std::fs::write(dir.join("ext.cnf"), "subjectAltName = IP:127.0.0.1\n").unwrap();
    run(Command::new("openssl").args(["x509", "-req", "-days", "2", "-CAcreateserial"]).args([
        "-in",
        &p("server.csr"),
        "-CA",
        &p("ca.pem"),
        "-CAkey",
        &p("ca.key"),
        "-extfile",
        &p("ext.cnf"),
        "-out",
        &p("server.pem"),
    ]));
}

struct Nginx(Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// nginx serving `root` over TLS on a free loopback port.
fn nginx_tls(dir: &Path, root: &Path) -> (Nginx, u16) {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let conf = format!(
        "daemon off; master_process off; pid {d}/nginx.pid; error_log stderr;
events {{}}
http {{
  access_log off;
  client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fcgi;
  uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
  server {{
    listen 127.0.0.1:{port} ssl;
    ssl_certificate {d}/server.pem; ssl_certificate_key {d}/server.key;
    root {root};
  }}
}}
",
        d = dir.display(),
        root = root.display()
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let nginx = ["/usr/sbin/nginx", "nginx"].into_iter().find(|n| Path::new(n).exists()).unwrap_or("nginx");
    let child = Command::new(nginx)
        .args(["-p", dir.to_str().unwrap(), "-c", dir.join("nginx.conf").to_str().unwrap()])
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("nginx: {e} (CI installs it)"));
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(started.elapsed() < Duration::from_secs(10), "nginx did not listen on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
    (Nginx(child), port)
}

#[test]
fn an_https_origin_is_served_when_its_ca_is_given_and_refused_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("www");
    std::fs::create_dir(&root).unwrap();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(root.join("big.bin"), &data).unwrap();
    make_certificates(dir.path());
    let (_nginx, port) = nginx_tls(dir.path(), &root);
    let url = format!("https://127.0.0.1:{port}/");
    let ca = dir.path().join("ca.pem");

    let tier = common::serve(&["--origin", &url, "--origin-ca", ca.to_str().unwrap()]);
    let (mut r, status, headers) = common::get_head(&tier.addr, "/big.bin", &[]);
    let mut body = Vec::new();
    r.read_to_end(&mut body).unwrap();
    assert_eq!(status, 200, "{headers:?}");
    assert!(body == data, "{} bytes, not the file", body.len());

    // The system's roots do not know the test's CA: no answer from it.
    let untrusting = common::serve(&["--origin", &url]);
    let (_, status, _) = common::get_head(&untrusting.addr, "/big.bin", &[]);
    assert_eq!(status, 502, "an origin whose certificate does not chain to a trusted root was used");
}
