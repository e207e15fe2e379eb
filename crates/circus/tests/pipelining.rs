//! HTTP/1.1 pipelining on the built binary: 50 connections, each keeping
//! eight requests for 1 KiB files in flight and topping up in batches (the
//! lava benchmark's load generator), so request bytes keep arriving while
//! responses are written. Every connection must get every response: hyper
//! 1.12 on its own left some connections stalled with a request unread
//! (see `crates/server/src/sendfile.rs`).

mod common;

use std::time::Duration;

#[test]
fn pipelined_requests_on_many_connections_all_get_answers() {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<String> = (0..200)
        .map(|i| {
            std::fs::write(dir.path().join(format!("f{i}")), vec![i as u8; 1024]).unwrap();
            format!("/f{i}")
        })
        .collect();
    let server = common::serve(&[dir.path().to_str().unwrap()]);

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    // Fails with "stopped answering" if any connection waits 10 s past the end.
    let load = runtime.block_on(circus_bench::loadgen::run(&server.addr, &paths, 50, 8, Duration::from_secs(3)));
    let load = load.unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{} pipelined responses", load.responses);
    assert!(load.responses > 0);
}
