//! Cancelling a running download (Ctrl-C in `circus get`, an exception in a
//! Python progress callback): what was verified is kept, the part file is
//! released at once, and the next run resumes.

mod common;

use circus_client::{GetError, GetOptions, Mode, ProgressSink, download, download_until, http_client};
use common::{BLOCK, Fixture, litter};
use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};
use tokio::sync::Notify;

/// Cancels the download once `after` bytes have arrived.
struct CancelAfter {
    after: u64,
    done: AtomicU64,
    fire: Notify,
}

impl ProgressSink for CancelAfter {
    fn start(&self, _total: Option<u64>, done: u64) {
        self.done.store(done, Ordering::Relaxed);
    }
    fn advance(&self, bytes: u64) {
        if self.done.fetch_add(bytes, Ordering::Relaxed) + bytes >= self.after {
            self.fire.notify_one();
        }
    }
}

fn opts(url: String, output: &std::path::Path, mode: Mode) -> GetOptions {
    let mut o = GetOptions::new(url, output);
    o.mode = mode;
    o.timeout = Duration::from_secs(10);
    // 3 MiB at 2 MiB/s: the cancel comes long before the end.
    o.limit_rate = Some(2 << 20);
    o
}

async fn cancel_then_resume(mode: Mode) {
    let f = Fixture::start().await;
    let out = f.out("big.bin");
    let want = f.served("big.bin");
    let client = http_client(Duration::from_secs(10));
    // Past the first checkpoint (one second of data), so there is progress to keep.
    let sink = CancelAfter { after: (5 << 19) as u64, done: AtomicU64::new(0), fire: Notify::new() };
    let err =
        download_until(&client, &opts(f.url("big.bin"), &out, mode), &sink, sink.fire.notified()).await.unwrap_err();
    assert!(matches!(err, GetError::Cancelled), "{err}");
    assert_eq!(err.exit_code(), 130);
    assert!(err.retry_may_help());
    assert!(!out.exists(), "a cancelled download installs nothing");
    assert_eq!(litter(&out).len(), 2, "part and state files stay: {:?}", litter(&out));

    // At once, in the same process: the part file's lock was released.
    let mut again = opts(f.url("big.bin"), &out, mode);
    again.limit_rate = None;
    let report = download(&again, &()).await.unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), want);
    assert!(report.resumed_bytes >= (1 << 20), "{report:?}");
    assert_eq!(report.restarts, 0, "what the state file claimed was on disk: {report:?}");
    if mode == Mode::Auto {
        assert!((report.blocks_received as usize) < want.len().div_ceil(BLOCK), "{report:?}");
    }
    assert!(litter(&out).is_empty());
}

#[tokio::test]
async fn a_cancelled_native_download_keeps_its_blocks_and_resumes() {
    cancel_then_resume(Mode::Auto).await;
}

#[tokio::test]
async fn a_cancelled_plain_download_keeps_its_bytes_and_resumes() {
    cancel_then_resume(Mode::Plain).await;
}

#[tokio::test]
async fn a_download_cancelled_before_any_data_leaves_nothing_behind() {
    let f = Fixture::start().await;
    let out = f.out("big.bin");
    let client = http_client(Duration::from_secs(10));
    let err = download_until(&client, &opts(f.url("big.bin"), &out, Mode::Auto), &(), async {}).await.unwrap_err();
    assert!(matches!(err, GetError::Cancelled), "{err}");
    assert!(!out.exists());
    assert!(litter(&out).is_empty(), "{:?}", litter(&out));
}

#[tokio::test]
async fn a_second_download_to_the_same_path_is_refused_while_the_first_runs() {
    let f = Fixture::start().await;
    let out = f.out("big.bin");
    let client = http_client(Duration::from_secs(10));
    let first = {
        let (client, o) = (client.clone(), opts(f.url("big.bin"), &out, Mode::Auto));
        tokio::spawn(async move { circus_client::download_with(&client, &o, &()).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let err = download(&opts(f.url("big.bin"), &out, Mode::Auto), &()).await.unwrap_err();
    assert!(matches!(err, GetError::Local { action: "lock", .. }), "{err}");
    assert!(err.retry_may_help(), "{err}");
    first.await.unwrap().unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), f.served("big.bin"));
}
