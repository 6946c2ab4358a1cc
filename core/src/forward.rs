//! Client address, forwarding headers and hop-by-hop headers (C-FWD-1..3, C-PATH-6, C-PATH-12).
//!
//! **Client address (C-FWD-1, C-FWD-3).** The client is the socket peer unless the peer is a
//! trusted proxy (`server.trusted_proxies`); then the forwarding chain is walked from the right,
//! skipping trusted hops, and the first untrusted address is the client. This is the
//! "rightmost untrusted" rule of nginx's `real_ip_recursive on`, Envoy's `xff_trusted_cidrs` and
//! MDN's `X-Forwarded-For` security notes: the leftmost element is whatever the client typed,
//! only the elements appended by proxies we trust can be believed. Rules:
//! - the peer and every chain address are unmapped first (`::ffff:a.b.c.d` → `a.b.c.d`);
//! - `X-Forwarded-For` is used when present; RFC 7239 `Forwarded` (`for=` of each element) only
//!   when there is no `X-Forwarded-For` line at all. X-Forwarded-For is what nginx
//!   (`real_ip_header`) and Envoy read by default, and consulting two chains that may disagree
//!   would let a client pick whichever suits it;
//! - an examined element that is not an IP address (garbage, a host name, RFC 7239 `unknown` or
//!   an obfuscated `_node`, a `Forwarded` element without `for=`) resolves to the peer: the chain
//!   cannot be followed through it. Elements left of the first untrusted address are never
//!   examined, so a client cannot force the fallback by prepending garbage;
//! - a chain whose every element is trusted resolves to its leftmost element;
//! - a trusted peer that sent no chain (or only empty elements) is itself the client;
//! - at most [`MAX_HOPS`] elements are examined; more trusted hops than that resolve to the peer.
//!
//! **Scheme (C-FWD-2).** `X-Forwarded-Proto: https` (else `Forwarded: proto=https`) counts only
//! from a trusted peer, and only the rightmost value — the one the peer itself wrote.
//!
//! **Rewrite (C-FWD-2).** Incoming `Forwarded`, `X-Forwarded-For`, `X-Forwarded-Proto`,
//! `X-Forwarded-Host` and `X-Real-IP` are removed and replaced by weir's own values, and the
//! client's `X-Forwarded-Port`, `-Prefix`, `-Scheme` and `-Ssl` are removed; every one of these
//! in either spelling (`X_Forwarded_For`: `_` and `-` are the same to CGI-style backends).
//! `Host` is kept. The adapter calls, in this order: [`resolve_client`] on the headers as received (a
//! header named in `Connection` is addressed to weir, the next hop, so it is still read), then
//! [`strip_hop_by_hop`], then [`rewrite_forwarding`] and the request id — so no `Connection`
//! token a client sends can remove a header weir writes.
//!
//! **Hop-by-hop (C-PATH-6, C-PATH-12).** See [`strip_hop_by_hop`].
//!
//! Nothing here does IO; the walk and the header parsing never allocate, and every input is
//! bounded (docs/forwarding.md, "Hostile input").

use std::net::{IpAddr, SocketAddr};

use http::header::{FORWARDED, HOST};
use http::{HeaderMap, HeaderName, HeaderValue};
use ipnet::{IpNet, Ipv4Net};

use crate::headers::HeaderLines;

mod chain;
mod hop;
mod node;

pub use chain::{MAX_ELEMENT_BYTES, MAX_FORWARDED_LINE_BYTES, MAX_HOPS};
pub use hop::{
    connection_may_remove, is_h2c, is_hop_by_hop, offers_upgrade, strip_hop_by_hop,
    te_asks_trailers, wants_upgrade,
};

use chain::{ForwardedRev, Walk, XffRev, forwarded_last_https, last_element, walk};

/// `X-Forwarded-For`.
pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
/// `X-Forwarded-Proto`.
pub const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
/// `X-Forwarded-Host`.
pub const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
/// `X-Real-IP`.
pub const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

/// The networks whose hops are believed (`server.trusted_proxies`, C-FWD-1).
///
/// IPv4-mapped IPv6 networks (`::ffff:10.0.0.0/104`) are stored as their IPv4 network, and every
/// address is unmapped before the lookup, so a mapped peer and a plain one are the same host.
/// Lookup is a scan: proxy lists have a handful of entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
}

impl TrustedProxies {
    /// The given networks (validated by the config layer; host bits are ignored).
    #[must_use]
    pub fn new(nets: Vec<IpNet>) -> TrustedProxies {
        TrustedProxies {
            nets: nets.into_iter().map(unmap_net).collect(),
        }
    }

    /// No trusted proxies: the peer is always the client.
    #[must_use]
    pub fn none() -> TrustedProxies {
        TrustedProxies::default()
    }

    /// `true` when `ip` (unmapped first) is inside one of the networks.
    #[must_use]
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.nets.iter().any(|net| net.contains(&ip))
    }

    /// The networks, mapped IPv4 ones as IPv4.
    #[must_use]
    pub fn nets(&self) -> &[IpNet] {
        &self.nets
    }

    /// `true` when no network is trusted.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }
}

/// `::ffff:a.b.c.d/n` with `n >= 96` → `a.b.c.d/(n - 96)`; anything else unchanged.
fn unmap_net(net: IpNet) -> IpNet {
    if let IpNet::V6(v6) = net
        && v6.prefix_len() >= 96
        && let Some(v4) = v6.addr().to_ipv4_mapped()
        && let Ok(v4net) = Ipv4Net::new(v4, v6.prefix_len() - 96)
    {
        return IpNet::V4(v4net);
    }
    net
}

/// The scheme the client used, as weir tells the backend (C-FWD-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// Plain HTTP (the default).
    Http,
    /// HTTPS, said by a trusted peer.
    Https,
}

impl Proto {
    /// `http` or `https`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Http => "http",
            Proto::Https => "https",
        }
    }
}

/// Which header a resolution read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainHeader {
    /// `X-Forwarded-For`.
    XForwardedFor,
    /// RFC 7239 `Forwarded` (only when there is no `X-Forwarded-For`).
    Forwarded,
}

/// How the client address was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressSource {
    /// The peer is not a trusted proxy: it is the client.
    Peer,
    /// A trusted peer sent no chain (or only empty elements): the peer is the client.
    TrustedPeerNoChain,
    /// The first untrusted address of the chain, from the right.
    Chain(ChainHeader),
    /// Every element of the chain was trusted: its leftmost element.
    AllTrusted(ChainHeader),
    /// An examined element was not an IP address: the peer (C-FWD-3).
    Malformed(ChainHeader),
    /// More than [`MAX_HOPS`] elements would have to be examined: the peer.
    TooManyHops(ChainHeader),
}

/// The outcome of client address resolution (C-FWD-1, C-FWD-3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolution {
    /// The client address (unmapped).
    pub client: IpAddr,
    /// The socket peer (unmapped).
    pub peer: IpAddr,
    /// The peer is a trusted proxy; only then do forwarding headers count (C-FWD-2).
    pub peer_trusted: bool,
    /// How `client` was found.
    pub source: AddressSource,
}

/// Resolves the client address from the socket peer and the request headers as received
/// (C-FWD-1, C-FWD-3). Never fails and never allocates; examines at most [`MAX_HOPS`] elements.
#[must_use]
pub fn resolve_client<H: HeaderLines + ?Sized>(
    peer: IpAddr,
    headers: &H,
    trusted: &TrustedProxies,
) -> Resolution {
    let peer = peer.to_canonical();
    let peer_trusted = trusted.contains(peer);
    let resolved = |client, source| Resolution {
        client,
        peer,
        peer_trusted,
        source,
    };
    if !peer_trusted {
        return resolved(peer, AddressSource::Peer);
    }
    let is_trusted = |ip: IpAddr| trusted.contains(ip);
    let xff = X_FORWARDED_FOR;
    let (header, outcome) = if headers.lines(&xff).next().is_some() {
        let lines = headers.lines(&xff).rev();
        (
            ChainHeader::XForwardedFor,
            walk(XffRev::new(lines), is_trusted),
        )
    } else {
        if headers.lines(&FORWARDED).next().is_none() {
            return resolved(peer, AddressSource::TrustedPeerNoChain);
        }
        let lines = headers.lines(&FORWARDED).rev();
        (
            ChainHeader::Forwarded,
            walk(ForwardedRev::new(lines), is_trusted),
        )
    };
    match outcome {
        Walk::Client(ip) => resolved(ip, AddressSource::Chain(header)),
        Walk::AllTrusted(ip) => resolved(ip, AddressSource::AllTrusted(header)),
        Walk::NoAddress => resolved(peer, AddressSource::TrustedPeerNoChain),
        Walk::Malformed => resolved(peer, AddressSource::Malformed(header)),
        Walk::TooManyHops => resolved(peer, AddressSource::TooManyHops(header)),
    }
}

/// The client address (C-FWD-1, C-FWD-3); see [`resolve_client`] for the reasons.
#[must_use]
pub fn client_address(peer: IpAddr, headers: &HeaderMap, trusted: &TrustedProxies) -> IpAddr {
    resolve_client(peer, headers, trusted).client
}

/// [`client_address`] for a socket address (the port is not used).
#[must_use]
pub fn client_address_of(
    peer: SocketAddr,
    headers: &HeaderMap,
    trusted: &TrustedProxies,
) -> IpAddr {
    client_address(peer.ip(), headers, trusted)
}

/// The scheme to tell the backend (C-FWD-2): `https` only when the peer is trusted and said so —
/// the rightmost `X-Forwarded-Proto` value (the one the peer wrote), or, when there is no
/// `X-Forwarded-Proto`, `proto=https` in the last `Forwarded` element. Case-insensitive.
#[must_use]
pub fn forwarded_proto<H: HeaderLines + ?Sized>(peer_trusted: bool, headers: &H) -> Proto {
    if !peer_trusted {
        return Proto::Http;
    }
    let https = if let Some(last) = headers.lines(&X_FORWARDED_PROTO).next_back() {
        // A window of 32 bytes: room for `https` and its whitespace, O(1) on a huge line.
        last_element(last, 32).is_some_and(|v| v.eq_ignore_ascii_case(b"https"))
    } else if let Some(last) = headers.lines(&FORWARDED).next_back() {
        forwarded_last_https(last)
    } else {
        false
    };
    if https { Proto::Https } else { Proto::Http }
}

/// Replaces the forwarding headers of an upstream request (C-FWD-2): removes every incoming
/// forwarding line ([`is_replaced_forwarding`]: `Forwarded`, `X-Forwarded-For`, `-Proto`,
/// `-Host`, `-Port`, `-Prefix`, `-Scheme`, `-Ssl` and `X-Real-IP`, in either spelling, `_` or
/// `-`), then writes `X-Forwarded-For` and `X-Real-IP` = `client`, `X-Forwarded-Host` =
/// `inbound_host` (the Host the client sent, or the request target's authority; left out when
/// there is none) and `X-Forwarded-Proto` = `proto`. `Host` itself is not touched.
///
/// Call it after [`strip_hop_by_hop`], so that no `Connection` token removes what it writes.
pub fn rewrite_forwarding(
    headers: &mut HeaderMap,
    client: IpAddr,
    inbound_host: Option<HeaderValue>,
    proto: Proto,
) {
    // Names are compared, not hashed per spelling; a pass finds the next name to remove (a
    // client rarely sends any, a trusted proxy one or two), so nothing is allocated.
    while let Some(name) = headers
        .keys()
        .find(|n| is_replaced_forwarding(n.as_str().as_bytes()))
        .cloned()
    {
        headers.remove(name);
    }
    // Room for the four written below, so the map grows once at most.
    headers.reserve(4);
    let client = ip_header_value(client.to_canonical());
    headers.insert(X_FORWARDED_FOR, client.clone());
    headers.insert(X_REAL_IP, client);
    if let Some(host) = inbound_host {
        headers.insert(X_FORWARDED_HOST, host);
    }
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(proto.as_str()));
}

/// The forwarding names a client's copy of is never passed on (lower case, `-` spelling).
/// Besides the four weir writes and `Forwarded`: `X-Forwarded-Port` and `X-Forwarded-Prefix`
/// (read by frameworks to build absolute URLs), `X-Forwarded-Scheme` and `X-Forwarded-Ssl` (read
/// before `X-Forwarded-Proto` by Rack and others, so a client could contradict weir's scheme).
const REPLACED: [&[u8]; 9] = [
    b"forwarded",
    b"x-forwarded-for",
    b"x-forwarded-proto",
    b"x-forwarded-host",
    b"x-forwarded-port",
    b"x-forwarded-prefix",
    b"x-forwarded-scheme",
    b"x-forwarded-ssl",
    b"x-real-ip",
];

/// Whether `name` is one of the forwarding names [`rewrite_forwarding`] removes: compared
/// case-insensitively with `_` and `-` the same byte, because CGI-style backends (PHP-FPM,
/// WSGI, Rack) turn both into `HTTP_X_FORWARDED_FOR`, so `X_Forwarded_For` or `X-Real_IP`
/// would otherwise reach them as the real thing (docs/forwarding.md). The flat-header writer of
/// [`crate::h1`] drops these too and appends weir's own.
#[must_use]
pub fn is_replaced_forwarding(name: &[u8]) -> bool {
    REPLACED.iter().any(|r| {
        r.len() == name.len()
            && r.iter().zip(name).all(|(&want, &b)| {
                let b = if b == b'_' {
                    b'-'
                } else {
                    b.to_ascii_lowercase()
                };
                b == want
            })
    })
}

/// The inbound Host for [`rewrite_forwarding`]: the `Host` header (its first line).
#[must_use]
pub fn inbound_host(headers: &HeaderMap) -> Option<HeaderValue> {
    headers.get(HOST).cloned()
}

/// An IP address as a header value, formatted on the stack (IPv4 by hand: `core::fmt` costs
/// hundreds of instructions for four small numbers, on every request).
fn ip_header_value(ip: IpAddr) -> HeaderValue {
    let mut buf = [0u8; 64];
    let len = ip_text(ip, &mut buf);
    match HeaderValue::from_bytes(&buf[..len]) {
        Ok(value) => value,
        // Unreachable: the text of an IP address is digits, hex, `.` and `:`.
        Err(_) => HeaderValue::from_static(""),
    }
}

/// The decimal text of each octet: up to three digits, then the digit count.
static OCTET_TEXT: [[u8; 4]; 256] = octet_text();

const fn octet_text() -> [[u8; 4]; 256] {
    let mut table = [[0u8; 4]; 256];
    let mut i = 0;
    while i < 256 {
        let o = i as u8;
        table[i] = if o >= 100 {
            [b'0' + o / 100, b'0' + o / 10 % 10, b'0' + o % 10, 3]
        } else if o >= 10 {
            [b'0' + o / 10, b'0' + o % 10, 0, 2]
        } else {
            [b'0' + o, 0, 0, 1]
        };
        i += 1;
    }
    table
}

/// Writes `ip` as text into `buf` (no allocation); returns its length.
pub fn ip_text(ip: IpAddr, buf: &mut [u8; 64]) -> usize {
    match ip {
        IpAddr::V4(v4) => {
            // Each octet from the table (a third of the instructions of dividing
            // each by 100 and 10 on every request); four bytes are copied, the last one
            // overwritten by the `.` or the next octet, or left past the end.
            let mut len = 0;
            for octet in v4.octets() {
                let text = OCTET_TEXT[usize::from(octet)];
                buf[len..len + 4].copy_from_slice(&text);
                len += usize::from(text[3]);
                buf[len] = b'.';
                len += 1;
            }
            len - 1
        }
        IpAddr::V6(_) => {
            use std::io::Write as _;
            let mut cursor = std::io::Cursor::new(&mut buf[..]);
            // An IPv6 address is at most 45 bytes of text, so it fits the 64-byte buffer.
            let _ = write!(cursor, "{ip}");
            cursor.position() as usize
        }
    }
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
