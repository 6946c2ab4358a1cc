//! [`copy_bidirectional`]: the two directions of an upgrade tunnel, on hyper's IO traits.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use hyper::rt::{Read, ReadBuf, Write};

/// Copy both ways between `a` and `b` until both directions have ended (each direction ends at
/// its EOF, and then shuts the other side's writer down), as tokio's `copy_bidirectional` does.
/// Returns the bytes copied a → b and b → a.
///
/// # Errors
/// The first read or write error in either direction.
pub async fn copy_bidirectional<A, B>(a: &mut A, b: &mut B) -> io::Result<(u64, u64)>
where
    A: Read + Write + Unpin + ?Sized,
    B: Read + Write + Unpin + ?Sized,
{
    let mut ab = Copy::new();
    let mut ba = Copy::new();
    std::future::poll_fn(|cx| {
        let r1 = ab.poll(cx, Pin::new(&mut *a), Pin::new(&mut *b))?;
        let r2 = ba.poll(cx, Pin::new(&mut *b), Pin::new(&mut *a))?;
        match (r1, r2) {
            (Poll::Ready(x), Poll::Ready(y)) => Poll::Ready(Ok((x, y))),
            _ => Poll::Pending,
        }
    })
    .await
}

/// One direction of [`copy_bidirectional`].
struct Copy {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    total: u64,
    eof: bool,
    done: bool,
}

impl Copy {
    fn new() -> Copy {
        Copy {
            buf: vec![0; 16 * 1024].into_boxed_slice(),
            start: 0,
            end: 0,
            total: 0,
            eof: false,
            done: false,
        }
    }

    fn poll<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        mut from: Pin<&mut R>,
        mut to: Pin<&mut W>,
    ) -> Poll<io::Result<u64>>
    where
        R: Read + ?Sized,
        W: Write + ?Sized,
    {
        if self.done {
            return Poll::Ready(Ok(self.total));
        }
        loop {
            if self.start == self.end && !self.eof {
                let mut rb = ReadBuf::new(&mut self.buf);
                ready!(from.as_mut().poll_read(cx, rb.unfilled()))?;
                let n = rb.filled().len();
                if n == 0 {
                    self.eof = true;
                } else {
                    self.start = 0;
                    self.end = n;
                }
            }
            if self.start < self.end {
                let n = ready!(to.as_mut().poll_write(cx, &self.buf[self.start..self.end]))?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                self.start += n;
                self.total += n as u64;
                continue;
            }
            if self.eof {
                ready!(to.as_mut().poll_flush(cx))?;
                ready!(to.as_mut().poll_shutdown(cx))?;
                self.done = true;
                return Poll::Ready(Ok(self.total));
            }
        }
    }
}
