//! HTTP/2 request rules that hyper's and h2's server leave to the application (RFC 9113).
//!
//! - [`host_agrees`]: a request whose `host` field names another entity than its `:authority`
//!   is malformed (RFC 9113 §8.3.1). h2 accepts it and hands both on; weir routed and wrote
//!   `X-Forwarded-Host` by `host` while the client's HTTP/2 stack named the other, the mismatch
//!   request smuggling between tiers uses. The request engine refuses it with `400`
//!   ([`ClientError::HostMismatch`](crate::response::ClientError::HostMismatch)) before anything
//!   else, as the HTTP/1 codec refuses a bad `Host`.
//! - [`Inbound`] (module `inbound`): a client's trailers that carry a pseudo-header field are
//!   malformed (RFC 9113 §8.1). h2 0.4 drops such fields from the trailers silently and reports
//!   the request complete; `Inbound` reads the client's frames before h2 does and marks such a
//!   trailer block so that h2 resets the stream (`PROTOCOL_ERROR`) itself.

mod hpack;
mod inbound;

pub use hpack::HpackError;
pub use inbound::{HEADER_TABLE_SIZE, Inbound, MAX_FRAME_SIZE};

use crate::headers::HeaderLines;

/// A request's `:scheme` and `:authority`, as an HTTP/2 request carries them apart from
/// `host`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Authority<'h> {
    /// `:scheme` is `https` (default port 443; otherwise 80).
    pub https: bool,
    /// The `:authority` value.
    pub value: &'h str,
}

/// Whether every `host` field of `headers` names the same entity as `authority` (RFC 9113
/// §8.3.1), after the scheme-based normalisation an intermediary must apply (RFC 3986 §6.2.3):
/// the host compared ASCII case-insensitively, an absent or empty port read as the scheme's
/// default. No `host` field agrees (`:authority` alone is the usual HTTP/2 request).
#[must_use]
pub fn host_agrees<H: HeaderLines + ?Sized>(headers: &H, authority: Authority<'_>) -> bool {
    headers
        .lines(&http::header::HOST)
        .all(|host| same_entity(authority.value.as_bytes(), host, authority.https))
}

/// Whether two authorities (`host[:port]`) name the same entity under `https`'s default port.
fn same_entity(a: &[u8], b: &[u8], https: bool) -> bool {
    let default = if https { 443 } else { 80 };
    match (split(a, default), split(b, default)) {
        (Some((ha, pa)), Some((hb, pb))) => pa == pb && ha.eq_ignore_ascii_case(hb),
        _ => false,
    }
}

/// `host[:port]` into the host and the port number (`default` when absent or empty); `None`
/// when the port is not a number up to 65535 or the value has userinfo.
fn split(v: &[u8], default: u16) -> Option<(&[u8], u16)> {
    if v.contains(&b'@') {
        return None;
    }
    let (host, port) = if v.first() == Some(&b'[') {
        let end = v.iter().position(|&b| b == b']')?;
        let (host, rest) = v.split_at(end + 1);
        match rest {
            [] => (host, &[][..]),
            [b':', port @ ..] => (host, port),
            _ => return None,
        }
    } else {
        match v.iter().position(|&b| b == b':') {
            Some(i) => (&v[..i], &v[i + 1..]),
            None => (v, &[][..]),
        }
    };
    if host.is_empty() {
        return None;
    }
    if port.is_empty() {
        return Some((host, default));
    }
    if port.len() > 5 || !port.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = port.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'));
    Some((host, u16::try_from(n).ok()?))
}

#[cfg(test)]
mod tests;
