//! The body of an upstream request on the HTTP/2 path (hyper's client).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

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
#[derive(Debug)]
pub struct ClientBody {
    inner: Incoming,
    failed: Arc<BodyTally>,
    deadline: Option<rt::Deadline>,
    /// The data that completed the declared length, until the stream's end is known.
    held: Option<Bytes>,
    /// A frame read while data was held, to pass after it (boxed: trailers are rare, and the
    /// body lives in every streamed request).
    after: Option<Box<Frame<Bytes>>>,
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
            inner,
            failed,
            deadline: deadline.map(|d| rt::Deadline::new(rt, d)),
            held: None,
            after: None,
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
        if let Some(f) = self.after.take() {
            return Poll::Ready(Some(Ok(*f)));
        }
        if let Some(d) = self.deadline.as_mut()
            && Pin::new(d).poll(cx).is_ready()
        {
            self.failed.time_out();
            return Poll::Ready(Some(Err("request body read timeout".into())));
        }
        loop {
            let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(Some(Err(e))) => {
                    // A held frame is dropped: the request never reaches its end upstream.
                    self.held = None;
                    self.failed.fail();
                    return Poll::Ready(Some(Err(e.into())));
                }
                Poll::Ready(None) => {
                    return Poll::Ready(self.held.take().map(|d| Ok(Frame::data(d))));
                }
                Poll::Ready(Some(Ok(frame))) => frame,
                Poll::Pending => return Poll::Pending,
            };
            if let Some(data) = frame.data_ref() {
                self.failed.add(data.len());
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
        self.held.is_none() && self.after.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let held = self.held.as_ref().map_or(0, Bytes::len) as u64
            + self
                .after
                .as_ref()
                .and_then(|f| f.data_ref())
                .map_or(0, Bytes::len) as u64;
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + held);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + held);
        }
        hint
    }
}
