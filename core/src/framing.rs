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
//! - `Transfer-Encoding` whose final coding is not `chunked`, or `chunked` applied twice (§6.1);
//! - a `Content-Length` that is not one decimal number, or several that differ (§6.3);
//! - an HTTP/1.1 request without `Host`, or any request with more than one (§3.2);
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
//! Methods: facts in (`handle_bytes`, `handle_upgrade`), actions out (`poll_verdict`).

use core::fmt;

/// How many bytes of a header line are kept: names and values of the framing headers fit.
pub const LINE_PREFIX: usize = 96;

/// Why a request head is refused (C-PATH-12).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FramingError {
    /// Both `Content-Length` and `Transfer-Encoding`.
    LengthAndTransferEncoding,
    /// `Transfer-Encoding` whose final coding is not `chunked`, or `chunked` twice.
    TransferEncoding,
    /// `Content-Length` not a decimal number, or repeated with different values.
    ContentLength,
    /// An HTTP/1.1 request without `Host`.
    HostMissing,
    /// More than one `Host` line.
    HostRepeated,
    /// A header line continued by obsolete line folding.
    ObsoleteFold,
    /// No verdict: the head arrived after the tracker stopped following the connection (after
    /// a malformed chunk or a protocol switch). Treated as a rejection.
    Untracked,
}

impl FramingError {
    /// A lower-case description for the client's error body.
    #[must_use]
    pub const fn message(&self) -> &'static str {
        match self {
            FramingError::LengthAndTransferEncoding => {
                "request has both content-length and transfer-encoding"
            }
            FramingError::TransferEncoding => "transfer-encoding must end in chunked, applied once",
            FramingError::ContentLength => {
                "content-length is invalid or repeated with another value"
            }
            FramingError::HostMissing => "http/1.1 request has no host header",
            FramingError::HostRepeated => "request has more than one host header",
            FramingError::ObsoleteFold => "header line folding is not allowed",
            FramingError::Untracked => "request framing could not be followed",
        }
    }
}

impl fmt::Display for FramingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

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
    Chunk(Chunk),
    /// Not following any more (module doc).
    Opaque,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// The chunk size, hex digits so far (`digits` counts them).
    Size { size: u64, digits: u8 },
    /// Whitespace after the size.
    SizeSpace { size: u64 },
    /// A chunk extension, to the end of the line.
    Extension { size: u64 },
    /// A `\r` ended the size line; `\n` must follow.
    SizeLf { size: u64 },
    /// Chunk data: bytes left.
    Data(u64),
    /// The `\r\n` after the data (`cr` once the `\r` is seen).
    DataEnd { cr: bool },
    /// Trailer lines after the last chunk (`len`: bytes in the current line, `\r` excluded).
    Trailer { len: u64 },
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
    hosts: u8,
    content_length: Option<u64>,
    transfer_encoding: bool,
    error: Option<FramingError>,
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
                hosts: 0,
                content_length: None,
                transfer_encoding: false,
                error: None,
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
            self.head.error.get_or_insert(FramingError::ObsoleteFold);
            return;
        }
        self.header_line(&line);
    }

    fn header_line(&mut self, line: &Line) {
        let kept = &line.prefix[..line.kept()];
        let Some(colon) = kept.iter().position(|&b| b == b':') else {
            return; // a name longer than the prefix: none of the names the rules read
        };
        let name = &kept[..colon];
        let value = trim(&kept[colon + 1..]);
        let whole = line.kept() as u64 == line.len;
        let head = &mut self.head;
        if name.eq_ignore_ascii_case(b"host") {
            head.hosts = head.hosts.saturating_add(1);
        } else if name.eq_ignore_ascii_case(b"content-length") {
            let len = if whole { content_length(value) } else { None };
            match (len, head.content_length) {
                (None, _) => {
                    head.error.get_or_insert(FramingError::ContentLength);
                }
                (Some(n), Some(before)) if n != before => {
                    head.error.get_or_insert(FramingError::ContentLength);
                }
                (Some(n), _) => head.content_length = Some(n),
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            // Several lines are one list (RFC 9110 §5.3): only the last may say chunked, and
            // only that one (a second `chunked` line after the first is chunked twice).
            let ok = whole && !head.transfer_encoding && ends_in_chunked_once(value);
            if !ok {
                head.error.get_or_insert(FramingError::TransferEncoding);
            }
            head.transfer_encoding = true;
        }
    }

    fn end_of_head(&mut self) {
        let head = core::mem::take(&mut self.head);
        let error = if head.transfer_encoding && head.content_length.is_some() {
            Some(FramingError::LengthAndTransferEncoding)
        } else if let Some(e) = head.error {
            Some(e)
        } else if head.hosts > 1 {
            Some(FramingError::HostRepeated)
        } else if head.hosts == 0 && !head.http10 {
            Some(FramingError::HostMissing)
        } else {
            None
        };
        if let Some(e) = error {
            self.rejected = Some(e);
            self.state = State::Opaque;
            return;
        }
        self.accepted = self.accepted.saturating_add(1);
        self.state = if head.transfer_encoding {
            State::Chunk(Chunk::Size { size: 0, digits: 0 })
        } else {
            match head.content_length {
                Some(n) if n > 0 => State::Body(n),
                _ => State::Head,
            }
        };
    }

    /// Chunked body bytes (RFC 9112 §7.1). Returns how many were used.
    fn chunk_bytes(&mut self, chunk: Chunk, bytes: &[u8]) -> usize {
        if let Chunk::Data(left) = chunk {
            let n = skip(left, bytes.len());
            self.state = State::Chunk(if n as u64 == left {
                Chunk::DataEnd { cr: false }
            } else {
                Chunk::Data(left - n as u64)
            });
            return n;
        }
        let b = bytes[0];
        self.state = match step(chunk, b) {
            Some(Step::Next(c)) => State::Chunk(c),
            Some(Step::SizeLine(0)) => State::Chunk(Chunk::Trailer { len: 0 }),
            Some(Step::SizeLine(n)) => State::Chunk(Chunk::Data(n)),
            Some(Step::Done) => State::Head,
            None => State::Opaque,
        };
        1
    }
}

enum Step {
    Next(Chunk),
    /// The size line ended: the chunk's size.
    SizeLine(u64),
    /// The empty line after the trailers: the message ended.
    Done,
}

/// One byte of the chunked coding outside chunk data; `None`: malformed.
fn step(chunk: Chunk, b: u8) -> Option<Step> {
    Some(match chunk {
        Chunk::Size { size, digits } => match b {
            b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                if digits >= 16 {
                    return None; // more than 64 bits
                }
                let d = u64::from((b as char).to_digit(16)?);
                Step::Next(Chunk::Size {
                    size: size << 4 | d,
                    digits: digits + 1,
                })
            }
            _ if digits == 0 => return None,
            b' ' | b'\t' => Step::Next(Chunk::SizeSpace { size }),
            b';' => Step::Next(Chunk::Extension { size }),
            b'\r' => Step::Next(Chunk::SizeLf { size }),
            b'\n' => Step::SizeLine(size),
            _ => return None,
        },
        Chunk::SizeSpace { size } => match b {
            b' ' | b'\t' => Step::Next(Chunk::SizeSpace { size }),
            b';' => Step::Next(Chunk::Extension { size }),
            b'\r' => Step::Next(Chunk::SizeLf { size }),
            b'\n' => Step::SizeLine(size),
            _ => return None,
        },
        Chunk::Extension { size } => match b {
            b'\n' => Step::SizeLine(size),
            _ => Step::Next(Chunk::Extension { size }),
        },
        Chunk::SizeLf { size } => match b {
            b'\n' => Step::SizeLine(size),
            _ => return None,
        },
        Chunk::DataEnd { cr } => match b {
            b'\r' if !cr => Step::Next(Chunk::DataEnd { cr: true }),
            b'\n' => Step::Next(Chunk::Size { size: 0, digits: 0 }),
            _ => return None,
        },
        Chunk::Trailer { len } => match b {
            b'\n' if len == 0 => Step::Done,
            b'\n' => Step::Next(Chunk::Trailer { len: 0 }),
            b'\r' => Step::Next(Chunk::Trailer { len }),
            _ => Step::Next(Chunk::Trailer { len: len + 1 }),
        },
        Chunk::Data(_) => unreachable!("chunk data is skipped by the caller"),
    })
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

fn trim(v: &[u8]) -> &[u8] {
    let start = v
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |i| i + 1);
    &v[start..end]
}

/// A `Content-Length` value: one decimal number, or a list of equal ones (RFC 9112 §6.3).
fn content_length(v: &[u8]) -> Option<u64> {
    let mut found = None;
    for part in v.split(|&b| b == b',') {
        let part = trim(part);
        if part.is_empty() || part.len() > 19 || !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n = part.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
        match found {
            Some(before) if before != n => return None,
            _ => found = Some(n),
        }
    }
    found
}

/// Whether a `Transfer-Encoding` list ends in `chunked` and names it only there.
fn ends_in_chunked_once(v: &[u8]) -> bool {
    let mut codings = v.split(|&b| b == b',').map(trim).filter(|c| !c.is_empty());
    let Some(last) = codings.next_back() else {
        return false;
    };
    last.eq_ignore_ascii_case(b"chunked") && !codings.any(|c| c.eq_ignore_ascii_case(b"chunked"))
}

#[cfg(test)]
mod tests;
