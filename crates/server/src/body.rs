//! Response bodies fed by the driver. Each body is one scheduler client: it
//! reports a block as sent once hyper asks for the next frame (the previous
//! one has gone to the connection), and leaves when dropped early.

use crate::{
    arena::Arena,
    driver::{Delivery, DriverHandle},
};
use bytes::{Bytes, BytesMut};
use circus_core::{BlockIdx, BlockLayout, BlockSet, ClientId};
use circus_proto::{ErrorCode, encode_block_header, encode_end, encode_error};
use circus_sched::FailReason;
use http_body::{Body, Frame, SizeHint};
use std::{
    collections::BTreeMap,
    ops::Range,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
};
use tokio::sync::mpsc;

use crate::files::FileEntry;

/// Error type of the bodies: the connection is cut, so a client with
/// Content-Length sees a short body and never mistakes it for the file.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// One download as the driver sees it.
struct Download {
    driver: DriverHandle,
    id: ClientId,
    rx: mpsc::Receiver<Delivery>,
    /// Blocks whose bytes hyper has taken; reported as sent at the next poll.
    taken: Range<BlockIdx>,
    /// A completion or failure met while looking ahead; delivered next.
    pending: Option<Delivery>,
    finished: bool,
}

impl Download {
    fn start(driver: &DriverHandle, file: Arc<FileEntry>, have: BlockSet, in_order: bool) -> Self {
        let (id, rx) = driver.join(file, have, in_order);
        Download { driver: driver.clone(), id, rx, taken: 0..0, pending: None, finished: false }
    }

    fn report_taken(&mut self) {
        self.driver.sent(self.id, std::mem::replace(&mut self.taken, 0..0));
    }

    /// A block that has already arrived, without waiting.
    fn ready_block(&mut self) -> Option<(BlockIdx, Bytes)> {
        if self.pending.is_some() {
            return None;
        }
        match self.rx.try_recv().ok()? {
            Delivery::Block(b, data) => Some((b, data)),
            other => {
                self.pending = Some(other);
                None
            }
        }
    }

    fn poll_delivery(&mut self, cx: &mut Context<'_>) -> Poll<Delivery> {
        self.report_taken();
        let next = match self.pending.take() {
            Some(d) => Some(d),
            None => ready!(self.rx.poll_recv(cx)),
        };
        match next {
            Some(d) => {
                if matches!(d, Delivery::Complete | Delivery::Failed(_) | Delivery::Stopped) {
                    self.finished = true;
                }
                Poll::Ready(d)
            }
            None => {
                self.finished = true;
                Poll::Ready(Delivery::Stopped)
            }
        }
    }
}

impl Drop for Download {
    fn drop(&mut self) {
        if !self.finished {
            self.driver.leave(self.id);
        }
    }
}

/// The native body: preamble and manifest, then framed blocks in the
/// scheduler's order, then END (or ERROR).
pub struct NativeBody {
    preface: Option<Bytes>,
    layout: BlockLayout,
    download: Option<Download>,
    /// Block bytes to send right after the header just yielded.
    data: Option<(BlockIdx, Bytes)>,
}

impl NativeBody {
    /// `preface` is the encoded preamble and manifest; `have` the blocks the
    /// client already holds. A client that needs nothing gets END at once.
    pub fn new(driver: &DriverHandle, file: Arc<FileEntry>, preface: Bytes, have: BlockSet) -> Self {
        let layout = file.layout;
        let download = (!have.is_full()).then(|| Download::start(driver, file, have, false));
        NativeBody { preface: Some(preface), layout, download, data: None }
    }
}

fn frame(f: impl FnOnce(&mut BytesMut)) -> Bytes {
    let mut buf = BytesMut::new();
    f(&mut buf);
    buf.freeze()
}

impl Body for NativeBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        if let Some(p) = this.preface.take() {
            return Poll::Ready(Some(Ok(Frame::data(p))));
        }
        if let Some((b, data)) = this.data.take() {
            if let Some(d) = this.download.as_mut() {
                d.taken = b..b + 1;
            }
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        let Some(download) = this.download.as_mut() else {
            return Poll::Ready(None);
        };
        if download.finished {
            download.report_taken();
            this.download = None;
            return Poll::Ready(None);
        }
        let out = match ready!(download.poll_delivery(cx)) {
            Delivery::Block(b, data) => {
                let header = frame(|buf| encode_block_header(b, this.layout.offset(b), this.layout.block_len(b), buf));
                this.data = Some((b, data));
                header
            }
            Delivery::Complete => frame(encode_end),
            Delivery::Failed(reason) => {
                let code = match reason {
                    FailReason::FileChanged { .. } => ErrorCode::FILE_CHANGED,
                    _ => ErrorCode::STORAGE,
                };
                frame(|buf| encode_error(code, &reason.to_string(), buf))
            }
            Delivery::Stopped => frame(|buf| encode_error(ErrorCode::SHUTTING_DOWN, "server shutting down", buf)),
        };
        Poll::Ready(Some(Ok(Frame::data(out))))
    }

    fn is_end_stream(&self) -> bool {
        self.preface.is_none() && self.data.is_none() && self.download.is_none()
    }
}

/// A piece of a plain response: fixed bytes (multipart boundaries) or an
/// inclusive byte range of the file.
#[derive(Debug, Clone)]
pub enum Part {
    Fixed(Bytes),
    Range(u64, u64),
}

/// A plain body: the parts in order, each range fetched through the
/// scheduler as an in-order client and reassembled from at most
/// `max_queued` blocks that arrive early.
pub struct PlainBody {
    driver: DriverHandle,
    file: Arc<FileEntry>,
    parts: std::vec::IntoIter<Part>,
    current: Option<(Download, RangeCursor)>,
}

struct RangeCursor {
    start: u64,
    end: u64,
    next: BlockIdx,
    last: BlockIdx,
    early: BTreeMap<BlockIdx, Bytes>,
}

/// Most blocks joined into one frame.
const MAX_RUN: usize = 32;

impl RangeCursor {
    /// Takes `first` (block `next`) and the blocks right after it that have
    /// arrived and sit in consecutive arena slots, as one `Bytes`: a run
    /// costs hyper one frame and the socket one `sendfile`, instead of one
    /// per block. Advances `next` past the run.
    fn take_run(&mut self, download: &mut Download, arena: Option<&Arc<Arena>>, first: Bytes) -> Bytes {
        self.next += 1;
        let Some(arena) = arena else { return first };
        let Some(mut end) = arena.locate(&first).map(|o| o + first.len() as u64) else { return first };
        let mut run = vec![first];
        while run.len() < MAX_RUN && self.next <= self.last {
            let Some(data) = self.early.remove(&self.next).or_else(|| self.receive(download, self.next)) else {
                break;
            };
            if arena.locate(&data) != Some(end) {
                self.early.insert(self.next, data);
                break;
            }
            end += data.len() as u64;
            run.push(data);
            self.next += 1;
        }
        match run.len() {
            1 => run.pop().expect("one block"),
            _ => arena.join(run).expect("consecutive slots join"),
        }
    }

    /// Block `want` if it has arrived; other arrivals are kept for later.
    fn receive(&mut self, download: &mut Download, want: BlockIdx) -> Option<Bytes> {
        while let Some((b, data)) = download.ready_block() {
            if b == want {
                return Some(data);
            }
            self.early.insert(b, data);
        }
        None
    }
}

impl PlainBody {
    pub fn new(driver: &DriverHandle, file: Arc<FileEntry>, parts: Vec<Part>) -> Self {
        PlainBody { driver: driver.clone(), file, parts: parts.into_iter(), current: None }
    }
}

impl Body for PlainBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        loop {
            let Some((download, cursor)) = this.current.as_mut() else {
                match this.parts.next() {
                    None => return Poll::Ready(None),
                    Some(Part::Fixed(bytes)) => return Poll::Ready(Some(Ok(Frame::data(bytes)))),
                    Some(Part::Range(start, end)) => {
                        let layout = this.file.layout;
                        let first = layout.block_of(start).expect("range within file");
                        let last = layout.block_of(end).expect("range within file");
                        let mut have = BlockSet::full(layout.blocks());
                        (first..=last).for_each(|b| _ = have.remove(b));
                        let download = Download::start(&this.driver, this.file.clone(), have, true);
                        let cursor = RangeCursor { start, end, next: first, last, early: BTreeMap::new() };
                        this.current = Some((download, cursor));
                        continue;
                    }
                }
            };
            if let Some(data) = cursor.early.remove(&cursor.next) {
                let first = cursor.next;
                let data = cursor.take_run(download, this.driver.arena(), data);
                download.report_taken();
                download.taken = first..cursor.next;
                let off = this.file.layout.offset(first);
                let from = cursor.start.saturating_sub(off) as usize;
                let to = ((cursor.end + 1 - off) as usize).min(data.len());
                return Poll::Ready(Some(Ok(Frame::data(data.slice(from..to)))));
            }
            if cursor.next > cursor.last {
                // Every block of the range went out; wait for the scheduler's
                // Complete so the last block is reported as sent.
                download.report_taken();
                if !download.finished {
                    match ready!(download.poll_delivery(cx)) {
                        Delivery::Complete => {}
                        Delivery::Failed(reason) => return Poll::Ready(Some(Err(reason.into()))),
                        Delivery::Stopped => return Poll::Ready(Some(Err("server shutting down".into()))),
                        Delivery::Block(b, _) => {
                            return Poll::Ready(Some(Err(format!("block {b} delivered twice").into())));
                        }
                    }
                }
                this.current = None;
                continue;
            }
            match ready!(download.poll_delivery(cx)) {
                Delivery::Block(b, data) => _ = cursor.early.insert(b, data),
                Delivery::Complete => return Poll::Ready(Some(Err("download ended early".into()))),
                Delivery::Failed(reason) => return Poll::Ready(Some(Err(reason.into()))),
                Delivery::Stopped => return Poll::Ready(Some(Err("server shutting down".into()))),
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

impl Drop for PlainBody {
    /// hyper stops polling once Content-Length bytes went out, so the last
    /// block's Sent would never be reported: when every block of the range
    /// was taken, report it here rather than count the download as abandoned.
    fn drop(&mut self) {
        if let Some((download, cursor)) = self.current.as_mut()
            && cursor.next > cursor.last
        {
            download.report_taken();
            download.finished = true;
        }
    }
}
