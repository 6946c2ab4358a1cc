//! Bodies as they arrive (C-PATH-7): a [`Reader`] follows a message body's framing over the
//! bytes of a read buffer (`Content-Length`, chunked, until close, none) and says which of them
//! go on: re-framed by weir when both sides speak HTTP/1.1 (chunked written again with weir's
//! own size lines, `ChunkedDecoder::rechunk`), or only the data (chunked decoded for an
//! HTTP/1.0 client). [`relay`] copies one body from a
//! connection to another, read by read, without buffering it; a [`Pump`] sends a request body
//! upstream read by read, polled beside the response head and body (full duplex).

use std::future::{Future as _, poll_fn};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use weir_core::h1::chunked::{ChunkError, ChunkedDecoder};
use weir_core::h1::{BodyFraming, LengthBody};

use super::io::{Buf, poll_write_some, write_all};
use crate::base::rt::{Deadline, Io};

/// Where a body stands.
#[derive(Debug, Clone, Copy)]
pub enum Reader {
    /// No body, or its end was read.
    Done,
    /// `Content-Length` bytes to go.
    Length(LengthBody),
    /// Chunked.
    Chunked(ChunkedDecoder),
    /// Until the sender closes.
    UntilClose,
}

/// Why a relay stopped before the body's end.
#[derive(Debug)]
pub enum RelayError {
    /// The sending side broke, closed early, or broke the framing.
    Source(io::Error),
    /// The receiving side could not be written.
    Sink(io::Error),
    /// The body broke its chunked coding (the sender's fault: a `400` for a request body).
    Malformed(ChunkError),
}

impl Reader {
    /// The reader of a body framed as `framing`.
    #[must_use]
    pub fn new(framing: BodyFraming) -> Reader {
        match framing {
            BodyFraming::Empty | BodyFraming::Length(0) => Reader::Done,
            BodyFraming::Length(n) => Reader::Length(LengthBody::new(n)),
            BodyFraming::Chunked => Reader::Chunked(ChunkedDecoder::new()),
            BodyFraming::UntilClose => Reader::UntilClose,
        }
    }

    /// Whether the body's end was read.
    #[must_use]
    pub const fn is_done(&self) -> bool {
        matches!(self, Reader::Done)
    }

    /// Take what belongs to the body from `buf` into `out` (chunked re-framed when `pass`);
    /// whether the body ended. `data` counts the body's own bytes taken (chunk framing not
    /// included), for the access log.
    ///
    /// # Errors
    /// A chunked body broke its framing.
    pub fn take(
        &mut self,
        buf: &mut Buf,
        pass: bool,
        out: &mut Vec<u8>,
        data: &mut u64,
    ) -> Result<bool, ChunkError> {
        loop {
            let avail = buf.bytes();
            match self {
                Reader::Done => return Ok(true),
                Reader::Length(l) => {
                    let n = l.take(avail.len());
                    out.extend_from_slice(&avail[..n]);
                    *data += n as u64;
                    let done = l.is_done();
                    buf.consume(n);
                    if done {
                        *self = Reader::Done;
                    }
                    return Ok(done);
                }
                Reader::UntilClose => {
                    out.extend_from_slice(avail);
                    let n = avail.len();
                    *data += n as u64;
                    buf.consume(n);
                    return Ok(false);
                }
                Reader::Chunked(d) => {
                    if avail.is_empty() {
                        return Ok(false);
                    }
                    let (consumed, done) = if pass {
                        // weir's own framing of the body (canonical sizes, trailers filtered).
                        let r = d.rechunk(avail, out)?;
                        *data += r.data;
                        (r.consumed, r.done)
                    } else {
                        let step = d.decode(avail)?;
                        out.extend_from_slice(step.data);
                        *data += step.data.len() as u64;
                        (step.consumed, step.done)
                    };
                    buf.consume(consumed);
                    if done {
                        *self = Reader::Done;
                        return Ok(true);
                    }
                    if consumed == 0 {
                        return Ok(false);
                    }
                }
            }
        }
    }
}

/// The read buffer cap while relaying a body.
pub const BODY_CHUNK: usize = 16 * 1024;

/// A request body still being sent upstream while the response head is awaited and its body
/// relayed (full duplex): the bytes taken from the client and not written yet, and
/// the body's read deadline. It moves only when polled, in the request's own task, beside the
/// response: a backend that answers before it has read the body (an early `413`, a streaming
/// echo) is answered at once.
#[derive(Debug)]
pub struct Pump {
    out: Vec<u8>,
    off: usize,
    deadline: Option<Deadline>,
    state: PumpState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PumpState {
    Sending,
    /// The whole body was written (and flushed).
    Sent,
    /// It failed on either side; the rest is not sent.
    Stopped,
}

/// A [`Pump`] with the request's reader and byte count, lent to [`relay`].
#[derive(Debug)]
pub struct PumpSide<'a> {
    /// The pump.
    pub pump: &'a mut Pump,
    /// The request body's reader.
    pub reader: &'a mut Reader,
    /// The request body's own bytes sent so far (access log).
    pub sent: &'a mut u64,
}

impl Pump {
    /// A body to send, its reading bounded by `deadline`.
    #[must_use]
    pub fn new(deadline: Option<Deadline>) -> Pump {
        Pump {
            out: Vec::new(),
            off: 0,
            deadline,
            state: PumpState::Sending,
        }
    }

    /// Whether there is more to send.
    #[must_use]
    pub fn is_sending(&self) -> bool {
        self.state == PumpState::Sending
    }

    /// Whether the whole body was sent.
    #[must_use]
    pub fn is_sent(&self) -> bool {
        self.state == PumpState::Sent
    }

    /// Move the body on from `src` (its bytes so far in `src_buf`) to `sink`: ready when it is
    /// all sent, or with why it stopped (a [`RelayError::Source`] or
    /// [`RelayError::Malformed`] is the client's, a [`RelayError::Sink`] the upstream's; the
    /// deadline is a `TimedOut` source error while the pump waits for the client's bytes, a
    /// `TimedOut` sink error while the backend has not taken the bytes it holds). Not to be
    /// polled once it is not sending.
    pub fn poll(
        &mut self,
        (src, src_buf): (&mut Box<dyn Io>, &mut Buf),
        reader: &mut Reader,
        sink: &mut Box<dyn Io>,
        sent: &mut u64,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), RelayError>> {
        let r = self.step((src, src_buf), reader, sink, sent, cx);
        match &r {
            Poll::Ready(Ok(())) => self.state = PumpState::Sent,
            Poll::Ready(Err(_)) => self.state = PumpState::Stopped,
            Poll::Pending => {}
        }
        r
    }

    fn step(
        &mut self,
        (src, src_buf): (&mut Box<dyn Io>, &mut Buf),
        reader: &mut Reader,
        sink: &mut Box<dyn Io>,
        sent: &mut u64,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), RelayError>> {
        if let Some(d) = self.deadline.as_mut()
            && Pin::new(d).poll(cx).is_ready()
        {
            let e = io::Error::from(io::ErrorKind::TimedOut);
            // Bytes the backend has not taken: it stopped reading, the client did not stall.
            return Poll::Ready(Err(if self.out.is_empty() {
                RelayError::Source(e)
            } else {
                RelayError::Sink(e)
            }));
        }
        loop {
            if self.off < self.out.len() {
                match poll_write_some(sink, cx, &self.out[self.off..]) {
                    Poll::Ready(Ok(n)) => self.off += n,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(RelayError::Sink(e))),
                    Poll::Pending => return Poll::Pending,
                }
                continue;
            }
            if !self.out.is_empty() {
                match Pin::new(&mut **sink).poll_flush(cx) {
                    Poll::Ready(Ok(())) => {
                        self.out.clear();
                        self.off = 0;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(RelayError::Sink(e))),
                    Poll::Pending => return Poll::Pending,
                }
            }
            if reader.is_done() {
                return Poll::Ready(Ok(()));
            }
            reader
                .take(src_buf, true, &mut self.out, sent)
                .map_err(RelayError::Malformed)?;
            if !self.out.is_empty() || reader.is_done() {
                continue;
            }
            match src_buf.poll_fill(src, cx, BODY_CHUNK) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(RelayError::Source(
                        io::ErrorKind::UnexpectedEof.into(),
                    )));
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(RelayError::Source(e))),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// Copy the rest of a response body from `from` (its bytes so far in `from_buf`) to the client
/// `to`, starting with `out` (a head, or nothing), until `reader` sees its end (or `from`
/// closes, for a body that runs until close). `out` is the write buffer; when the body ends it
/// is left holding the last bytes read (with the head, if the whole response came at once),
/// for the caller to write once it has reported the end: so the request's gate slot is free
/// before the last byte is handed to the socket, as on HTTP/2 (C-LOAD-1). While
/// `from` has nothing, the client is read too (into `to_buf`, up to `cap` bytes): its end of
/// stream is a [`RelayError::Sink`] (a client that left while the upstream held its body,
/// C-PATH-9). With `pump`, the request body still being sent goes on beside (full duplex): the
/// client's bytes are its bytes; a failure of the client's side of it is a
/// [`RelayError::Sink`] too, a failure of the upstream's side only stops it (the response goes
/// on). `sent` counts the response body's own bytes passed on (chunk framing and the head in
/// `out` not included), for the access log.
///
/// # Errors
/// Which side broke first.
pub async fn relay(
    (from, from_buf): (&mut Box<dyn Io>, &mut Buf),
    reader: &mut Reader,
    pass: bool,
    (to, to_buf, cap): (&mut Box<dyn Io>, &mut Buf, usize),
    mut pump: Option<PumpSide<'_>>,
    out: &mut Vec<u8>,
    sent: &mut u64,
) -> Result<(), RelayError> {
    loop {
        let done = reader
            .take(from_buf, pass, out, sent)
            .map_err(RelayError::Malformed)?;
        if done {
            // The last bytes are the caller's to write, after it reported the end.
            return Ok(());
        }
        if !out.is_empty() {
            write_all(to, out).await.map_err(RelayError::Sink)?;
            out.clear();
        }
        let n = poll_fn(|cx| {
            let mut sending = false;
            if let Some(p) = pump.as_mut()
                && p.pump.is_sending()
            {
                match p
                    .pump
                    .poll((&mut *to, &mut *to_buf), p.reader, from, p.sent, cx)
                {
                    Poll::Ready(Err(RelayError::Source(e))) => {
                        return Poll::Ready(Err(RelayError::Sink(e)));
                    }
                    Poll::Ready(Err(RelayError::Malformed(e))) => {
                        return Poll::Ready(Err(RelayError::Sink(io::Error::new(
                            io::ErrorKind::InvalidData,
                            e.to_string(),
                        ))));
                    }
                    Poll::Ready(_) => {}
                    Poll::Pending => sending = true,
                }
            }
            if let Poll::Ready(r) = from_buf.poll_fill(from, cx, BODY_CHUNK) {
                return Poll::Ready(r.map_err(RelayError::Source));
            }
            // While the pump sends, it reads the client (its end of stream is its failure).
            if !sending && !to_buf.is_full(cap) {
                match to_buf.poll_fill(to, cx, cap) {
                    Poll::Ready(Ok(0)) => {
                        return Poll::Ready(Err(RelayError::Sink(
                            io::ErrorKind::UnexpectedEof.into(),
                        )));
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(RelayError::Sink(e))),
                    Poll::Ready(Ok(_)) => cx.waker().wake_by_ref(),
                    Poll::Pending => {}
                }
            }
            Poll::Pending
        })
        .await?;
        if n == 0 {
            if matches!(reader, Reader::UntilClose) {
                *reader = Reader::Done;
                return Ok(());
            }
            return Err(RelayError::Source(io::Error::from(
                io::ErrorKind::UnexpectedEof,
            )));
        }
    }
}

/// Wait until the peer of `io` closes (or its socket fails), reading what it sends into `buf`
/// (up to `cap` bytes; with the buffer full, this waits forever).
pub async fn until_closed(io: &mut Box<dyn Io>, buf: &mut Buf, cap: usize) {
    poll_fn(|cx| {
        loop {
            if buf.is_full(cap) {
                return Poll::Pending;
            }
            match buf.poll_fill(io, cx, cap) {
                Poll::Ready(Ok(0) | Err(_)) => return Poll::Ready(()),
                Poll::Ready(Ok(_)) => {}
                Poll::Pending => return Poll::Pending,
            }
        }
    })
    .await;
}
