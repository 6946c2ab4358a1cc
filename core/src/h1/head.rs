//! The parsed heads, a request's ([`RequestHead`]) and a response's ([`ResponseHead`]), and what
//! both directions share: the size [`Limits`], the [`Version`], a parser's answer ([`Parsed`]),
//! the facts of a header list and httparse's reasons. The parsers are the parent module's
//! (requests) and `response`; the writers are `write`.

use httparse::Header;

use super::rules::{BodyFraming, Facts};

/// Size limits of a head. The header count limit is the length of the storage slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The request line without its CRLF (`414` beyond it).
    pub max_request_line: usize,
    /// The whole head, request line and CRLFs included (`431` beyond it).
    pub max_head_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        // nginx's large_client_header_buffers (8k lines) and HAProxy's tune.bufsize (16 KiB).
        Limits {
            max_request_line: 8 * 1024,
            max_head_bytes: 16 * 1024,
        }
    }
}

/// The protocol version of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// `HTTP/1.0`.
    Http10,
    /// `HTTP/1.1`.
    Http11,
}

/// A parser's answer when the head is well-formed so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed<T> {
    /// The whole head.
    Complete(T),
    /// More bytes are needed (the buffer holds a well-formed prefix, within the limits).
    Partial,
}

/// A parsed request head, borrowing the read buffer and the header storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHead<'h, 'b> {
    /// The method token.
    pub method: &'b str,
    /// The request target, as sent.
    pub target: &'b str,
    /// The version.
    pub version: Version,
    /// Header lines in order, names and values as sent (values trimmed).
    pub headers: &'h [Header<'b>],
    /// Bytes of the buffer the head took (leading empty lines included).
    pub head_len: usize,
    /// Those bytes (the writers copy runs of lines that stand as they would write them).
    pub raw: &'b [u8],
    /// How the body is framed.
    pub body: BodyFraming,
    /// What the headers said.
    pub facts: Facts,
}

impl RequestHead<'_, '_> {
    /// `HEAD` (its response has no body whatever its headers say).
    #[must_use]
    pub fn is_head(&self) -> bool {
        self.method == "HEAD"
    }

    /// Whether the client wants the connection kept after this exchange (RFC 9112 §9.3).
    #[must_use]
    pub fn keep_alive(&self) -> bool {
        self.facts.persistent(self.version == Version::Http10)
    }

    /// Whether the client connection carries another request after this exchange: the client
    /// wants it kept ([`keep_alive`](Self::keep_alive)), weir is not `shutting_down` (a
    /// draining connection closes after its response), and the request body was read to its
    /// end (`body_read`): unread body bytes would be read as the next request's head, so a
    /// connection whose body was not consumed closes (C-PATH-7, docs/proxy.md).
    #[must_use]
    pub fn persists(&self, shutting_down: bool, body_read: bool) -> bool {
        self.keep_alive() && !shutting_down && body_read
    }

    /// An upgrade request (HTTP/1.1 only: RFC 9110 §7.8 ignores `Upgrade` in HTTP/1.0).
    #[must_use]
    pub fn upgrade(&self) -> bool {
        self.version == Version::Http11 && self.facts.upgrade()
    }

    /// `Expect: 100-continue` on HTTP/1.1 (RFC 9110 §10.1.1: ignored in HTTP/1.0).
    /// [`write_upstream_request`] drops the client's `Expect` line; whether the expectation is
    /// passed on to the backend is [`RequestHead::expect_upstream`]'s decision.
    #[must_use]
    pub fn expect_continue(&self) -> bool {
        self.version == Version::Http11 && self.facts.expect_continue
    }

    /// Whether an attempt passes the client's `Expect: 100-continue` on to the backend and holds
    /// the body until the backend's `100 Continue`, its final answer, or `wait` (the
    /// `expect_continue_timeout`), as Go's transport, curl and Envoy do: only for a body that
    /// streams (`streamed`: a body buffered for replay is weir's to accept, and weir answers
    /// the `100` itself when it reads it), that the client has not started sending
    /// (`body_started`: it did not wait), that weir did not accept already (`continued`), and
    /// when `wait` is not zero (zero: weir answers the `100` itself and sends the body at
    /// once). A backend that refuses the request (`401`, `413`, `417`) is then answered before
    /// the client sends a byte of a body nobody wants.
    #[must_use]
    pub fn expect_upstream(
        &self,
        streamed: bool,
        body_started: bool,
        continued: bool,
        wait: core::time::Duration,
    ) -> bool {
        self.expect_continue()
            && streamed
            && !body_started
            && !continued
            && !wait.is_zero()
            && !matches!(self.body, BodyFraming::Empty | BodyFraming::Length(0))
    }

    /// The authority the request is for (RFC 9112 §3.2.2): an absolute-form target's, which
    /// wins over `Host`, else the `Host` value. The upstream head's `Host` and
    /// `X-Forwarded-Host` are this.
    #[must_use]
    pub fn authority(&self) -> Option<&[u8]> {
        absolute_authority(self.target.as_bytes()).or_else(|| self.host())
    }

    /// The `Host` value as sent, if there is one.
    #[must_use]
    pub fn host(&self) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("host"))
            .map(|h| h.value)
    }
}

/// A parsed response head, borrowing the read buffer and the header storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHead<'h, 'b> {
    /// 100–599.
    pub status: u16,
    /// The reason phrase, as sent.
    pub reason: &'b str,
    /// The upstream's version.
    pub version: Version,
    /// Header lines in order.
    pub headers: &'h [Header<'b>],
    /// Bytes of the buffer the head took.
    pub head_len: usize,
    /// Those bytes (the writers copy runs of lines that stand as they would write them).
    pub raw: &'b [u8],
    /// How the body is framed.
    pub body: BodyFraming,
    /// What the headers said.
    pub facts: Facts,
}

impl ResponseHead<'_, '_> {
    /// An interim response (1xx other than `101`): relayed (to HTTP/1.1 clients) and followed
    /// by the final one on the same connection.
    #[must_use]
    pub const fn is_interim(&self) -> bool {
        self.status >= 100 && self.status < 200 && self.status != 101
    }

    /// `101 Switching Protocols`: the connection becomes a tunnel after this head.
    #[must_use]
    pub const fn switching(&self) -> bool {
        self.status == 101
    }

    /// Whether the upstream connection can carry another request once this body is read: the
    /// upstream did not ask to close and the body has an end of its own.
    #[must_use]
    pub fn reusable(&self) -> bool {
        reusable(self.status, self.body, &self.facts, self.version)
    }
}

/// Whether the connection of a response with these parts can carry another request after it:
/// not a switch of protocols, a delimited body, and persistence (RFC 9112 §9.3).
pub(super) const fn reusable(
    status: u16,
    body: BodyFraming,
    facts: &Facts,
    version: Version,
) -> bool {
    status != 101 && body.is_delimited() && facts.persistent(matches!(version, Version::Http10))
}

/// The authority of an absolute-form target (`http://authority/path?q` → `authority`); `None`
/// for the other forms. Whether it is a valid one is [`valid_host`]'s to say (userinfo is not).
#[must_use]
pub fn absolute_authority(target: &[u8]) -> Option<&[u8]> {
    let colon = target.iter().position(|&b| b == b':')?;
    let rest = target[colon..].strip_prefix(b"://")?;
    if !target[..colon].iter().all(u8::is_ascii_alphabetic) || colon == 0 {
        return None;
    }
    let end = rest
        .iter()
        .position(|&b| b == b'/' || b == b'?')
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// The facts of a parsed header list.
pub(crate) fn facts_of(headers: &[Header<'_>]) -> Facts {
    let mut facts = Facts::new();
    for h in headers {
        facts.header(h.name.as_bytes(), h.value);
    }
    facts
}

/// A lower-case reason for one of httparse's errors.
pub(crate) const fn malformed(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName => "invalid header name",
        httparse::Error::HeaderValue => "invalid header value",
        httparse::Error::NewLine => "invalid line ending",
        httparse::Error::Status => "invalid status",
        httparse::Error::Token => "invalid request line",
        httparse::Error::TooManyHeaders => "too many header lines",
        httparse::Error::Version => "unsupported http version",
    }
}
