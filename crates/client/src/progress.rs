//! How a download reports progress: a trait, so the binary can draw a bar
//! while a benchmark runs hundreds of downloads in one process silently.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// Receives progress from a running download. Every method has a do-nothing
/// default; `&()` is the sink that ignores everything.
///
/// Calls come from the download's task, between awaits: keep them cheap.
pub trait ProgressSink: Send + Sync {
    /// The file's size is known (`None`: the server did not say), and `done`
    /// bytes of it are already on disk. Called again after a start-over.
    fn start(&self, total: Option<u64>, done: u64) {
        let _ = (total, done);
    }
    /// `bytes` more bytes of the file were received (and verified, in native
    /// mode) and handed to the writer.
    fn advance(&self, bytes: u64) {
        let _ = bytes;
    }
    /// Something a person watching may want to know: a reconnect, a
    /// start-over, a digest check.
    fn note(&self, message: &str) {
        let _ = message;
    }
    /// What the download is doing now, when it is not receiving (e.g.
    /// checking the whole-file digest): for a status display, not a log.
    fn status(&self, what: &str) {
        let _ = what;
    }
    /// The download ended, successfully or not.
    fn finish(&self) {}
}

impl ProgressSink for () {}

/// A terminal progress bar on stderr: bytes done and total, rate, ETA.
///
/// Hidden when stderr is not a terminal or when made `quiet`. Notes go above
/// the bar, or to stderr as plain lines when there is no bar (unless quiet),
/// so logs of scripted downloads still show reconnects.
#[derive(Debug)]
pub struct BarProgress {
    bar: ProgressBar,
    quiet: bool,
}

impl BarProgress {
    pub fn new(quiet: bool) -> Self {
        let target = if quiet || !std::io::stderr().is_terminal() {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        };
        let bar = ProgressBar::with_draw_target(None, target);
        bar.set_style(Self::style(false));
        Self { bar, quiet }
    }

    fn style(known_total: bool) -> ProgressStyle {
        let template = if known_total {
            "{bar:30} {bytes}/{total_bytes} {bytes_per_sec} ETA {eta} {msg}"
        } else {
            "{spinner} {bytes} {bytes_per_sec} {msg}"
        };
        ProgressStyle::with_template(template).expect("valid template")
    }
}

impl ProgressSink for BarProgress {
    fn start(&self, total: Option<u64>, done: u64) {
        self.bar.set_style(Self::style(total.is_some()));
        match total {
            Some(t) => self.bar.set_length(t),
            None => self.bar.unset_length(),
        }
        self.bar.set_position(done);
        // The rate and ETA should reflect this run, not bytes already on disk.
        self.bar.reset_eta();
    }

    fn advance(&self, bytes: u64) {
        self.bar.inc(bytes);
    }

    fn note(&self, message: &str) {
        if self.bar.is_hidden() {
            if !self.quiet {
                eprintln!("{message}");
            }
        } else {
            self.bar.println(message);
        }
    }

    fn status(&self, what: &str) {
        self.bar.set_message(what.to_owned());
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
