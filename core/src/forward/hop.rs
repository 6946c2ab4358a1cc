//! Hop-by-hop headers (C-PATH-6, C-PATH-12), one function for both directions.
//!
//! RFC 9110 §7.6.1: a proxy removes `Connection` and every header it names, plus the headers
//! that are hop-by-hop by definition. The list is the contract's (C-PATH-6), which is Go's
//! `httputil.ReverseProxy` list without `Proxy-Authenticate`/`Proxy-Authorization` (RFC 9110
//! §11.7 lets a proxy relay those, and they are end to end there).
//!
//! Exceptions, where the contract or the protocol needs a header to survive a `Connection`
//! token:
//! - `TE` is decided by its own rule (C-PATH-12): when one of its values is `trailers`, the
//!   upstream gets exactly `TE: trailers`; otherwise no `TE`. RFC 9110 §10.1.4 makes a sender of
//!   `TE` also send `Connection: TE`, so removing every named header would drop it always;
//! - `Upgrade` when upgrading (C-PATH-8): kept, and `Connection: upgrade` is written;
//! - `Upgrade: h2c` is never an upgrade: weir does not do HTTP/1.1's upgrade to cleartext
//!   HTTP/2 (RFC 7540 §3.2, dropped by RFC 9113), and tunnelling it would hand the client a
//!   raw HTTP/2 connection to the backend past weir's per-request rules ("h2c smuggling"). A
//!   request whose `Upgrade` offers only `h2c` is a plain request (what nginx does): `Upgrade`
//!   and `HTTP2-Settings` are removed; when it offers another protocol too, only `h2c` is
//!   taken out of the list. `HTTP2-Settings` is connection-specific (RFC 7540 §3.2.1), so it
//!   is hop-by-hop here in every case;
//! - `Host` is never removed: `Connection: host` is a client trying to strip the one header an
//!   HTTP/1.1 request must carry.
//!
//! Headers weir writes itself (`X-Forwarded-*`, `X-Real-IP`, `X-Request-ID`,
//! `X-Balancer-*`) are written after this strip runs, so a `Connection` token cannot remove
//! them.

use http::header::{CONNECTION, HOST, TE, TRAILER, TRANSFER_ENCODING, UPGRADE};
use http::{HeaderMap, HeaderName, HeaderValue};

/// `Keep-Alive`.
const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
/// `Proxy-Connection`.
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");
/// `HTTP2-Settings` (the h2c upgrade's, connection-specific).
const HTTP2_SETTINGS: HeaderName = HeaderName::from_static("http2-settings");

/// The comma-separated tokens of a header line, trimmed, empty ones skipped.
fn tokens(value: &HeaderValue) -> impl Iterator<Item = &[u8]> {
    byte_tokens(value.as_bytes())
}

/// The comma-separated, trimmed, non-empty elements of a header value.
fn byte_tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(|t| t.trim_ascii())
        .filter(|t| !t.is_empty())
}

/// Whether `name` is hop-by-hop by definition (C-PATH-6), case-insensitive: `Connection`,
/// `HTTP2-Settings` (module doc), `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`,
/// `Transfer-Encoding`, `Upgrade`. The
/// flat-header writers of [`crate::h1`] drop these (and the names a `Connection` line lists)
/// and write what survives (`TE: trailers`, `Upgrade` when upgrading) themselves.
#[must_use]
pub fn is_hop_by_hop(name: &[u8]) -> bool {
    use crate::headers::is_name;
    // By length, then one folded comparison: `connection`, `http2-settings`,
    // `keep-alive`, `proxy-connection`, `te`, `trailer`, `transfer-encoding`, `upgrade`.
    match name.len() {
        2 => is_name(name, b"te"),
        7 => is_name(name, b"trailer") || is_name(name, b"upgrade"),
        10 => is_name(name, b"connection") || is_name(name, b"keep-alive"),
        14 => is_name(name, b"http2-settings"),
        16 => is_name(name, b"proxy-connection"),
        17 => is_name(name, b"transfer-encoding"),
        _ => false,
    }
}

/// Whether a `TE` value names `trailers`: then the upstream gets exactly `TE: trailers`
/// (C-PATH-12), as [`strip_hop_by_hop`] does.
#[must_use]
pub fn te_asks_trailers(value: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"trailers"))
}

/// Whether a token of a `Connection` line may remove the header it names: never `Host`, `TE`
/// (its own rule) or, when upgrading, `Upgrade` (module doc).
#[must_use]
pub fn connection_may_remove(token: &[u8], upgrading: bool) -> bool {
    !(token.eq_ignore_ascii_case(b"host")
        || token.eq_ignore_ascii_case(b"te")
        || (upgrading && token.eq_ignore_ascii_case(b"upgrade")))
}

/// Whether a protocol of an `Upgrade` list (`name[/version]`) is `h2c`, which weir never
/// tunnels (module doc).
#[must_use]
pub fn is_h2c(protocol: &[u8]) -> bool {
    let name = protocol.split(|&b| b == b'/').next().unwrap_or(protocol);
    name.trim_ascii().eq_ignore_ascii_case(b"h2c")
}

/// Whether an `Upgrade` value offers a protocol weir tunnels: any but `h2c`.
#[must_use]
pub fn offers_upgrade(value: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .any(|p| !p.is_empty() && !is_h2c(p))
}

/// `true` when the headers ask for a protocol upgrade weir tunnels (C-PATH-8): a `Connection`
/// line names `upgrade` (case-insensitive) and an `Upgrade` line offers a protocol other than
/// `h2c` ([`offers_upgrade`]). Read it before [`strip_hop_by_hop`]. The engine's
/// `Exchange::upgrade_requested` is this.
#[must_use]
pub fn wants_upgrade<H: crate::headers::HeaderLines + ?Sized>(headers: &H) -> bool {
    headers.lines(&UPGRADE).any(offers_upgrade)
        && headers
            .lines(&CONNECTION)
            .any(|line| byte_tokens(line).any(|t| t.eq_ignore_ascii_case(b"upgrade")))
}

/// Removes hop-by-hop headers, in place, from a request or a response (C-PATH-6):
/// `Connection` and every header named by any of its lines (case-insensitive), `HTTP2-Settings`,
/// `Keep-Alive`, `Proxy-Connection`, `Trailer`, `Transfer-Encoding`, `TE` unless one of its
/// values is `trailers` (then exactly `TE: trailers` remains, C-PATH-12), and `Upgrade` unless
/// `upgrading` (then `Upgrade` stays without any `h2c` offer, and `Connection: upgrade` is
/// written). `Host` is never
/// removed. Work is linear in the size of the `Connection` and `TE` lines.
pub fn strip_hop_by_hop(headers: &mut HeaderMap, upgrading: bool) {
    // One pass over the names finds which hop-by-hop headers are there at all; most requests
    // and responses carry none (or only `Connection`), and a `remove` of an absent name still
    // costs a hash and a probe. Names are compared, never hashed, here.
    let found = present(headers);
    if found & CONNECTION_BIT != 0 {
        // Taking the Connection lines out of the map lets us remove what they name while
        // reading them.
        let connection: Vec<HeaderValue> = match headers.entry(CONNECTION) {
            http::header::Entry::Occupied(entry) => entry.remove_entry_mult().1.collect(),
            http::header::Entry::Vacant(_) => Vec::new(),
        };
        for line in &connection {
            for token in tokens(line) {
                let Ok(name) = HeaderName::from_bytes(token) else {
                    continue;
                };
                let protected = name == HOST || name == TE || (upgrading && name == UPGRADE);
                if !protected {
                    headers.remove(&name);
                }
            }
        }
    }
    for (bit, name) in [
        (HTTP2_SETTINGS_BIT, HTTP2_SETTINGS),
        (KEEP_ALIVE_BIT, KEEP_ALIVE),
        (PROXY_CONNECTION_BIT, PROXY_CONNECTION),
        (TRAILER_BIT, TRAILER),
        (TRANSFER_ENCODING_BIT, TRANSFER_ENCODING),
    ] {
        if found & bit != 0 {
            headers.remove(name);
        }
    }
    if found & TE_BIT != 0 && !lone_plain_trailers(headers) {
        let trailers = headers
            .get_all(TE)
            .iter()
            .any(|line| tokens(line).any(|t| t.eq_ignore_ascii_case(b"trailers")));
        if trailers {
            headers.insert(TE, HeaderValue::from_static("trailers"));
        } else {
            headers.remove(TE);
        }
    }
    if upgrading {
        drop_h2c_offers(headers);
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    } else if found & UPGRADE_BIT != 0 {
        headers.remove(UPGRADE);
    }
}

/// `TE` is one line, byte for byte the `trailers` the rewrite would put there, and not marked
/// sensitive (the rewrite's value is not): what a gRPC request carries, left as it is rather
/// than looked up, removed and inserted again.
fn lone_plain_trailers(headers: &HeaderMap) -> bool {
    let mut lines = headers.get_all(TE).iter();
    matches!((lines.next(), lines.next()),
        (Some(v), None) if v == "trailers" && !v.is_sensitive())
}

/// An upgrade's `Upgrade` lines without `h2c` (module doc); untouched when none names it.
fn drop_h2c_offers(headers: &mut HeaderMap) {
    let names_h2c = headers
        .get_all(UPGRADE)
        .iter()
        .any(|v| v.as_bytes().split(|&b| b == b',').any(is_h2c));
    if !names_h2c {
        return;
    }
    let mut kept: Vec<u8> = Vec::new();
    for line in headers.get_all(UPGRADE) {
        for p in tokens(line).filter(|p| !is_h2c(p)) {
            if !kept.is_empty() {
                kept.extend_from_slice(b", ");
            }
            kept.extend_from_slice(p);
        }
    }
    match HeaderValue::from_bytes(&kept) {
        Ok(v) if !kept.is_empty() => {
            headers.insert(UPGRADE, v);
        }
        _ => {
            headers.remove(UPGRADE);
        }
    }
}

const CONNECTION_BIT: u8 = 1;
const KEEP_ALIVE_BIT: u8 = 1 << 1;
const PROXY_CONNECTION_BIT: u8 = 1 << 2;
const TRAILER_BIT: u8 = 1 << 3;
const TRANSFER_ENCODING_BIT: u8 = 1 << 4;
const TE_BIT: u8 = 1 << 5;
const UPGRADE_BIT: u8 = 1 << 6;
const HTTP2_SETTINGS_BIT: u8 = 1 << 7;

/// Which of the fixed hop-by-hop names `headers` holds, as bits; one pass over its distinct
/// names (a removal through a `Connection` token may leave a bit set for a name that is gone,
/// which only makes a later `remove` a no-op).
fn present(headers: &HeaderMap) -> u8 {
    let mut found = 0;
    for name in headers.keys() {
        found |= if *name == CONNECTION {
            CONNECTION_BIT
        } else if *name == TE {
            TE_BIT
        } else if *name == UPGRADE {
            UPGRADE_BIT
        } else if *name == TRANSFER_ENCODING {
            TRANSFER_ENCODING_BIT
        } else if *name == TRAILER {
            TRAILER_BIT
        } else if *name == KEEP_ALIVE {
            KEEP_ALIVE_BIT
        } else if *name == PROXY_CONNECTION {
            PROXY_CONNECTION_BIT
        } else if *name == HTTP2_SETTINGS {
            HTTP2_SETTINGS_BIT
        } else {
            0
        };
    }
    found
}
