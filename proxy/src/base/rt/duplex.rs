//! An in-memory byte pipe with both ends hyper streams (tokio's `io::duplex`, runtime-neutral):
//! the management plane's synthetic request talks HTTP/1.1 to the data-plane handler over it.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use bytes::{Buf, BytesMut};
use hyper::rt::{Read, ReadBufCursor, Write};

/// One direction: bytes written and not yet read, bounded by `max`.
#[derive(Debug)]
struct Pipe {
    buf: BytesMut,
    max: usize,
    closed: bool,
    reader: Option<Waker>,
    writer: Option<Waker>,
}

type Shared = Arc<Mutex<Pipe>>;

/// One end of a [`duplex`] pair; dropping it closes both directions for the other end.
#[derive(Debug)]
pub struct DuplexStream {
    read: Shared,
    write: Shared,
}

/// Two connected ends, each direction buffering at most `max` bytes.
#[must_use]
pub fn duplex(max: usize) -> (DuplexStream, DuplexStream) {
    let pipe = || {
        Arc::new(Mutex::new(Pipe {
            buf: BytesMut::new(),
            max: max.max(1),
            closed: false,
            reader: None,
            writer: None,
        }))
    };
    let (a, b) = (pipe(), pipe());
    (
        DuplexStream {
            read: Arc::clone(&a),
            write: Arc::clone(&b),
        },
        DuplexStream { read: b, write: a },
    )
}

fn lock(p: &Shared) -> std::sync::MutexGuard<'_, Pipe> {
    p.lock().unwrap_or_else(PoisonError::into_inner)
}

fn close(p: &Shared) {
    let mut p = lock(p);
    p.closed = true;
    if let Some(w) = p.reader.take() {
        w.wake();
    }
    if let Some(w) = p.writer.take() {
        w.wake();
    }
}

impl Drop for DuplexStream {
    fn drop(&mut self) {
        close(&self.read);
        close(&self.write);
    }
}

impl Read for DuplexStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let mut p = lock(&self.read);
        if p.buf.is_empty() {
            if p.closed {
                return Poll::Ready(Ok(()));
            }
            p.reader = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let n = p.buf.len().min(buf.remaining());
        buf.put_slice(&p.buf[..n]);
        p.buf.advance(n);
        if let Some(w) = p.writer.take() {
            w.wake();
        }
        Poll::Ready(Ok(()))
    }
}

impl Write for DuplexStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut p = lock(&self.write);
        if p.closed {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let room = p.max.saturating_sub(p.buf.len());
        if room == 0 {
            p.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let n = room.min(data.len());
        p.buf.extend_from_slice(&data[..n]);
        if let Some(w) = p.reader.take() {
            w.wake();
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        close(&self.write);
        Poll::Ready(Ok(()))
    }
}
