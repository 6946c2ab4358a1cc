//! The framing rules of RFC 9112, one set for every reader of an HTTP/1 head (C-PATH-12):
//! weir's head parsers (requests and [`super::response`]) feed header lines to
//! [`Facts::header`] and ask [`Facts::request_body`] / [`Facts::response_body`] for the
//! verdict, so the two cannot drift.

use core::fmt;

use crate::headers::is_name;

/// How a message's body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body at all (a request without length, HEAD/1xx/204/304 responses).
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// The chunked transfer coding.
    Chunked,
    /// A response without length: the body runs until the upstream closes.
    UntilClose,
}

impl BodyFraming {
    /// Whether the end of the body is known without the connection closing.
    #[must_use]
    pub const fn is_delimited(self) -> bool {
        !matches!(self, BodyFraming::UntilClose)
    }
}

/// What the header lines of one head said, as far as framing and connection handling go.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Facts {
    /// `Host` lines seen (saturating).
    pub hosts: u8,
    /// A `Host` value is not a valid authority ([`valid_host`]); a request rule only, so it
    /// is kept apart from `error` (a response's `Host` line means nothing to framing).
    pub host_invalid: bool,
    /// The `Content-Length` value, when every line agreed.
    pub content_length: Option<u64>,
    /// A `Transfer-Encoding` line was seen.
    pub transfer_encoding: bool,
    /// `Connection: close`.
    pub close: bool,
    /// `Connection: keep-alive`.
    pub keep_alive: bool,
    /// `Connection: upgrade`.
    pub upgrade_token: bool,
    /// An `Upgrade` header offering a protocol other than `h2c`.
    pub upgrade_header: bool,
    /// A `Connection` line names something other than `close`, `keep-alive`, `upgrade`
    /// (headers the writers must then look for and drop).
    pub connection_names: bool,
    /// `Expect: 100-continue`.
    pub expect_continue: bool,
    /// The first rule broken, if any.
    pub error: Option<FramingError>,
}

impl Facts {
    /// Nothing seen yet.
    #[must_use]
    pub const fn new() -> Facts {
        Facts {
            hosts: 0,
            host_invalid: false,
            content_length: None,
            transfer_encoding: false,
            close: false,
            keep_alive: false,
            upgrade_token: false,
            upgrade_header: false,
            connection_names: false,
            expect_continue: false,
            error: None,
        }
    }

    /// One header line.
    pub fn header(&mut self, name: &[u8], value: &[u8]) {
        match name.len() {
            4 if is_name(name, b"host") => {
                self.hosts = self.hosts.saturating_add(1);
                self.host_invalid |= !valid_host(trim(value));
            }
            6 if is_name(name, b"expect") => {
                self.expect_continue |= trim(value).eq_ignore_ascii_case(b"100-continue");
            }
            // `h2c` is never an upgrade weir makes (`forward::is_h2c`): offered alone, the
            // request is a plain one and its `Upgrade` is dropped as hop-by-hop.
            7 if is_name(name, b"upgrade") => {
                self.upgrade_header |= crate::forward::offers_upgrade(value);
            }
            10 if is_name(name, b"connection") => {
                for t in tokens(value) {
                    self.close |= t.eq_ignore_ascii_case(b"close");
                    self.keep_alive |= t.eq_ignore_ascii_case(b"keep-alive");
                    let upgrade = t.eq_ignore_ascii_case(b"upgrade");
                    self.upgrade_token |= upgrade;
                    self.connection_names |= !upgrade
                        && !t.eq_ignore_ascii_case(b"close")
                        && !t.eq_ignore_ascii_case(b"keep-alive");
                }
            }
            14 if is_name(name, b"content-length") => {
                // One line, one number (a repeated Content-Length is refused even
                // with equal values, as nginx and hyper do; RFC 9112 §6.3 allows either).
                match (content_length(value), self.content_length) {
                    (Some(n), None) => self.content_length = Some(n),
                    _ => self.fail(FramingError::ContentLength),
                }
            }
            17 if is_name(name, b"transfer-encoding") => {
                // weir understands one coding, `chunked`, alone: a list (`gzip, chunked`) is
                // refused rather than rewritten to plain `chunked` (RFC 9112 §6.1 lets a
                // server refuse codings it does not understand; nginx 1.23+ does the same).
                // Several lines are one list (RFC 9110 §5.3), so a second line is refused too.
                if self.transfer_encoding || !only_chunked(value) {
                    self.fail(FramingError::TransferEncoding);
                }
                self.transfer_encoding = true;
            }
            _ => {}
        }
    }

    fn fail(&mut self, e: FramingError) {
        self.error.get_or_insert(e);
    }

    /// The verdict on a request head with these facts: how its body is framed, or the rule it
    /// broke. The order of the checks is the order of the messages a client sees.
    pub fn request_body(&self, http10: bool) -> Result<BodyFraming, FramingError> {
        if self.transfer_encoding && self.content_length.is_some() {
            return Err(FramingError::LengthAndTransferEncoding);
        }
        if let Some(e) = self.error {
            return Err(e);
        }
        // RFC 9112 §6.1: Transfer-Encoding in an HTTP/1.0 message is faulty framing.
        if self.transfer_encoding && http10 {
            return Err(FramingError::TransferEncoding);
        }
        if self.hosts > 1 {
            return Err(FramingError::HostRepeated);
        }
        if self.hosts == 0 && !http10 {
            return Err(FramingError::HostMissing);
        }
        if self.host_invalid {
            return Err(FramingError::HostInvalid);
        }
        Ok(if self.transfer_encoding {
            BodyFraming::Chunked
        } else {
            match self.content_length {
                Some(n) if n > 0 => BodyFraming::Length(n),
                _ => BodyFraming::Empty,
            }
        })
    }

    /// The verdict on a response head (RFC 9112 §6.3): the same strictness as for requests
    /// (Host is not read, Transfer-Encoding refused in HTTP/1.0); `bodiless` for a response to HEAD and for 1xx, 204 and 304.
    pub fn response_body(&self, bodiless: bool, http10: bool) -> Result<BodyFraming, FramingError> {
        if self.transfer_encoding && self.content_length.is_some() {
            return Err(FramingError::LengthAndTransferEncoding);
        }
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.transfer_encoding && http10 {
            return Err(FramingError::TransferEncoding);
        }
        Ok(if bodiless {
            BodyFraming::Empty
        } else if self.transfer_encoding {
            BodyFraming::Chunked
        } else {
            match self.content_length {
                Some(0) => BodyFraming::Empty,
                Some(n) => BodyFraming::Length(n),
                None => BodyFraming::UntilClose,
            }
        })
    }

    /// Whether the connection may carry another message after this one, by its headers and
    /// version (RFC 9112 §9.3): HTTP/1.1 unless `close`, HTTP/1.0 only with `keep-alive`.
    #[must_use]
    pub const fn persistent(&self, http10: bool) -> bool {
        !self.close && (!http10 || self.keep_alive)
    }

    /// Whether the head asks for a protocol switch (`Connection: upgrade` and `Upgrade`).
    #[must_use]
    pub const fn upgrade(&self) -> bool {
        self.upgrade_token && self.upgrade_header
    }
}

/// `v` without leading and trailing spaces and tabs.
pub(crate) fn trim(v: &[u8]) -> &[u8] {
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

/// The comma-separated tokens of a header value, trimmed, empty ones skipped.
pub(crate) fn tokens(v: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    v.split(|&b| b == b',').map(trim).filter(|t| !t.is_empty())
}

/// A `Content-Length` value: one decimal number of at most 19 digits (no sign, no list).
pub(crate) fn content_length(v: &[u8]) -> Option<u64> {
    let v = trim(v);
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0')))
}

/// Whether a `Transfer-Encoding` value is exactly one coding, `chunked` (any case).
pub(crate) fn only_chunked(v: &[u8]) -> bool {
    let mut codings = tokens(v);
    codings
        .next()
        .is_some_and(|c| c.eq_ignore_ascii_case(b"chunked"))
        && codings.next().is_none()
}

/// Whether `v` is a valid `Host` value (RFC 9110 §7.2, RFC 3986 §3.2.2-3): a host, either a
/// reg-name (unreserved, sub-delims, `%` and two hex digits; this covers IPv4 too) or an
/// IP-literal (`[` IPv6 address or `v`-IPvFuture `]`), then an optional `:` and port of 1–5
/// digits no larger than 65535. Not empty, no userinfo (`@`), no path (`/`), no zone id.
#[must_use]
pub fn valid_host(v: &[u8]) -> bool {
    if v.first() == Some(&b'[') {
        let Some(end) = v.iter().position(|&b| b == b']') else {
            return false;
        };
        let (literal, rest) = v.split_at(end + 1);
        return ip_literal(&literal[1..end])
            && match rest {
                [] => true,
                [b':', port @ ..] => valid_port(port),
                _ => false,
            };
    }
    // A non-empty reg-name (an IPv4 address is one too) up to the first `:`, in one pass
    // (no separate search for the colon).
    let mut i = 0;
    while i < v.len() {
        match v[i] {
            // One table look-up per byte: unreserved or a sub-delim.
            b if REG_NAME[b as usize] => i += 1,
            b'%' if i + 2 < v.len()
                && v[i + 1].is_ascii_hexdigit()
                && v[i + 2].is_ascii_hexdigit() =>
            {
                i += 3;
            }
            b':' => break,
            _ => return false,
        }
    }
    i > 0 && (i == v.len() || valid_port(&v[i + 1..]))
}

/// A port: 1–5 digits, at most 65535.
fn valid_port(p: &[u8]) -> bool {
    if p.is_empty() || p.len() > 5 {
        return false;
    }
    let mut n = 0u32;
    for &d in p {
        if !d.is_ascii_digit() {
            return false;
        }
        n = n * 10 + u32::from(d - b'0');
    }
    n <= 65535
}

/// The bytes of a reg-name other than `%`: [`unreserved`] or [`sub_delim`].
static REG_NAME: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = unreserved(b as u8) || sub_delim(b as u8);
        b += 1;
    }
    t
};

/// Inside `[...]`: an IPv6 address (no zone id) or an IPvFuture (`v1.x`).
fn ip_literal(l: &[u8]) -> bool {
    if let [b'v' | b'V', rest @ ..] = l {
        let Some(dot) = rest.iter().position(|&b| b == b'.') else {
            return false;
        };
        let (ver, addr) = (&rest[..dot], &rest[dot + 1..]);
        return !ver.is_empty()
            && ver.iter().all(u8::is_ascii_hexdigit)
            && !addr.is_empty()
            && addr
                .iter()
                .all(|&b| unreserved(b) || sub_delim(b) || b == b':');
    }
    core::str::from_utf8(l).is_ok_and(|s| s.parse::<std::net::Ipv6Addr>().is_ok())
}

const fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

const fn sub_delim(b: u8) -> bool {
    matches!(
        b,
        b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'='
    )
}

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
