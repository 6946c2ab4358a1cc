//! One node of a forwarding chain: an IP address with an optional port (C-FWD-1, C-FWD-3).
//!
//! Accepted forms, in `X-Forwarded-For` elements and in RFC 7239 `for=` values alike:
//! `192.0.2.1`, `192.0.2.1:8080`, `2001:db8::1`, `[2001:db8::1]`, `[2001:db8::1]:8080`, and an
//! RFC 7239 obfuscated port (`192.0.2.1:_abc`). Ports are accepted because real proxies (Azure's
//! front door, some CDNs) append them to `X-Forwarded-For`; they are discarded. IPv4-mapped IPv6
//! addresses are unmapped. Everything else — `unknown`, an obfuscated identifier (`_hidden`), a
//! host name, an IPv6 zone id, an empty port — is not an IP address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The longest node text considered: `[` + the longest IPv6 text (45) + `]:` + 5 digits is 54;
/// an obfuscated port may be a little longer. Anything beyond is not an address.
pub(super) const MAX_NODE_BYTES: usize = 96;

/// Parses a node, already stripped of surrounding whitespace and quotes. `None` when it is not an
/// IP address (with an optional port). The result is unmapped (`::ffff:a.b.c.d` → `a.b.c.d`).
pub(super) fn parse_node(node: &[u8]) -> Option<IpAddr> {
    if node.is_empty() || node.len() > MAX_NODE_BYTES {
        return None;
    }
    let text = core::str::from_utf8(node).ok()?;
    let ip = if let Some(rest) = text.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !after.is_empty() && !valid_port(after.strip_prefix(':')?) {
            return None;
        }
        IpAddr::V6(inside.parse::<Ipv6Addr>().ok()?)
    } else if let Ok(ip) = text.parse::<IpAddr>() {
        ip
    } else {
        let (host, port) = text.split_once(':')?;
        if !valid_port(port) {
            return None;
        }
        IpAddr::V4(host.parse::<Ipv4Addr>().ok()?)
    };
    Some(ip.to_canonical())
}

/// A port: 1–5 decimal digits up to 65535, or an RFC 7239 obfuscated port (`_` then
/// `[A-Za-z0-9._-]`).
fn valid_port(port: &str) -> bool {
    let b = port.as_bytes();
    match b.first() {
        Some(b'_') => {
            b.len() > 1
                && b[1..]
                    .iter()
                    .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
        }
        _ => {
            (1..=5).contains(&b.len())
                && b.iter().all(u8::is_ascii_digit)
                && port.parse::<u16>().is_ok()
        }
    }
}

#[cfg(test)]
mod tests;
