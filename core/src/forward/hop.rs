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

/// The comma-separated tokens of a header line, trimmed, empty ones skipped.
fn tokens(value: &HeaderValue) -> impl Iterator<Item = &[u8]> {
    value
        .as_bytes()
        .split(|&b| b == b',')
        .map(|t| t.trim_ascii())
        .filter(|t| !t.is_empty())
}

/// Whether `name` is hop-by-hop by definition (C-PATH-6), case-insensitive: `Connection`,
/// `Keep-Alive`, `Proxy-Connection`, `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade`. The
/// flat-header writers of [`crate::h1`] drop these (and the names a `Connection` line lists)
/// and write what survives (`TE: trailers`, `Upgrade` when upgrading) themselves.
#[must_use]
pub fn is_hop_by_hop(name: &[u8]) -> bool {
    const NAMES: [&[u8]; 7] = [
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    ];
    NAMES
        .iter()
        .any(|n| n.len() == name.len() && n.eq_ignore_ascii_case(name))
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

/// `true` when the headers ask for a protocol upgrade: a `Connection` line names `upgrade`
/// (case-insensitive) and an `Upgrade` header is present. Read it before [`strip_hop_by_hop`].
#[must_use]
pub fn wants_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(UPGRADE)
        && headers
            .get_all(CONNECTION)
            .iter()
            .any(|line| tokens(line).any(|t| t.eq_ignore_ascii_case(b"upgrade")))
}

/// Removes hop-by-hop headers, in place, from a request or a response (C-PATH-6):
/// `Connection` and every header named by any of its lines (case-insensitive), `Keep-Alive`,
/// `Proxy-Connection`, `Trailer`, `Transfer-Encoding`, `TE` unless one of its values is
/// `trailers` (then exactly `TE: trailers` remains, C-PATH-12), and `Upgrade` unless
/// `upgrading` (then `Upgrade` stays and `Connection: upgrade` is written). `Host` is never
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
        (KEEP_ALIVE_BIT, KEEP_ALIVE),
        (PROXY_CONNECTION_BIT, PROXY_CONNECTION),
        (TRAILER_BIT, TRAILER),
        (TRANSFER_ENCODING_BIT, TRANSFER_ENCODING),
    ] {
        if found & bit != 0 {
            headers.remove(name);
        }
    }
    if found & TE_BIT != 0 {
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
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    } else if found & UPGRADE_BIT != 0 {
        headers.remove(UPGRADE);
    }
}

const CONNECTION_BIT: u8 = 1;
const KEEP_ALIVE_BIT: u8 = 1 << 1;
const PROXY_CONNECTION_BIT: u8 = 1 << 2;
const TRAILER_BIT: u8 = 1 << 3;
const TRANSFER_ENCODING_BIT: u8 = 1 << 4;
const TE_BIT: u8 = 1 << 5;
const UPGRADE_BIT: u8 = 1 << 6;

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
        } else {
            0
        };
    }
    found
}
