//! gRPC's view of weir's own answers and of a backend's trailers-only answer (C-GRPC-3).
//!
//! A gRPC client reads its call's outcome from `grpc-status`, not from the HTTP status: a
//! `503` with a JSON body is, to it, a protocol error (`UNKNOWN` or `UNAVAILABLE` with a
//! message about a missing content type), which tells the caller nothing of why. So an answer
//! weir makes itself to a gRPC request takes gRPC's "Trailers-Only" form: HTTP `200`,
//! `content-type: application/grpc`, no body, and `grpc-status` / `grpc-message` in the one
//! HEADERS frame (grpc/doc/PROTOCOL-HTTP2.md). Envoy's local replies do the same for gRPC
//! requests. The status code follows weir's own HTTP status, in one table ([`code_for`]).

use core::fmt;

use http::HeaderName;

use crate::headers::HeaderLines;

pub mod health;
pub mod timeout;

/// `grpc-status`.
pub const STATUS: &str = "grpc-status";
/// `grpc-message`.
pub const MESSAGE: &str = "grpc-message";
/// The content type of weir's gRPC answers.
pub const CONTENT_TYPE: &str = "application/grpc";

/// The gRPC status codes weir answers with (grpc/doc/statuscodes.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Code {
    /// 4: the call's time ran out (a per-try or header timeout, a body not read in time).
    DeadlineExceeded = 4,
    /// 8: the client is over its rate limit.
    ResourceExhausted = 8,
    /// 13: the request was malformed.
    Internal = 13,
    /// 14: no backend could take the call (none available, gate or bulkhead full,
    /// unreachable); the client may retry.
    Unavailable = 14,
}

impl Code {
    /// The numeric code, as `grpc-status` carries it.
    #[must_use]
    pub const fn as_u8(self) -> u8 {
        self as u8
    }
}

/// `CANCELLED` (1): what a gRPC client reads when it cancelled its call, recorded for a call
/// whose client left before a response head (`499`).
pub const CANCELLED: u8 = 1;
/// `UNKNOWN` (2): what a gRPC client makes of a `grpc-status` that is not a known code.
pub const UNKNOWN: u8 = 2;
/// The largest gRPC status code (`UNAUTHENTICATED`, 16).
pub const MAX_CODE: u8 = 16;

/// Where the access log and the request metric take a request's gRPC status from (C-OBS-3,
/// C-OBS-1: the `grpc_status` field and label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatusSource {
    /// Not a gRPC call (or a health answer): no gRPC status.
    NotGrpc,
    /// Known now: weir's own answer's code (C-GRPC-3), or `CANCELLED` for a client that left.
    Known(u8),
    /// A backend's response to a gRPC call: its `grpc-status`, from the head of a
    /// trailers-only answer or from the trailers at the body's end ([`status_code`]); none when
    /// neither carried one.
    Response,
}

impl StatusSource {
    /// The code when it is known now.
    #[must_use]
    pub const fn known(self) -> Option<u8> {
        match self {
            StatusSource::Known(c) => Some(c),
            _ => None,
        }
    }
}

/// A backend's `grpc-status` value as a bounded code (0..=16): a decimal code in range is
/// itself; anything else is `UNKNOWN` (2), as a gRPC client reads it.
#[must_use]
pub fn status_code(value: &[u8]) -> u8 {
    let v = value.trim_ascii();
    let code = match v {
        [d] if d.is_ascii_digit() => d - b'0',
        [b'1', d] if d.is_ascii_digit() => 10 + (d - b'0'),
        _ => return UNKNOWN,
    };
    if code <= MAX_CODE { code } else { UNKNOWN }
}

/// The gRPC code of weir's own answer of HTTP status `status` (C-GRPC-3): `502` and `503`
/// (no backend, gate, bulkhead, store, unreachable backend) are `UNAVAILABLE`; `429` is
/// `RESOURCE_EXHAUSTED`; `504` and `408` (a deadline passed) are `DEADLINE_EXCEEDED`;
/// anything else weir answers itself (`400`, `405`, `414`, a malformed request) is `INTERNAL`.
#[must_use]
pub const fn code_for(status: u16) -> Code {
    match status {
        502 | 503 => Code::Unavailable,
        429 => Code::ResourceExhausted,
        504 | 408 => Code::DeadlineExceeded,
        _ => Code::Internal,
    }
}

/// Whether a request is a gRPC call: its `content-type` starts with `application/grpc`
/// (`application/grpc`, `application/grpc+proto`, `application/grpc-web`, …; ASCII
/// case-insensitive, as media types are).
#[must_use]
pub fn is_grpc<H: HeaderLines + ?Sized>(headers: &H) -> bool {
    let prefix = CONTENT_TYPE.as_bytes();
    headers
        .first_line(&http::header::CONTENT_TYPE)
        .is_some_and(|v| v.len() >= prefix.len() && v[..prefix.len()].eq_ignore_ascii_case(prefix))
}

/// Whether a backend's response head is a trailers-only gRPC answer of `UNAVAILABLE` (its
/// stream ended with the head, `end_stream`, and the head carries `grpc-status: 14`). Such an
/// answer counts as a failure for retries and the breaker, as a `503` would (C-GRPC-3). A
/// `grpc-status` in the trailers of a streamed body cannot count: the head, and maybe some of
/// the body, is already on its way to the client when the trailers arrive.
#[must_use]
pub fn trailers_only_unavailable<H: HeaderLines + ?Sized>(headers: &H, end_stream: bool) -> bool {
    end_stream
        && headers
            .first_line(&HeaderName::from_static(STATUS))
            .is_some_and(|v| v.trim_ascii() == b"14")
}

/// The `grpc-message` of weir's own answer: the C-PATH-11 message and the request id,
/// `<message> (request id <id>)`, percent-encoded as gRPC asks (every byte outside
/// `0x20..=0x7E`, and `%` itself, as `%XX`). Formatted by `Display`, without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    /// The C-PATH-11 message.
    pub message: &'static str,
    /// The request id in force.
    pub request_id: &'a str,
}

impl fmt::Display for Message<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        percent_encode(f, self.message)?;
        f.write_str(" (request id ")?;
        percent_encode(f, self.request_id)?;
        f.write_str(")")
    }
}

/// gRPC's percent-encoding of `grpc-message` (PROTOCOL-HTTP2.md, "Percent-Byte-Unencoded").
fn percent_encode(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    let mut rest = s.as_bytes();
    while !rest.is_empty() {
        let plain = rest
            .iter()
            .position(|&b| !(0x20..=0x7E).contains(&b) || b == b'%')
            .unwrap_or(rest.len());
        // The bytes up to `plain` are printable ASCII, so valid UTF-8 on their own.
        f.write_str(core::str::from_utf8(&rest[..plain]).map_err(|_| fmt::Error)?)?;
        if let Some(&b) = rest.get(plain) {
            write!(f, "%{b:02X}")?;
            rest = &rest[plain + 1..];
        } else {
            rest = &[];
        }
    }
    Ok(())
}

#[cfg(all(test, not(loom)))]
mod tests;
