//! The first bytes of a connection: read (not peeked) to tell HTTP/2's preface from HTTP/1, and
//! given back to hyper's HTTP/2 server through a rewinding IO.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use hyper::rt::{Read, ReadBufCursor, Write};

use crate::base::rt::{self, Io, Rt};
use crate::datapath::h1::io::Buf;

/// The HTTP/2 connection preface (RFC 9113 §3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A byte stream whose first bytes were already read: they are read again first (HTTP/2's
/// preface, read to tell the protocol).
pub(super) struct Rewind {
    pub(super) first: Buf,
    pub(super) io: Box<dyn Io>,
}

impl Read for Rewind {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.first.is_empty() {
            let n = this.first.len().min(buf.remaining());
            buf.put_slice(&this.first.bytes()[..n]);
            this.first.consume(n);
            if this.first.is_empty() {
                this.first.release();
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
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
