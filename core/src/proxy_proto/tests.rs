//! C-TLS-3: the PROXY protocol parser.

use super::*;
use proptest::prelude::*;

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn complete(buf: &[u8], accept: Accept) -> Header {
    match parse(buf, accept) {
        Ok(Parse::Complete(h)) => h,
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
    }
}

/// A v2 header: command, family/transport byte, payload.
fn v2(cmd: u8, fam: u8, payload: &[u8]) -> Vec<u8> {
    let mut v = V2_SIG.to_vec();
    v.push(0x20 | cmd);
    v.push(fam);
    v.extend_from_slice(&u16::try_from(payload.len()).unwrap().to_be_bytes());
    v.extend_from_slice(payload);
    v
}

fn v2_tcp4(src: [u8; 4], sport: u16, tlvs: &[u8]) -> Vec<u8> {
    let mut p = src.to_vec();
    p.extend_from_slice(&[10, 0, 0, 1]);
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&443u16.to_be_bytes());
    p.extend_from_slice(tlvs);
    v2(1, 0x11, &p)
}

#[test]
fn c_tls_3_v1_tcp4_tcp6_unknown() {
    let line = b"PROXY TCP4 192.0.2.7 10.0.0.1 56324 443\r\nGET / HTTP/1.1\r\n";
    let h = complete(line, Accept::V1);
    assert_eq!(h.source, Some(sa("192.0.2.7:56324")));
    assert_eq!(h.len, 41);
    assert_eq!(&line[h.len..h.len + 3], b"GET");
    let h = complete(b"PROXY TCP6 2001:db8::7 ::1 1 65535\r\n", Accept::Any);
    assert_eq!(h.source, Some(sa("[2001:db8::7]:1")));
    assert_eq!(h.version, Version::V1);
    let h = complete(b"PROXY UNKNOWN whatever follows\r\n", Accept::V1);
    assert_eq!(h.source, None);
    assert_eq!(complete(b"PROXY UNKNOWN\r\n", Accept::V1).len, 15);
}

#[test]
fn c_tls_3_v1_malformed_lines_are_errors() {
    let bad: &[&[u8]] = &[
        b"PROXY TCP4 192.0.2.7 10.0.0.1 56324\r\n",
        b"PROXY TCP4 192.0.2.7 10.0.0.1 56324 443 x\r\n",
        b"PROXY TCP4 2001:db8::1 10.0.0.1 1 2\r\n",
        b"PROXY TCP6 192.0.2.7 ::1 1 2\r\n",
        b"PROXY TCP4 192.0.2.7 10.0.0.1 65536 443\r\n",
        b"PROXY TCP4 192.0.2.7 10.0.0.1 +80 443\r\n",
        b"PROXY TCP4 192.0.2.7 10.0.0.1 080 443\r\n",
        b"PROXY TCP4 192.0.2.7  10.0.0.1 1 2\r\n",
        b"PROXY TCP4 192.0.2.7 10.0.0.1 1 2\n",
        b"PROXY UDP4 192.0.2.7 10.0.0.1 1 2\r\n",
        b"PROXY TCP4 192.000.2.7 10.0.0.1 1 2\r\n",
    ];
    for b in bad {
        assert!(
            matches!(parse(b, Accept::Any), Err(ProxyError::V1Syntax(_))),
            "{:?}: {:?}",
            String::from_utf8_lossy(b),
            parse(b, Accept::Any)
        );
    }
    assert_eq!(parse(b"PROXX", Accept::V1), Err(ProxyError::NotProxy));
    assert_eq!(
        parse(b"GET / HTTP/1.1\r\n", Accept::Any),
        Err(ProxyError::NotProxy)
    );
    // A wrong signature byte fails on that byte.
    assert_eq!(parse(b"PRI", Accept::Any), Err(ProxyError::NotProxy));
}

#[test]
fn c_tls_3_v1_is_bounded() {
    let mut long = b"PROXY UNKNOWN ".to_vec();
    long.resize(V1_MAX_LEN - 1, b'a');
    assert_eq!(parse(&long, Accept::V1), Ok(Parse::Incomplete));
    long.push(b'a');
    assert_eq!(parse(&long, Accept::V1), Err(ProxyError::V1TooLong));
    // 107 bytes, CRLF included, is the longest accepted.
    let mut max = b"PROXY UNKNOWN ".to_vec();
    max.resize(V1_MAX_LEN - 2, b'a');
    max.extend_from_slice(b"\r\n");
    assert_eq!(complete(&max, Accept::V1).len, V1_MAX_LEN);
}

#[test]
fn c_tls_3_v2_inet_inet6_local_unspec() {
    let tlvs = [0x04, 0x00, 0x02, 0xab, 0xcd]; // a NOOP TLV, skipped
    let mut b = v2_tcp4([203, 0, 113, 9], 40000, &tlvs);
    let hlen = b.len();
    b.extend_from_slice(b"\x16\x03\x01");
    let h = complete(&b, Accept::V2);
    assert_eq!(h.source, Some(sa("203.0.113.9:40000")));
    assert_eq!(h.len, hlen);
    let mut p6 = vec![0x20, 0x01, 0x0d, 0xb8];
    p6.resize(16, 0);
    p6[15] = 5;
    p6.extend_from_slice(&[0; 16]);
    p6.extend_from_slice(&7u16.to_be_bytes());
    p6.extend_from_slice(&443u16.to_be_bytes());
    assert_eq!(
        complete(&v2(1, 0x21, &p6), Accept::Any).source,
        Some(sa("[2001:db8::5]:7"))
    );
    // LOCAL (a health check of the sender) keeps the socket peer, whatever it carries.
    assert_eq!(complete(&v2(0, 0x11, &[1; 12]), Accept::V2).source, None);
    assert_eq!(complete(&v2(0, 0x00, &[]), Accept::V2).source, None);
    // UNSPEC and UNIX families keep the socket peer.
    assert_eq!(complete(&v2(1, 0x00, &[]), Accept::V2).source, None);
    assert_eq!(complete(&v2(1, 0x31, &[0; 216]), Accept::V2).source, None);
}

#[test]
fn c_tls_3_v2_malformed_headers_are_errors() {
    let mut bad_version = v2_tcp4([1, 2, 3, 4], 1, &[]);
    bad_version[12] = 0x11;
    assert_eq!(
        parse(&bad_version, Accept::V2),
        Err(ProxyError::V2Version(1))
    );
    assert_eq!(
        parse(&v2(2, 0x11, &[0; 12]), Accept::V2),
        Err(ProxyError::V2Command(2))
    );
    assert_eq!(
        parse(&v2(1, 0x41, &[0; 12]), Accept::V2),
        Err(ProxyError::V2Family(4))
    );
    assert_eq!(
        parse(&v2(1, 0x12, &[0; 12]), Accept::V2),
        Err(ProxyError::V2Transport(2))
    );
    assert_eq!(
        parse(&v2(1, 0x11, &[0; 11]), Accept::V2),
        Err(ProxyError::V2ShortAddresses)
    );
    assert_eq!(
        parse(&v2(1, 0x21, &[0; 35]), Accept::V2),
        Err(ProxyError::V2ShortAddresses)
    );
    let mut sig = V2_SIG.to_vec();
    sig[5] = b'x';
    assert_eq!(parse(&sig, Accept::V2), Err(ProxyError::NotProxy));
}

#[test]
fn c_tls_3_v2_is_bounded() {
    let mut head = V2_SIG.to_vec();
    head.extend_from_slice(&[0x21, 0x11]);
    let too_long = u16::try_from(V2_MAX_PAYLOAD + 1).unwrap();
    head.extend_from_slice(&too_long.to_be_bytes());
    // Refused from the length field, before any payload arrives.
    assert_eq!(
        parse(&head, Accept::V2),
        Err(ProxyError::V2TooLong(too_long))
    );
    let max = v2(1, 0x11, &vec![0; V2_MAX_PAYLOAD]);
    assert_eq!(complete(&max, Accept::V2).len, MAX_LEN);
}

#[test]
fn c_tls_3_version_must_be_accepted() {
    let v1 = b"PROXY UNKNOWN\r\n";
    let v2h = v2(0, 0, &[]);
    assert_eq!(
        parse(v1, Accept::V2),
        Err(ProxyError::VersionNotAccepted(Version::V1))
    );
    assert_eq!(
        parse(&v2h, Accept::V1),
        Err(ProxyError::VersionNotAccepted(Version::V2))
    );
    assert!(matches!(parse(v1, Accept::Any), Ok(Parse::Complete(_))));
    assert!(matches!(parse(&v2h, Accept::Any), Ok(Parse::Complete(_))));
    assert_eq!(parse(&[], Accept::Any), Ok(Parse::Incomplete));
}

fn valid_headers() -> Vec<Vec<u8>> {
    vec![
        b"PROXY TCP4 192.0.2.7 10.0.0.1 56324 443\r\n".to_vec(),
        b"PROXY TCP6 2001:db8::7 ::1 1 65535\r\n".to_vec(),
        b"PROXY UNKNOWN\r\n".to_vec(),
        v2_tcp4([203, 0, 113, 9], 40000, &[0x04, 0, 1, 0]),
        v2(0, 0, &[]),
    ]
}

#[test]
fn c_tls_3_every_prefix_is_incomplete() {
    for h in valid_headers() {
        for n in 0..h.len() {
            assert_eq!(
                parse(&h[..n], Accept::Any),
                Ok(Parse::Incomplete),
                "{:?} cut at {n}",
                String::from_utf8_lossy(&h)
            );
        }
        assert_eq!(complete(&h, Accept::Any).len, h.len());
    }
}

proptest! {
    /// Whatever follows a header does not change what it parses to.
    #[test]
    fn c_tls_3_trailing_bytes_do_not_change_the_header(
        which in 0usize..5,
        tail in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let h = &valid_headers()[which];
        let alone = complete(h, Accept::Any);
        let mut with = h.clone();
        with.extend_from_slice(&tail);
        prop_assert_eq!(parse(&with, Accept::Any), Ok(Parse::Complete(alone)));
    }

    /// Arbitrary bytes never panic, and a complete header is never longer than the input or the
    /// bound.
    #[test]
    fn c_tls_3_arbitrary_bytes_are_bounded(
        data in proptest::collection::vec(any::<u8>(), 0..300),
        first in prop_oneof![Just(b'P'), Just(b'\r'), any::<u8>()],
    ) {
        let mut buf = vec![first];
        buf.extend_from_slice(&data);
        if let Ok(Parse::Complete(h)) = parse(&buf, Accept::Any) {
            prop_assert!(h.len <= buf.len() && h.len <= MAX_LEN);
        }
    }
}

/// C-TLS-3 (sending): what `encode` writes, `parse` reads back as the same source, for both
/// versions and families; an IPv4-mapped source is written as IPv4.
#[test]
fn c_tls_3_encode_round_trips() {
    for (src, dst) in [
        ("203.0.113.7:40000", "127.0.0.1:8080"),
        ("[2001:db8::1]:65535", "[::1]:443"),
        ("[::ffff:198.51.100.9]:5555", "127.0.0.1:80"),
        // Mixed families: the destination becomes the source family's unspecified address.
        ("203.0.113.7:1", "[::1]:443"),
        ("[2001:db8::2]:2", "127.0.0.1:443"),
    ] {
        let (src, dst) = (sa(src), sa(dst));
        for v in [Version::V1, Version::V2] {
            let e = encode(v, src, dst);
            let bytes = e.as_bytes();
            let h = complete(bytes, Accept::Any);
            assert_eq!(h.version, v);
            assert_eq!(h.len, bytes.len(), "{v} {src}");
            let want = match src {
                SocketAddr::V6(a) => match a.ip().to_ipv4_mapped() {
                    Some(ip) => SocketAddr::new(IpAddr::V4(ip), a.port()),
                    None => src,
                },
                SocketAddr::V4(_) => src,
            };
            assert_eq!(h.source, Some(want), "{v} {src} -> {dst}");
        }
    }
    assert_eq!(
        encode(Version::V1, sa("203.0.113.7:40000"), sa("127.0.0.1:8080")).as_bytes(),
        b"PROXY TCP4 203.0.113.7 127.0.0.1 40000 8080\r\n"
    );
    let v6 = encode(
        Version::V1,
        sa("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"),
        sa("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe]:65535"),
    );
    assert_eq!(v6.as_bytes().len(), 104, "the longest v1 line");
    assert_eq!(
        &encode(Version::V2, sa("10.1.2.3:258"), sa("10.0.0.1:80")).as_bytes()[12..],
        &[0x21, 0x11, 0, 12, 10, 1, 2, 3, 10, 0, 0, 1, 1, 2, 0, 80]
    );
}

/// C-TLS-3: the destination (the address the client connected to) is read from both versions
/// and round-trips through `encode`, so a chain of senders passes it on.
#[test]
fn c_tls_3_destination_is_parsed_and_round_trips() {
    for (src, dst) in [
        ("203.0.113.7:40000", "192.0.2.1:443"),
        ("[2001:db8::7]:1", "[2001:db8::1]:8443"),
    ] {
        let (src, dst) = (sa(src), sa(dst));
        for v in [Version::V1, Version::V2] {
            let h = complete(encode(v, src, dst).as_bytes(), Accept::Any);
            assert_eq!((h.source, h.destination), (Some(src), Some(dst)), "{v}");
        }
    }
    let local = complete(encode_local(Version::V2).as_bytes(), Accept::Any);
    assert_eq!(local.destination, None);
}

/// C-TLS-3 (sending): a health check's header says "no client" in both versions; `parse`
/// keeps the socket peer for it.
#[test]
fn c_tls_3_encode_local_keeps_the_socket_peer() {
    for v in [Version::V1, Version::V2] {
        let e = encode_local(v);
        let h = complete(e.as_bytes(), Accept::Any);
        assert_eq!((h.version, h.source, h.len), (v, None, e.as_bytes().len()));
    }
    assert_eq!(encode_local(Version::V1).as_bytes(), b"PROXY UNKNOWN\r\n");
}

proptest! {
    /// C-TLS-3 (sending): any source address round-trips through `encode` and `parse`.
    #[test]
    fn c_tls_3_encode_parse_any_address(
        v6 in any::<bool>(),
        bits in any::<u128>(),
        port in any::<u16>(),
        version_2 in any::<bool>(),
    ) {
        let ip = if v6 {
            IpAddr::V6(Ipv6Addr::from(bits))
        } else {
            IpAddr::V4(Ipv4Addr::from(u32::try_from(bits & 0xffff_ffff).unwrap()))
        };
        let src = unmapped(SocketAddr::new(ip, port));
        let v = if version_2 { Version::V2 } else { Version::V1 };
        let e = encode(v, src, sa("127.0.0.1:80"));
        let h = complete(e.as_bytes(), Accept::Any);
        prop_assert_eq!(h.source, Some(src));
        prop_assert_eq!(h.len, e.as_bytes().len());
    }
}
