//! Directories over real sockets: a listing where there is no index.html
//! (names escaped, hidden entries left out, JSON on request), index.html
//! where there is one, and the redirect that adds a directory's slash.

mod common;

use std::{io::Read, path::Path};

fn get(addr: &str, path: &str, extra: &[(&str, &str)]) -> (u16, std::collections::HashMap<String, String>, String) {
    let (mut r, status, headers) = common::get_head(addr, path, extra);
    let mut body = String::new();
    r.read_to_string(&mut body).unwrap();
    (status, headers, body)
}

fn tree(root: &Path) {
    std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
    std::fs::create_dir_all(root.join("site")).unwrap();
    std::fs::create_dir_all(root.join("evil.com")).unwrap();
    std::fs::write(root.join("big.iso"), vec![7u8; 3 << 20]).unwrap();
    std::fs::write(root.join("<b>bold&.txt"), b"x").unwrap();
    std::fs::write(root.join("50%off.txt"), b"sale").unwrap();
    std::fs::write(root.join(".env"), b"SECRET=1").unwrap();
    std::fs::write(root.join("site/index.html"), b"<h1>welcome</h1>").unwrap();
    std::fs::write(root.join("sub/a.bin"), b"abc").unwrap();
    std::os::unix::fs::symlink("/etc", root.join("escape")).unwrap();
}

#[test]
fn a_directory_without_index_html_is_listed_with_hidden_entries_left_out() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path());
    let s = common::serve(&[dir.path().to_str().unwrap()]);
    let (status, h, page) = get(&s.addr, "/", &[("accept", "text/html")]);
    assert_eq!(status, 200, "{page}");
    assert_eq!(h["content-type"], "text/html; charset=utf-8");
    assert!(page.contains("<title>Index of /</title>"), "{page}");
    for shown in ["href=\"./big.iso\"", ">3.0 MiB<", "href=\"./sub/\"", "href=\"./site/\"", "href=\"./50%25off.txt\""] {
        assert!(page.contains(shown), "{shown} missing from\n{page}");
    }
    // A file name is text, never markup.
    assert!(page.contains("&lt;b&gt;bold&amp;.txt") && !page.contains("<b>bold"), "{page}");
    // Dotfiles, the index directory and links out of the root are not shown.
    for hidden in [".env", ".circus", "escape"] {
        assert!(!page.contains(hidden), "{hidden} listed:\n{page}");
    }
    // Directories first, then files, by name.
    assert!(page.find("evil.com/").unwrap() < page.find("site/").unwrap());
    assert!(page.find("sub/").unwrap() < page.find("50%25off").unwrap());
    // What the listing links to is served.
    assert_eq!(get(&s.addr, "/50%25off.txt", &[]).2, "sale");
    let (status, _, sub) = get(&s.addr, "/sub/", &[]);
    assert_eq!(status, 200);
    assert!(sub.contains("href=\"../\"") && sub.contains("href=\"./deeper/\"") && sub.contains("a.bin"), "{sub}");
}

#[test]
fn listings_come_as_json_on_request_and_head_has_no_body() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path());
    let s = common::serve(&[dir.path().to_str().unwrap()]);
    let (status, h, body) = get(&s.addr, "/sub/", &[("accept", "application/json")]);
    assert_eq!((status, h["content-type"].as_str()), (200, "application/json"));
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["entries"][0]["name"], "deeper");
    assert_eq!(v["entries"][0]["type"], "directory");
    assert_eq!((v["entries"][1]["name"].as_str(), v["entries"][1]["size"].as_u64()), (Some("a.bin"), Some(3)));
    let mut c = std::net::TcpStream::connect(&s.addr).unwrap();
    std::io::Write::write_all(&mut c, b"HEAD / HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n").unwrap();
    let mut raw = String::new();
    c.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200") && head.to_ascii_lowercase().contains("content-length: "), "{head}");
    assert_eq!(body, "");
}

#[test]
fn a_directory_named_without_its_slash_is_redirected_and_index_html_is_its_page() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path());
    let s = common::serve(&[dir.path().to_str().unwrap()]);
    let (status, h, _) = get(&s.addr, "/site", &[]);
    assert_eq!((status, h["location"].as_str()), (301, "/site/"));
    let (status, h, _) = get(&s.addr, "/sub/deeper?x=1", &[]);
    assert_eq!((status, h["location"].as_str()), (301, "/sub/deeper/?x=1"));
    // `//evil.com` must not become a redirect to another host.
    let (status, h, _) = get(&s.addr, "//evil.com", &[]);
    assert_eq!((status, h["location"].as_str()), (301, "/evil.com/"));
    let (status, h, page) = get(&s.addr, "/site/", &[]);
    assert_eq!((status, page.as_str()), (200, "<h1>welcome</h1>"));
    assert!(h["content-type"].starts_with("text/html"), "{h:?}");
    // A file is not a directory.
    assert_eq!(get(&s.addr, "/big.iso/", &[]).0, 404);
}

#[test]
fn listing_off_refuses_directories_but_serves_index_html() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path());
    let s = common::serve(&[dir.path().to_str().unwrap(), "--listing", "false"]);
    let (status, _, body) = get(&s.addr, "/", &[]);
    assert_eq!(status, 403);
    assert!(body.contains("listing is off"), "{body}");
    assert_eq!(get(&s.addr, "/site/", &[]).2, "<h1>welcome</h1>");
}
