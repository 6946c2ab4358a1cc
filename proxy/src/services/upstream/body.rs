//! The body of an upstream request on the HTTP/2 path (hyper's client).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use super::Resend;
use crate::base::rt::{self, Rt};

/// The error type of bodies that cross the proxy.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The client's streamed request body as the data path read it (C-PATH-9): the bytes
/// passed upstream, and whether reading it failed (the client went away or `read_timeout`
/// passed), shared by the body's stream and the request's pending access-log line.
#[derive(Debug, Default)]
pub struct BodyTally {
    bytes: AtomicU64,
    failed: AtomicBool,
    timed_out: AtomicBool,
}

impl BodyTally {
    /// Count `n` more bytes read.
    pub fn add(&self, n: usize) {
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Reading the body failed.
    pub fn fail(&self) {
        self.failed.store(true, Ordering::Relaxed);
    }

    /// Reading the body failed because the client stopped sending it and its read deadline
    /// passed (`408`, the client's fault).
    pub fn time_out(&self) {
        self.timed_out.store(true, Ordering::Relaxed);
        self.fail();
    }

    /// Whether reading the body failed because its read deadline passed.
    #[must_use]
    pub fn timed_out(&self) -> bool {
        self.timed_out.load(Ordering::Relaxed)
    }

    /// Whether reading the body failed.
    #[must_use]
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// Bytes read so far.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// The body of an upstream request.
#[derive(Debug)]
pub enum UpBody {
    /// No body.
    Empty,
    /// A buffered body (replayable: each attempt sends a cheap clone of the bytes).
    Full(Option<Bytes>),
    /// The client's body, streamed as it arrives (never replayed, C-RETRY-1).
    Stream(ClientBody),
    /// A buffered body with the trailers that came after it (replayable as `Full`).
    Trailed(Option<Bytes>, Option<Box<http::HeaderMap>>),
    /// An HTTP/1 client's body on its way to an HTTP/2 backend, fed by the data path as it
    /// reads it; an error item breaks the stream (the backend sees a reset, not an end).
    Channel(Pin<Box<async_channel::Receiver<Result<Bytes, BoxError>>>>),
}

impl UpBody {
    /// A buffered body; empty bytes are no body.
    #[must_use]
    pub fn full(bytes: Bytes) -> UpBody {
        if bytes.is_empty() {
            UpBody::Empty
        } else {
            UpBody::Full(Some(bytes))
        }
    }
}

impl Body for UpBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            UpBody::Empty => Poll::Ready(None),
            UpBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            UpBody::Trailed(b, t) => Poll::Ready(match b.take() {
                Some(b) => Some(Ok(Frame::data(b))),
                None => t.take().map(|t| Ok(Frame::trailers(*t))),
            }),
            UpBody::Stream(s) => Pin::new(s).poll_frame(cx),
            UpBody::Channel(rx) => {
                use futures_util::Stream as _;
                rx.as_mut()
                    .poll_next(cx)
                    .map(|item| item.map(|r| r.map(Frame::data)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpBody::Empty => true,
            UpBody::Full(b) => b.is_none(),
            UpBody::Trailed(b, t) => b.is_none() && t.is_none(),
            // The client body's own end: a frame it holds back is still to come.
            UpBody::Stream(s) => s.is_end_stream(),
            UpBody::Channel(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpBody::Empty => SizeHint::with_exact(0),
            UpBody::Full(b) | UpBody::Trailed(b, _) => {
                SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64))
            }
            UpBody::Stream(s) => s.size_hint(),
            UpBody::Channel(_) => SizeHint::default(),
        }
    }
}

/// The client's request body on its way upstream. When reading it fails (the client went away,
/// or `server.read_timeout` passed) it marks its tally failed, so the proxy can tell a client fault from
/// a backend fault (C-PATH-9).
///
/// The data frame that completes a declared length is held until the stream's end is known
/// (RFC 9113 §8.1): an HTTP/1 backend takes a `Content-Length` body as the whole request once
/// its last byte arrives, but the HTTP/2 request is complete only at `END_STREAM`, and trailers
/// that come after the data may still make it malformed (a pseudo-header field: h2 resets the
/// stream, docs/proxy.md "HTTP/2 requests"). Held, that frame is never written when the stream
/// ends in an error, and the backend never sees the request whole. When `END_STREAM` came with
/// the last data (the usual case) nothing is held.
///
/// A body made [`ClientBody::resumable`] shares its reading with the data path, which takes it
/// back ([`Resumable::take`]) when the HTTP/2 stream it went to was refused (C-RETRY-9): what
/// it handed to that stream (kept up to [`RESEND_LIMIT`](super::RESEND_LIMIT)) goes first on
/// the next attempt's stream, then the rest of the client's body.
#[derive(Debug)]
pub struct ClientBody {
    source: Source,
    failed: Arc<BodyTally>,
    deadline: Option<rt::Deadline>,
}

#[derive(Debug)]
enum Source {
    /// Read by this body alone.
    Own(Box<Reading>),
    /// Shared with the data path, which may take it back for another attempt; `None` once it did.
    Shared(Arc<Mutex<Option<Reading>>>),
}

/// Where reading the client's body stands: the stream, a held frame, what a refused stream was
/// handed (to hand first), and what this stream was handed while that is kept.
#[derive(Debug)]
struct Reading {
    inner: Incoming,
    /// The data that completed the declared length, until the stream's end is known.
    held: Option<Bytes>,
    /// A frame read while data was held, to pass after it (boxed: trailers are rare).
    after: Option<Box<Frame<Bytes>>>,
    /// Handed to a refused stream: handed again first, in order.
    replay: VecDeque<Bytes>,
    /// What this stream was handed, while the backend has not answered (resumable bodies only).
    kept: Option<Resend>,
    /// Reading the client's body failed: it is never resumed (its rest may read as an end).
    broken: bool,
}

impl Reading {
    fn new(inner: Incoming, keep: bool) -> Reading {
        Reading {
            inner,
            held: None,
            after: None,
            replay: VecDeque::new(),
            kept: keep.then(Resend::default),
            broken: false,
        }
    }

    fn poll_frame(
        &mut self,
        failed: &BodyTally,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = self.poll_next(failed, cx);
        if let (Some(kept), Poll::Ready(Some(Ok(frame)))) = (self.kept.as_mut(), &polled)
            && let Some(data) = frame.data_ref()
        {
            kept.keep(data);
        }
        polled
    }

    fn poll_next(
        &mut self,
        failed: &BodyTally,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(data) = self.replay.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if let Some(f) = self.after.take() {
            return Poll::Ready(Some(Ok(*f)));
        }
        loop {
            let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(Some(Err(e))) => {
                    // A held frame is dropped: the request never reaches its end upstream.
                    self.held = None;
                    self.broken = true;
                    failed.fail();
                    return Poll::Ready(Some(Err(e.into())));
                }
                Poll::Ready(None) => {
                    return Poll::Ready(self.held.take().map(|d| Ok(Frame::data(d))));
                }
                Poll::Ready(Some(Ok(frame))) => frame,
                Poll::Pending => return Poll::Pending,
            };
            if let Some(data) = frame.data_ref() {
                failed.add(data.len());
            }
            if let Some(held) = self.held.take() {
                self.after = Some(Box::new(frame));
                return Poll::Ready(Some(Ok(Frame::data(held))));
            }
            let completes =
                self.inner.size_hint().exact() == Some(0) && !self.inner.is_end_stream();
            match frame.into_data() {
                Ok(data) if completes => self.held = Some(data),
                Ok(data) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                Err(frame) => return Poll::Ready(Some(Ok(frame))),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.replay.is_empty()
            && self.held.is_none()
            && self.after.is_none()
            && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let pending = self.replay.iter().map(Bytes::len).sum::<usize>() as u64
            + self.held.as_ref().map_or(0, Bytes::len) as u64
            + self
                .after
                .as_ref()
                .and_then(|f| f.data_ref())
                .map_or(0, Bytes::len) as u64;
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + pending);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + pending);
        }
        hint
    }
}

/// The data path's hold on a [`ClientBody::resumable`] body handed to an HTTP/2 stream.
#[derive(Debug)]
pub struct Resumable(Arc<Mutex<Option<Reading>>>);

/// A resumable body taken back from a refused stream, for the next attempt's stream.
#[derive(Debug)]
pub struct Taken(Reading);

impl Resumable {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Reading>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The backend answered: nothing needs sending again, so nothing more is kept.
    pub fn answered(&self) {
        if let Some(r) = self.lock().as_mut() {
            r.kept = None;
        }
    }

    /// Take the body back from its refused stream (C-RETRY-9): `None` when more than
    /// [`RESEND_LIMIT`](super::RESEND_LIMIT) went to it (it cannot be sent whole again), or
    /// reading it failed. The stream's side, should hyper poll it again, ends in an error.
    #[must_use]
    pub fn take(self) -> Option<Taken> {
        let mut reading = self.lock().take()?;
        let kept = reading.kept.take()?;
        if !kept.whole() || reading.broken {
            return None;
        }
        // Handed to the refused stream first, then what was still to hand again.
        let mut replay: VecDeque<Bytes> = kept.chunks.into();
        replay.append(&mut reading.replay);
        reading.replay = replay;
        Some(Taken(reading))
    }
}

impl ClientBody {
    /// Stream `inner`, raising `failed` when it breaks or `deadline` passes.
    #[must_use]
    pub fn new(
        rt: Rt,
        inner: Incoming,
        failed: Arc<BodyTally>,
        deadline: Option<std::time::Instant>,
    ) -> ClientBody {
        ClientBody {
            source: Source::Own(Box::new(Reading::new(inner, false))),
            failed,
            deadline: deadline.map(|d| rt::Deadline::new(rt, d)),
        }
    }

    /// As [`ClientBody::new`] for a stream that may be refused (C-RETRY-9): a fresh body
    /// (`Ok`) or one taken back from a refused stream (`Err`), with the data path's hold on it.
    #[must_use]
    pub fn resumable(
        rt: Rt,
        source: Result<Incoming, Taken>,
        failed: Arc<BodyTally>,
        deadline: Option<std::time::Instant>,
    ) -> (ClientBody, Resumable) {
        let reading = match source {
            Ok(inner) => Reading::new(inner, true),
            Err(Taken(mut r)) => {
                r.kept = Some(Resend::default());
                r
            }
        };
        let shared = Arc::new(Mutex::new(Some(reading)));
        let body = ClientBody {
            source: Source::Shared(Arc::clone(&shared)),
            failed,
            deadline: deadline.map(|d| rt::Deadline::new(rt, d)),
        };
        (body, Resumable(shared))
    }
}

impl ClientBody {
    /// A body taken back from a refused stream, for an attempt after which none can follow:
    /// nothing more is kept.
    #[must_use]
    pub fn resumed(
        rt: Rt,
        taken: Taken,
        failed: Arc<BodyTally>,
        deadline: Option<std::time::Instant>,
    ) -> ClientBody {
        let Taken(mut reading) = taken;
        reading.kept = None;
        ClientBody {
            source: Source::Own(Box::new(reading)),
            failed,
            deadline: deadline.map(|d| rt::Deadline::new(rt, d)),
        }
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(d) = self.deadline.as_mut()
            && Pin::new(d).poll(cx).is_ready()
        {
            self.failed.time_out();
            return Poll::Ready(Some(Err("request body read timeout".into())));
        }
        let this = &mut *self;
        match &mut this.source {
            Source::Own(r) => r.poll_frame(&this.failed, cx),
            Source::Shared(shared) => {
                match shared
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .as_mut()
                {
                    Some(r) => r.poll_frame(&this.failed, cx),
                    // Taken back for another attempt: this stream was refused.
                    None => Poll::Ready(Some(Err("request body taken for another attempt".into()))),
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.source {
            Source::Own(r) => r.is_end_stream(),
            Source::Shared(shared) => shared
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .is_some_and(Reading::is_end_stream),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.source {
            Source::Own(r) => r.size_hint(),
            Source::Shared(shared) => shared
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .map_or_else(SizeHint::default, Reading::size_hint),
        }
    }
}
