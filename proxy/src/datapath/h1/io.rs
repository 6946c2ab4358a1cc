//! What both sides of weir's HTTP/1 share: the read buffer ([`Buf`]) and its per-thread stash,
//! the write helpers, the scratch for extra header lines ([`Scratch`], [`Extra`]) and integer
//! header values ([`push_text`]).

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::rt::{Read, Write};

use crate::base::rt::Io;

/// A read buffer: bytes `start..end` of `data` are read and not consumed yet. The storage is
/// taken on first use (from this thread's [`STASH`] of released buffers, or allocated), grows
/// up to a cap, and is given back when a connection parks or an upstream connection goes back
/// to its pool.
#[derive(Debug, Default)]
pub struct Buf {
    data: Vec<u8>,
    start: usize,
    end: usize,
}

/// The first allocation of a buffer.
const INITIAL: usize = 4 * 1024;

/// Released buffers of [`INITIAL`] bytes a worker thread keeps for reuse: a keep-alive request
/// takes its upstream connection's buffer from here and gives it back with the connection, so
/// the steady state allocates none. Bounded, so that parked connections still cost
/// no buffer each: at most `STASH_MAX × INITIAL` bytes per thread.
const STASH_MAX: usize = 16;

thread_local! {
    static STASH: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A buffer of [`INITIAL`] bytes, from the stash when it has one.
fn take_storage() -> Vec<u8> {
    STASH
        .try_with(|s| s.try_borrow_mut().ok().and_then(|mut s| s.pop()))
        .ok()
        .flatten()
        .unwrap_or_else(|| vec![0; INITIAL])
}

/// How many released buffers this thread's stash holds.
#[cfg(test)]
pub(super) fn stash_len() -> usize {
    STASH.with(|s| s.borrow().len())
}

/// Give `data` back to the stash (only a buffer of [`INITIAL`] bytes; a grown one is freed).
fn give_storage(data: Vec<u8>) {
    if data.len() != INITIAL {
        return;
    }
    let _ = STASH.try_with(|s| {
        if let Ok(mut s) = s.try_borrow_mut()
            && s.len() < STASH_MAX
        {
            s.push(data);
        }
    });
}

impl Buf {
    /// An empty buffer with no storage.
    #[must_use]
    pub const fn new() -> Buf {
        Buf {
            data: Vec::new(),
            start: 0,
            end: 0,
        }
    }

    /// A buffer holding `bytes`.
    #[must_use]
    pub fn from_slice(bytes: &[u8]) -> Buf {
        let mut data = if bytes.len() <= INITIAL {
            take_storage()
        } else {
            vec![0; bytes.len()]
        };
        data[..bytes.len()].copy_from_slice(bytes);
        Buf {
            data,
            start: 0,
            end: bytes.len(),
        }
    }

    /// The unconsumed bytes.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    /// The unconsumed bytes, to change in place (the HTTP/2 guard clears a flag).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.data[self.start..self.end]
    }

    /// Whether no byte is waiting.
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// How many bytes are waiting.
    #[must_use]
    pub const fn len(&self) -> usize {
        self.end - self.start
    }

    /// Mark `n` waiting bytes as used.
    pub fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Give the storage back if nothing is waiting (parking, pooling).
    pub fn release(&mut self) {
        if self.is_empty() {
            give_storage(std::mem::take(&mut self.data));
        }
    }

    /// Whether the buffer is full at `cap` bytes waiting.
    #[must_use]
    pub fn is_full(&self, cap: usize) -> bool {
        self.len() >= cap
    }

    /// Room to read into, the buffer holding at most `cap` bytes (empty when full).
    fn room(&mut self, cap: usize) -> &mut [u8] {
        if self.data.is_empty() {
            // Whole storage even for a small `cap` (a pooled connection's liveness check reads
            // at most one byte): the next read of the same connection wants room for a head,
            // and a storage sized to `cap` would grow a few bytes at a time, one read each.
            self.data = take_storage();
        }
        if self.end == self.data.len() && self.start > 0 {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.data.len() && self.data.len() < cap {
            let grown = (self.data.len() * 2).min(cap);
            self.data.resize(grown, 0);
        }
        let limit = (self.start + cap).min(self.data.len());
        &mut self.data[self.end..limit.max(self.end)]
    }

    /// Read once from `io` (at most `cap` bytes waiting): the bytes read, `0` at end of stream.
    /// Never call it with the buffer full.
    pub fn poll_fill(
        &mut self,
        io: &mut Box<dyn Io>,
        cx: &mut Context<'_>,
        cap: usize,
    ) -> Poll<io::Result<usize>> {
        let room = self.room(cap);
        if room.is_empty() {
            return Poll::Ready(Err(io::Error::other("read buffer full")));
        }
        let mut rb = hyper::rt::ReadBuf::new(room);
        match Pin::new(&mut *io).poll_read(cx, rb.unfilled()) {
            Poll::Ready(Ok(())) => {
                let n = rb.filled().len();
                self.end += n;
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Append `bytes`.
    pub fn extend(&mut self, bytes: &[u8]) {
        if self.data.len() - self.end < bytes.len() {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.data.is_empty() && bytes.len() <= INITIAL {
                self.data = take_storage();
            } else if self.data.len() - self.end < bytes.len() {
                self.data.resize(self.end + bytes.len().max(INITIAL), 0);
            }
        }
        self.data[self.end..self.end + bytes.len()].copy_from_slice(bytes);
        self.end += bytes.len();
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        give_storage(std::mem::take(&mut self.data));
    }
}

/// Write once; `WriteZero` when the peer takes nothing.
pub fn poll_write_some(
    io: &mut Box<dyn Io>,
    cx: &mut Context<'_>,
    bytes: &[u8],
) -> Poll<io::Result<usize>> {
    match Pin::new(&mut *io).poll_write(cx, bytes) {
        Poll::Ready(Ok(0)) if !bytes.is_empty() => {
            Poll::Ready(Err(io::Error::from(io::ErrorKind::WriteZero)))
        }
        other => other,
    }
}

/// Write all of `bytes` and flush.
pub async fn write_all(io: &mut Box<dyn Io>, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        let n = poll_fn(|cx| poll_write_some(io, cx, bytes)).await?;
        bytes = &bytes[n..];
    }
    poll_fn(|cx| Pin::new(&mut *io).poll_flush(cx)).await
}

/// Tell the client to send its body (`100 Continue`), once: `sent` records that it was.
///
/// # Errors
/// Writing to the client failed.
pub async fn send_continue(io: &mut Box<dyn Io>, sent: &mut bool) -> io::Result<()> {
    if *sent {
        return Ok(());
    }
    *sent = true;
    write_all(io, b"HTTP/1.1 100 Continue\r\n\r\n").await
}

/// End the write side (FIN after what was written).
pub async fn shutdown(io: &mut Box<dyn Io>) {
    let _ = poll_fn(|cx| Pin::new(&mut *io).poll_shutdown(cx)).await;
}

/// A header value of the engine's ([`weir_core::response::Text`]) appended to `out` as bytes.
pub fn push_text(out: &mut Vec<u8>, text: &weir_core::response::Text<'_>) {
    use std::io::Write as _;
    match text {
        weir_core::response::Text::Str(s) => out.extend_from_slice(s.as_bytes()),
        weir_core::response::Text::Id(id) => out.extend_from_slice(id.as_bytes()),
        weir_core::response::Text::Int(n) => weir_core::h1::push_decimal(out, *n),
        other => {
            let _ = write!(out, "{other}");
        }
    }
}

/// Up to this many extra header lines are written by weir on one head.
pub const MAX_EXTRA: usize = 16;

/// Lines [`Extra::with_pairs`] lends from a small array.
const FEW_EXTRA: usize = 4;

/// The buffers an [`Extra`] reuses from head to head on a connection: the values' bytes and the
/// lines (name, value span), both cleared, never initialised again (two 16-line
/// arrays were 512 bytes written twice per request).
#[derive(Debug, Default)]
pub struct Scratch {
    bytes: Vec<u8>,
    lines: Vec<(&'static str, (usize, usize))>,
}

/// The first allocation of each of an awake period's write and scratch buffers
/// ([`Scratch::for_awake`], `conn::Client`): room for a common head, so that the buffers are not
/// grown a few bytes at a time (a dozen small allocations per awake period), and in a size class no
/// object a parked connection keeps uses. Small buffers freed at every park, in the size
/// classes of what the parked connections keep, left allocator pages partly used and resident
/// after a burst of connections (docs/benchmarks.md, "What an idle connection holds").
pub const AWAKE_BUF: usize = 1024;

impl Scratch {
    /// An awake period's scratch: [`AWAKE_BUF`] bytes for values, room for [`MAX_EXTRA`] lines.
    #[must_use]
    pub fn for_awake() -> Scratch {
        Scratch {
            bytes: Vec::with_capacity(AWAKE_BUF),
            lines: Vec::with_capacity(MAX_EXTRA),
        }
    }
}

/// Extra header lines being collected: names and value spans into one scratch buffer, so the
/// head writers get `(&str, &[u8])` pairs without an allocation per line; a few values that
/// outlive the head (`'v`: the request id, the backend's id) are borrowed where they are rather
/// than copied.
#[derive(Debug)]
pub struct Extra<'v> {
    lines: Vec<(&'static str, (usize, usize))>,
    scratch: Vec<u8>,
    borrowed: [&'v [u8]; BORROWED],
    n_borrowed: usize,
}

/// Values an [`Extra`] borrows (more are copied).
const BORROWED: usize = 2;

/// The span start that marks a borrowed value (its end is the index in `Extra::borrowed`).
const BORROWED_SPAN: usize = usize::MAX;

impl<'v> Extra<'v> {
    /// No lines, `scratch` (cleared) holding the values.
    #[must_use]
    pub fn new(scratch: Scratch) -> Extra<'v> {
        let Scratch {
            bytes: mut scratch,
            mut lines,
        } = scratch;
        scratch.clear();
        lines.clear();
        Extra {
            lines,
            scratch,
            borrowed: [&[]; BORROWED],
            n_borrowed: 0,
        }
    }

    /// Set `name` (a later value for the same name replaces an earlier one; up to
    /// [`MAX_EXTRA`] names, later ones are dropped).
    pub fn set(&mut self, name: &'static str, value: impl FnOnce(&mut Vec<u8>)) {
        let start = self.scratch.len();
        value(&mut self.scratch);
        self.set_span(name, (start, self.scratch.len()));
    }

    fn set_span(&mut self, name: &'static str, span: (usize, usize)) {
        if let Some(line) = self
            .lines
            .iter_mut()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
        {
            line.1 = span;
        } else if self.lines.len() < MAX_EXTRA {
            self.lines.push((name, span));
        }
    }

    /// Set `name` to `bytes`, borrowed while there is room, else copied.
    pub fn set_borrowed(&mut self, name: &'static str, bytes: &'v [u8]) {
        if self.n_borrowed < BORROWED {
            let i = self.n_borrowed;
            self.borrowed[i] = bytes;
            self.n_borrowed += 1;
            self.set_span(name, (BORROWED_SPAN, i));
        } else {
            self.set_bytes(name, bytes);
        }
    }

    /// Set `name` to `bytes`.
    pub fn set_bytes(&mut self, name: &'static str, bytes: &[u8]) {
        self.set(name, |out| out.extend_from_slice(bytes));
    }

    /// Whether `name` is set.
    #[must_use]
    pub fn has(&self, name: &str) -> bool {
        self.lines.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
    }

    /// The lines, for a head writer.
    pub fn with_pairs<R>(&self, f: impl FnOnce(&[(&str, &[u8])]) -> R) -> R {
        // Most heads carry a few lines: a small array then (the full one is 512 bytes
        // to initialise, twice per request).
        let n = self.lines.len();
        if n <= FEW_EXTRA {
            let mut pairs: [(&str, &[u8]); FEW_EXTRA] = [("", &[]); FEW_EXTRA];
            self.fill(&mut pairs);
            return f(&pairs[..n]);
        }
        let mut pairs: [(&str, &[u8]); MAX_EXTRA] = [("", &[]); MAX_EXTRA];
        self.fill(&mut pairs);
        f(&pairs[..n])
    }

    /// The first lines into `pairs` (as many as it holds).
    fn fill<'s>(&'s self, pairs: &mut [(&'s str, &'s [u8])]) {
        for (pair, &(name, (a, b))) in pairs.iter_mut().zip(&self.lines) {
            *pair = (name, self.value(a, b));
        }
    }

    /// The bytes of the value at span `(a, b)`.
    fn value(&self, a: usize, b: usize) -> &[u8] {
        if a == BORROWED_SPAN {
            self.borrowed[b]
        } else {
            &self.scratch[a..b]
        }
    }

    /// The scratch buffers back, for reuse.
    #[must_use]
    pub fn into_scratch(self) -> Scratch {
        Scratch {
            bytes: self.scratch,
            lines: self.lines,
        }
    }
}
