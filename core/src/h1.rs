//! weir's own HTTP/1.1 codec, the pure part (C-PATH-2, C-PATH-6, C-PATH-12).
//!
//! Heads are parsed by `httparse` into a flat list of [`Header`]s borrowed from the read buffer
//! (no `http::HeaderMap`, no allocation), checked against the framing rules of RFC 9112 (one
//! set, in [`Facts`], for requests and responses; their errors are [`FramingError`]s), and rewritten in one
//! pass into one output buffer ([`write_upstream_request`], [`write_response_head`]). Bodies are
//! followed by small machines: [`LengthBody`], [`chunked::ChunkedDecoder`], or neither
//! ([`BodyFraming::Empty`], [`BodyFraming::UntilClose`]).
//!
//! Pipelining: a parser reports the bytes its head took ([`RequestHead::head_len`]) and a body
//! machine the bytes its body took, so whatever follows stays in the caller's buffer for the
//! next message.
//!
//! The rules, each documented in docs/proxy.md ("HTTP/1 parsing rules"):
//! - request line longer than [`Limits::max_request_line`] → `414`;
//! - head bytes over [`Limits::max_head_bytes`], or more header lines than the caller's header
//!   storage holds → `431`;
//! - anything `httparse` refuses (whitespace before a colon, obs-fold, NUL/CR/LF or other
//!   control bytes in a value, a bad method token, a version other than HTTP/1.0 or 1.1) → `400`;
//! - the rules of [`Facts`] (CL+TE, bad or differing CL, TE other than one `chunked` alone,
//!   Host missing on HTTP/1.1, repeated, or not a valid authority: [`valid_host`]) → `400`;
//! - an absolute-form target whose authority is not valid (userinfo included) → `400`; a valid
//!   one replaces the client's `Host` upstream (RFC 9112 §3.2.2, [`RequestHead::authority`]);
//! - a response with any of these defects, a status outside 100–599 or a `101` weir did not
//!   ask for → [`BadResponse`]: `502`, and the upstream connection is not reused.

pub mod chunked;
mod head;
mod response;
mod rules;
mod write;

pub use head::{Limits, Parsed, RequestHead, ResponseHead, Version, absolute_authority};
use head::{facts_of, malformed};
pub use httparse::Header;
pub use response::{BadResponse, KeptHead, ResponseContext, parse_response, parse_response_in};
pub use rules::{BodyFraming, Facts, FramingError, valid_host};
pub use write::{
    BodyOut, ClientSide, ResponseOut, UpstreamRequest, push_decimal, relay_interim, write_interim,
    write_response_head, write_upstream_request,
};

use core::fmt;
use core::mem::MaybeUninit;

/// An empty header slot, to build the storage a parser fills (`[EMPTY_HEADER; N]`).
pub const EMPTY_HEADER: Header<'static> = httparse::EMPTY_HEADER;

/// Header lines a head may carry when the caller has no better number (nginx and HAProxy
/// allow about 100).
pub const DEFAULT_MAX_HEADERS: usize = 100;

/// Why a request head is refused: the client gets [`HeadError::status`] and the connection is
/// closed; nothing is sent upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// Not HTTP/1 syntax (httparse's reason).
    Malformed(&'static str),
    /// Syntax fine, framing rules broken.
    Framing(FramingError),
    /// The request line is over the limit.
    RequestLineTooLong,
    /// The head is over the byte limit.
    HeadTooLarge,
    /// More header lines than the limit.
    TooManyHeaders,
    /// A request target in none of the forms of RFC 9112 §3.2 (see [`valid_target`]).
    Target,
}

impl HeadError {
    /// The status weir answers with.
    #[must_use]
    pub const fn status(&self) -> u16 {
        match self {
            HeadError::Malformed(_) | HeadError::Framing(_) | HeadError::Target => 400,
            HeadError::RequestLineTooLong => 414,
            HeadError::HeadTooLarge | HeadError::TooManyHeaders => 431,
        }
    }

    /// The access log's `reason` for the refusal (docs/operations.md): `malformed_request`
    /// (syntax or framing), `bad_target`, `uri_too_long` (`414`) or `header_too_large` (`431`).
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        match self {
            HeadError::Malformed(_) | HeadError::Framing(_) => "malformed_request",
            HeadError::Target => "bad_target",
            HeadError::RequestLineTooLong => "uri_too_long",
            HeadError::HeadTooLarge | HeadError::TooManyHeaders => "header_too_large",
        }
    }

    /// A lower-case description for the error body.
    #[must_use]
    pub const fn message(&self) -> &'static str {
        match self {
            HeadError::Malformed(m) => m,
            HeadError::Framing(f) => f.message(),
            HeadError::RequestLineTooLong => "request line too long",
            HeadError::HeadTooLarge => "request header section too large",
            HeadError::TooManyHeaders => "too many request header lines",
            HeadError::Target => "invalid request target",
        }
    }
}

impl fmt::Display for HeadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

/// Parses a request head at the start of `buf` into `headers` (module doc for the rules).
pub fn parse_request<'h, 'b>(
    buf: &'b [u8],
    headers: &'h mut [Header<'b>],
    limits: &Limits,
) -> Result<Parsed<RequestHead<'h, 'b>>, HeadError> {
    let (view, over_line) = request_view(buf, limits);
    let mut req = httparse::Request::new(headers);
    let status = req.parse(view);
    request_head(req, status, view, over_line, limits)
}

/// [`parse_request`] into storage that need not be initialised first ([`header_slots`]): the
/// same answers, without writing every slot before the parse (the proxy's hot path).
pub fn parse_request_in<'h, 'b>(
    buf: &'b [u8],
    slots: &'h mut [MaybeUninit<Header<'b>>],
    limits: &Limits,
) -> Result<Parsed<RequestHead<'h, 'b>>, HeadError> {
    let (view, over_line) = request_view(buf, limits);
    let mut req = httparse::Request::new(&mut []);
    let status = req.parse_with_uninit_headers(view, slots);
    request_head(req, status, view, over_line, limits)
}

/// Header storage for [`parse_request_in`] and [`parse_response_in`], left uninitialised.
#[must_use]
pub const fn header_slots<'b, const N: usize>() -> [MaybeUninit<Header<'b>>; N] {
    [const { MaybeUninit::uninit() }; N]
}

/// The bytes httparse may see, and where the request line crosses its limit.
fn request_view<'b>(buf: &'b [u8], limits: &Limits) -> (&'b [u8], usize) {
    // Errors are reported in stream order, so the answer never depends on how the bytes were
    // split into reads: httparse sees only the bytes up to the point where a limit is crossed,
    // and a syntax error before that point wins over the limit.
    let over_line = line_over_at(buf, limits.max_request_line);
    (
        &buf[..buf.len().min(over_line).min(limits.max_head_bytes)],
        over_line,
    )
}

/// The request head httparse read (its answer `status` on `view_len` bytes), by weir's rules.
fn request_head<'h, 'b>(
    req: httparse::Request<'h, 'b>,
    status: httparse::Result<usize>,
    view: &'b [u8],
    over_line: usize,
    limits: &Limits,
) -> Result<Parsed<RequestHead<'h, 'b>>, HeadError> {
    let head_len = match status {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if view.len() == over_line => {
            return Err(HeadError::RequestLineTooLong);
        }
        Ok(httparse::Status::Partial) if view.len() >= limits.max_head_bytes => {
            return Err(HeadError::HeadTooLarge);
        }
        Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooManyHeaders),
        Err(e) => return Err(HeadError::Malformed(malformed(e))),
    };
    let httparse::Request {
        method,
        path,
        version,
        headers,
    } = req;
    let (Some(method), Some(target), Some(version)) = (method, path, version) else {
        return Err(HeadError::Malformed("incomplete request line"));
    };
    if !valid_target(method, target.as_bytes()) {
        return Err(HeadError::Target);
    }
    let version = if version == 0 {
        Version::Http10
    } else {
        Version::Http11
    };
    let headers: &'h [Header<'b>] = headers;
    let facts = facts_of(headers);
    let body = facts
        .request_body(version == Version::Http10)
        .map_err(HeadError::Framing)?;
    Ok(Parsed::Complete(RequestHead {
        method,
        target,
        version,
        headers,
        head_len,
        raw: &view[..head_len],
        body,
        facts,
    }))
}

/// Whether `target` is a request target of RFC 9112 §3.2 for `method`:
/// - origin-form (`/path?query`): the bytes `http::Uri` accepts in a path and a query (so the
///   target means the same to weir and to an `http`-based backend), no fragment (`#`);
/// - absolute-form (`http://...`, `https://...`, any case), with the same bytes;
/// - authority-form (`host:port`) for `CONNECT` only; asterisk-form (`*`) for `OPTIONS` only.
#[must_use]
pub fn valid_target(method: &str, target: &[u8]) -> bool {
    let uri_bytes = |t: &[u8]| {
        let mut query = false;
        t.iter().all(|&b| match b {
            b'?' => {
                query = true;
                true
            }
            0x21 | 0x24..=0x3b | 0x3d | 0x80..=0xff => true,
            0x3f..=0x7e if query => true,
            0x40..=0x5f | 0x61..=0x7a | 0x7c | 0x7e | b'"' | b'{' | b'}' => !query || b != b'"',
            _ => false,
        })
    };
    match target {
        b"*" => method == "OPTIONS",
        [b'/', ..] => method != "CONNECT" && uri_bytes(target),
        _ if method == "CONNECT" => {
            !target.is_empty()
                && target
                    .iter()
                    .all(|&b| b.is_ascii_alphanumeric() || b"-._~:[]%!$&'()*+,;=".contains(&b))
        }
        _ => {
            let scheme = target.iter().position(|&b| b == b':').unwrap_or(0);
            let (s, rest) = target.split_at(scheme);
            (s.eq_ignore_ascii_case(b"http") || s.eq_ignore_ascii_case(b"https"))
                && rest.starts_with(b"://")
                && rest.len() > 3
                && uri_bytes(&rest[3..])
                && absolute_authority(target).is_some_and(valid_host)
        }
    }
}

/// The length of the shortest prefix of `buf` that shows a request line longer than `max`
/// (`usize::MAX` when `buf` does not show one). httparse skips empty lines before a request
/// line; a final CR is not counted until the byte after it shows it is not a line ending.
fn line_over_at(buf: &[u8], max: usize) -> usize {
    let start = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    let line = &buf[start..];
    let end = line.iter().position(|&b| b == b'\n').unwrap_or(line.len());
    let content = match line[..end].last() {
        Some(b'\r') if end < line.len() => end - 1,
        _ => end,
    };
    if content <= max {
        return usize::MAX;
    }
    // The (max + 1)-th byte of the line crosses the limit, unless it is a CR that might still
    // end the line: then the byte after it does.
    if line[max] == b'\r' {
        start + max + 2
    } else {
        start + max + 1
    }
}

/// A `Content-Length` body: how many of the bytes on offer belong to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LengthBody {
    left: u64,
}

impl LengthBody {
    /// A body of `len` bytes.
    #[must_use]
    pub const fn new(len: u64) -> LengthBody {
        LengthBody { left: len }
    }

    /// Bytes still to come.
    #[must_use]
    pub const fn remaining(&self) -> u64 {
        self.left
    }

    /// Whether the body is complete.
    #[must_use]
    pub const fn is_done(&self) -> bool {
        self.left == 0
    }

    /// Of `available` bytes, how many are body (the rest is the next message).
    pub fn take(&mut self, available: usize) -> usize {
        let n = usize::try_from(self.left).map_or(available, |l| l.min(available));
        self.left -= n as u64;
        n
    }
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
