//! Property tests: client address against a reference oracle (C-FWD-1, C-FWD-3), no panics on
//! arbitrary header bytes (C-FWD-3), and the hop-by-hop strip (C-PATH-6, C-PATH-12).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use http::header::{CONNECTION, TE, UPGRADE};
use http::{HeaderMap, HeaderName, HeaderValue};
use proptest::prelude::*;

use super::*;

// ---------- generators ----------

fn address() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        (0u8..9).prop_map(|i| IpAddr::V4(Ipv4Addr::new(10, 0, 0, i))),
        (0u8..9).prop_map(|i| IpAddr::V4(Ipv4Addr::new(192, 0, 2, i))),
        (0u16..9).prop_map(|i| IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, i))),
        (0u8..3).prop_map(|i| IpAddr::V4(Ipv4Addr::new(198, 51, 100, i))),
    ]
}

const NETS: &[&str] = &[
    "10.0.0.0/29",
    "10.0.0.0/30",
    "10.0.0.4/31",
    "192.0.2.0/30",
    "192.0.2.4/32",
    "2001:db8::/126",
    "2001:db8::4/127",
    "::ffff:192.0.2.0/126",
    "0.0.0.0/0",
    "::/0",
];

fn nets() -> impl Strategy<Value = Vec<&'static str>> {
    prop::sample::subsequence(NETS, 0..=NETS.len())
}

/// The reference trust check: plain mask arithmetic, written independently of `ipnet`.
fn oracle_trusted(nets: &[&str], ip: IpAddr) -> bool {
    let ip = canonical(ip);
    nets.iter().any(|n| {
        let (addr, len) = n.split_once('/').expect("net");
        let addr: IpAddr = addr.parse().expect("addr");
        let len: u32 = len.parse().expect("len");
        let (addr, len) = match addr {
            IpAddr::V6(v6) if len >= 96 && v6.to_ipv4_mapped().is_some() => {
                (IpAddr::V4(v6.to_ipv4_mapped().expect("mapped")), len - 96)
            }
            other => (other, len),
        };
        match (addr, ip) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
                u32::from(a) & mask == u32::from(b) & mask
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                let mask = if len == 0 {
                    0
                } else {
                    u128::MAX << (128 - len)
                };
                u128::from(a) & mask == u128::from(b) & mask
            }
            _ => false,
        }
    })
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn trusted_of(nets: &[&str]) -> TrustedProxies {
    TrustedProxies::new(nets.iter().map(|n| n.parse().expect("net")).collect())
}

/// One chain element with its ground truth.
#[derive(Debug, Clone)]
enum Elem {
    /// An address, and how it is written.
    Addr(IpAddr, u8, String),
    /// Not an address.
    Garbage(String),
    /// An empty element (maybe whitespace).
    Empty(String),
}

fn ows() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["", "", " ", "  ", "\t", " \t"]).prop_map(str::to_owned)
}

fn garbage() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("unknown".to_owned()),
        Just("_hidden".to_owned()),
        Just("1.2.3".to_owned()),
        Just("1.2.3.4:99999".to_owned()),
        Just("[::1".to_owned()),
        Just("x".repeat(300)),
        "[g-z_][a-z0-9._-]{0,8}",
    ]
}

fn xff_elem() -> impl Strategy<Value = Elem> {
    prop_oneof![
        8 => (address(), 0u8..5, ows()).prop_map(|(ip, r, pad)| Elem::Addr(ip, r, pad)),
        1 => garbage().prop_map(Elem::Garbage),
        1 => ows().prop_map(Elem::Empty),
    ]
}

/// Writes an address in one of the accepted forms.
fn render_node(ip: IpAddr, style: u8) -> String {
    match (ip, style) {
        (IpAddr::V4(v4), 1) => format!("{v4}:{}", 1000 + u16::from(style)),
        (IpAddr::V4(v4), 2) => format!("::ffff:{v4}"),
        (IpAddr::V4(v4), 3) => format!("[::ffff:{v4}]:80"),
        (IpAddr::V6(v6), 1) => format!("[{v6}]:8443"),
        (IpAddr::V6(v6), 2) => format!("[{v6}]"),
        (IpAddr::V6(v6), 3) => format!("[{v6}]:_obf"),
        (ip, _) => ip.to_string(),
    }
}

fn render_xff(e: &Elem) -> String {
    match e {
        Elem::Addr(ip, style, pad) => format!("{pad}{}{pad}", render_node(*ip, *style)),
        Elem::Garbage(g) => g.clone(),
        Elem::Empty(pad) => pad.clone(),
    }
}

/// RFC 7239 parameters written before `for=`, some with quoted commas and semicolons.
fn before_for() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "",
        "by=_proxy;",
        "host=\"a.example, b;c\";",
        "BY=\"[2001:db8::9]:80\" ; ",
    ])
    .prop_map(str::to_owned)
}

/// RFC 7239 parameters written after `for=`.
fn after_for() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "",
        ";proto=http",
        ";Proto=https",
        " ; ext=\"x,y\"",
        ";;",
    ])
    .prop_map(str::to_owned)
}

fn forwarded_elem() -> impl Strategy<Value = Elem> {
    prop_oneof![
        8 => (address(), 0u8..5, prop::sample::select(vec!["for", "For", "FOR"]), before_for(), after_for()).prop_map(
            |(ip, style, name, before, after)| {
                let node = render_node(ip, style);
                // A token cannot hold ':' or '[': those forms are quoted (RFC 7239 §6).
                let value = if node.contains(':') { format!("\"{node}\"") } else { node };
                Elem::Addr(ip, 0, format!("{before}{name}={value}{after}"))
            }
        ),
        1 => prop::sample::select(vec![
            "for=unknown",
            "for=_hidden",
            "for=\"_x:80\"",
            "proto=https",
            "by=10.0.0.1",
            "for=10.0.0.1;for=10.0.0.2",
            "for=\"[::1\"",
            "for=",
            "for=\"10.0.0.1\" x",
            "=x",
        ]).prop_map(|g| Elem::Garbage(g.to_owned())),
        1 => ows().prop_map(Elem::Empty),
    ]
}

fn render_forwarded(e: &Elem) -> String {
    match e {
        Elem::Addr(_, _, text) => text.clone(),
        Elem::Garbage(g) => g.clone(),
        Elem::Empty(pad) => pad.clone(),
    }
}

/// Splits elements into header lines at `breaks` and renders each line.
fn lines_of(
    elems: &[Elem],
    breaks: &[bool],
    sep: &str,
    render: fn(&Elem) -> String,
) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current: Vec<String> = Vec::new();
    for (i, e) in elems.iter().enumerate() {
        current.push(render(e));
        if breaks.get(i).copied().unwrap_or(false) || i + 1 == elems.len() {
            lines.push(current.join(sep));
            current.clear();
        }
    }
    lines
}

/// The reference: collect every element, walk from the right.
fn oracle(peer: IpAddr, elems: &[Elem], nets: &[&str]) -> IpAddr {
    let peer = canonical(peer);
    if !oracle_trusted(nets, peer) || elems.is_empty() {
        return peer;
    }
    let mut leftmost = None;
    for (examined, e) in elems.iter().rev().enumerate() {
        if examined == MAX_HOPS {
            return peer;
        }
        match e {
            Elem::Empty(_) => {}
            Elem::Garbage(_) => return peer,
            Elem::Addr(ip, _, _) => {
                let ip = canonical(*ip);
                if !oracle_trusted(nets, ip) {
                    return ip;
                }
                leftmost = Some(ip);
            }
        }
    }
    leftmost.unwrap_or(peer)
}

fn headers_with(name: &HeaderName, lines: &[String]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for l in lines {
        h.append(
            name.clone(),
            HeaderValue::from_str(l).expect("rendered line is a valid value"),
        );
    }
    h
}

fn peer() -> impl Strategy<Value = IpAddr> {
    (address(), any::<bool>()).prop_map(|(ip, mapped)| match ip {
        IpAddr::V4(v4) if mapped => IpAddr::V6(v4.to_ipv6_mapped()),
        other => other,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// C-FWD-1, C-FWD-3: X-Forwarded-For resolution equals the collect-and-walk oracle.
    #[test]
    fn c_fwd_1_c_fwd_3_xff_matches_oracle(
        peer in peer(),
        nets in nets(),
        elems in prop::collection::vec(xff_elem(), 0..90),
        breaks in prop::collection::vec(prop::bool::weighted(0.1), 90),
    ) {
        let lines = lines_of(&elems, &breaks, ",", render_xff);
        let h = headers_with(&X_FORWARDED_FOR, &lines);
        let got = client_address(peer, &h, &trusted_of(&nets));
        prop_assert_eq!(got, oracle(peer, &elems, &nets), "lines {:?}", lines);
    }

    /// C-FWD-1, C-FWD-3: long, mostly trusted chains without garbage, so that the hop cap
    /// (MAX_HOPS) decides often; still equal to the oracle.
    #[test]
    fn c_fwd_3_long_trusted_chains_match_oracle(
        peer in (0u8..9).prop_map(|i| IpAddr::V4(Ipv4Addr::new(192, 0, 2, i))),
        extra in prop::sample::subsequence(&NETS[..8], 0..=8),
        elems in prop::collection::vec(
            prop_oneof![
                30 => (address().prop_filter("v4", IpAddr::is_ipv4), 0u8..5, ows())
                    .prop_map(|(ip, r, pad)| Elem::Addr(ip, r, pad)),
                1 => (address(), 0u8..5, ows()).prop_map(|(ip, r, pad)| Elem::Addr(ip, r, pad)),
                1 => ows().prop_map(Elem::Empty),
            ],
            50..100,
        ),
        breaks in prop::collection::vec(prop::bool::weighted(0.05), 100),
    ) {
        // Trust all of IPv4, plus some smaller networks: IPv6 hops are the untrusted ones.
        let mut nets = extra;
        nets.push("0.0.0.0/0");
        let lines = lines_of(&elems, &breaks, ",", render_xff);
        let h = headers_with(&X_FORWARDED_FOR, &lines);
        prop_assert_eq!(client_address(peer, &h, &trusted_of(&nets)), oracle(peer, &elems, &nets));
        let fwd: Vec<String> = lines_of(&elems, &breaks, ",", |e| match e {
            Elem::Addr(ip, style, _) => {
                let node = render_node(*ip, *style);
                if node.contains(':') { format!("for=\"{node}\"") } else { format!("for={node}") }
            }
            other => render_xff(other),
        });
        let h = headers_with(&FORWARDED_NAME, &fwd);
        prop_assert_eq!(client_address(peer, &h, &trusted_of(&nets)), oracle(peer, &elems, &nets));
    }

    /// C-FWD-1, C-FWD-3: RFC 7239 Forwarded resolution equals the oracle (quoted values with
    /// commas, parameters in any order and case, `unknown` and obfuscated nodes).
    #[test]
    fn c_fwd_1_c_fwd_3_forwarded_matches_oracle(
        peer in peer(),
        nets in nets(),
        elems in prop::collection::vec(forwarded_elem(), 0..90),
        breaks in prop::collection::vec(prop::bool::weighted(0.1), 90),
        sep in prop::sample::select(vec![",", ", ", " ,\t"]),
    ) {
        let lines = lines_of(&elems, &breaks, sep, render_forwarded);
        let h = headers_with(&FORWARDED_NAME, &lines);
        let got = client_address(peer, &h, &trusted_of(&nets));
        prop_assert_eq!(got, oracle(peer, &elems, &nets), "lines {:?}", lines);
    }

    /// C-FWD-3: arbitrary bytes in every forwarding header never panic; an untrusted peer is
    /// always the client, and a trusted peer's answer is the peer or a trusted-or-not address.
    #[test]
    fn c_fwd_3_arbitrary_bytes_never_panic(
        xff in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..80), 0..3),
        fwd in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..80), 0..3),
        proto in prop::collection::vec(any::<u8>(), 0..20),
        trust_all in any::<bool>(),
    ) {
        let mut h = HeaderMap::new();
        for l in &xff {
            if let Ok(v) = HeaderValue::from_bytes(l) { h.append(X_FORWARDED_FOR, v); }
        }
        for l in &fwd {
            if let Ok(v) = HeaderValue::from_bytes(l) { h.append(FORWARDED_NAME, v); }
        }
        if let Ok(v) = HeaderValue::from_bytes(&proto) { h.append(X_FORWARDED_PROTO, v); }
        let nets: &[&str] = if trust_all { &["0.0.0.0/0", "::/0"] } else { &[] };
        let peer = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let r = resolve_client(peer, &h, &trusted_of(nets));
        if !trust_all {
            prop_assert_eq!(r.client, peer);
            prop_assert_eq!(forwarded_proto(r.peer_trusted, &h), Proto::Http);
        }
        let _ = forwarded_proto(true, &h);
        let mut out = h.clone();
        strip_hop_by_hop(&mut out, false);
        rewrite_forwarding(&mut out, r.client, None, Proto::Http);
        prop_assert_eq!(out.get_all(X_FORWARDED_FOR).iter().count(), 1);
    }

    /// C-FWD-3: bytes from the Forwarded grammar's own alphabet (quotes, escapes, separators)
    /// never panic, with every address trusted so that the whole chain is walked.
    #[test]
    fn c_fwd_3_forwarded_grammar_soup_never_panics(
        line in "[\"\\\\,;= \tfFoOrR0-9a-f:\\[\\]._]{0,120}",
    ) {
        let h = headers_with(&FORWARDED_NAME, &[line]);
        let _ = resolve_client(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), &h, &trusted_of(&["0.0.0.0/0", "::/0"]));
        let _ = forwarded_proto(true, &h);
    }
}

const FORWARDED_NAME: HeaderName = http::header::FORWARDED;

// ---------- C-PATH-6 ----------

const NAME_POOL: &[&str] = &[
    "x-a",
    "x-b",
    "x-c",
    "host",
    "te",
    "upgrade",
    "keep-alive",
    "proxy-connection",
    "trailer",
    "transfer-encoding",
    "content-type",
    "x-forwarded-for",
    "close",
];

const ALWAYS_HOP: &[&str] = &[
    "keep-alive",
    "proxy-connection",
    "trailer",
    "transfer-encoding",
];

fn header_line() -> impl Strategy<Value = (&'static str, String)> {
    (
        prop::sample::select(NAME_POOL),
        prop::sample::select(vec![
            "1",
            "trailers",
            "gzip",
            "trailers, gzip",
            " Trailers ",
            "deflate;q=0.5",
            "",
        ]),
    )
        .prop_map(|(n, v)| (n, v.to_owned()))
}

fn connection_line() -> impl Strategy<Value = String> {
    prop::collection::vec(
        (prop::sample::select(NAME_POOL), any::<bool>(), ows()).prop_map(|(n, upper, pad)| {
            let n = if upper {
                n.to_ascii_uppercase()
            } else {
                n.to_owned()
            };
            format!("{pad}{n}{pad}")
        }),
        0..4,
    )
    .prop_map(|tokens| tokens.join(","))
}

proptest! {
    /// C-PATH-6, C-PATH-12: after the strip no hop-by-hop header and no header named by
    /// `Connection` remains (except `Host`, `TE: trailers` and `Upgrade` when upgrading), `TE`
    /// is exactly `trailers` when a `trailers` value was sent, and every other header is
    /// untouched.
    #[test]
    fn c_path_6_strip_removes_exactly_the_hop_by_hop_headers(
        lines in prop::collection::vec(header_line(), 0..12),
        connection in prop::collection::vec(connection_line(), 0..3),
        upgrading in any::<bool>(),
    ) {
        let mut h = HeaderMap::new();
        for (n, v) in &lines {
            h.append(*n, HeaderValue::from_str(v).expect("value"));
        }
        for c in &connection {
            h.append(CONNECTION, HeaderValue::from_str(c).expect("value"));
        }
        let before = h.clone();
        strip_hop_by_hop(&mut h, upgrading);

        let named: Vec<String> = connection
            .iter()
            .flat_map(|c| c.split(',').map(|t| t.trim().to_ascii_lowercase()))
            .filter(|t| !t.is_empty())
            .collect();
        let sent_trailers = before
            .get_all(TE)
            .iter()
            .any(|v| v.to_str().expect("ascii").split(',').any(|t| t.trim().eq_ignore_ascii_case("trailers")));

        for hop in ALWAYS_HOP {
            prop_assert!(!h.contains_key(*hop), "{} survived", hop);
        }
        if upgrading {
            prop_assert_eq!(h.get_all(CONNECTION).iter().cloned().collect::<Vec<_>>(), vec![HeaderValue::from_static("upgrade")]);
            prop_assert_eq!(h.get_all(UPGRADE).iter().collect::<Vec<_>>(), before.get_all(UPGRADE).iter().collect::<Vec<_>>());
        } else {
            prop_assert!(!h.contains_key(CONNECTION));
            prop_assert!(!h.contains_key(UPGRADE));
        }
        if sent_trailers {
            prop_assert_eq!(h.get_all(TE).iter().cloned().collect::<Vec<_>>(), vec![HeaderValue::from_static("trailers")]);
        } else {
            prop_assert!(!h.contains_key(TE));
        }
        for name in NAME_POOL {
            let special = ALWAYS_HOP.contains(name) || matches!(*name, "te" | "upgrade");
            let is_named = named.iter().any(|t| t == name);
            if special {
                continue;
            }
            if is_named && *name != "host" {
                prop_assert!(!h.contains_key(*name), "{} named by Connection survived", name);
            } else {
                prop_assert_eq!(
                    h.get_all(*name).iter().collect::<Vec<_>>(),
                    before.get_all(*name).iter().collect::<Vec<_>>(),
                    "{} changed", name
                );
            }
        }
    }
}

proptest! {
    /// C-FWD-2: the address weir writes into `X-Forwarded-For` / `X-Real-IP` is exactly the
    /// standard text of the address, for every IPv4 and IPv6 address (IPv4 is formatted by hand).
    #[test]
    fn c_fwd_2_written_address_is_the_standard_text(v4 in any::<u32>(), v6 in any::<u128>()) {
        for ip in [IpAddr::V4(Ipv4Addr::from(v4)), IpAddr::V6(Ipv6Addr::from(v6))] {
            let written = ip_header_value(ip);
            let text = ip.to_string();
            prop_assert_eq!(written.to_str().ok(), Some(text.as_str()));
        }
    }
}
