//! Bodies as they arrive (C-PATH-7): a [`Reader`] follows a message body's framing over the
//! bytes of a read buffer (`Content-Length`, chunked, until close, none) and says which of them
//! go on: re-framed by weir when both sides speak HTTP/1.1 (chunked written again with weir's
//! own size lines, `ChunkedDecoder::rechunk`), or only the data (chunked decoded for an
//! HTTP/1.0 client). [`relay`] copies one body from a
//! connection to another, read by read, without buffering it.

use std::future::poll_fn;
use std::io;
use std::task::Poll;

use weir_core::h1::chunked::{ChunkError, ChunkedDecoder};
use weir_core::h1::{BodyFraming, LengthBody};

use super::{Buf, write_all};
use crate::rt::Io;

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
    /// The body broke its chunked coding (the sender's fault: a `400` for a request body,
    /// issue 14).
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

/// Copy the rest of a body from `from` (its bytes so far in `from_buf`) to `to`, starting with
/// `out` (a head, or nothing), until `reader` sees its end (or `from` closes, for a body that
/// runs until close). `out` is the write buffer, left empty. With `to_buf`, `to` is read too
/// while `from` has nothing (into `to_buf`, up to `cap` bytes): its end of stream is a
/// [`RelayError::Sink`] (a client that left while the upstream held its body, C-PATH-9).
/// `sent` counts the body's own bytes passed on (chunk framing and the head in `out` not
/// included), for the access log.
///
/// # Errors
/// Which side broke first.
pub async fn relay(
    (from, from_buf): (&mut Box<dyn Io>, &mut Buf),
    reader: &mut Reader,
    pass: bool,
    (to, mut to_buf): (&mut Box<dyn Io>, Option<&mut Buf>),
    out: &mut Vec<u8>,
    cap: usize,
    sent: &mut u64,
) -> Result<(), RelayError> {
    loop {
        let done = reader
            .take(from_buf, pass, out, sent)
            .map_err(RelayError::Malformed)?;
        if !out.is_empty() {
            write_all(to, out).await.map_err(RelayError::Sink)?;
            out.clear();
        }
        if done {
            return Ok(());
        }
        let n = poll_fn(|cx| {
            if let Poll::Ready(r) = from_buf.poll_fill(from, cx, BODY_CHUNK) {
                return Poll::Ready(r.map_err(RelayError::Source));
            }
            if let Some(tb) = to_buf.as_deref_mut()
                && !tb.is_full(cap)
            {
                match tb.poll_fill(to, cx, cap) {
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
