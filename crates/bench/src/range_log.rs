//! The requests a circus server logged (`--access-log-format json`), as the
//! in-order readers they were, for the offline bound of a crowd whose
//! clients choose their ranges as they go (aria2c's connections).
//!
//! Each plain answer is one reader: it started when its response began
//! (the line's time less its duration), went at its bytes over its
//! duration, and read the bytes from its range's first (`range`, for a
//! 206) onwards, as many as it took. Native answers and errors are not
//! readers.

use crate::{BenchError, io_err};
use circus_sim::bound::Reader;
use std::{path::Path, time::SystemTime};

/// Every plain, successful answer in the log at `path`, with start times in
/// seconds from the first one's.
pub fn readers(path: &Path) -> Result<Vec<Reader>, BenchError> {
    parse(&std::fs::read_to_string(path).map_err(io_err("reading the access log"))?)
}

/// [`readers`] of a log's text.
fn parse(text: &str) -> Result<Vec<Reader>, BenchError> {
    let mut found: Vec<(SystemTime, f64, u64, u64)> = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| BenchError::Setup(format!("access log line {line:?}: {e}")))?;
        let status = v["status"].as_u64().unwrap_or(0);
        let bytes = v["bytes"].as_u64().unwrap_or(0);
        let seconds = v["duration_ms"].as_f64().unwrap_or(0.0) / 1000.0;
        if !matches!(status, 200 | 206) || v["mode"] != "plain" || bytes == 0 || seconds <= 0.0 {
            continue;
        }
        let ended = v["time"]
            .as_str()
            .and_then(|t| humantime::parse_rfc3339(t).ok())
            .ok_or_else(|| BenchError::Setup(format!("access log line without a time: {line}")))?;
        let from = v["range"].as_str().map_or(Ok(0), first_byte)?;
        let started = ended - std::time::Duration::from_secs_f64(seconds);
        found.push((started, seconds, from, bytes));
    }
    let Some(first) = found.iter().map(|f| f.0).min() else { return Ok(Vec::new()) };
    Ok(found
        .into_iter()
        .map(|(started, seconds, from, bytes)| Reader {
            start_s: started.duration_since(first).unwrap_or_default().as_secs_f64(),
            bytes_per_s: bytes as f64 / seconds,
            bytes: Some(from..from + bytes),
        })
        .collect())
}

/// `100-199/1000` -> 100.
fn first_byte(range: &str) -> Result<u64, BenchError> {
    range
        .split('-')
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| BenchError::Setup(format!("access log range {range:?} is not FIRST-LAST/LEN")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_answers_become_readers_of_their_ranges() {
        let lines = [
            r#"{"time":"2026-11-25T10:00:02.000Z","status":206,"bytes":1000,"duration_ms":1000.0,"mode":"plain","range":"5000-9999/10000"}"#,
            r#"{"time":"2026-11-25T10:00:02.500Z","status":200,"bytes":10000,"duration_ms":2000.0,"mode":"plain","range":null}"#,
            r#"{"time":"2026-11-25T10:00:03.000Z","status":200,"bytes":500,"duration_ms":10.0,"mode":"native","range":null}"#,
            r#"{"time":"2026-11-25T10:00:03.000Z","status":404,"bytes":9,"duration_ms":1.0,"mode":"plain","range":null}"#,
        ];
        let r = parse(&lines.join("\n")).unwrap();
        assert_eq!(r.len(), 2);
        // The second started first (02.500 - 2 s = 00.500), the first at 01.000.
        assert_eq!(r[0], Reader { start_s: 0.5, bytes_per_s: 1000.0, bytes: Some(5000..6000) });
        assert_eq!(r[1], Reader { start_s: 0.0, bytes_per_s: 5000.0, bytes: Some(0..10000) });
    }
}
