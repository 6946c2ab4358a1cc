//! The request id in force for one request (C-PATH-3).
//!
//! A client (or a proxy in front of weir) may send `X-Request-ID`. weir keeps it when it is 1–128
//! characters of `[A-Za-z0-9._:-]`, and otherwise generates a fresh one: 32 lower-case hex
//! characters (128 random bits, the size of a UUID without its dashes). The id in force is sent
//! upstream, replacing whatever the client sent, and returned on every response (C-PATH-3,
//! C-PATH-4, C-PATH-11).
//!
//! Why this alphabet: it covers UUIDs (with or without dashes), ULIDs, W3C trace ids, Heroku's and
//! AWS ALB's `Root=1-...` style ids minus the `=` and `;`, and nothing in it needs escaping in a
//! JSON log line, a header or a metric exemplar. The reference balancer (reference/000) likewise
//! keeps a valid incoming id and creates one otherwise; Envoy regenerates an external id unless
//! told to keep it (`preserve_external_request_id`).
//!
//! Decisions (docs/forwarding.md):
//! - an `X-Request-ID` header that appears on more than one line is ambiguous and is replaced,
//!   even if every line is valid;
//! - validation looks at the length first, so a 1 MiB header is rejected without reading its
//!   bytes (O(1)); a candidate of at most 128 bytes is scanned once.
//!
//! A [`RequestId`] lives inline (a 128-byte array and a length): keeping or generating an id
//! never allocates.

use core::fmt;

use http::{HeaderMap, HeaderName, HeaderValue};

use crate::Rng;
use crate::headers::HeaderLines;

/// The `X-Request-ID` header name.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The longest id weir keeps (C-PATH-3).
pub const MAX_LEN: usize = 128;

/// Length of a generated id: 32 lower-case hex characters (128 bits).
pub const GENERATED_LEN: usize = 32;

/// A valid request id: 1–128 characters of `[A-Za-z0-9._:-]` (C-PATH-3).
///
/// Only [`RequestId::parse`] and [`RequestId::generate`] make one, so every value is valid.
#[derive(Clone, Copy)]
pub struct RequestId {
    bytes: [u8; MAX_LEN],
    len: u8,
}

/// `x` as 8 lower-case hex characters, most significant first: its nibbles spread to one per
/// byte, then each made a digit or a letter, all eight at once (a table look-up per
/// nibble cost 32 per generated id).
const fn hex8(x: u32) -> [u8; 8] {
    let mut v = x as u64;
    v = (v | (v << 16)) & 0x0000_ffff_0000_ffff;
    v = (v | (v << 8)) & 0x00ff_00ff_00ff_00ff;
    v = (v | (v << 4)) & 0x0f0f_0f0f_0f0f_0f0f;
    // 1 in each byte whose nibble is 10 or more.
    let letters = ((v + 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101;
    // `0` is 0x30; `a` is 0x27 past `0` + 10.
    (v + 0x3030_3030_3030_3030 + letters * 0x27).to_be_bytes()
}

/// Where the id in force came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdOrigin {
    /// The client's `X-Request-ID` was valid and is kept.
    Kept,
    /// weir generated the id, for the given reason.
    Generated(Replaced),
}

/// Why the client's id was not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replaced {
    /// there was no `X-Request-ID` header
    Absent,
    /// the header was empty, longer than 128 bytes or had a byte outside `[A-Za-z0-9._:-]`
    Invalid,
    /// the header appeared on more than one line
    Repeated,
}

impl IdOrigin {
    /// `true` when the client's id was kept.
    #[must_use]
    pub fn is_kept(self) -> bool {
        matches!(self, IdOrigin::Kept)
    }
}

/// `true` for the bytes of the id alphabet `[A-Za-z0-9._:-]`.
#[inline]
fn allowed(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-')
}

impl RequestId {
    /// Parses a candidate id (a header value's bytes). `None` unless it has 1–128 bytes, all of
    /// the alphabet `[A-Za-z0-9._:-]`. The length is checked first, so a long candidate costs O(1).
    #[must_use]
    pub fn parse(candidate: &[u8]) -> Option<RequestId> {
        if candidate.is_empty() || candidate.len() > MAX_LEN {
            return None;
        }
        if !candidate.iter().all(|&b| allowed(b)) {
            return None;
        }
        let mut bytes = [0u8; MAX_LEN];
        bytes[..candidate.len()].copy_from_slice(candidate);
        Some(RequestId {
            bytes,
            // In range: checked against MAX_LEN (128) above.
            len: candidate.len() as u8,
        })
    }

    /// Parses a header value; see [`RequestId::parse`].
    #[must_use]
    pub fn parse_header(value: &HeaderValue) -> Option<RequestId> {
        RequestId::parse(value.as_bytes())
    }

    /// A fresh id: 32 lower-case hex characters from two draws of `rng` (C-PATH-3).
    pub fn generate(rng: &mut dyn Rng) -> RequestId {
        let mut bytes = [0u8; MAX_LEN];
        let words = [rng.next_u64(), rng.next_u64()];
        for (w, word) in words.iter().enumerate() {
            bytes[w * 16..w * 16 + 8].copy_from_slice(&hex8((word >> 32) as u32));
            bytes[w * 16 + 8..w * 16 + 16].copy_from_slice(&hex8(*word as u32));
        }
        RequestId {
            bytes,
            len: GENERATED_LEN as u8,
        }
    }

    /// The id as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        // Every byte is ASCII (the alphabet is checked by `parse`, hex by `generate`), so this
        // never fails; the fallback only keeps the code free of `unwrap`.
        core::str::from_utf8(self.as_bytes()).unwrap_or("")
    }

    /// The id's bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// Length in bytes (1..=128).
    #[must_use]
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Always `false`: a request id has at least one character. Present for API symmetry.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The id as a header value (allocates the value's buffer).
    #[must_use]
    pub fn to_header_value(&self) -> HeaderValue {
        match HeaderValue::from_bytes(self.as_bytes()) {
            Ok(v) => v,
            // Unreachable: the alphabet is a subset of visible ASCII, which every header value
            // may carry. An empty value is the harmless fallback.
            Err(_) => HeaderValue::from_static(""),
        }
    }
}

impl PartialEq for RequestId {
    fn eq(&self, other: &RequestId) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for RequestId {}

impl core::hash::Hash for RequestId {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl fmt::Debug for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RequestId").field(&self.as_str()).finish()
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The id in force for a request (C-PATH-3): the client's `X-Request-ID` when there is exactly
/// one such header line and it is valid, otherwise a generated one. Reads at most the first two
/// header lines and at most 128 bytes of a value.
pub fn request_id_in_force<H: HeaderLines + ?Sized>(
    headers: &H,
    rng: &mut dyn Rng,
) -> (RequestId, IdOrigin) {
    let name = X_REQUEST_ID;
    let mut lines = headers.lines(&name);
    let reason = match (lines.next(), lines.next()) {
        (None, _) => Replaced::Absent,
        (Some(_), Some(_)) => Replaced::Repeated,
        (Some(value), None) => match RequestId::parse(value) {
            Some(id) => return (id, IdOrigin::Kept),
            None => Replaced::Invalid,
        },
    };
    (RequestId::generate(rng), IdOrigin::Generated(reason))
}

/// Writes `X-Request-ID: <id>` into `headers`, replacing every line the client sent (C-PATH-3).
/// Used for the upstream request and for every response weir returns.
pub fn set_request_id(headers: &mut HeaderMap, id: &RequestId) {
    headers.insert(X_REQUEST_ID, id.to_header_value());
}

#[cfg(test)]
mod tests;
