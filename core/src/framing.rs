//! Why a message's framing is refused (C-PATH-12): the errors of the framing rules of RFC 9112
//! that weir's HTTP/1 codec checks on every head ([`crate::h1`]'s `Facts`; the rules, each a
//! `400` with `Connection: close` for a request and a `502` for a response, are listed in
//! docs/proxy.md, "HTTP/1 parsing rules").
//!
//! This module held `RequestFraming`, a streaming smuggling guard fed every byte of a client
//! connection beside hyper's HTTP/1 server. weir's own codec parses every head itself, so the
//! parser is the guard and the second reader was removed (issue 14).

use core::fmt;

/// Why a request head is refused (C-PATH-12).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FramingError {
    /// Both `Content-Length` and `Transfer-Encoding`.
    LengthAndTransferEncoding,
    /// `Transfer-Encoding` other than one `chunked` coding alone (a list such as
    /// `gzip, chunked`, `chunked` twice, another line), or any in HTTP/1.0.
    TransferEncoding,
    /// `Content-Length` not a decimal number, or repeated with different values.
    ContentLength,
    /// An HTTP/1.1 request without `Host`.
    HostMissing,
    /// More than one `Host` line.
    HostRepeated,
    /// A `Host` that is not a valid authority (`h1::valid_host`: a reg-name, IPv4 or
    /// IP-literal and an optional port, no userinfo, no path), empty included.
    HostInvalid,
}

impl FramingError {
    /// A lower-case description for the client's error body.
    #[must_use]
    pub const fn message(&self) -> &'static str {
        match self {
            FramingError::LengthAndTransferEncoding => {
                "request has both content-length and transfer-encoding"
            }
            FramingError::TransferEncoding => {
                "transfer-encoding other than a single chunked is not supported"
            }
            FramingError::ContentLength => {
                "content-length is invalid or repeated with another value"
            }
            FramingError::HostMissing => "http/1.1 request has no host header",
            FramingError::HostRepeated => "request has more than one host header",
            FramingError::HostInvalid => "request host header is not a valid authority",
        }
    }
}

impl fmt::Display for FramingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}
