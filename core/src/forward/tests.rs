//! Table tests for client address resolution, the forwarding rewrite and hop-by-hop stripping
//! (C-FWD-1..3, C-PATH-6, C-PATH-12).

use std::net::IpAddr;

use http::header::{CONNECTION, FORWARDED, HOST, TE, TRAILER, TRANSFER_ENCODING, UPGRADE};
use http::{HeaderMap, HeaderName, HeaderValue};

use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("test address")
}

fn trusted(nets: &[&str]) -> TrustedProxies {
    TrustedProxies::new(nets.iter().map(|n| n.parse().expect("test net")).collect())
}

fn map(lines: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, value) in lines {
        h.append(
            HeaderName::from_bytes(name.as_bytes()).expect("test name"),
            HeaderValue::from_str(value).expect("test value"),
        );
    }
    h
}

fn values(h: &HeaderMap, name: &str) -> Vec<String> {
    h.get_all(name)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect()
}

const PEER: &str = "10.0.0.1";

/// Header lines of a table case.
type Lines<'a> = &'a [(&'a str, &'a str)];

/// (headers, expected client, expected source) with peer 10.0.0.1 and 10.0.0.0/8 trusted.
#[test]
fn c_fwd_1_c_fwd_3_x_forwarded_for_table() {
    use AddressSource::*;
    use ChainHeader::XForwardedFor as X;
    let cases: &[(Lines, &str, AddressSource)] = &[
        (&[], PEER, TrustedPeerNoChain),
        (&[("x-forwarded-for", "")], PEER, TrustedPeerNoChain),
        (&[("x-forwarded-for", " , ,")], PEER, TrustedPeerNoChain),
        (
            &[("x-forwarded-for", "203.0.113.7")],
            "203.0.113.7",
            Chain(X),
        ),
        (
            &[("x-forwarded-for", "203.0.113.7, 10.0.0.2")],
            "203.0.113.7",
            Chain(X),
        ),
        (
            &[("x-forwarded-for", "1.1.1.1, 203.0.113.7, 10.0.0.2")],
            "203.0.113.7",
            Chain(X),
        ),
        // Garbage left of the client is never examined.
        (
            &[("x-forwarded-for", "garbage, 203.0.113.7")],
            "203.0.113.7",
            Chain(X),
        ),
        (
            &[("x-forwarded-for", "203.0.113.7, garbage")],
            PEER,
            Malformed(X),
        ),
        (
            &[("x-forwarded-for", "203.0.113.7, 10.0.0.2, unknown")],
            PEER,
            Malformed(X),
        ),
        (
            &[("x-forwarded-for", "10.0.0.3, 10.0.0.2")],
            "10.0.0.3",
            AllTrusted(X),
        ),
        (
            &[("x-forwarded-for", "203.0.113.7,,10.0.0.2, ")],
            "203.0.113.7",
            Chain(X),
        ),
        (
            &[("x-forwarded-for", "\t203.0.113.7\t")],
            "203.0.113.7",
            Chain(X),
        ),
        (
            &[("x-forwarded-for", "203.0.113.7:5555")],
            "203.0.113.7",
            Chain(X),
        ),
        (
            &[("x-forwarded-for", "[2001:db8::7]:443")],
            "2001:db8::7",
            Chain(X),
        ),
        (
            &[("x-forwarded-for", "2001:db8::7")],
            "2001:db8::7",
            Chain(X),
        ),
        (
            &[("x-forwarded-for", "::ffff:203.0.113.7")],
            "203.0.113.7",
            Chain(X),
        ),
        (
            &[("x-forwarded-for", "::ffff:10.0.0.9")],
            "10.0.0.9",
            AllTrusted(X),
        ),
        // Lines are one list, in order.
        (
            &[
                ("x-forwarded-for", "203.0.113.7"),
                ("x-forwarded-for", "10.0.0.2"),
            ],
            "203.0.113.7",
            Chain(X),
        ),
        (
            &[
                ("x-forwarded-for", "10.0.0.2"),
                ("x-forwarded-for", "203.0.113.9"),
            ],
            "203.0.113.9",
            Chain(X),
        ),
        (
            &[
                ("x-forwarded-for", "203.0.113.7, 10.0.0.2"),
                ("x-forwarded-for", "10.0.0.3"),
            ],
            "203.0.113.7",
            Chain(X),
        ),
        // X-Forwarded-For wins over Forwarded.
        (
            &[
                ("forwarded", "for=198.51.100.1"),
                ("x-forwarded-for", "203.0.113.7"),
            ],
            "203.0.113.7",
            Chain(X),
        ),
        (
            &[
                ("forwarded", "for=198.51.100.1"),
                ("x-forwarded-for", "bogus"),
            ],
            PEER,
            Malformed(X),
        ),
    ];
    let proxies = trusted(&["10.0.0.0/8"]);
    for (lines, want, source) in cases {
        let r = resolve_client(ip(PEER), &map(lines), &proxies);
        assert_eq!((r.client, r.source), (ip(want), *source), "{lines:?}");
        assert!(r.peer_trusted);
        assert_eq!(client_address(ip(PEER), &map(lines), &proxies), ip(want));
    }
}

#[test]
fn c_fwd_1_forwarded_table() {
    use AddressSource::*;
    use ChainHeader::Forwarded as F;
    let cases: &[(&[&str], &str, AddressSource)] = &[
        (
            &["for=192.0.2.60;proto=http;by=203.0.113.43"],
            "192.0.2.60",
            Chain(F),
        ),
        (
            &["For=\"[2001:db8:cafe::17]:4711\""],
            "2001:db8:cafe::17",
            Chain(F),
        ),
        (&["for=\"192.0.2.43:47011\""], "192.0.2.43", Chain(F)),
        (&["for=\"192.0.2.43:_obf\""], "192.0.2.43", Chain(F)),
        (&["for=\"\\1\\9\\2.0.2.43\""], "192.0.2.43", Chain(F)),
        (&["for=192.0.2.43, for=10.0.0.2"], "192.0.2.43", Chain(F)),
        (
            &["for=192.0.2.43;by=\"a,b\", for=10.0.0.2;host=\"x, y\""],
            "192.0.2.43",
            Chain(F),
        ),
        (&["for=192.0.2.43", "for=10.0.0.2"], "192.0.2.43", Chain(F)),
        (
            &["for=192.0.2.43 ; proto=https , for=10.0.0.2"],
            "192.0.2.43",
            Chain(F),
        ),
        (&["for=10.0.0.3, for=10.0.0.2"], "10.0.0.3", AllTrusted(F)),
        (&["for=unknown"], PEER, Malformed(F)),
        (&["for=_hidden"], PEER, Malformed(F)),
        (&["for=192.0.2.43, for=unknown"], PEER, Malformed(F)),
        (&["for=unknown, for=192.0.2.43"], "192.0.2.43", Chain(F)),
        (&["proto=https;by=10.0.0.2"], PEER, Malformed(F)),
        (&["for=192.0.2.1;for=192.0.2.2"], PEER, Malformed(F)),
        (
            &["for=192.0.2.1;proto=http;proto=https"],
            PEER,
            Malformed(F),
        ),
        (&["for="], PEER, Malformed(F)),
        (&["for = 192.0.2.1"], PEER, Malformed(F)),
        (&["for=\"192.0.2.1"], PEER, Malformed(F)),
        (&["for=192.0.2.1 junk"], PEER, Malformed(F)),
        (&["for=\"a,b\", for=10.0.0.2"], PEER, Malformed(F)),
        // A malformed element far left is never examined; recovery finds the next element.
        (
            &["for=\"x, ;=, for=192.0.2.9\", for=192.0.2.8"],
            "192.0.2.8",
            Chain(F),
        ),
        (&["garbage;;=, for=192.0.2.8"], "192.0.2.8", Chain(F)),
        (&["for=192.0.2.8,"], "192.0.2.8", Chain(F)),
        (&[",,for=192.0.2.8,,"], "192.0.2.8", Chain(F)),
        (&[""], PEER, TrustedPeerNoChain),
        (&[";"], PEER, TrustedPeerNoChain),
    ];
    let proxies = trusted(&["10.0.0.0/8"]);
    for (lines, want, source) in cases {
        let h = map(&lines.iter().map(|l| ("forwarded", *l)).collect::<Vec<_>>());
        let r = resolve_client(ip(PEER), &h, &proxies);
        assert_eq!((r.client, r.source), (ip(want), *source), "{lines:?}");
    }
}

#[test]
fn c_fwd_1_untrusted_peer_is_the_client() {
    let h = map(&[
        ("x-forwarded-for", "203.0.113.7"),
        ("forwarded", "for=192.0.2.1"),
    ]);
    let r = resolve_client(ip("198.51.100.5"), &h, &trusted(&["10.0.0.0/8"]));
    assert_eq!(r.client, ip("198.51.100.5"));
    assert_eq!(r.source, AddressSource::Peer);
    assert!(!r.peer_trusted);
    let none = TrustedProxies::none();
    assert!(none.is_empty());
    assert_eq!(client_address(ip(PEER), &h, &none), ip(PEER));
    let sock: std::net::SocketAddr = "[::ffff:198.51.100.5]:4000".parse().expect("sock");
    assert_eq!(client_address_of(sock, &h, &none), ip("198.51.100.5"));
}

/// C-FWD-3: IPv4-mapped peers are unmapped first, and mapped trusted networks match plain peers.
#[test]
fn c_fwd_3_mapped_peers_and_networks() {
    let h = map(&[("x-forwarded-for", "203.0.113.7")]);
    let r = resolve_client(ip("::ffff:10.0.0.1"), &h, &trusted(&["10.0.0.0/8"]));
    assert_eq!((r.peer, r.client), (ip(PEER), ip("203.0.113.7")));
    let mapped_net = trusted(&["::ffff:10.0.0.0/104"]);
    assert_eq!(
        mapped_net.nets(),
        &["10.0.0.0/8".parse::<ipnet::IpNet>().expect("net")]
    );
    assert!(mapped_net.contains(ip("10.1.2.3")));
    assert!(mapped_net.contains(ip("::ffff:10.1.2.3")));
    assert!(!mapped_net.contains(ip("11.0.0.1")));
    assert_eq!(client_address(ip(PEER), &h, &mapped_net), ip("203.0.113.7"));
    // A mapped network shorter than /96 is left alone (it is not all IPv4).
    let wide = trusted(&["::/64"]);
    assert!(!wide.contains(ip("10.0.0.1")));
    // The peer's own mapped form is trusted through a plain IPv4 entry.
    let v6 = trusted(&["2001:db8::/32"]);
    assert!(v6.contains(ip("2001:db8::1")));
}

fn xff_of(n: usize, element: &str, tail: &str) -> HeaderMap {
    let mut s = String::with_capacity(n * (element.len() + 2) + tail.len());
    for _ in 0..n {
        s.push_str(element);
        s.push_str(", ");
    }
    s.push_str(tail);
    map(&[("x-forwarded-for", &s)])
}

/// C-FWD-1/3 bounded input: at most MAX_HOPS elements are examined.
#[test]
fn c_fwd_3_hop_cap() {
    use AddressSource::*;
    use ChainHeader::XForwardedFor as X;
    let p = trusted(&["10.0.0.0/8"]);
    // Exactly MAX_HOPS trusted elements: the leftmost.
    let r = resolve_client(ip(PEER), &xff_of(MAX_HOPS - 1, "10.0.0.5", "10.0.0.2"), &p);
    assert_eq!((r.client, r.source), (ip("10.0.0.5"), AllTrusted(X)));
    // One more: the peer.
    let r = resolve_client(ip(PEER), &xff_of(MAX_HOPS, "10.0.0.5", "10.0.0.2"), &p);
    assert_eq!((r.client, r.source), (ip(PEER), TooManyHops(X)));
    // A client behind MAX_HOPS trusted hops is beyond the cap.
    let h = xff_of(MAX_HOPS, "10.0.0.5", "10.0.0.2");
    let mut line = String::from("203.0.113.7, ");
    line.push_str(
        h.get("x-forwarded-for")
            .and_then(|v| v.to_str().ok())
            .expect("ascii"),
    );
    let r = resolve_client(ip(PEER), &map(&[("x-forwarded-for", &line)]), &p);
    assert_eq!(r.source, TooManyHops(X));
    // The cap spans header lines.
    let many: Vec<(&str, &str)> = (0..=MAX_HOPS)
        .map(|_| ("x-forwarded-for", "10.0.0.5"))
        .collect();
    assert_eq!(
        resolve_client(ip(PEER), &map(&many), &p).source,
        TooManyHops(X)
    );
    let many: Vec<(&str, &str)> = (0..MAX_HOPS)
        .map(|_| ("x-forwarded-for", "10.0.0.5"))
        .collect();
    assert_eq!(
        resolve_client(ip(PEER), &map(&many), &p).source,
        AllTrusted(X)
    );
}

/// C-FWD-1/3 bounded input: a 100k-element X-Forwarded-For completes with the defined answer.
#[test]
fn c_fwd_3_hundred_thousand_elements() {
    let p = trusted(&["10.0.0.0/8"]);
    // All trusted: beyond the cap, so the peer.
    let r = resolve_client(ip(PEER), &xff_of(100_000, "10.0.0.5", "10.0.0.2"), &p);
    assert_eq!(
        (r.client, r.source),
        (
            ip(PEER),
            AddressSource::TooManyHops(ChainHeader::XForwardedFor)
        )
    );
    // Garbage everywhere left of the client: the client.
    let r = resolve_client(
        ip(PEER),
        &xff_of(100_000, "not-an-ip", "203.0.113.7, 10.0.0.2"),
        &p,
    );
    assert_eq!(r.client, ip("203.0.113.7"));
    // A one-mebibyte element: not an address, so the peer.
    let huge = "1".repeat(1 << 20);
    let r = resolve_client(ip(PEER), &map(&[("x-forwarded-for", &huge)]), &p);
    assert_eq!(
        r.source,
        AddressSource::Malformed(ChainHeader::XForwardedFor)
    );
    let r = resolve_client(
        ip(PEER),
        &map(&[("x-forwarded-for", &format!("{huge}, 203.0.113.7"))]),
        &p,
    );
    assert_eq!(r.client, ip("203.0.113.7"));
    // The same for Forwarded: an over-long line is one malformed element ...
    let mut fwd = "for=10.0.0.5, ".repeat(100_000);
    fwd.push_str("for=10.0.0.2");
    let r = resolve_client(ip(PEER), &map(&[("forwarded", &fwd)]), &p);
    assert_eq!(r.source, AddressSource::Malformed(ChainHeader::Forwarded));
    // ... and a short line with more elements than the ring holds is beyond the cap.
    let fwd = "for=10.0.0.5,".repeat(MAX_HOPS + 5);
    let r = resolve_client(ip(PEER), &map(&[("forwarded", &fwd)]), &p);
    assert_eq!(r.source, AddressSource::TooManyHops(ChainHeader::Forwarded));
    let fwd = vec!["for=10.0.0.5"; MAX_HOPS];
    let h = map(&fwd.iter().map(|l| ("forwarded", *l)).collect::<Vec<_>>());
    assert_eq!(
        resolve_client(ip(PEER), &h, &p).source,
        AddressSource::AllTrusted(ChainHeader::Forwarded)
    );
    // 100k header lines: the walk still stops at the cap.
    let lines: Vec<(&str, &str)> = (0..100_000)
        .map(|_| ("forwarded", "for=10.0.0.5"))
        .collect();
    assert_eq!(
        resolve_client(ip(PEER), &map(&lines), &p).source,
        AddressSource::TooManyHops(ChainHeader::Forwarded)
    );
}

/// C-FWD-2: `https` only when a trusted peer said so, rightmost value.
#[test]
fn c_fwd_2_proto_table() {
    let cases: &[(bool, Lines, Proto)] = &[
        (false, &[("x-forwarded-proto", "https")], Proto::Http),
        (false, &[("forwarded", "proto=https")], Proto::Http),
        (true, &[], Proto::Http),
        (true, &[("x-forwarded-proto", "https")], Proto::Https),
        (true, &[("x-forwarded-proto", " HTTPS ")], Proto::Https),
        (true, &[("x-forwarded-proto", "http")], Proto::Http),
        (true, &[("x-forwarded-proto", "https, http")], Proto::Http),
        (true, &[("x-forwarded-proto", "http, https")], Proto::Https),
        (
            true,
            &[
                ("x-forwarded-proto", "https"),
                ("x-forwarded-proto", "http"),
            ],
            Proto::Http,
        ),
        (true, &[("x-forwarded-proto", "wss")], Proto::Http),
        (true, &[("x-forwarded-proto", "httpsx")], Proto::Http),
        (
            true,
            &[("forwarded", "for=1.2.3.4;proto=https")],
            Proto::Https,
        ),
        (
            true,
            &[("forwarded", "for=1.2.3.4;Proto=\"HTTPS\"")],
            Proto::Https,
        ),
        (
            true,
            &[("forwarded", "proto=https, for=1.2.3.4")],
            Proto::Http,
        ),
        (
            true,
            &[("forwarded", "proto=https"), ("x-forwarded-proto", "http")],
            Proto::Http,
        ),
    ];
    for (peer_trusted, lines, want) in cases {
        assert_eq!(
            forwarded_proto(*peer_trusted, &map(lines)),
            *want,
            "{peer_trusted} {lines:?}"
        );
    }
    assert_eq!(Proto::Https.as_str(), "https");
}

/// C-FWD-2: incoming forwarding headers never pass as received; Host is kept.
#[test]
fn c_fwd_2_rewrite() {
    let mut h = map(&[
        ("host", "shop.example"),
        ("forwarded", "for=6.6.6.6"),
        ("x-forwarded-for", "6.6.6.6"),
        ("x-forwarded-for", "7.7.7.7"),
        ("x-forwarded-proto", "https"),
        ("x-forwarded-host", "evil.example"),
        ("x-real-ip", "6.6.6.6"),
        ("accept", "*/*"),
    ]);
    let host = inbound_host(&h);
    rewrite_forwarding(&mut h, ip("::ffff:203.0.113.7"), host, Proto::Http);
    assert_eq!(values(&h, "x-forwarded-for"), ["203.0.113.7"]);
    assert_eq!(values(&h, "x-real-ip"), ["203.0.113.7"]);
    assert_eq!(values(&h, "x-forwarded-host"), ["shop.example"]);
    assert_eq!(values(&h, "x-forwarded-proto"), ["http"]);
    assert_eq!(values(&h, "host"), ["shop.example"]);
    assert_eq!(values(&h, "accept"), ["*/*"]);
    assert!(h.get(FORWARDED).is_none());

    let mut h = map(&[("x-forwarded-host", "evil.example")]);
    rewrite_forwarding(&mut h, ip("2001:db8::1"), None, Proto::Https);
    assert!(h.get(X_FORWARDED_HOST).is_none());
    assert_eq!(values(&h, "x-forwarded-for"), ["2001:db8::1"]);
    assert_eq!(values(&h, "x-forwarded-proto"), ["https"]);
    let longest = ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff");
    rewrite_forwarding(&mut h, longest, None, Proto::Https);
    assert_eq!(
        values(&h, "x-real-ip"),
        ["ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"]
    );
}

/// C-FWD-2: the client's copies of every forwarding name go, in either spelling (`_` and `-`
/// are one byte to CGI-style backends, which read `HTTP_X_FORWARDED_FOR` for both) and any
/// case; `X-Forwarded-Port`, `-Prefix`, `-Scheme`, `-Ssl` too. Other names with `_` stay.
#[test]
fn c_fwd_2_rewrite_strips_every_spelling_of_the_forwarding_names() {
    let spoofed = [
        "x_forwarded_for",
        "X_Forwarded_For",
        "x-forwarded_for",
        "X-Real_IP",
        "x_real_ip",
        "X_Forwarded_Proto",
        "x_forwarded_host",
        "X-Forwarded-Port",
        "X_Forwarded_Port",
        "X-Forwarded-Prefix",
        "x_forwarded_prefix",
        "X-Forwarded-Scheme",
        "X-Forwarded-Ssl",
        "X_FORWARDED_SSL",
    ];
    let mut lines: Vec<(&str, &str)> = spoofed.iter().map(|n| (*n, "6.6.6.6")).collect();
    lines.push(("x_custom_header", "kept"));
    let mut h = map(&lines);
    rewrite_forwarding(&mut h, ip("203.0.113.7"), None, Proto::Http);
    for name in spoofed {
        assert!(
            super::is_replaced_forwarding(name.as_bytes()),
            "{name} is a forwarding name"
        );
        let lower = name.to_ascii_lowercase();
        assert!(
            h.get(lower.as_str()).is_none_or(|v| v != "6.6.6.6"),
            "{name} passed through"
        );
    }
    assert_eq!(values(&h, "x-forwarded-for"), ["203.0.113.7"]);
    assert_eq!(values(&h, "x-real-ip"), ["203.0.113.7"]);
    assert_eq!(values(&h, "x-forwarded-proto"), ["http"]);
    assert_eq!(values(&h, "x_custom_header"), ["kept"]);
    assert_eq!(h.len(), 4, "weir's three and the custom one: {h:?}");
    for other in [
        "x-forwarded",
        "x-forwarded-fo",
        "x-forwarded-forx",
        "xforwarded-for",
    ] {
        assert!(!super::is_replaced_forwarding(other.as_bytes()), "{other}");
    }
}

/// C-PATH-6, C-PATH-12: the hop-by-hop table.
#[test]
fn c_path_6_strip_table() {
    let mut h = map(&[
        ("host", "a.example"),
        ("connection", "keep-alive, X-Custom, host"),
        ("connection", "  x-other ,, te , close"),
        ("keep-alive", "timeout=5"),
        ("proxy-connection", "keep-alive"),
        ("te", "trailers, deflate"),
        ("trailer", "grpc-status"),
        ("transfer-encoding", "chunked"),
        ("upgrade", "websocket"),
        ("x-custom", "1"),
        ("x-other", "2"),
        ("x-kept", "3"),
        ("close", "4"),
    ]);
    strip_hop_by_hop(&mut h, false);
    let mut names: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["host", "te", "x-kept"]);
    assert_eq!(values(&h, "te"), ["trailers"]);

    // TE without trailers is dropped; Upgrade kept when upgrading, with Connection: upgrade.
    let mut h = map(&[
        ("connection", "Upgrade"),
        ("upgrade", "websocket"),
        ("te", "gzip"),
        ("sec-websocket-key", "k"),
    ]);
    assert!(wants_upgrade(&h));
    strip_hop_by_hop(&mut h, true);
    assert_eq!(values(&h, "upgrade"), ["websocket"]);
    assert_eq!(values(&h, "connection"), ["upgrade"]);
    assert!(h.get(TE).is_none());
    assert_eq!(values(&h, "sec-websocket-key"), ["k"]);

    // Not upgrading: Upgrade goes even when Connection names it.
    let mut h = map(&[
        ("connection", "upgrade"),
        ("upgrade", "h2c"),
        ("te", "TRAILERS"),
    ]);
    strip_hop_by_hop(&mut h, false);
    assert!(h.get(UPGRADE).is_none() && h.get(CONNECTION).is_none());
    assert_eq!(values(&h, "te"), ["trailers"]);

    // A lone plain `te: trailers` stays; two lines, or a sensitive one, become one plain line.
    for (lines, sensitive) in [(1, false), (2, false), (1, true)] {
        let mut h = HeaderMap::new();
        for _ in 0..lines {
            let mut v = HeaderValue::from_static("trailers");
            v.set_sensitive(sensitive);
            h.append(TE, v);
        }
        strip_hop_by_hop(&mut h, false);
        assert_eq!(values(&h, "te"), ["trailers"]);
        assert!(h.get(TE).is_some_and(|v| !v.is_sensitive()));
    }

    // C-PATH-8: h2c is never an upgrade; HTTP2-Settings is hop-by-hop even when Connection
    // does not name it; beside another protocol only h2c leaves the list.
    let mut h = map(&[
        ("connection", "Upgrade, HTTP2-Settings"),
        ("upgrade", "h2c"),
        ("http2-settings", "AAMAAABkAAQAoAAAAAIAAAAA"),
        ("x-kept", "1"),
    ]);
    assert!(!wants_upgrade(&h));
    strip_hop_by_hop(&mut h, false);
    assert_eq!(
        h.keys().map(HeaderName::as_str).collect::<Vec<_>>(),
        ["x-kept"]
    );
    let mut h = map(&[("upgrade", "H2C"), ("http2-settings", "x")]);
    strip_hop_by_hop(&mut h, false);
    assert!(h.is_empty(), "{h:?}");
    let mut h = map(&[("connection", "upgrade"), ("upgrade", "h2c, websocket")]);
    assert!(wants_upgrade(&h));
    strip_hop_by_hop(&mut h, true);
    assert_eq!(values(&h, "upgrade"), ["websocket"]);

    // Invalid tokens are skipped; nothing else happens.
    let mut h = map(&[
        ("connection", "bad token, (x), \u{7e}ok"),
        ("~ok", "1"),
        ("y", "2"),
    ]);
    strip_hop_by_hop(&mut h, false);
    assert_eq!(h.keys().map(HeaderName::as_str).collect::<Vec<_>>(), ["y"]);

    // A response: Transfer-Encoding and Trailer go.
    let mut h = map(&[
        ("transfer-encoding", "chunked"),
        ("trailer", "x"),
        ("content-type", "a/b"),
    ]);
    strip_hop_by_hop(&mut h, false);
    assert!(h.get(TRANSFER_ENCODING).is_none() && h.get(TRAILER).is_none());
    assert_eq!(values(&h, "content-type"), ["a/b"]);
    assert!(h.get(HOST).is_none());
}

#[test]
fn c_path_6_wants_upgrade() {
    assert!(!wants_upgrade(&map(&[
        ("connection", "upgrade"),
        ("upgrade", "h2c")
    ])));
    assert!(!wants_upgrade(&map(&[
        ("connection", "upgrade"),
        ("upgrade", " h2c ,")
    ])));
    assert!(!wants_upgrade(&map(&[("connection", "upgrade")])));
    assert!(!wants_upgrade(&map(&[("upgrade", "websocket")])));
    assert!(!wants_upgrade(&map(&[
        ("upgrade", "websocket"),
        ("connection", "keep-alive")
    ])));
    assert!(wants_upgrade(&map(&[
        ("upgrade", "websocket"),
        ("connection", "keep-alive"),
        ("connection", "keep-alive, UPGRADE"),
    ])));
}

/// The documented order: resolve on received headers, strip, then rewrite; a client's
/// `Connection: x-forwarded-for` cannot remove what weir writes.
#[test]
fn c_fwd_2_order_strip_then_rewrite() {
    let mut h = map(&[
        ("host", "a.example"),
        ("connection", "x-forwarded-for, x-real-ip, host"),
        ("x-forwarded-for", "203.0.113.7"),
    ]);
    let p = trusted(&["10.0.0.0/8"]);
    let r = resolve_client(ip(PEER), &h, &p);
    assert_eq!(r.client, ip("203.0.113.7"));
    let proto = forwarded_proto(r.peer_trusted, &h);
    let host = inbound_host(&h);
    strip_hop_by_hop(&mut h, false);
    rewrite_forwarding(&mut h, r.client, host, proto);
    assert_eq!(values(&h, "x-forwarded-for"), ["203.0.113.7"]);
    assert_eq!(values(&h, "x-real-ip"), ["203.0.113.7"]);
    assert_eq!(values(&h, "host"), ["a.example"]);
}

#[test]
fn ip_text_writes_every_ipv4_octet_as_std_does() {
    // The table of octet texts against std's formatting, each octet in each position.
    for o in 0..=255u8 {
        for ip in [
            std::net::Ipv4Addr::new(o, 0, 9, 255),
            std::net::Ipv4Addr::new(1, o, 10, 99),
            std::net::Ipv4Addr::new(100, 200, o, 7),
            std::net::Ipv4Addr::new(127, 0, 0, o),
        ] {
            let mut buf = [0u8; 64];
            let len = ip_text(IpAddr::V4(ip), &mut buf);
            assert_eq!(&buf[..len], ip.to_string().as_bytes());
        }
    }
    let v6: IpAddr = "2001:db8::1".parse().unwrap();
    let mut buf = [0u8; 64];
    let len = ip_text(v6, &mut buf);
    assert_eq!(&buf[..len], b"2001:db8::1");
}
