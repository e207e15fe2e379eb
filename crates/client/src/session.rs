//! One download from start to finish: load or create its state, run
//! attempts with bounded, backed-off retries, then read the whole file back
//! to check it (starting over once if it is damaged) and install it.

use crate::{
    GetError, GetOptions, Mode, Protocol, Report,
    digest::Sha256Digest,
    fetch::{self, Failure, HttpClient, Stop},
    native,
    part::{self, Paths, Writer},
    plain,
    progress::ProgressSink,
    state::{PlainState, Progress, State},
    throttle::Throttle,
    verify,
};
use circus_proto::complement;
use http::{HeaderMap, Uri};
use std::time::{Duration, Instant};

/// Persist progress at least this often...
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
/// ...or after this many blocks (native) ...
const CHECKPOINT_BLOCKS: u32 = 256;
/// ...or bytes (plain: 256 blocks of 64 KiB), whichever comes first.
const CHECKPOINT_BYTES: u64 = 16 << 20;
/// Backoff between retries doubles up to this.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Everything an attempt works on.
pub(crate) struct Job<'a> {
    pub opts: &'a GetOptions,
    pub client: &'a HttpClient,
    pub progress: &'a dyn ProgressSink,
    pub uri: Uri,
    pub paths: Paths,
    pub state: State,
    pub writer: Writer,
    pub throttle: Throttle,
    pub report: Report,
    dirty_blocks: u32,
    dirty_bytes: u64,
    last_checkpoint: Instant,
}

impl Job<'_> {
    /// The headers every request of the download carries: the caller's
    /// (`circus get -H`).
    pub fn request_headers(&self) -> http::HeaderMap {
        self.opts.headers.iter().cloned().collect()
    }

    pub fn note(&self, message: &str) {
        tracing::debug!(url = %self.uri, "{message}");
        self.progress.note(message);
    }

    /// Replaces the progress (a new download or a start-over): the part
    /// file is emptied and sized to `len`.
    pub async fn begin(&mut self, progress: Progress, len: u64, repr: Option<Sha256Digest>) -> Result<(), GetError> {
        self.state.progress = progress;
        self.state.repr_sha256 = repr;
        self.writer.reset(len, self.state.to_json()).await?;
        self.progress.start(self.state.total(), self.state.done_bytes());
        self.dirty_blocks = 0;
        self.dirty_bytes = 0;
        self.last_checkpoint = Instant::now();
        Ok(())
    }

    /// Starts over from nothing with a new writer, after the old one was
    /// closed and the part file discarded.
    pub async fn reopen(&mut self) -> Result<(), GetError> {
        (self.writer, _) = Writer::open(&self.paths).await?;
        self.begin(Progress::Fresh, 0, None).await
    }

    /// Records that `blocks` blocks / `bytes` bytes went to the writer,
    /// checkpointing when enough has piled up.
    pub async fn written(&mut self, blocks: u32, bytes: u64) -> Result<(), GetError> {
        self.progress.advance(bytes);
        self.dirty_blocks += blocks;
        self.dirty_bytes += bytes;
        if self.dirty_blocks >= CHECKPOINT_BLOCKS
            || self.dirty_bytes >= CHECKPOINT_BYTES
            || self.last_checkpoint.elapsed() >= CHECKPOINT_EVERY
        {
            self.checkpoint().await?;
        }
        Ok(())
    }

    /// Queues "sync, then save the state as it is now".
    pub async fn checkpoint(&mut self) -> Result<(), GetError> {
        self.dirty_blocks = 0;
        self.dirty_bytes = 0;
        self.last_checkpoint = Instant::now();
        self.writer.checkpoint(self.state.to_json()).await
    }

    /// The `Repr-Digest` of a response, if it has a readable SHA-256.
    pub fn repr_digest(headers: &HeaderMap) -> Option<Sha256Digest> {
        headers.get("repr-digest").and_then(|v| v.to_str().ok()).and_then(Sha256Digest::from_repr_digest)
    }
}

/// Downloads, verifies and installs `opts.url`, unless `cancelled` resolves
/// first. A cancel is taken while data is being fetched, a retry waited
/// for, or the whole file read back to check it; it ends the download as a
/// failure would, keeping what was verified. The rename, once begun, is
/// seen through.
pub(crate) async fn download(
    client: &HttpClient,
    opts: &GetOptions,
    progress: &dyn ProgressSink,
    cancelled: impl Future<Output = ()>,
) -> Result<Report, GetError> {
    let mut cancelled = std::pin::pin!(cancelled);
    let started = Instant::now();
    let uri = fetch::parse_url(&opts.url)?;
    if opts.output.as_os_str().is_empty() {
        return Err(GetError::Usage("the output path is empty".into()));
    }
    if opts.output.is_dir() {
        return Err(GetError::Usage(format!("{} is a directory, not a file name", opts.output.display())));
    }
    let paths = Paths::new(&opts.output);
    let (writer, part_len) = Writer::open(&paths).await?;
    let state = load_state(&paths, opts, part_len, progress);
    let report = Report {
        path: opts.output.clone(),
        protocol: if matches!(state.progress, Progress::Plain(_)) { Protocol::Plain } else { Protocol::Native },
        resumed_bytes: state.done_bytes(),
        ..Report::default()
    };
    progress.start(state.total(), state.done_bytes());
    let mut job = Job {
        opts,
        client,
        progress,
        uri,
        paths,
        state,
        writer,
        throttle: Throttle::new(opts.limit_rate),
        report,
        dirty_blocks: 0,
        dirty_bytes: 0,
        last_checkpoint: Instant::now(),
    };
    // At most one start-over per run for data that failed the final check:
    // a second failure is not the disk's doing.
    let mut refetched = false;
    let result = loop {
        // Every await in `run` may be abandoned: progress is recorded only
        // after the write it describes is queued, so a checkpoint never
        // claims data the writer was not given.
        let fetched = tokio::select! {
            r = run(&mut job) => r,
            () = &mut cancelled => Err(GetError::Cancelled),
        };
        if let Err(e) = fetched {
            break Err(stop(&mut job, e).await);
        }
        // Everything is in: record that (a cancel from here on leaves a
        // state that says so, and the next run only checks), and close the
        // part file, which stays locked until the download ends.
        if let Err(e) = seal(&mut job).await {
            break Err(e);
        }
        // Reading a large file back takes a while: a cancel stops it.
        let checked = tokio::select! {
            v = check(&mut job) => v,
            () = &mut cancelled => Err(GetError::Cancelled),
        };
        match checked {
            Ok(Verdict::Good(sha256)) => break install(job, sha256).await,
            Ok(Verdict::Bad { reason, refetch }) => {
                // Wrong content must not stay around looking like progress.
                part::discard(&job.paths).await;
                if !refetch || refetched {
                    break Err(GetError::Integrity { reason });
                }
                refetched = true;
                job.report.restarts += 1;
                job.note(&format!("{reason}; starting over"));
                if let Err(e) = job.reopen().await {
                    break Err(e);
                }
            }
            Err(e) => break Err(e),
        }
    };
    progress.finish();
    result.map(|mut r| {
        r.elapsed = started.elapsed();
        r
    })
}

/// The saved state if it is for this URL and matches the part file;
/// otherwise a fresh one (the first response resets the part file).
fn load_state(paths: &Paths, opts: &GetOptions, part_len: u64, progress: &dyn ProgressSink) -> State {
    let saved = match std::fs::read(&paths.state) {
        Ok(bytes) => State::from_json(&bytes).map_err(|e| e.to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return State::fresh(&opts.url),
        Err(e) => Err(e.to_string()),
    };
    let mut state = match saved {
        Ok(s) if s.url != opts.url => {
            progress.note(&format!("{} is for {}; starting over", paths.state.display(), s.url));
            return State::fresh(&opts.url);
        }
        Ok(s) if s.expected_part_len().is_some_and(|l| l != part_len) => {
            progress.note(&format!("{} does not match its state file; starting over", paths.part.display()));
            return State::fresh(&opts.url);
        }
        Ok(s) => s,
        Err(why) => {
            progress.note(&format!("ignoring {}: {why}; starting over", paths.state.display()));
            return State::fresh(&opts.url);
        }
    };
    // A native download continued over plain HTTP keeps its verified prefix.
    if let (Mode::Plain, Progress::Native(n)) = (opts.mode, &state.progress) {
        let first_missing = complement(&n.have).iter().next();
        let done = first_missing.map_or(n.layout.len(), |b| n.layout.offset(b));
        let validator = Some(n.etag.clone());
        state.progress = Progress::Plain(PlainState { validator, total: Some(n.layout.len()), done });
    }
    if state.done_bytes() > 0 {
        progress.note(&format!("resuming: {} bytes already verified", state.done_bytes()));
    }
    state
}

/// Attempts until the data is complete or the retries run out. `--retries`
/// bounds failures in a row without progress, so a long download over a
/// flaky link goes on as long as each connection gets something done.
async fn run(job: &mut Job<'_>) -> Result<(), GetError> {
    let mut streak = 0u32;
    let mut attempts = 0u32;
    // The most data ever in place during this run. A try that starts over
    // (a plain server with no validator to resume against) and gets no
    // further than an earlier one made no progress, however many bytes it
    // received: otherwise a body cut at the same place every time would be
    // retried for ever.
    let mut high_water = job.state.done_bytes();
    loop {
        attempts += 1;
        let native_ok = job.opts.mode == Mode::Auto && !matches!(job.state.progress, Progress::Plain(_));
        let result = if job.state.is_complete() {
            Ok(())
        } else if native_ok {
            native::attempt(job).await
        } else {
            plain::attempt(job).await
        };
        let failure = match result {
            Ok(()) => return Ok(()),
            Err(Stop::Fatal(e)) => return Err(e),
            Err(Stop::Retry(f)) => f,
        };
        if failure.start_over {
            job.report.restarts += 1;
            job.begin(Progress::Fresh, 0, None).await?;
        } else {
            job.checkpoint().await?;
        }
        let done = job.state.done_bytes();
        let progressed = failure.progressed && done > high_water;
        high_water = high_water.max(done);
        streak = if progressed { 1 } else { streak + 1 };
        if streak > job.opts.retries {
            return Err(give_up(failure, attempts));
        }
        let backoff = retry_wait(job.opts.backoff, streak, failure.retry_after);
        job.note(&format!(
            "{}; retrying in {:.1} s ({streak} of {})",
            failure.reason,
            backoff.as_secs_f64(),
            job.opts.retries
        ));
        tokio::time::sleep(backoff).await;
        job.report.reconnects += 1;
    }
}

/// The wait before retry number `streak` (from 1) of a row: `base`,
/// doubling each time, or what the server asked for (`Retry-After`) if
/// longer; never more than [`MAX_BACKOFF`], so a server cannot park a
/// download for hours.
fn retry_wait(base: Duration, streak: u32, retry_after: Option<Duration>) -> Duration {
    let backoff = base.saturating_mul(1 << streak.saturating_sub(1).min(16));
    backoff.max(retry_after.unwrap_or(Duration::ZERO)).min(MAX_BACKOFF)
}

fn give_up(failure: Failure, attempts: u32) -> GetError {
    if failure.corrupt > 0 {
        let tries = if attempts == 1 { "the only try".to_owned() } else { format!("the last of {attempts} tries") };
        GetError::Integrity { reason: format!("{} (on {tries})", failure.reason) }
    } else if let Some((status, message)) = failure.status {
        GetError::Status { status, message }
    } else {
        GetError::Network { attempts, reason: failure.reason }
    }
}

/// Ends a failed download: whatever was verified stays for the next run.
async fn stop(job: &mut Job<'_>, e: GetError) -> GetError {
    // If the writer is what failed, the checkpoint fails too and the old
    // state file stands.
    let keep = job.state.done_bytes() > 0;
    if keep {
        let _ = job.checkpoint().await;
    }
    let _ = job.writer.close().await;
    if !keep {
        // Nothing worth resuming (a 404, a refused connection): leave no
        // litter beside the output.
        part::discard(&job.paths).await;
    }
    e
}

/// Saves the state of a download whose data is all in place, then waits
/// for the writer to sync and stop.
async fn seal(job: &mut Job<'_>) -> Result<(), GetError> {
    job.checkpoint().await?;
    job.writer.close().await
}

/// The outcome of the whole-file check.
enum Verdict {
    /// The data is right; its SHA-256 if one was computed.
    Good(Option<Sha256Digest>),
    /// The data is wrong. `refetch`: downloading it again may cure it (the
    /// part file held bytes this run did not check as they arrived).
    Bad { reason: String, refetch: bool },
}

/// Syncs the part file and reads it back: a native download must hash to
/// the manifest's root, and the file must match every SHA-256 known.
/// Nothing else (a state file, a count of blocks) is taken as proof.
async fn check(job: &mut Job<'_>) -> Result<Verdict, GetError> {
    let opts = job.opts;
    let mut wanted: Vec<(&str, Sha256Digest)> = Vec::new();
    if let Some(d) = opts.expect_digest {
        wanted.push(("the expected digest", d));
    }
    if opts.verify_digest {
        if let Some(d) = job.state.repr_sha256 {
            wanted.push(("the server's Repr-Digest", d));
        }
        if let Progress::Native(n) = &job.state.progress
            && n.sha256 != [0; 32]
        {
            wanted.push(("the manifest", Sha256Digest(n.sha256)));
        }
    }
    let (layout, root) = match &job.state.progress {
        Progress::Native(n) => (Some(n.layout), Some(n.root)),
        _ => (None, None),
    };
    if layout.is_none() && wanted.is_empty() {
        // A plain download with no digest: nothing to check against.
        return Ok(Verdict::Good(None));
    }
    job.progress.status(if wanted.is_empty() { "checking the blocks" } else { "checking the blocks and SHA-256" });
    let (path, sha256) = (job.paths.part.clone(), !wanted.is_empty());
    let scan = tokio::task::spawn_blocking(move || verify::scan(&path, layout, sha256))
        .await
        .map_err(|e| GetError::local("read", &job.paths.part, std::io::Error::other(e)))?
        .map_err(|e| GetError::local("read back", &job.paths.part, e))?;
    if scan.root != root {
        return Ok(Verdict::Bad {
            reason: format!("{} does not match the manifest's hash tree", job.paths.part.display()),
            refetch: true,
        });
    }
    if let Some(got) = scan.sha256
        && let Some((source, want)) = wanted.iter().find(|(_, want)| *want != got)
    {
        // With the tree matched, a native file is what the server said it
        // is: a digest that disagrees is wrong itself, and fetching again
        // would not change that. A plain file resumed from an earlier run
        // may have been damaged on disk.
        let refetch = layout.is_none() && job.report.resumed_bytes > 0;
        return Ok(Verdict::Bad { reason: format!("the file's SHA-256 is {got}, but {source} says {want}"), refetch });
    }
    Ok(Verdict::Good(scan.sha256))
}

/// Moves the checked file into place.
async fn install(mut job: Job<'_>, sha256: Option<Sha256Digest>) -> Result<Report, GetError> {
    part::install(&job.paths).await?;
    job.report.sha256 = sha256;
    job.report.protocol =
        if matches!(job.state.progress, Progress::Native(_)) { Protocol::Native } else { Protocol::Plain };
    job.report.bytes = job.state.total().unwrap_or(0);
    Ok(job.report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_waits_double_and_honour_retry_after_up_to_the_cap() {
        struct Case {
            streak: u32,
            retry_after: Option<u64>,
            want_ms: u64,
        }
        let cases = [
            Case { streak: 1, retry_after: None, want_ms: 200 },
            Case { streak: 3, retry_after: None, want_ms: 800 },
            Case { streak: 40, retry_after: None, want_ms: 10_000 },
            Case { streak: 1, retry_after: Some(2), want_ms: 2_000 },
            // The backoff, when longer, still applies.
            Case { streak: 4, retry_after: Some(0), want_ms: 1_600 },
            Case { streak: 1, retry_after: Some(3600), want_ms: 10_000 },
            Case { streak: 1, retry_after: Some(u64::MAX), want_ms: 10_000 },
        ];
        for Case { streak, retry_after, want_ms } in cases {
            let got = retry_wait(Duration::from_millis(200), streak, retry_after.map(Duration::from_secs));
            assert_eq!(got, Duration::from_millis(want_ms), "streak {streak}, Retry-After {retry_after:?}");
        }
    }
}
