//! Private content over real sockets: a `[[private]]` prefix is readable
//! with a signed URL (`circus sign`, any of the rotation keys) or a bearer
//! token, refused with 403 and a reason otherwise, however the path is
//! spelled; the hit lane and the native protocol obey the same rules.

mod common;

use std::{
    io::{Read, Write},
    net::TcpStream,
    process::Command,
};

const KEY: &str = "current-signing-key";
const TOKEN: &str = "s3cret-token";

struct Setup {
    _dir: tempfile::TempDir,
    server: common::ServerProc,
    root: std::path::PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("files");
    std::fs::create_dir_all(root.join("private")).unwrap();
    std::fs::write(root.join("public.txt"), b"for everyone").unwrap();
    std::fs::write(root.join("private/small.txt"), b"for some").unwrap();
    let big: Vec<u8> = (0..(2u32 << 20) + 5).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    std::fs::write(root.join("private/big.bin"), big).unwrap();
    let conf = dir.path().join("circus.toml");
    let text = "[[private]]\nprefix = \"/private/\"\nsigning_keys = [\"env:CIRCUS_TEST_KEY\", \"previous-key\"]\n\
                tokens = [\"env:CIRCUS_TEST_TOKEN\"]\n";
    std::fs::write(&conf, text).unwrap();
    let server = common::serve_env(
        &[root.to_str().unwrap(), "--config", conf.to_str().unwrap()],
        &[("CIRCUS_TEST_KEY", KEY), ("CIRCUS_TEST_TOKEN", TOKEN)],
    );
    Setup { _dir: dir, server, root }
}

/// One request on a fresh connection: status, head (lowercased) and body.
fn get(addr: &str, target: &str, extra: &str) -> (u16, String, Vec<u8>) {
    let mut c = TcpStream::connect(addr).unwrap();
    write!(c, "GET {target} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n{extra}\r\n").unwrap();
    let mut raw = Vec::new();
    c.read_to_end(&mut raw).unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, head, raw[split..].to_vec())
}

fn sign(target: &str, key: &str, expires_in: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_circus"))
        .args(["sign", target, "--key", "env:SIGN_KEY", "--expires-in", expires_in])
        .env("SIGN_KEY", key)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[test]
fn private_paths_need_a_signed_url_or_a_token_however_they_are_spelled() {
    let s = setup();
    let addr = &s.server.addr;
    assert_eq!(get(addr, "/public.txt", "").2, b"for everyone");
    for sneaky in ["/private/small.txt", "/%70rivate/small.txt", "//private/small.txt", "/./private/small.txt"] {
        let (status, _, body) = get(addr, sneaky, "");
        assert_eq!(status, 403, "{sneaky}");
        assert!(String::from_utf8_lossy(&body).contains("signed URL"), "{sneaky}: {}", String::from_utf8_lossy(&body));
    }
    // A bearer token: the file, marked private for caches downstream.
    let (status, head, body) = get(addr, "/private/small.txt", &format!("authorization: Bearer {TOKEN}\r\n"));
    assert_eq!((status, body.as_slice()), (200, &b"for some"[..]));
    assert!(head.contains("cache-control: private"), "{head}");
    let (status, _, body) = get(addr, "/private/small.txt", "authorization: Bearer guess\r\n");
    assert_eq!(status, 403);
    assert!(String::from_utf8_lossy(&body).contains("bearer token is not valid"));
    // Signed URLs: the current key and the previous one; expired, moved to
    // another path or signed with an unknown key, refused.
    for key in [KEY, "previous-key"] {
        let url = sign("/private/small.txt", key, "1h");
        assert_eq!(get(addr, &url, "").2, b"for some", "{url}");
    }
    let expired = sign("/private/small.txt", KEY, "0s");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let (status, _, body) = get(addr, &expired, "");
    assert_eq!(status, 403);
    assert!(String::from_utf8_lossy(&body).contains("expired"));
    let moved = sign("/private/small.txt", KEY, "1h").replace("small.txt", "big.bin");
    assert_eq!(get(addr, &moved, "").0, 403);
    assert_eq!(get(addr, &sign("/private/small.txt", "unknown", "1h"), "").0, 403);
}

#[test]
fn the_hit_lane_never_answers_a_private_path() {
    let s = setup();
    let addr = &s.server.addr;
    let auth = format!("authorization: Bearer {TOKEN}\r\n");
    // Fetched with the token many times: a public small file this often
    // would be resident in the lane by now.
    for _ in 0..20 {
        assert_eq!(get(addr, "/private/small.txt", &auth).0, 200);
        assert_eq!(get(addr, "/public.txt", "").0, 200);
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(get(addr, "/private/small.txt", "").0, 403);
    // Pipelined, as the lane batches them.
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(b"GET /public.txt HTTP/1.1\r\nhost: t\r\n\r\nGET /private/small.txt HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut raw = String::new();
    c.read_to_string(&mut raw).unwrap();
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    assert!(raw.contains("HTTP/1.1 403") && !raw.contains("for some"), "{raw}");
}

#[test]
fn native_downloads_obey_the_same_rules() {
    let s = setup();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://{}/private/big.bin", s.server.addr);
    let get = |out: &str, extra: &[&str], url: &str| {
        Command::new(env!("CARGO_BIN_EXE_circus"))
            .args(["get", "--retries", "1", "-o"])
            .arg(dir.path().join(out))
            .args(extra)
            .arg(url)
            .output()
            .unwrap()
    };
    let refused = get("none", &[], &url);
    assert_eq!(refused.status.code(), Some(4), "{}", String::from_utf8_lossy(&refused.stderr));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("403"));
    let want = std::fs::read(s.root.join("private/big.bin")).unwrap();
    let with_token = get("token", &["-H", &format!("Authorization: Bearer {TOKEN}")], &url);
    assert!(with_token.status.success(), "{}", String::from_utf8_lossy(&with_token.stderr));
    assert!(std::fs::read(dir.path().join("token")).unwrap() == want);
    let signed = sign(&url, KEY, "1h");
    let with_signature = get("signed", &[], &signed);
    assert!(with_signature.status.success(), "{}", String::from_utf8_lossy(&with_signature.stderr));
    assert!(std::fs::read(dir.path().join("signed")).unwrap() == want);
}
