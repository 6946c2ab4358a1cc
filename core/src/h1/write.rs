//! Head writers: one pass over a parsed head into one buffer, so the proxy sends a head with
//! one write (C-PATH-6, C-FWD-2, C-PATH-12). The framing headers (`Content-Length`,
//! `Transfer-Encoding`) and `Connection` are always written by weir from the parsed framing,
//! never copied, so what the next hop reads is what weir followed.
//!
//! A `Vec` with enough capacity is never reallocated: reuse one per connection and the write
//! allocates nothing.

use std::net::IpAddr;

use super::{BodyFraming, Facts, Header, RequestHead, ResponseHead, Version};
use crate::forward::{self, Proto};
use crate::h1::rules::tokens;
use crate::headers::is_name;

/// What the upstream request carries besides the client's head.
#[derive(Debug, Clone, Copy)]
pub struct UpstreamRequest<'a> {
    /// The upstream request target (the backend's prefix applied, C-PATH-5).
    pub target: &'a [u8],
    /// The client address (C-FWD-1), for `X-Forwarded-For` and `X-Real-IP`.
    pub client: IpAddr,
    /// The scheme the client used (C-FWD-2), for `X-Forwarded-Proto`.
    pub proto: Proto,
    /// weir's own headers (`X-Request-ID`, `X-Balancer-Backend-Attempt`, a `Host` for an
    /// HTTP/1.0 client that sent none, ...): each replaces any client line of the same name,
    /// except a `Host` when the target is absolute-form (its authority is the `Host`).
    pub extra: &'a [(&'a str, &'a [u8])],
}

/// Writes the upstream request head for `head` into `out` (appended). The upstream always
/// gets HTTP/1.1; a chunked body stays chunked (the upstream speaks 1.1), re-framed by
/// [`super::chunked::ChunkedDecoder::rechunk`].
pub fn write_upstream_request(
    head: &RequestHead<'_, '_>,
    req: &UpstreamRequest<'_>,
    out: &mut Vec<u8>,
) {
    let upgrading = head.upgrade();
    let mut copy = Runs::new(head.raw);
    // The request line joins the run of lines after it when the client's stands as weir's
    // would: its method, the same target bytes, HTTP/1.1.
    if !copy.request_line(head.method.as_bytes(), req.target) {
        out.extend_from_slice(head.method.as_bytes());
        out.push(b' ');
        out.extend_from_slice(req.target);
        out.extend_from_slice(b" HTTP/1.1\r\n");
    }
    let mut te_trailers = false;
    // RFC 9112 §3.2.2: a proxy forwarding an absolute-form request writes Host from the
    // target, never the received one; it takes the place of the client's Host line.
    let authority = head.authority();
    let from_target = super::absolute_authority(head.target.as_bytes());
    if let Some(a) = from_target
        && head.host().is_none()
    {
        copy.flush(out);
        line(out, b"host", a);
    }
    let all = pairs(head.headers);
    for h in head.headers {
        let name = h.name.as_bytes();
        if let Some(a) = from_target
            && name.eq_ignore_ascii_case(b"host")
        {
            copy.flush(out);
            line(out, name, a);
            continue;
        }
        if name.eq_ignore_ascii_case(b"te") {
            te_trailers |= forward::te_asks_trailers(h.value);
        }
        if upgrading && name.eq_ignore_ascii_case(b"upgrade") {
            copy.flush(out);
            upgrade_line(out, name, h.value);
            continue;
        }
        // `Expect`: the client's line ends here; an attempt that passes the expectation on
        // writes its own (`RequestHead::expect_upstream`, docs/proxy.md).
        if dropped(name, all.clone(), head.facts.connection_names, upgrading)
            || name.eq_ignore_ascii_case(b"expect")
            || forward::is_replaced_forwarding(name)
            || req
                .extra
                .iter()
                .any(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name))
        {
            continue;
        }
        copy.line(out, name, h.value);
    }
    copy.flush(out);
    framing(out, head.body, head.facts.content_length);
    if te_trailers {
        out.extend_from_slice(b"te: trailers\r\n");
    }
    if upgrading {
        out.extend_from_slice(b"connection: upgrade\r\n");
    }
    let mut ip = [0u8; 64];
    let len = forward::ip_text(req.client.to_canonical(), &mut ip);
    let ip = &ip[..len];
    // weir's forwarding lines, their constant parts joined (fewer, larger copies;
    // the same bytes as one `line` each).
    out.reserve(2 * ip.len() + authority.map_or(0, <[u8]>::len) + 96);
    out.extend_from_slice(b"x-forwarded-for: ");
    out.extend_from_slice(ip);
    out.extend_from_slice(b"\r\nx-real-ip: ");
    out.extend_from_slice(ip);
    if let Some(host) = authority {
        out.extend_from_slice(b"\r\nx-forwarded-host: ");
        out.extend_from_slice(host);
    }
    let proto: &[u8] = match req.proto {
        Proto::Http => b"\r\nx-forwarded-proto: http\r\n",
        Proto::Https => b"\r\nx-forwarded-proto: https\r\n",
    };
    out.extend_from_slice(proto);
    for (name, value) in req.extra {
        if from_target.is_some() && name.eq_ignore_ascii_case("host") {
            continue; // the target's authority is the Host
        }
        line(out, name.as_bytes(), value);
    }
    out.extend_from_slice(b"\r\n");
}

/// The client side of a response: what it speaks and whether it asked to keep the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientSide {
    /// The client's request version.
    pub version: Version,
    /// The client's request allows another one after it ([`RequestHead::keep_alive`]) and
    /// weir is willing (not draining, not at a request cap).
    pub keep_alive: bool,
}

/// How the response body goes to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyOut {
    /// No body.
    None,
    /// `n` bytes, copied as they arrive.
    Length(u64),
    /// Chunked to a 1.1 client: chunked again, with weir's own framing
    /// ([`super::chunked::ChunkedDecoder::rechunk`]: canonical size lines, trailers filtered).
    PassChunked,
    /// Chunked to a 1.0 client: decoded, the data copied, the end marked by closing.
    DecodeChunked,
    /// Until the upstream closes, then close the client too.
    UntilClose,
    /// `101`: both directions become a byte tunnel.
    Tunnel,
}

/// What [`write_response_head`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseOut {
    /// The client connection stays open after the body.
    pub keep_alive: bool,
    /// How to send the body.
    pub body: BodyOut,
}

/// Writes the client's response head for the upstream's `head` into `out` (appended). weir
/// answers with its own version, HTTP/1.1, whatever the upstream's (RFC 9110 §2.5), and keeps
/// a connection only when the client can tell where the body ends: an HTTP/1.0 client gets
/// keep-alive only for a response with a length. `extra` (weir's `X-Balancer-*`,
/// `X-Request-ID`) replace any upstream line of the same name.
pub fn write_response_head(
    head: &ResponseHead<'_, '_>,
    client: ClientSide,
    extra: &[(&str, &[u8])],
    out: &mut Vec<u8>,
) -> ResponseOut {
    response_out(&Response::of(head), pairs(head.headers), client, extra, out)
}

/// A response head as the writers read it: its lines come apart ([`pairs`] of a parsed head, or
/// a kept head's places), so that a kept head is written without being rebuilt.
pub(super) struct Response<'b> {
    pub(super) status: u16,
    pub(super) reason: &'b [u8],
    pub(super) raw: &'b [u8],
    pub(super) body: BodyFraming,
    pub(super) facts: Facts,
}

impl<'b> Response<'b> {
    fn of(head: &ResponseHead<'_, 'b>) -> Self {
        Response {
            status: head.status,
            reason: head.reason.as_bytes(),
            raw: head.raw,
            body: head.body,
            facts: head.facts,
        }
    }
}

/// A parsed head's lines as `(name, value)` bytes.
fn pairs<'a>(headers: &'a [Header<'_>]) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone {
    headers.iter().map(|h| (h.name.as_bytes(), h.value))
}

/// [`write_response_head`] of a head given as its parts and lines.
pub(super) fn response_out<'a>(
    head: &Response<'a>,
    lines: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
    client: ClientSide,
    extra: &[(&str, &[u8])],
    out: &mut Vec<u8>,
) -> ResponseOut {
    let http10 = client.version == Version::Http10;
    let switching = head.status == 101;
    let body = match head.body {
        _ if switching => BodyOut::Tunnel,
        BodyFraming::Empty => BodyOut::None,
        BodyFraming::Length(n) => BodyOut::Length(n),
        BodyFraming::Chunked if http10 => BodyOut::DecodeChunked,
        BodyFraming::Chunked => BodyOut::PassChunked,
        BodyFraming::UntilClose => BodyOut::UntilClose,
    };
    let keep_alive = client.keep_alive
        && !switching
        && !matches!(body, BodyOut::DecodeChunked | BodyOut::UntilClose);
    let mut copy = Runs::new(head.raw);
    // The status line joins the run of lines after it when the upstream's stands as weir's
    // would: HTTP/1.1, the same status and reason.
    if !copy.status_line(head.status, head.reason) {
        status_line(out, head.status, head.reason);
    }
    headers(out, &mut copy, lines, head.facts, switching, extra);
    // A HEAD or 304 response keeps its Content-Length (it describes the representation);
    // 1xx and 204 never carry one (RFC 9110 §8.6).
    match (head.facts.content_length, body) {
        (_, BodyOut::Tunnel) => {}
        (Some(n), _) if head.status >= 200 && head.status != 204 => content_length(out, n),
        _ => {}
    }
    if body == BodyOut::PassChunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    if switching {
        out.extend_from_slice(b"connection: upgrade\r\n");
    } else if !keep_alive {
        out.extend_from_slice(b"connection: close\r\n");
    } else if http10 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    for (name, value) in extra {
        line(out, name.as_bytes(), value);
    }
    out.extend_from_slice(b"\r\n");
    ResponseOut { keep_alive, body }
}

/// Whether an interim response (`100`, `103`, ...) is relayed to the client: only to HTTP/1.1
/// clients (RFC 9110 §15.2: a server must not send 1xx to an HTTP/1.0 client).
#[must_use]
pub const fn relay_interim(client: Version) -> bool {
    matches!(client, Version::Http11)
}

/// Writes an interim response head for the client (hop-by-hop headers dropped).
pub fn write_interim(head: &ResponseHead<'_, '_>, out: &mut Vec<u8>) {
    status_line(out, head.status, head.reason.as_bytes());
    let mut copy = Runs::new(head.raw);
    headers(out, &mut copy, pairs(head.headers), head.facts, false, &[]);
    out.extend_from_slice(b"\r\n");
}

/// An upgrade request's `Upgrade` line without its `h2c` offers (`forward::is_h2c`); as sent
/// when it has none, left out when it has nothing else.
fn upgrade_line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    if !value.split(|&b| b == b',').any(forward::is_h2c) {
        return line(out, name, value);
    }
    let mut first = true;
    for p in tokens(value).filter(|p| !forward::is_h2c(p)) {
        if first {
            out.extend_from_slice(name);
            out.extend_from_slice(b": ");
            first = false;
        } else {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(p);
    }
    if !first {
        out.extend_from_slice(b"\r\n");
    }
}

fn status_line(out: &mut Vec<u8>, status: u16, reason: &[u8]) {
    out.extend_from_slice(&status_prefix(status));
    out.extend_from_slice(reason);
    out.extend_from_slice(b"\r\n");
}

/// `HTTP/1.1 <status> ` (a status of 100..=599: three digits).
const fn status_prefix(status: u16) -> [u8; 13] {
    let mut p = *b"HTTP/1.1 000 ";
    p[9] = b'0' + (status / 100) as u8;
    p[10] = b'0' + (status / 10 % 10) as u8;
    p[11] = b'0' + (status % 10) as u8;
    p
}

/// The end-to-end lines of a response, in order (`all` its lines, copied through `copy`).
fn headers<'a>(
    out: &mut Vec<u8>,
    copy: &mut Runs<'_>,
    all: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
    facts: Facts,
    switching: bool,
    extra: &[(&str, &[u8])],
) {
    for (name, value) in all.clone() {
        if switching && name.eq_ignore_ascii_case(b"upgrade") {
            copy.line(out, name, value);
            continue;
        }
        if dropped(name, all.clone(), facts.connection_names, switching)
            || extra
                .iter()
                .any(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name))
        {
            continue;
        }
        copy.line(out, name, value);
    }
    copy.flush(out);
}

/// Copied header lines, written as `name: value\r\n`. A line that stands exactly so in the
/// head's bytes joins the run of such lines before it in the head, and a run is copied whole:
/// the same bytes as one [`line`] per header, in fewer copies.
struct Runs<'r> {
    raw: &'r [u8],
    /// The pending run, `raw[start..end]` (empty when `start == end`).
    start: usize,
    end: usize,
}

impl<'r> Runs<'r> {
    const fn new(raw: &'r [u8]) -> Self {
        Runs {
            raw,
            start: 0,
            end: 0,
        }
    }

    /// One line, `value` a slice of the head's bytes (or not: then written apart).
    fn line(&mut self, out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
        match self.span(name, value) {
            Some((s, e)) if s == self.end && self.start != self.end => self.end = e,
            Some((s, e)) => {
                self.flush(out);
                (self.start, self.end) = (s, e);
            }
            None => {
                self.flush(out);
                line(out, name, value);
            }
        }
    }

    /// Start the run with the request line `method target HTTP/1.1` CRLF when it stands so in
    /// the head's bytes (`method` a slice of them, `target` the bytes after its space or equal
    /// to them); whether it did (nothing pending before).
    fn request_line(&mut self, method: &[u8], target: &[u8]) -> bool {
        let Some(s) = self.offset(method) else {
            return false;
        };
        let t = s + method.len() + 1;
        let e = t + target.len() + 11;
        let raw = self.raw;
        let fits = e <= raw.len()
            && raw[t - 1] == b' '
            && (target.as_ptr() as usize == raw.as_ptr() as usize + t
                || raw[t..t + target.len()] == *target)
            && raw[e - 11..e] == *b" HTTP/1.1\r\n";
        if fits {
            (self.start, self.end) = (s, e);
        }
        fits
    }

    /// Start the run with the status line `HTTP/1.1 <status> <reason>` CRLF when it stands so
    /// in the head's bytes (`reason` a slice of them, not empty); whether it did.
    fn status_line(&mut self, status: u16, reason: &[u8]) -> bool {
        let Some(r) = self
            .offset(reason)
            .filter(|&r| r >= 13 && !reason.is_empty())
        else {
            return false;
        };
        let e = r + reason.len() + 2;
        let raw = self.raw;
        let fits =
            e <= raw.len() && raw[r - 13..r] == status_prefix(status) && raw[e - 2..e] == *b"\r\n";
        if fits {
            (self.start, self.end) = (r - 13, e);
        }
        fits
    }

    /// Where `s` begins in the head's bytes, if it is a slice of them.
    fn offset(&self, s: &[u8]) -> Option<usize> {
        let at = (s.as_ptr() as usize).checked_sub(self.raw.as_ptr() as usize)?;
        (at.checked_add(s.len())? <= self.raw.len()).then_some(at)
    }

    /// Write the pending run (before anything else goes into `out`).
    fn flush(&mut self, out: &mut Vec<u8>) {
        if self.start != self.end {
            out.extend_from_slice(&self.raw[self.start..self.end]);
        }
        self.start = self.end;
    }

    /// Where `name: value\r\n` stands in the head's bytes, if it does: `name` is a slice of
    /// them (its address inside their range), followed by `: `, `value` (its address next,
    /// unless empty) and CRLF.
    fn span(&self, name: &[u8], value: &[u8]) -> Option<(usize, usize)> {
        let base = self.raw.as_ptr() as usize;
        let s = (name.as_ptr() as usize).checked_sub(base)?;
        let v = s.checked_add(name.len())?.checked_add(2)?;
        let e = v.checked_add(value.len())?.checked_add(2)?;
        let raw = self.raw;
        let fits = e <= raw.len()
            && raw[v - 2..v] == *b": "
            && (value.is_empty() || value.as_ptr() as usize == base + v)
            && raw[e - 2..e] == *b"\r\n";
        fits.then_some((s, e))
    }
}

/// Whether a line is not copied: hop-by-hop (C-PATH-6), named by a `Connection` line, or a
/// `Content-Length` (weir writes its own from the parsed framing).
fn dropped<'a>(
    name: &[u8],
    mut all: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    connection_names: bool,
    upgrading: bool,
) -> bool {
    if forward::is_hop_by_hop(name) || is_name(name, b"content-length") {
        return true;
    }
    connection_names
        && forward::connection_may_remove(name, upgrading)
        && all.any(|(n, v)| {
            n.eq_ignore_ascii_case(b"connection") && tokens(v).any(|t| t.eq_ignore_ascii_case(name))
        })
}

/// The request's framing line. An explicit `Content-Length: 0` is kept (the body is empty
/// either way, but a backend may require a length on a `POST`/`PUT`, and it is what the client
/// said); a request that named no length gets none.
fn framing(out: &mut Vec<u8>, body: BodyFraming, declared: Option<u64>) {
    match body {
        BodyFraming::Length(n) => content_length(out, n),
        BodyFraming::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        BodyFraming::Empty if declared == Some(0) => content_length(out, 0),
        BodyFraming::Empty | BodyFraming::UntilClose => {}
    }
}

fn content_length(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(b"content-length: ");
    push_decimal(out, n);
    out.extend_from_slice(b"\r\n");
}

/// `n` in decimal appended to `out`, digit by digit (`core::fmt` costs about a
/// hundred instructions for a small number); the same text as `Display`.
pub fn push_decimal(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut v = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

#[inline]
fn line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.reserve(name.len() + value.len() + 4);
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}
