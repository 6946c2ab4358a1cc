//! The PROXY protocol, versions 1 and 2, as a receiver (C-TLS-3).
//!
//! A TCP load balancer in front of weir (AWS NLB, HAProxy `send-proxy`, GCP's TCP proxy) puts
//! one header before the client's first byte saying whom it accepted the connection from;
//! weir then treats that address as the socket peer (C-FWD-1 applies to it as usual). The
//! format is HAProxy's specification (`doc/proxy-protocol.txt`, "The PROXY protocol",
//! versions 1 and 2):
//!
//! - **v1** is one text line, `PROXY TCP4|TCP6|UNKNOWN <src> <dst> <sport> <dport>\r\n`, at
//!   most [`V1_MAX_LEN`] bytes, CRLF included. `UNKNOWN` (the sender does not know the client)
//!   keeps the socket peer; what follows it is ignored, as the specification says.
//! - **v2** is binary: a 12-byte signature, a version/command byte, a family/transport byte and
//!   a 16-bit length of what follows (addresses, then TLVs, which weir skips). `LOCAL` (a health
//!   check of the proxy itself) and the `UNSPEC` / `UNIX` families keep the socket peer. The
//!   length weir accepts is bounded by [`V2_MAX_PAYLOAD`] (the specification allows 64 KiB; the
//!   TLVs of real senders are a few hundred bytes at most).
//!
//! **Incremental.** [`parse`] is given every byte received so far and answers
//! [`Parse::Incomplete`] until the header is whole, so a header split across reads in any
//! place parses like one read. While it is incomplete every byte given so far belongs to the
//! header, so the caller may consume them; once it is complete, [`Header::len`] says where the
//! client's own bytes begin. Errors are reported as soon as a byte proves the header wrong (a
//! wrong signature byte fails on that byte, not after a timeout).
//!
//! Nothing here does IO or allocates; the input is bounded by the two maxima.
//!
//! **Sending.** [`encode`] writes the header weir sends at the start of a new upstream
//! connection to a backend with `send_proxy_protocol` on (docs/tls.md, "Sending the PROXY
//! protocol to backends"): the `PROXY` command over TCP, the client's address as the source.

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The longest v1 line, CRLF included (the specification's 107 bytes).
pub const V1_MAX_LEN: usize = 107;
/// The most bytes a v2 header may carry after its 16-byte fixed part.
pub const V2_MAX_PAYLOAD: usize = 2048;
/// The longest header [`parse`] accepts, either version.
pub const MAX_LEN: usize = 16 + V2_MAX_PAYLOAD;

/// v2's signature.
const V2_SIG: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// v1's prefix.
const V1_SIG: &[u8; 6] = b"PROXY ";

/// Which versions a listener accepts (`server.proxy_protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Accept {
    /// Text only.
    V1,
    /// Binary only.
    V2,
    /// Either (told apart by the first byte).
    Any,
}

impl Accept {
    fn allows(self, v: Version) -> bool {
        matches!(
            (self, v),
            (Accept::Any, _) | (Accept::V1, Version::V1) | (Accept::V2, Version::V2)
        )
    }
}

/// A header's version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    /// Text.
    V1,
    /// Binary.
    V2,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        })
    }
}

/// A whole header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Its version.
    pub version: Version,
    /// The client's address as the sender saw it; `None`: keep the socket peer (v1 `UNKNOWN`,
    /// v2 `LOCAL`, or a v2 family other than IPv4 / IPv6).
    pub source: Option<SocketAddr>,
    /// The address the client connected to (the sender's listener), present exactly when
    /// `source` is: a sender of its own PROXY headers passes it on as the destination.
    pub destination: Option<SocketAddr>,
    /// The header's length in bytes: the client's own bytes start here.
    pub len: usize,
}

/// What the bytes so far amount to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parse {
    /// Not a whole header yet, and nothing wrong so far: every byte given is part of it.
    Incomplete,
    /// A whole header.
    Complete(Header),
}

/// Why the bytes are not an acceptable PROXY header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProxyError {
    /// The bytes start with neither version's signature.
    NotProxy,
    /// A version the listener does not accept.
    VersionNotAccepted(Version),
    /// A v1 line with no CRLF within [`V1_MAX_LEN`] bytes.
    V1TooLong,
    /// A v1 line that does not follow the grammar (which part is named).
    V1Syntax(&'static str),
    /// A v2 version other than 2.
    V2Version(u8),
    /// A v2 command other than `LOCAL` (0) or `PROXY` (1).
    V2Command(u8),
    /// A v2 transport other than `UNSPEC` or `STREAM` for an IP family.
    V2Transport(u8),
    /// A v2 family other than `UNSPEC`, `INET`, `INET6`, `UNIX`.
    V2Family(u8),
    /// A v2 payload longer than [`V2_MAX_PAYLOAD`].
    V2TooLong(u16),
    /// A v2 payload too short for the addresses of its family.
    V2ShortAddresses,
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyError::NotProxy => f.write_str("no PROXY protocol signature"),
            ProxyError::VersionNotAccepted(v) => {
                write!(f, "a PROXY {v} header where it is not accepted")
            }
            ProxyError::V1TooLong => write!(f, "a PROXY v1 line over {V1_MAX_LEN} bytes"),
            ProxyError::V1Syntax(part) => write!(f, "a malformed PROXY v1 line ({part})"),
            ProxyError::V2Version(v) => write!(f, "PROXY v2 header of version {v}"),
            ProxyError::V2Command(c) => write!(f, "PROXY v2 command {c} (LOCAL or PROXY)"),
            ProxyError::V2Transport(t) => write!(f, "PROXY v2 transport {t} (STREAM expected)"),
            ProxyError::V2Family(a) => write!(f, "PROXY v2 address family {a}"),
            ProxyError::V2TooLong(n) => {
                write!(
                    f,
                    "a PROXY v2 payload of {n} bytes (at most {V2_MAX_PAYLOAD})"
                )
            }
            ProxyError::V2ShortAddresses => {
                f.write_str("a PROXY v2 payload too short for its addresses")
            }
        }
    }
}

impl core::error::Error for ProxyError {}

impl ProxyError {
    /// A short label for metrics (`reason`).
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            ProxyError::NotProxy => "no_signature",
            ProxyError::VersionNotAccepted(_) => "version_not_accepted",
            ProxyError::V1TooLong | ProxyError::V2TooLong(_) => "too_long",
            _ => "malformed",
        }
    }
}

/// Parse the bytes received so far on a connection (module doc).
///
/// # Errors
/// The bytes cannot begin an acceptable header ([`ProxyError`]).
pub fn parse(buf: &[u8], accept: Accept) -> Result<Parse, ProxyError> {
    let Some(&first) = buf.first() else {
        return Ok(Parse::Incomplete);
    };
    let version = match first {
        b'P' => Version::V1,
        b'\r' => Version::V2,
        _ => return Err(ProxyError::NotProxy),
    };
    if !accept.allows(version) {
        return Err(ProxyError::VersionNotAccepted(version));
    }
    match version {
        Version::V1 => parse_v1(buf),
        Version::V2 => parse_v2(buf),
    }
}

fn prefix_matches(buf: &[u8], sig: &[u8]) -> bool {
    let n = buf.len().min(sig.len());
    buf[..n] == sig[..n]
}

fn parse_v1(buf: &[u8]) -> Result<Parse, ProxyError> {
    if !prefix_matches(buf, V1_SIG) {
        return Err(ProxyError::NotProxy);
    }
    let window = &buf[..buf.len().min(V1_MAX_LEN)];
    let Some(lf) = window.iter().position(|&b| b == b'\n') else {
        if buf.len() >= V1_MAX_LEN {
            return Err(ProxyError::V1TooLong);
        }
        return Ok(Parse::Incomplete);
    };
    if lf == 0 || window[lf - 1] != b'\r' {
        return Err(ProxyError::V1Syntax("line not ended by CRLF"));
    }
    let line = &window[V1_SIG.len()..lf - 1];
    let addresses = v1_addresses(line)?;
    Ok(Parse::Complete(Header {
        version: Version::V1,
        source: addresses.map(|(s, _)| s),
        destination: addresses.map(|(_, d)| d),
        len: lf + 1,
    }))
}

/// The source and destination of a v1 line's fields after `PROXY `.
fn v1_addresses(line: &[u8]) -> Result<Option<(SocketAddr, SocketAddr)>, ProxyError> {
    let text = core::str::from_utf8(line).map_err(|_| ProxyError::V1Syntax("not ASCII"))?;
    let mut parts = text.split(' ');
    let proto = parts.next().unwrap_or("");
    let v6 = match proto {
        // The rest of an UNKNOWN line is to be ignored (specification, 2.1).
        "UNKNOWN" => return Ok(None),
        "TCP4" => false,
        "TCP6" => true,
        _ => {
            return Err(ProxyError::V1Syntax(
                "protocol is not TCP4, TCP6 or UNKNOWN",
            ));
        }
    };
    let mut next = |what| parts.next().ok_or(ProxyError::V1Syntax(what));
    let src = v1_addr(next("source address")?, v6)?;
    let dst = v1_addr(next("destination address")?, v6)?;
    let sport = v1_port(next("source port")?)?;
    let dport = v1_port(next("destination port")?)?;
    if parts.next().is_some() {
        return Err(ProxyError::V1Syntax("fields after the destination port"));
    }
    Ok(Some((
        SocketAddr::new(src, sport),
        SocketAddr::new(dst, dport),
    )))
}

fn v1_addr(text: &str, v6: bool) -> Result<IpAddr, ProxyError> {
    if v6 {
        text.parse::<Ipv6Addr>()
            .map(IpAddr::V6)
            .map_err(|_| ProxyError::V1Syntax("not an IPv6 address"))
    } else {
        text.parse::<Ipv4Addr>()
            .map(IpAddr::V4)
            .map_err(|_| ProxyError::V1Syntax("not an IPv4 address"))
    }
}

/// A port: 1 to 5 decimal digits, no sign, no leading zero, at most 65535.
fn v1_port(text: &str) -> Result<u16, ProxyError> {
    let digits = !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit());
    if !digits || (text.len() > 1 && text.starts_with('0')) {
        return Err(ProxyError::V1Syntax("not a port number"));
    }
    text.parse()
        .map_err(|_| ProxyError::V1Syntax("port over 65535"))
}

fn parse_v2(buf: &[u8]) -> Result<Parse, ProxyError> {
    if !prefix_matches(buf, V2_SIG) {
        return Err(ProxyError::NotProxy);
    }
    if let Some(&ver_cmd) = buf.get(12) {
        let (ver, cmd) = (ver_cmd >> 4, ver_cmd & 0x0f);
        if ver != 2 {
            return Err(ProxyError::V2Version(ver));
        }
        if cmd > 1 {
            return Err(ProxyError::V2Command(cmd));
        }
    }
    if let Some(&fam) = buf.get(13) {
        let (family, transport) = (fam >> 4, fam & 0x0f);
        if family > 3 {
            return Err(ProxyError::V2Family(family));
        }
        if transport > 2 || (matches!(family, 1 | 2) && transport == 2) {
            return Err(ProxyError::V2Transport(transport));
        }
    }
    let (Some(&hi), Some(&lo)) = (buf.get(14), buf.get(15)) else {
        return Ok(Parse::Incomplete);
    };
    let payload_len = u16::from_be_bytes([hi, lo]);
    if usize::from(payload_len) > V2_MAX_PAYLOAD {
        return Err(ProxyError::V2TooLong(payload_len));
    }
    let len = 16 + usize::from(payload_len);
    let Some(payload) = buf.get(16..len) else {
        return Ok(Parse::Incomplete);
    };
    let local = buf[12] & 0x0f == 0;
    let family = buf[13] >> 4;
    let addresses = if local {
        None
    } else {
        match family {
            1 => {
                let a = payload.get(..12).ok_or(ProxyError::V2ShortAddresses)?;
                let src = Ipv4Addr::new(a[0], a[1], a[2], a[3]);
                let dst = Ipv4Addr::new(a[4], a[5], a[6], a[7]);
                Some((
                    SocketAddr::new(IpAddr::V4(src), u16::from_be_bytes([a[8], a[9]])),
                    SocketAddr::new(IpAddr::V4(dst), u16::from_be_bytes([a[10], a[11]])),
                ))
            }
            2 => {
                let a = payload.get(..36).ok_or(ProxyError::V2ShortAddresses)?;
                let ip = |at: usize| {
                    let mut octets = [0u8; 16];
                    octets.copy_from_slice(&a[at..at + 16]);
                    IpAddr::V6(Ipv6Addr::from(octets))
                };
                Some((
                    SocketAddr::new(ip(0), u16::from_be_bytes([a[32], a[33]])),
                    SocketAddr::new(ip(16), u16::from_be_bytes([a[34], a[35]])),
                ))
            }
            // UNSPEC and UNIX: the receiver uses the real connection's addresses (2.2).
            _ => None,
        }
    };
    Ok(Parse::Complete(Header {
        version: Version::V2,
        source: addresses.map(|(s, _)| s),
        destination: addresses.map(|(_, d)| d),
        len,
    }))
}

/// The longest header [`encode`] writes (v1 with two IPv6 addresses is 104 bytes).
pub const ENCODED_MAX: usize = V1_MAX_LEN;

/// A header written by [`encode`] (no allocation: a fixed buffer and its used length).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Encoded {
    buf: [u8; ENCODED_MAX],
    len: usize,
}

impl Encoded {
    /// The header's bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl fmt::Debug for Encoded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Encoded")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl fmt::Write for Encoded {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        let dst = self.buf.get_mut(self.len..end).ok_or(fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// An IPv4-mapped IPv6 address (a dual-stack socket's view of an IPv4 client) as IPv4.
fn unmapped(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), v6.port()),
            None => a,
        },
        SocketAddr::V4(_) => a,
    }
}

/// A sender's header, `version` 1 or 2, saying the connection came from `source` to
/// `destination` (the `PROXY` command, TCP). IPv4-mapped IPv6 addresses are written as IPv4;
/// a `destination` of the other family than `source` is written as the unspecified address of
/// `source`'s family, port 0 (a header carries one family). [`parse`] reads what this writes.
#[must_use]
pub fn encode(version: Version, source: SocketAddr, destination: SocketAddr) -> Encoded {
    let source = unmapped(source);
    let mut destination = unmapped(destination);
    if source.is_ipv4() != destination.is_ipv4() {
        let ip = if source.is_ipv4() {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        } else {
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        };
        destination = SocketAddr::new(ip, 0);
    }
    let mut out = Encoded {
        buf: [0; ENCODED_MAX],
        len: 0,
    };
    match version {
        Version::V1 => {
            let family = if source.is_ipv4() { "TCP4" } else { "TCP6" };
            // At most 104 bytes (module constant): the buffer always holds it.
            let _ = fmt::Write::write_fmt(
                &mut out,
                format_args!(
                    "PROXY {family} {} {} {} {}\r\n",
                    source.ip(),
                    destination.ip(),
                    source.port(),
                    destination.port()
                ),
            );
        }
        Version::V2 => {
            let mut put = |bytes: &[u8]| {
                out.buf[out.len..out.len + bytes.len()].copy_from_slice(bytes);
                out.len += bytes.len();
            };
            put(V2_SIG);
            put(&[0x21]); // version 2, PROXY
            match (source.ip(), destination.ip()) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    put(&[0x11, 0, 12]); // TCP over IPv4, 12 bytes
                    put(&s.octets());
                    put(&d.octets());
                }
                (IpAddr::V6(s), IpAddr::V6(d)) => {
                    put(&[0x21, 0, 36]); // TCP over IPv6, 36 bytes
                    put(&s.octets());
                    put(&d.octets());
                }
                // One family by construction (above).
                _ => {}
            }
            put(&source.port().to_be_bytes());
            put(&destination.port().to_be_bytes());
        }
    }
    out
}

/// A sender's header for a connection of its own, on behalf of no client (a health check):
/// v1 `PROXY UNKNOWN`, v2 the `LOCAL` command. A receiver keeps the socket's own address.
#[must_use]
pub fn encode_local(version: Version) -> Encoded {
    let mut out = Encoded {
        buf: [0; ENCODED_MAX],
        len: 0,
    };
    let bytes: &[u8] = match version {
        Version::V1 => b"PROXY UNKNOWN\r\n",
        Version::V2 => b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00",
    };
    out.buf[..bytes.len()].copy_from_slice(bytes);
    out.len = bytes.len();
    out
}

#[cfg(test)]
mod tests;
