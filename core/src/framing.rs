//! Request framing across reads: one verdict per HTTP/1 request head (C-PATH-12).
//!
//! A request smuggling guard that looks at one read at a time has holes: a `Transfer-Encoding`
//! name split across two TCP segments is never seen whole, and a request pipelined behind
//! another one in the same read is never looked at. [`RequestFraming`] closes both: it is fed
//! *every* byte the client sends on an HTTP/1 connection, in order and however the reads split
//! them, follows the message boundaries (request line, header lines, then the body by
//! `Content-Length` or chunked coding, trailers included) and queues one [`Verdict`] per
//! complete head, in the order the heads arrived. The HTTP/1 server answers requests in that
//! same order, so the n-th request handed to the proxy takes the n-th verdict.
//!
//! The rules (RFC 9112; each a `400` with `Connection: close`, nothing sent upstream):
//! - both `Content-Length` and `Transfer-Encoding` (§6.1: "ought to be handled as an error");
//! - `Transfer-Encoding` other than the one coding `chunked` alone: `gzip, chunked` is refused,
//!   not rewritten (§6.1 lets a server refuse codings it does not understand; nginx 1.23+);
//! - a `Content-Length` that is not one decimal number, or more than one (§6.3);
//! - an HTTP/1.1 request without `Host`, or any request with more than one (§3.2), or a `Host`
//!   that is not a valid authority (`h1::valid_host`: RFC 3986 reg-name, IPv4 or IP-literal,
//!   optional port 0–65535, no userinfo, no path; a line over the kept prefix is checked byte
//!   by byte);
//! - an obsolete line folding (a header line starting with whitespace, §5.2).
//!
//! After a rejected head the connection is closed by the proxy, so the tracker stops looking
//! (it becomes *opaque*): nothing after a rejected head is ever given a verdict. It is opaque as
//! well after a malformed chunk (the server fails that body and closes) and once the connection
//! switches protocols ([`RequestFraming::handle_upgrade`]). A head that arrives while the
//! tracker is opaque has no verdict, which the proxy treats as a rejection (fail closed).
//!
//! Memory: a fixed-size value (no allocation); only the first [`LINE_PREFIX`] bytes of a header
//! line are kept, enough for the names and values the rules read. A `Content-Length` or
//! `Transfer-Encoding` line longer than that is rejected.
//!
//! The rules themselves live in [`crate::h1`] (`Facts`, the chunked decoder), shared with weir's
//! HTTP/1 head parsers: one set of framing rules.
//!
//! Methods: facts in (`handle_bytes`, `handle_upgrade`), actions out (`poll_verdict`).

use core::fmt;

use crate::h1::chunked::ChunkedDecoder;
use crate::h1::{BodyFraming, Facts, FramingError};

/// How many bytes of a header line are kept: names and values of the framing headers fit.
pub const LINE_PREFIX: usize = 96;

/// The verdict on one request head.
pub type Verdict = Result<(), FramingError>;

/// Follows an HTTP/1 client byte stream and queues one verdict per request head (module doc).
#[derive(Debug, Clone)]
pub struct RequestFraming {
    state: State,
    line: Line,
    head: Head,
    /// Complete heads accepted and not yet taken.
    accepted: u32,
    /// The rejection that ended tracking, if it is not taken yet.
    rejected: Option<FramingError>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a head, line by line.
    Head,
    /// A `Content-Length` body: bytes left.
    Body(u64),
    /// A chunked body.
    Chunk(ChunkedDecoder),
    /// Not following any more (module doc).
    Opaque,
}

/// The header line being read.
#[derive(Clone)]
struct Line {
    prefix: [u8; LINE_PREFIX],
    /// Bytes in the line so far (all of them, not only the kept prefix).
    len: u64,
    /// The last sixteen bytes, for the request line's version.
    tail: u128,
}

impl fmt::Debug for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Line")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// What the head read so far says.
#[derive(Debug, Clone, Copy, Default)]
struct Head {
    /// The request line is behind us.
    started: bool,
    http10: bool,
    facts: Facts,
}

impl Default for RequestFraming {
    fn default() -> Self {
        RequestFraming::new()
    }
}

impl RequestFraming {
    /// A tracker at the start of a connection.
    #[must_use]
    pub const fn new() -> RequestFraming {
        RequestFraming {
            state: State::Head,
            line: Line {
                prefix: [0; LINE_PREFIX],
                len: 0,
                tail: 0,
            },
            head: Head {
                started: false,
                http10: false,
                facts: Facts::new(),
            },
            accepted: 0,
            rejected: None,
        }
    }

    /// Whether the tracker stopped following the connection.
    #[must_use]
    pub fn is_opaque(&self) -> bool {
        self.state == State::Opaque
    }

    /// Bytes the client sent, in order.
    pub fn handle_bytes(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let used = match self.state {
                State::Opaque => return,
                State::Head => self.head_bytes(bytes),
                State::Body(left) => {
                    let n = skip(left, bytes.len());
                    self.state = if n as u64 == left {
                        State::Head
                    } else {
                        State::Body(left - n as u64)
                    };
                    n
                }
                State::Chunk(c) => self.chunk_bytes(c, bytes),
            };
            bytes = &bytes[used..];
        }
    }

    /// The connection switched protocols (`101`): what follows is not HTTP/1.
    pub fn handle_upgrade(&mut self) {
        self.state = State::Opaque;
        self.accepted = 0;
    }

    /// The verdict on the oldest head not yet taken; `None` when no complete head is waiting.
    pub fn poll_verdict(&mut self) -> Option<Verdict> {
        if self.accepted > 0 {
            self.accepted -= 1;
            return Some(Ok(()));
        }
        self.rejected.take().map(Err)
    }

    /// Head bytes up to and including the next line feed (or all of them). Returns how many
    /// were used.
    fn head_bytes(&mut self, bytes: &[u8]) -> usize {
        let (content, used, complete) = match bytes.iter().position(|&b| b == b'\n') {
            Some(i) => (&bytes[..i], i + 1, true),
            None => (bytes, bytes.len(), false),
        };
        self.line.push(content);
        if complete {
            self.end_of_line();
        }
        used
    }

    fn end_of_line(&mut self) {
        let line = self.line.take();
        let empty = line.len == 0 || (line.len == 1 && line.tail & 0xff == u128::from(b'\r'));
        if !self.head.started {
            if !empty {
                // RFC 9112 §2.2: empty lines before the request line are ignored.
                self.head.started = true;
                self.head.http10 = line.version() == *b"HTTP/1.0";
            }
            return;
        }
        if empty {
            self.end_of_head();
            return;
        }
        if matches!(line.prefix[0], b' ' | b'\t') {
            self.head
                .facts
                .error
                .get_or_insert(FramingError::ObsoleteFold);
            return;
        }
        self.header_line(&line);
    }

    fn header_line(&mut self, line: &Line) {
        let kept = &line.prefix[..line.kept()];
        let Some(colon) = kept.iter().position(|&b| b == b':') else {
            return; // a name longer than the prefix: none of the names the rules read
        };
        let whole = line.kept() as u64 == line.len;
        self.head
            .facts
            .header(&kept[..colon], &kept[colon + 1..], whole);
    }

    fn end_of_head(&mut self) {
        let head = core::mem::take(&mut self.head);
        match head.facts.request_body(head.http10) {
            Err(e) => {
                self.rejected = Some(e);
                self.state = State::Opaque;
            }
            Ok(body) => {
                self.accepted = self.accepted.saturating_add(1);
                self.state = match body {
                    BodyFraming::Chunked => State::Chunk(ChunkedDecoder::new()),
                    BodyFraming::Length(n) => State::Body(n),
                    BodyFraming::Empty | BodyFraming::UntilClose => State::Head,
                };
            }
        }
    }

    /// Chunked body bytes (RFC 9112 §7.1). Returns how many were used.
    fn chunk_bytes(&mut self, mut chunk: ChunkedDecoder, bytes: &[u8]) -> usize {
        match chunk.decode(bytes) {
            Ok(d) if d.done => {
                self.state = State::Head;
                d.consumed
            }
            Ok(d) => {
                self.state = State::Chunk(chunk);
                d.consumed
            }
            Err(_) => {
                self.state = State::Opaque;
                bytes.len()
            }
        }
    }
}

/// How many of `available` bytes a body with `left` bytes to go takes.
fn skip(left: u64, available: usize) -> usize {
    usize::try_from(left).map_or(available, |l| l.min(available))
}

impl Line {
    fn push(&mut self, bytes: &[u8]) {
        let kept = self.kept();
        if kept < LINE_PREFIX {
            let n = (LINE_PREFIX - kept).min(bytes.len());
            self.prefix[kept..kept + n].copy_from_slice(&bytes[..n]);
        }
        for &b in &bytes[bytes.len().saturating_sub(16)..] {
            self.tail = self.tail << 8 | u128::from(b);
        }
        self.len += bytes.len() as u64;
    }

    /// Bytes of the line held in `prefix`.
    fn kept(&self) -> usize {
        usize::try_from(self.len).map_or(LINE_PREFIX, |l| l.min(LINE_PREFIX))
    }

    /// The line so far, leaving an empty one behind.
    fn take(&mut self) -> Line {
        let line = self.clone();
        self.len = 0;
        self.tail = 0;
        line
    }

    /// The last eight bytes of the line without its `\r`: the request line's version.
    fn version(&self) -> [u8; 8] {
        let tail = if self.tail & 0xff == u128::from(b'\r') {
            self.tail >> 8
        } else {
            self.tail
        };
        // The low eight bytes (truncation intended).
        (tail as u64).to_be_bytes()
    }
}

#[cfg(test)]
mod tests;
