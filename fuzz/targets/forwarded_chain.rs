//! C-FWD-1..3, C-PATH-6: client-address resolution and header rewriting on arbitrary headers.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use http::{HeaderMap, HeaderName, HeaderValue};
use weir_core::forward::{self, TrustedProxies};

pub fn run(data: &[u8]) {
    if data.len() < 3 {
        return;
    }
    let (ctl, rest) = data.split_at(3);
    let peer = if ctl[0] & 1 == 0 {
        IpAddr::V4(Ipv4Addr::new(10, 0, ctl[1], ctl[2]))
    } else {
        IpAddr::V6(Ipv6Addr::new(
            0x2001,
            0xdb8,
            0,
            0,
            0,
            0,
            u16::from(ctl[1]),
            u16::from(ctl[2]),
        ))
    };
    let trusted = match ctl[0] >> 1 & 3 {
        0 => TrustedProxies::none(),
        1 => TrustedProxies::new(vec!["10.0.0.0/8".parse().unwrap()]),
        2 => TrustedProxies::new(vec![
            "10.0.0.0/8".parse().unwrap(),
            "2001:db8::/32".parse().unwrap(),
        ]),
        _ => TrustedProxies::new(vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()]),
    };
    let names = [
        "x-forwarded-for",
        "forwarded",
        "connection",
        "x-forwarded-proto",
        "te",
        "host",
    ];
    let mut headers = HeaderMap::new();
    for (i, line) in rest.split(|&b| b == b'\n').enumerate() {
        let name = HeaderName::from_static(names[(usize::from(ctl[0] >> 3) + i) % names.len()]);
        if let Ok(v) = HeaderValue::from_bytes(line) {
            headers.append(name, v);
        }
    }
    let r = forward::resolve_client(peer, &headers, &trusted);
    if !trusted.contains(peer) {
        assert_eq!(r.client, peer, "an untrusted peer is the client (C-FWD-1)");
    }
    let proto = forward::forwarded_proto(r.peer_trusted, &headers);
    let host = forward::inbound_host(&headers);
    forward::strip_hop_by_hop(&mut headers, false);
    forward::rewrite_forwarding(&mut headers, r.client, host, proto);
    for hop in [
        "connection",
        "keep-alive",
        "proxy-connection",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ] {
        assert!(
            !headers.contains_key(hop),
            "{hop} survived the strip (C-PATH-6)"
        );
    }
    let xff = headers.get_all("x-forwarded-for").iter().count();
    assert_eq!(xff, 1, "exactly one canonical X-Forwarded-For (C-FWD-2)");
    assert!(!headers.contains_key("forwarded"));
}
