//! The driver against in-memory and faulty block sources: no disk, no
//! origin, the real scheduler and mailboxes.

use super::{Storage, spawn};
use crate::{
    mailbox::{End, Mailbox, Next},
    metrics::Metrics,
};
use bytes::Bytes;
use circus_core::{BlockSet, Fault, FileId};
use circus_sched::{FailReason, SchedConfig};
use circus_store::{
    BlockSource, Description, FileEntry,
    testing::{FaultySource, Injected, MemSource},
};
use prometheus_client::registry::Registry;
use std::{sync::Arc, time::SystemTime};

const BLOCK: u32 = 4096;

fn content(blocks: u32) -> Bytes {
    (0..blocks * BLOCK).map(|i| (i * 7 % 251) as u8).collect::<Vec<u8>>().into()
}

fn entry(id: u64, source: Arc<dyn BlockSource>, size: u64) -> Arc<FileEntry> {
    let d = Description {
        size,
        modified: SystemTime::UNIX_EPOCH,
        etag: "\"t\"".into(),
        content_type: "application/octet-stream".into(),
    };
    Arc::new(FileEntry::new(FileId(id), format!("f{id}"), source, d, BLOCK))
}

fn driver() -> super::DriverHandle {
    let cfg = SchedConfig { block_size: BLOCK, cache_bytes: 64 * u64::from(BLOCK), ..SchedConfig::default() };
    let metrics = Arc::new(Metrics::register(&mut Registry::default()));
    spawn(cfg, Storage { io_threads: 2, arena: None, pacer: None }, metrics)
}

/// Takes blocks until the download ends, telling the driver each was
/// sent; the file as assembled, and how it ended.
async fn download(d: &super::DriverHandle, id: circus_core::ClientId, mb: &Mailbox, size: usize) -> (Vec<u8>, End) {
    let mut out = vec![0u8; size];
    loop {
        match std::future::poll_fn(|cx| mb.poll_next(cx, None)).await {
            Next::Block(b, bytes) => {
                let at = b as usize * BLOCK as usize;
                out[at..at + bytes.len()].copy_from_slice(&bytes);
                d.sent(id, b..b + 1);
            }
            Next::Resume => d.resume(id),
            Next::End(end) => return (out, end),
        }
    }
}

#[tokio::test]
async fn clients_of_one_version_get_every_block_and_share_its_reads() {
    let bytes = content(32);
    let source = Arc::new(MemSource::new(bytes.clone(), BLOCK));
    let file = entry(1, source.clone(), bytes.len() as u64);
    let d = driver();
    let (a, ma) = d.join(file.clone(), BlockSet::new(32), false, None);
    let (b, mb) = d.join(file.clone(), BlockSet::new(32), false, None);
    let ((got_a, end_a), (got_b, end_b)) =
        tokio::join!(download(&d, a, &ma, bytes.len()), download(&d, b, &mb, bytes.len()));
    assert!(matches!(end_a, End::Complete) && matches!(end_b, End::Complete), "{end_a:?} {end_b:?}");
    assert_eq!(got_a, bytes);
    assert_eq!(got_b, bytes);
    assert_eq!(source.reads(), 32, "each block read once for both clients");
}

#[tokio::test]
async fn a_plain_download_alone_on_its_file_reads_runs_as_one_request_each() {
    // 64 blocks of memory: runs of 32 blocks (rule C17), one request each.
    let bytes = content(128);
    let source = Arc::new(MemSource::new(bytes.clone(), BLOCK));
    let file = entry(5, source.clone(), bytes.len() as u64);
    let d = driver();
    let (id, mb) = d.join(file, BlockSet::new(128), true, None);
    let (got, end) = download(&d, id, &mb, bytes.len()).await;
    assert!(matches!(end, End::Complete), "{end:?}");
    assert_eq!(got, bytes);
    assert_eq!(source.reads(), 128, "each block read once");
    assert_eq!(source.requests(), 4, "one request per run of 32");
}

/// A source that fetches blocks on its own, as the origin tier does: it
/// does not read runs whole.
#[derive(Debug)]
struct OneByOne(Arc<MemSource>);

impl BlockSource for OneByOne {
    fn read_block(&self, offset: u64, len: u32) -> circus_store::ReadFuture<'_, Bytes> {
        self.0.read_block(offset, len)
    }

    fn shares_buffers(&self) -> bool {
        true
    }

    fn index(&self) -> circus_store::ReadFuture<'_, Arc<circus_store::FileIndex>> {
        self.0.index()
    }

    fn index_now(&self) -> Option<Arc<circus_store::FileIndex>> {
        self.0.index_now()
    }
}

#[tokio::test]
async fn blocks_of_a_source_that_does_not_read_runs_are_read_one_by_one() {
    let bytes = content(64);
    let mem = Arc::new(MemSource::new(bytes.clone(), BLOCK));
    let file = entry(6, Arc::new(OneByOne(mem.clone())), bytes.len() as u64);
    let d = driver();
    let (id, mb) = d.join(file, BlockSet::new(64), true, None);
    let (got, end) = download(&d, id, &mb, bytes.len()).await;
    assert!(matches!(end, End::Complete), "{end:?}");
    assert_eq!(got, bytes);
    assert_eq!(mem.requests(), 64, "each block its own request, reported as it arrives");
}

#[tokio::test]
async fn a_source_that_changed_fails_its_clients_as_changed_not_as_storage() {
    let bytes = content(8);
    let faulty = Arc::new(FaultySource::new(Arc::new(MemSource::new(bytes.clone(), BLOCK))));
    faulty.inject(3 * u64::from(BLOCK), Injected::Fail(Fault::Changed));
    let file = entry(2, faulty, bytes.len() as u64);
    let d = driver();
    let (id, mb) = d.join(file, BlockSet::new(8), true, None);
    let (_, end) = download(&d, id, &mb, bytes.len()).await;
    assert!(matches!(end, End::Failed(FailReason::FileChanged { block: 3, .. })), "{end:?}");
}

#[tokio::test]
async fn a_failing_read_fails_its_clients_as_storage() {
    let bytes = content(8);
    let faulty = Arc::new(FaultySource::new(Arc::new(MemSource::new(bytes.clone(), BLOCK))));
    faulty.inject(5 * u64::from(BLOCK), Injected::Fail(Fault::Origin));
    let file = entry(3, faulty, bytes.len() as u64);
    let d = driver();
    let (id, mb) = d.join(file, BlockSet::new(8), true, None);
    let (_, end) = download(&d, id, &mb, bytes.len()).await;
    assert!(matches!(end, End::Failed(FailReason::StorageRead { block: 5, .. })), "{end:?}");
}

#[tokio::test]
async fn a_block_that_fails_its_hash_is_never_sent_and_the_version_is_distrusted() {
    let bytes = content(8);
    let faulty = Arc::new(FaultySource::new(Arc::new(MemSource::new(bytes.clone(), BLOCK))));
    faulty.inject(2 * u64::from(BLOCK), Injected::Corrupt(Bytes::from(vec![0u8; BLOCK as usize])));
    let file = entry(4, faulty.clone(), bytes.len() as u64);
    let d = driver();
    let (id, mb) = d.join(file, BlockSet::new(8), true, None);
    let (got, end) = download(&d, id, &mb, bytes.len()).await;
    assert!(matches!(end, End::Failed(FailReason::FileChanged { block: 2, .. })), "{end:?}");
    assert_eq!(&got[..2 * BLOCK as usize], &bytes[..2 * BLOCK as usize], "blocks before it arrive intact");
    assert!(got[2 * BLOCK as usize..].iter().all(|&b| b == 0), "nothing of or after the bad block is sent in order");
    assert!(faulty.was_distrusted());
}

#[test]
fn a_run_takes_the_next_block_of_its_file_only() {
    // A read of an earlier block must not be mistaken for a continuation
    // (the byte count would underflow), nor one of another file.
    let bytes = content(1024);
    let file = entry(7, Arc::new(MemSource::new(bytes.clone(), BLOCK)), bytes.len() as u64);
    let run = super::Run { entry: file, first: 10, count: 2 };
    assert!(run.extends(FileId(7), 12));
    assert!(!run.extends(FileId(7), 3), "an earlier block");
    assert!(!run.extends(FileId(7), 13), "a gap");
    assert!(!run.extends(FileId(8), 12), "another file");
    let long = super::Run { count: (2 << 20) / BLOCK, ..run };
    assert!(!long.extends(FileId(7), 10 + (2 << 20) / BLOCK), "past 2 MiB");
}
