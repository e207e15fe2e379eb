//! Response bodies fed by the driver. Each body is one scheduler client: it
//! reports a block as sent once hyper asks for the next frame (the previous
//! one has gone to the connection), and leaves when dropped early.

use crate::{
    activity::Activity,
    arena::Arena,
    driver::DriverHandle,
    mailbox::{End, Mailbox, Next},
};
use bytes::{Bytes, BytesMut};
use circus_core::{BlockIdx, BlockLayout, BlockSet, ClientId};
use circus_proto::{ErrorCode, encode_block_header, encode_end, encode_error};
use circus_sched::FailReason;
use circus_store::FileEntry;
use http_body::{Body, Frame, SizeHint};
use std::{
    ops::Range,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
};

/// Error type of the bodies: the connection is cut, so a client with
/// Content-Length sees a short body and never mistakes it for the file.
pub use circus_http::BodyError;

/// What a download's connection gets next.
#[derive(Debug)]
enum Delivery {
    Block(BlockIdx, Bytes),
    End(End),
}

/// One download as the driver sees it.
struct Download {
    driver: DriverHandle,
    id: ClientId,
    /// Blocks the connection took are held there (given to hyper) until
    /// the next poll reports them sent.
    mailbox: Arc<Mailbox>,
    finished: bool,
    /// The download's events (debug level), inside its connection's span.
    span: tracing::Span,
}

impl Download {
    fn start(
        driver: &DriverHandle,
        file: Arc<FileEntry>,
        have: BlockSet,
        in_order: bool,
        connection: Option<Arc<Activity>>,
    ) -> Self {
        let span = tracing::debug_span!("download", file = %file.rel, in_order, client = tracing::field::Empty);
        let (id, mailbox) = driver.join(file, have, in_order, connection);
        span.record("client", id.0);
        span.in_scope(|| tracing::debug!("joined the scheduler"));
        Download { driver: driver.clone(), id, mailbox, finished: false, span }
    }

    /// The connection took `blocks`, `bytes` long, to send.
    fn hold(&self, blocks: Range<BlockIdx>, bytes: usize) {
        self.mailbox.hold(blocks, bytes as u64);
    }

    /// What the connection held went to the socket (or was detached).
    fn report_taken(&mut self) {
        let released = self.mailbox.release();
        self.driver.sent(self.id, released.sent);
        self.driver.release_detached(released.detached);
    }

    /// Block `want` if it has already arrived and `accept` takes it,
    /// without waiting.
    fn ready_block(&mut self, want: BlockIdx, accept: impl FnOnce(&Bytes) -> bool) -> Option<Bytes> {
        self.mailbox.try_take(want, accept)
    }

    /// Block `want` (any block, if `None`), or how the download ended. A
    /// parked download is resumed: the connection is asking for blocks.
    fn poll_delivery(&mut self, cx: &mut Context<'_>, want: Option<BlockIdx>) -> Poll<Delivery> {
        self.report_taken();
        loop {
            match ready!(self.mailbox.poll_next(cx, want)) {
                Next::Block(b, data) => return Poll::Ready(Delivery::Block(b, data)),
                Next::End(end) => {
                    self.finished = true;
                    self.span.in_scope(|| tracing::debug!(?end, "delivered"));
                    return Poll::Ready(Delivery::End(end));
                }
                Next::Resume => self.driver.resume(self.id),
            }
        }
    }
}

impl Drop for Download {
    fn drop(&mut self) {
        if !self.finished {
            self.span.in_scope(|| tracing::debug!("left before its end"));
            self.driver.release_detached(self.mailbox.release().detached);
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
    data: Option<Bytes>,
    /// The connection, corked while the blocks go out (see
    /// [`NativeBody::corking`]).
    corked: Option<Arc<Activity>>,
}

impl NativeBody {
    /// `preface` is the encoded preamble and manifest; `have` the blocks the
    /// client already holds. A client that needs nothing gets END at once.
    pub fn new(driver: &DriverHandle, file: Arc<FileEntry>, preface: Bytes, have: BlockSet) -> Self {
        let layout = file.layout;
        let connection = crate::activity::current();
        let download = (!have.is_full()).then(|| Download::start(driver, file, have, false, connection));
        NativeBody { preface: Some(preface), layout, download, data: None, corked: None }
    }

    /// Corks the connection (TCP_CORK) while the blocks of a file of at
    /// least [`CORK_FROM`] bytes go out, up to the END or ERROR frame, as
    /// [`PlainBody::corking`] does for a long range.
    pub fn corking(mut self, cork: bool) -> Self {
        if cork && self.download.is_some() && self.layout.len() >= CORK_FROM {
            self.corked = crate::activity::current();
            ask_cork(self.corked.as_ref(), true);
        }
        self
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
        if let Some(data) = this.data.take() {
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
        let out = match ready!(download.poll_delivery(cx, None)) {
            Delivery::Block(b, data) => {
                let header = frame(|buf| encode_block_header(b, this.layout.offset(b), this.layout.block_len(b), buf));
                download.hold(b..b + 1, data.len());
                this.data = Some(data);
                header
            }
            Delivery::End(End::Complete) => {
                ask_cork(this.corked.as_ref(), false);
                frame(encode_end)
            }
            Delivery::End(End::Failed(reason)) => {
                ask_cork(this.corked.as_ref(), false);
                let code = match reason {
                    FailReason::FileChanged { .. } => ErrorCode::FILE_CHANGED,
                    _ => ErrorCode::STORAGE,
                };
                frame(|buf| encode_error(code, &reason.to_string(), buf))
            }
            Delivery::End(End::Stopped) => {
                ask_cork(this.corked.as_ref(), false);
                frame(|buf| encode_error(ErrorCode::SHUTTING_DOWN, "server shutting down", buf))
            }
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
/// scheduler as an in-order client; blocks that arrive early wait in the
/// download's mailbox (at most `max_queued` of them).
pub struct PlainBody {
    driver: DriverHandle,
    file: Arc<FileEntry>,
    parts: std::vec::IntoIter<Part>,
    current: Option<(Download, RangeCursor)>,
    /// The connection the response goes out on (see `Download::start`).
    connection: Option<Arc<Activity>>,
    /// The first frame, fetched before the head was written (see
    /// [`PlainBody::primed`]).
    first: Option<Option<Result<Frame<Bytes>, BodyError>>>,
    /// Whether a long range corks the connection (see [`PlainBody::corking`]).
    cork: bool,
}

/// The shortest range that corks its connection: more than a block, so
/// that it takes several writes.
const CORK_FROM: u64 = 256 << 10;

struct RangeCursor {
    start: u64,
    end: u64,
    next: BlockIdx,
    last: BlockIdx,
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
            let Some(data) = download.ready_block(self.next, |data| arena.locate(data) == Some(end)) else {
                break;
            };
            end += data.len() as u64;
            run.push(data);
            self.next += 1;
        }
        match run.len() {
            1 => run.pop().expect("one block"),
            _ => arena.join(run).expect("consecutive slots join"),
        }
    }
}

impl PlainBody {
    pub fn new(driver: &DriverHandle, file: Arc<FileEntry>, parts: Vec<Part>) -> Self {
        let connection = crate::activity::current();
        PlainBody {
            driver: driver.clone(),
            file,
            parts: parts.into_iter(),
            current: None,
            connection,
            first: None,
            cork: false,
        }
    }

    /// Asks the connection to send whole segments only (TCP_CORK) while a
    /// range of at least [`CORK_FROM`] bytes goes out, up to its last frame
    /// (`send_mark.rs` says why). Only for a connection that carries this
    /// response alone: an HTTP/2 connection's streams would undo each
    /// other's.
    pub fn corking(mut self, cork: bool) -> Self {
        self.cork = cork;
        self
    }

    /// Waits for the first frame, so that hyper finds it ready and writes
    /// it together with the response head: one segment, where a head
    /// written alone while the first block is on its way costs a packet
    /// (and on loopback the peer's receive path) of its own.
    pub async fn primed(mut self) -> Self {
        let first = std::future::poll_fn(|cx| Pin::new(&mut self).poll_frame(cx)).await;
        self.first = Some(first);
        self
    }
}

/// Asks `connection` (if known) to cork or uncork its socket.
fn ask_cork(connection: Option<&Arc<Activity>>, cork: bool) {
    if let Some(c) = connection {
        c.want_send_mark(c.send_mark().corked(cork));
    }
}

impl Body for PlainBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        if let Some(first) = this.first.take() {
            return Poll::Ready(first);
        }
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
                        let connection = this.connection.clone();
                        let download = Download::start(&this.driver, this.file.clone(), have, true, connection);
                        let cursor = RangeCursor { start, end, next: first, last };
                        this.current = Some((download, cursor));
                        if this.cork && end - start + 1 >= CORK_FROM {
                            ask_cork(this.connection.as_ref(), true);
                        }
                        continue;
                    }
                }
            };
            if cursor.next > cursor.last {
                // Every block of the range went out; wait for the scheduler's
                // Complete so the last block is reported as sent.
                download.report_taken();
                if !download.finished {
                    match ready!(download.poll_delivery(cx, None)) {
                        Delivery::End(End::Complete) => {}
                        Delivery::End(end) => return Poll::Ready(Some(Err(ended(end)))),
                        Delivery::Block(b, _) => {
                            return Poll::Ready(Some(Err(format!("block {b} delivered twice").into())));
                        }
                    }
                }
                this.current = None;
                continue;
            }
            let first = cursor.next;
            match ready!(download.poll_delivery(cx, Some(first))) {
                Delivery::Block(_, data) => {
                    let data = cursor.take_run(download, this.driver.arena(), data);
                    download.hold(first..cursor.next, data.len());
                    if cursor.next > cursor.last && this.cork {
                        // The range's last frame: the stream uncorks at
                        // hyper's flush once it is written, sending what
                        // the cork held.
                        ask_cork(this.connection.as_ref(), false);
                    }
                    let off = this.file.layout.offset(first);
                    let from = cursor.start.saturating_sub(off) as usize;
                    let to = ((cursor.end + 1 - off) as usize).min(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data.slice(from..to)))));
                }
                Delivery::End(End::Complete) => return Poll::Ready(Some(Err("download ended early".into()))),
                Delivery::End(end) => return Poll::Ready(Some(Err(ended(end)))),
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// Why a plain body is cut short (the client sees a short body, never a
/// complete-looking one).
fn ended(end: End) -> BodyError {
    match end {
        End::Complete => "download ended early".into(),
        End::Failed(reason) => reason.into(),
        End::Stopped => "server shutting down".into(),
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
