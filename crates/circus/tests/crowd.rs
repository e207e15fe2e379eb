//! A crowd on the built binary: 100 native downloads at mixed speeds of two
//! files through a cache far smaller than either, all at once. Every copy
//! must be byte-exact, and the server must have read far less than one
//! file per download: blocks read once were shared.

mod common;

use circus_client::{GetOptions, Protocol, download_with, http_client};
use std::{process::Command, time::Duration};

const CLIENTS: usize = 100;

/// The tests of this file run one at a time: the hundred downloads of one
/// would starve the other's server of the two cores, and its scheduler's
/// ticks and reads would come late (it once read the file 1.34 times
/// favoring storage beside them, 0.81-1.00 alone).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Received bytes per second by client index: unthrottled, 8, 4 and 2 MiB/s.
fn rate(i: usize) -> Option<u64> {
    [None, Some(8 << 20), Some(4 << 20), Some(2 << 20)][i % 4]
}

fn metric(addr: &str, name: &str) -> f64 {
    let out = Command::new("curl").args(["-sS", &format!("http://{addr}/metrics")]).output().expect("curl /metrics");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
        .unwrap_or_else(|| panic!("{name} not in /metrics:\n{text}"))
}

#[test]
fn a_hundred_mixed_speed_native_downloads_share_reads_and_arrive_byte_exact() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<(String, Vec<u8>)> = [("a.bin", 3 << 20), ("b.bin", (2 << 20) + 12_345)]
        .into_iter()
        .enumerate()
        .map(|(k, (name, len))| {
            let data: Vec<u8> = (0..len as u64).map(|i| ((i * 31 + k as u64 * 7) % 251) as u8).collect();
            std::fs::write(dir.path().join(name), &data).unwrap();
            (name.to_string(), data)
        })
        .collect();
    // Half a file's worth of cache, shared by two files and 100 queues.
    let server = common::serve(&[dir.path().to_str().unwrap(), "--cache", "1536KiB"]);
    let addr = server.addr.clone();

    let out = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let reports = runtime.block_on(async {
        let client = http_client(Duration::from_secs(10));
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..CLIENTS {
            let (name, _) = &files[i % files.len()];
            let mut opts = GetOptions::new(format!("http://{addr}/{name}"), out.path().join(format!("{i}-{name}")));
            opts.limit_rate = rate(i);
            opts.timeout = Duration::from_secs(30);
            let client = client.clone();
            tasks.spawn(async move { (i, download_with(&client, &opts, &()).await) });
        }
        tasks.join_all().await
    });
    for (i, report) in reports {
        let report = report.unwrap_or_else(|e| panic!("download {i}: {e}"));
        let (name, data) = &files[i % files.len()];
        assert_eq!(report.protocol, Protocol::Native, "download {i}");
        assert_eq!(report.blocks_corrupt, 0, "download {i}");
        let got = std::fs::read(out.path().join(format!("{i}-{name}"))).unwrap();
        assert!(got == *data, "download {i} of {name} differs ({} bytes, want {})", got.len(), data.len());
    }

    // Without sharing, 100 downloads read 100 files' worth. The index
    // build reads each file once more.
    let total: usize = files.iter().map(|(_, d)| d.len()).sum();
    let per_download = total as f64 / files.len() as f64;
    let read = metric(&server.admin, "circus_storage_read_bytes_total");
    eprintln!("read {read} bytes, {:.1} downloads worth", read / per_download);
    assert!(
        read < CLIENTS as f64 * per_download / 5.0,
        "read {read} bytes for {CLIENTS} downloads of ~{per_download} bytes: blocks were not shared"
    );
}

/// Storage bytes `circus serve --favor F` reads for six native downloads of
/// one 4 MiB file, two each unthrottled, at 4 MiB/s and at 1 MiB/s, through
/// a cache a quarter of the file, after a first download built the index.
fn crowd_reads(favor: &str, data: &[u8]) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f.bin"), data).unwrap();
    let args = [dir.path().to_str().unwrap(), "--cache", "1MiB", "--active", "512KiB", "--favor", favor];
    let server = common::serve(&args);
    let (addr, out) = (server.addr.clone(), tempfile::tempdir().unwrap());
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let client = http_client(Duration::from_secs(10));
    let get = |name: String, rate: Option<u64>| {
        let mut opts = GetOptions::new(format!("http://{addr}/f.bin"), out.path().join(name));
        opts.limit_rate = rate;
        opts.timeout = Duration::from_secs(30);
        let client = client.clone();
        async move { download_with(&client, &opts, &()).await }
    };
    runtime.block_on(get("warm".into(), None)).expect("first download");
    let before = metric(&server.admin, "circus_storage_read_bytes_total");
    let rates = [None, None, Some(4 << 20), Some(4 << 20), Some(1 << 20), Some(1 << 20)];
    let reports = runtime.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for (i, rate) in rates.into_iter().enumerate() {
            tasks.spawn(get(format!("{i}"), rate));
        }
        tasks.join_all().await
    });
    for (i, report) in reports.into_iter().enumerate() {
        let report = report.unwrap_or_else(|e| panic!("{favor}: download {i}: {e}"));
        assert_eq!(report.protocol, Protocol::Native);
        assert!(std::fs::read(out.path().join(i.to_string())).unwrap() == data, "{favor}: download {i} differs");
    }
    metric(&server.admin, "circus_storage_read_bytes_total") - before
}

#[test]
fn favoring_storage_reads_the_file_about_once_for_clients_of_every_speed() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let data: Vec<u8> = (0..4u64 << 20).map(|i| (i * 13 % 251) as u8).collect();
    let len = data.len() as f64;
    let storage = crowd_reads("storage", &data) / len;
    let speed = crowd_reads("speed", &data) / len;
    eprintln!("file read {storage:.2} times favoring storage, {speed:.2} favoring speed");
    // At full speed the 1 MiB/s clients hold a quarter of the file when the
    // fast ones are done, and most of the rest is read again.
    // Favoring storage reads it about once: 0.81-1.09 on a quiet machine
    // (more when the cores are busy: ticks and reads come late, and a
    // block leaves the cache before the slowest holder takes it).
    assert!(storage <= 1.3, "favoring storage read the file {storage:.2} times");
    assert!(speed >= 1.3, "favoring speed read the file {speed:.2} times: the crowd did not differ in speed");
    assert!(storage * 2.0 <= speed, "favoring storage ({storage:.2}) read not half of favoring speed ({speed:.2})");
}
