//! A directory's page when it has no `index.html`: an HTML table of its
//! entries (names escaped and linked, sizes, modification times), or JSON
//! for clients that ask for `application/json`. Self-contained: no script,
//! no asset from elsewhere.

use crate::files::{Listed, Listing};
use circus_http::{ResBody, full};
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};
use std::{fmt::Write, time::SystemTime};

/// What a name must have encoded to be one path segment of a link.
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}');

/// The listing of the directory at `url_path` (ending in `/`, still
/// percent-encoded), as HTML or, when the client asks for it, JSON.
pub fn response(url_path: &str, listing: &Listing, request: &HeaderMap, head: bool) -> Response<ResBody> {
    let (body, ctype) = if wants_json(request) {
        (json(listing), "application/json")
    } else {
        (html(url_path, listing), "text/html; charset=utf-8")
    };
    let len = body.len();
    let mut res = Response::new(full(if head { String::new() } else { body }));
    *res.status_mut() = StatusCode::OK;
    let h = res.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    // A listing changes whenever the directory does: no validators.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    res
}

/// JSON when Accept names `application/json` (with a non-zero quality)
/// and not `text/html`, which browsers send.
fn wants_json(h: &HeaderMap) -> bool {
    let items: Vec<(String, bool)> = h
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|item| {
            let mut params = item.split(';');
            let kind = params.next().unwrap_or("").trim().to_ascii_lowercase();
            let zero =
                params.any(|p| p.trim().strip_prefix("q=").and_then(|q| q.trim().parse::<f32>().ok()) == Some(0.0));
            (kind, !zero)
        })
        .collect();
    let listed = |kind: &str| items.iter().any(|(k, ok)| k == kind && *ok);
    listed("application/json") && !listed("text/html")
}

fn json(listing: &Listing) -> String {
    let entries: Vec<serde_json::Value> = listing
        .entries
        .iter()
        .map(|e| {
            serde_json::json!({
                "name": e.name,
                "type": if e.dir { "directory" } else { "file" },
                "size": if e.dir { None } else { Some(e.size) },
                "modified": humantime::format_rfc3339_seconds(e.modified).to_string(),
            })
        })
        .collect();
    format!("{}\n", serde_json::json!({ "entries": entries, "truncated": listing.truncated }))
}

fn html(url_path: &str, listing: &Listing) -> String {
    let shown = escape(&percent_encoding::percent_decode_str(url_path).decode_utf8_lossy());
    let mut page = String::with_capacity(1024 + 160 * listing.entries.len());
    let _ = write!(
        page,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>Index of {shown}</title><style>{STYLE}</style></head>\n<body><h1>Index of {shown}</h1>\n\
         <table><thead><tr><th>Name</th><th class=\"n\">Size</th><th>Modified (UTC)</th></tr></thead><tbody>\n"
    );
    if url_path != "/" {
        page.push_str("<tr><td><a href=\"../\">../</a></td><td class=\"n\">-</td><td></td></tr>\n");
    }
    for e in &listing.entries {
        row(&mut page, e);
    }
    page.push_str("</tbody></table>\n");
    if listing.entries.is_empty() {
        page.push_str("<p>This directory is empty.</p>\n");
    }
    if listing.truncated {
        let _ = writeln!(page, "<p>Only the first {} entries are shown.</p>", listing.entries.len());
    }
    page.push_str("<footer>circus</footer></body></html>\n");
    page
}

fn row(page: &mut String, e: &Listed) {
    let slash = if e.dir { "/" } else { "" };
    let href = utf8_percent_encode(&e.name, SEGMENT);
    let name = escape(&e.name);
    let size = if e.dir { "-".to_owned() } else { approximate(e.size) };
    let when = minute(e.modified);
    let _ = writeln!(
        page,
        "<tr><td><a href=\"./{href}{slash}\">{name}{slash}</a></td><td class=\"n\" title=\"{} bytes\">{size}</td><td>{when}</td></tr>",
        e.size
    );
}

/// `1.5 MiB`: three significant figures at most, for reading, not parsing
/// (the exact count is in the cell's title).
fn approximate(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    let digits = if value < 10.0 { 1 } else { 0 };
    format!("{value:.digits$} {}", UNITS[unit])
}

/// `2026-11-24 11:20`.
fn minute(t: SystemTime) -> String {
    let full = humantime::format_rfc3339_seconds(t).to_string();
    full.get(..16).map(|s| s.replace('T', " ")).unwrap_or(full)
}

/// Text made safe inside HTML elements and quoted attributes.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:60em;padding:0 1em;color:#222}\
h1{font-size:1.3em;word-break:break-all}table{border-collapse:collapse;width:100%}\
th,td{text-align:left;padding:.25em .75em;border-bottom:1px solid #eee}td.n,th.n{text-align:right;white-space:nowrap}\
a{text-decoration:none;color:#0645ad}a:hover{text-decoration:underline}footer{margin-top:2em;color:#888;font-size:.8em}";

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(names: &[(&str, bool)]) -> Listing {
        let entries = names
            .iter()
            .map(|&(name, dir)| Listed { name: name.into(), dir, size: 1536, modified: SystemTime::UNIX_EPOCH })
            .collect();
        Listing { entries, truncated: false }
    }

    #[test]
    fn names_are_escaped_in_text_and_encoded_in_links() {
        let page = html("/a%20b/", &listing(&[("<script>alert(1)</script>", false), ("x\"y#z?.iso", false)]));
        assert!(!page.contains("<script>alert"), "{page}");
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(page.contains("href=\"./x%22y%23z%3F.iso\""), "{page}");
        assert!(page.contains("<title>Index of /a b/</title>"));
        assert!(page.contains(">1.5 KiB<"), "{page}");
        assert_eq!(
            (approximate(1023), approximate(10 << 20), approximate(3 << 40)),
            ("1023 B".into(), "10 MiB".into(), "3.0 TiB".into())
        );
    }

    #[test]
    fn json_only_when_asked_for_and_not_by_a_browser() {
        let with = |accept: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT, HeaderValue::from_str(accept).unwrap());
            wants_json(&h)
        };
        assert!(with("application/json"));
        assert!(!with("text/html,application/xhtml+xml,application/json;q=0.9"));
        assert!(!with("application/json;q=0"));
        assert!(!wants_json(&HeaderMap::new()));
        let parsed: serde_json::Value = serde_json::from_str(&json(&listing(&[("d", true), ("f", false)]))).unwrap();
        assert_eq!(parsed["entries"][0]["type"], "directory");
        assert_eq!(parsed["entries"][1]["size"], 1536);
        assert_eq!(parsed["entries"][1]["modified"], "1970-01-01T00:00:00Z");
    }
}
