//! The first bytes of a connection: read (not peeked) to tell HTTP/2's preface from HTTP/1, and
//! given back to hyper's HTTP/2 server through a rewinding IO.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use hyper::rt::{Read, ReadBufCursor, Write};

use weir_core::h2::Inbound;

use crate::base::rt::{self, Io, Rt};
use crate::datapath::h1::io::Buf;

/// The HTTP/2 connection preface (RFC 9113 §3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A byte stream whose first bytes were already read: they are read again first (HTTP/2's
/// preface, read to tell the protocol). Every byte passes weir-core's [`Inbound`] on its way
/// to h2, which holds back a trailer block until it is complete and marks one that carries a
/// pseudo-header field so that h2 resets its stream (RFC 9113 §8.1; docs/proxy.md, "HTTP/2
/// requests"). The bytes are read into `pending` and copied to h2 from there: one copy more
/// than reading into h2's buffer, the price of looking at them first.
pub(super) struct Rewind {
    first: Buf,
    io: Box<dyn Io>,
    guard: Inbound,
    /// Read, not yet handed to h2: the first `ready` bytes may go now, the rest wait for the
    /// guard.
    pending: Buf,
    ready: usize,
    eof: bool,
}

/// Room for one read beyond what is pending.
const READ_CHUNK: usize = 16 * 1024;

impl Rewind {
    /// The connection `io` whose first bytes `first` were read already; `max_block`: the most
    /// bytes one header block may take (`Inbound::new`).
    pub(super) fn new(first: Buf, io: Box<dyn Io>, max_block: usize) -> Rewind {
        Rewind {
            first,
            io,
            guard: Inbound::new(max_block),
            pending: Buf::new(),
            ready: 0,
            eof: false,
        }
    }
}

impl Read for Rewind {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.ready > 0 {
                let n = this.ready.min(buf.remaining());
                buf.put_slice(&this.pending.bytes()[..n]);
                this.pending.consume(n);
                this.ready -= n;
                if this.pending.is_empty() {
                    this.pending.release();
                }
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                // What the guard still held goes as it is: h2 sees a frame cut short.
                this.ready = this.pending.len();
                if this.ready == 0 {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            if this.first.is_empty() {
                let cap = this.pending.len() + READ_CHUNK;
                match this.pending.poll_fill(&mut this.io, cx, cap) {
                    Poll::Ready(Ok(0)) => this.eof = true,
                    Poll::Ready(Ok(_)) => {}
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                }
            } else {
                this.pending.extend(this.first.bytes());
                this.first.consume(this.first.len());
                this.first.release();
            }
            let refused = this.guard.refused();
            // Nothing is ready here, so every pending byte is one the guard has not released.
            this.ready = this.guard.scan(this.pending.bytes_mut());
            if this.guard.refused() > refused {
                tracing::debug!(
                    "HTTP/2 trailers with a pseudo-header field: stream reset (RFC 9113 §8.1)"
                );
            }
        }
    }
}

impl Write for Rewind {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// Read (at most until `deadline`) enough of the first bytes into `buf` to tell HTTP/2's
/// preface from an HTTP/1 request: `Some(true)` for HTTP/2; `None`: closed, failed or too slow.
pub(super) async fn sniff(
    rt: Rt,
    io: &mut Box<dyn Io>,
    buf: &mut Buf,
    deadline: Instant,
) -> Option<bool> {
    loop {
        let n = buf.len().min(H2_PREFACE.len());
        if buf.bytes()[..n] != H2_PREFACE[..n] {
            return Some(false);
        }
        if n == H2_PREFACE.len() {
            return Some(true);
        }
        let read = std::future::poll_fn(|cx| buf.poll_fill(io, cx, 16 * 1024));
        match rt::timeout_at(rt, deadline, read).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return None,
        }
    }
}
