//! C-PATH-12: split invariance (any split of the byte stream gives the same result)
//! and write/parse round trips.

use std::net::{IpAddr, Ipv4Addr};

use proptest::prelude::*;

use super::chunked::{ChunkError, ChunkedDecoder};
use super::*;
use crate::forward::Proto;

/// What a whole stream of pipelined requests frames to: per message (method, target, body
/// bytes), then the error that stopped it, if any.
type Framed = (Vec<(String, String, Vec<u8>)>, Option<String>);

/// Reads `stream` the way a connection would, its bytes arriving in `pieces` (cut points):
/// parse a head when the buffer holds one, then follow its body.
fn frame(stream: &[u8], cuts: &[usize]) -> Framed {
    let mut arrived = 0;
    let mut cuts = cuts
        .iter()
        .copied()
        .filter(|&c| c <= stream.len())
        .collect::<Vec<_>>();
    cuts.sort_unstable();
    cuts.push(stream.len());
    let mut cuts = cuts.into_iter();
    let mut at = 0;
    let mut out = Vec::new();
    loop {
        let buf = &stream[at..arrived];
        let mut h = [EMPTY_HEADER; 32];
        match parse_request(buf, &mut h, &Limits::default()) {
            Err(e) => return (out, Some(e.to_string())),
            Ok(Parsed::Partial) => match cuts.next() {
                Some(c) => arrived = arrived.max(c),
                None => return (out, (!buf.is_empty()).then(|| "incomplete".into())),
            },
            Ok(Parsed::Complete(r)) => {
                let (method, target, body) = (r.method.to_owned(), r.target.to_owned(), r.body);
                at += r.head_len;
                let mut data = Vec::new();
                match body {
                    BodyFraming::Empty | BodyFraming::UntilClose => {}
                    BodyFraming::Length(n) => {
                        let mut b = LengthBody::new(n);
                        while !b.is_done() {
                            let n = b.take(arrived - at);
                            data.extend_from_slice(&stream[at..at + n]);
                            at += n;
                            if !b.is_done() {
                                match cuts.next() {
                                    Some(c) => arrived = arrived.max(c),
                                    None => return (out, Some("incomplete".into())),
                                }
                            }
                        }
                    }
                    BodyFraming::Chunked => {
                        let mut d = ChunkedDecoder::new();
                        loop {
                            match d.decode(&stream[at..arrived]) {
                                Err(e) => return (out, Some(e.to_string())),
                                Ok(s) => {
                                    data.extend_from_slice(s.data);
                                    at += s.consumed;
                                    if s.done {
                                        break;
                                    }
                                    if at == arrived {
                                        match cuts.next() {
                                            Some(c) => arrived = arrived.max(c),
                                            None => return (out, Some("incomplete".into())),
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                out.push((method, target, data));
            }
        }
    }
}

fn header_line() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("Host: a".to_owned()),
        Just("Content-Length: 3".to_owned()),
        Just("content-length: 0".to_owned()),
        Just("Transfer-Encoding: chunked".to_owned()),
        Just("Transfer-Encoding: gzip".to_owned()),
        Just("Connection: close".to_owned()),
        Just("X-A: 1".to_owned()),
        Just(" folded".to_owned()),
        "[A-Za-z-]{1,8}: [ -~]{0,12}",
    ]
}

fn message() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![Just("GET"), Just("POST"), Just("HEAD")],
        "/[a-z0-9/?=]{0,10}",
        prop_oneof![Just("HTTP/1.1"), Just("HTTP/1.0")],
        prop::collection::vec(header_line(), 0..6),
        prop_oneof![
            Just(Vec::new()),
            Just(b"abc".to_vec()),
            Just(b"3\r\nabc\r\n0\r\n\r\n".to_vec()),
            prop::collection::vec(any::<u8>(), 0..8),
        ],
    )
        .prop_map(|(m, t, v, hs, body)| {
            let mut s = format!("{m} {t} {v}\r\n");
            for h in hs {
                s.push_str(&h);
                s.push_str("\r\n");
            }
            s.push_str("\r\n");
            let mut b = s.into_bytes();
            b.extend_from_slice(&body);
            b
        })
}

proptest! {
    /// Any split of a stream of pipelined messages frames them exactly as the whole stream.
    #[test]
    fn c_path_12_framing_does_not_depend_on_reads(
        msgs in prop::collection::vec(message(), 1..4),
        cuts in prop::collection::vec(0usize..400, 0..12),
    ) {
        let stream = msgs.concat();
        prop_assert_eq!(frame(&stream, &cuts), frame(&stream, &[]));
        let singles: Vec<usize> = (0..=stream.len()).collect();
        prop_assert_eq!(frame(&stream, &singles), frame(&stream, &[]));
    }

    /// Any bytes: no panic, and split invariance still holds.
    #[test]
    fn any_bytes_frame_the_same_however_split(
        stream in prop::collection::vec(any::<u8>(), 0..200),
        cuts in prop::collection::vec(0usize..200, 0..8),
    ) {
        prop_assert_eq!(frame(&stream, &cuts), frame(&stream, &[]));
    }

    /// The chunked decoder gives the same data and the same end however its input is cut.
    #[test]
    fn chunked_decoder_is_split_invariant(
        chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..20), 0..5),
        cut in 0usize..200,
    ) {
        let mut stream = Vec::new();
        for c in &chunks {
            stream.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
            stream.extend_from_slice(c);
            stream.extend_from_slice(b"\r\n");
        }
        stream.extend_from_slice(b"0\r\n\r\nREST");
        let cut = cut.min(stream.len());
        let whole = decode(&[&stream]);
        prop_assert_eq!(&whole, &Ok((chunks.concat(), stream.len() - 4)));
        prop_assert_eq!(decode(&[&stream[..cut], &stream[cut..]]), whole);
    }

    /// What weir writes upstream parses back, with the same method and framing.
    #[test]
    fn upstream_head_round_trips(msg in message()) {
        let mut h = [EMPTY_HEADER; 32];
        if let Ok(Parsed::Complete(r)) = parse_request(&msg, &mut h, &Limits::default()) {
            let mut out = Vec::new();
            let req = UpstreamRequest {
                target: r.target.as_bytes(),
                client: IpAddr::V4(Ipv4Addr::LOCALHOST),
                proto: Proto::Http,
                extra: &[("host", b"up")],
            };
            write_upstream_request(&r, &req, &mut out);
            let mut h2 = [EMPTY_HEADER; 40];
            match parse_request(&out, &mut h2, &Limits::default()) {
                Ok(Parsed::Complete(back)) => {
                    prop_assert_eq!(back.method, r.method);
                    prop_assert_eq!(back.body, r.body);
                    prop_assert_eq!(back.head_len, out.len());
                    prop_assert_eq!(back.version, Version::Http11);
                }
                other => prop_assert!(false, "{:?} for {:?}", other, String::from_utf8_lossy(&out)),
            }
        }
    }
}

/// Header lines as sent, spacing and line ends included (the writers' run copying keys on
/// them), values with UTF-8 and non-UTF-8 bytes.
fn loose_line() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("Host: a\r\n".to_owned()),
        Just("Host:a\r\n".to_owned()),
        Just("Connection: x-y\r\n".to_owned()),
        Just("Connection: upgrade\r\n".to_owned()),
        Just("Upgrade: websocket, h2c\r\n".to_owned()),
        Just("X-Y: 1\r\n".to_owned()),
        Just("Content-Length: 3\r\n".to_owned()),
        Just("TE: trailers\r\n".to_owned()),
        Just("x-request-id: 7\r\n".to_owned()),
        Just("X-E:\r\n".to_owned()),
        Just("X-E: \r\n".to_owned()),
        Just("X-F: v\n".to_owned()),
        Just("X-U: caf\u{e9}\r\n".to_owned()),
        Just("X-O: a`b\r\n".to_owned()),
        "[A-Za-z-]{1,8}:[ \t]{0,2}[!-~]{0,6}[ \t]{0,2}\r\n",
    ]
}

/// A head (request line or status line first) of such lines.
fn loose_head(first: &'static str, lines: &[String]) -> Vec<u8> {
    let mut s = first.to_owned();
    for l in lines {
        s.push_str(l);
    }
    s.push_str("\r\n");
    // A backquote stands for a byte that is not UTF-8 (obs-text in a value).
    s.bytes()
        .map(|b| if b == b'`' { 0xff } else { b })
        .collect()
}

proptest! {
    /// Copying runs of lines whole writes the same bytes as one line at a time (a head whose
    /// `raw` is empty gives no run), parsing into uninitialised storage reads the same, and a
    /// kept response head is the head parsed.
    #[test]
    fn head_writers_copy_runs_as_lines(
        lines in prop::collection::vec(loose_line(), 0..8),
        http10 in any::<bool>(),
        request_line in prop_oneof![
            Just("GET /a HTTP/1.1\r\n"),
            Just("GET /a HTTP/1.0\r\n"),
            Just("\r\nGET /a HTTP/1.1\r\n"),
            Just("GET /a HTTP/1.1\n"),
            Just("OPTIONS /a HTTP/1.1\r\n"),
            Just("GET /b HTTP/1.1\r\n"),
            Just("GET /a?q HTTP/1.1\r\n"),
        ],
        status_line in prop_oneof![
            Just("HTTP/1.1 200 OK\r\n"),
            Just("HTTP/1.0 200 OK\r\n"),
            Just("HTTP/1.1 200 \r\n"),
            Just("HTTP/1.1 200\r\n"),
            Just("\r\nHTTP/1.1 404 Not Found\r\n"),
            Just("HTTP/1.1 200 OK\n"),
            Just("HTTP/1.1 204 No Content\r\n"),
            Just("HTTP/1.1 200 caf\u{e9}\r\n"),
        ],
    ) {
        let req = loose_head(request_line, &lines);
        let mut h = [EMPTY_HEADER; 32];
        let mut slots = header_slots::<32>();
        let parsed = parse_request(&req, &mut h, &Limits::default());
        prop_assert_eq!(parsed, parse_request_in(&req, &mut slots, &Limits::default()));
        if let Ok(Parsed::Complete(r)) = parsed {
            let up = UpstreamRequest {
                target: b"/a",
                client: IpAddr::V4(Ipv4Addr::LOCALHOST),
                proto: Proto::Http,
                extra: &[("x-request-id", b"1"), ("host", b"up")],
            };
            let (mut runs, mut lines) = (Vec::new(), Vec::new());
            write_upstream_request(&r, &up, &mut runs);
            write_upstream_request(&RequestHead { raw: &[], ..r }, &up, &mut lines);
            prop_assert_eq!(runs, lines);
        }
        let res = loose_head(status_line, &lines);
        let ctx = ResponseContext::default();
        let mut h = [EMPTY_HEADER; 32];
        let mut slots = header_slots::<32>();
        let parsed = parse_response(&res, &mut h, &Limits::default(), ctx);
        prop_assert_eq!(parsed, parse_response_in(&res, &mut slots, &Limits::default(), ctx));
        if let Ok(Parsed::Complete(r)) = parsed {
            let mut lines = [EMPTY_HEADER; 8];
            // Kept in place, the same value, over an empty or a filled slot.
            let mut slot = None;
            r.keep_in::<8>(&mut slot);
            prop_assert_eq!(slot, r.keep::<8>());
            r.keep_in::<8>(&mut slot);
            prop_assert_eq!(slot, r.keep::<8>());
            let mut small = r.keep::<2>();
            r.keep_in::<2>(&mut small);
            prop_assert_eq!(small, r.keep::<2>());
            let kept = r.keep::<8>().and_then(|k| k.head(&res, &mut lines));
            prop_assert_eq!(kept, Some(r));
            let client = ClientSide {
                version: if http10 { Version::Http10 } else { Version::Http11 },
                keep_alive: true,
            };
            let extra: &[(&str, &[u8])] = &[("x-request-id", b"1")];
            let (mut runs, mut lines) = (Vec::new(), Vec::new());
            let a = write_response_head(&r, client, extra, &mut runs);
            let b = write_response_head(&ResponseHead { raw: &[], ..r }, client, extra, &mut lines);
            prop_assert_eq!(a, b);
            prop_assert_eq!(&runs, &lines);
            // A kept head writes the same bytes and answer as the head parsed (and
            // `body`/`reusable` are the parsed head's), without being rebuilt.
            let k = r.keep::<8>().expect("a head of at most 8 lines is kept");
            prop_assert_eq!((k.body(), k.reusable()), (r.body, r.reusable()));
            let mut kept_out = Vec::new();
            prop_assert_eq!(k.write_response_head(&res, client, extra, &mut kept_out), Some(a));
            prop_assert_eq!(&kept_out, &runs);
            prop_assert_eq!(k.write_response_head(&res[..r.head_len - 1], client, extra, &mut kept_out), None);
            let (mut runs, mut lines) = (Vec::new(), Vec::new());
            write_interim(&r, &mut runs);
            write_interim(&ResponseHead { raw: &[], ..r }, &mut lines);
            prop_assert_eq!(runs, lines);
        }
    }
}

/// The chunked decoder over pieces: the data and the bytes used until done.
fn decode(pieces: &[&[u8]]) -> Result<(Vec<u8>, usize), ChunkError> {
    let mut d = ChunkedDecoder::new();
    let (mut data, mut used) = (Vec::new(), 0);
    for p in pieces {
        let mut at = 0;
        while at < p.len() && !d.is_done() {
            let s = d.decode(&p[at..])?;
            data.extend_from_slice(s.data);
            at += s.consumed;
        }
        used += at;
    }
    Ok((data, used))
}

/// [`valid_host`] as it was before its one-pass reg-name: the colon found first,
/// then the reg-name and the port checked apart. An IP-literal is checked by the function
/// under test (that branch did not change).
fn valid_host_before(v: &[u8]) -> bool {
    fn reg_name(h: &[u8]) -> bool {
        const fn unreserved(b: u8) -> bool {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
        }
        const fn sub_delim(b: u8) -> bool {
            matches!(
                b,
                b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'='
            )
        }
        if h.is_empty() {
            return false;
        }
        let mut i = 0;
        while i < h.len() {
            match h[i] {
                b if unreserved(b) || sub_delim(b) => {}
                b'%' => {
                    if !(i + 2 < h.len()
                        && h[i + 1].is_ascii_hexdigit()
                        && h[i + 2].is_ascii_hexdigit())
                    {
                        return false;
                    }
                    i += 3;
                    continue;
                }
                _ => return false,
            }
            i += 1;
        }
        true
    }
    let (host, port) = match v.first() {
        Some(b'[') => match v.iter().position(|&b| b == b']') {
            Some(end) => {
                let (literal, rest) = v.split_at(end + 1);
                if !valid_host(literal) {
                    return false;
                }
                match rest {
                    [] => return true,
                    [b':', port @ ..] => (literal, Some(port)),
                    _ => return false,
                }
            }
            None => return false,
        },
        _ => match v.iter().position(|&b| b == b':') {
            Some(colon) => (&v[..colon], Some(&v[colon + 1..])),
            None => (v, None),
        },
    };
    if host.first() != Some(&b'[') && !reg_name(host) {
        return false;
    }
    port.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 5
            && p.iter().all(u8::is_ascii_digit)
            && p.iter().fold(0u32, |n, &d| n * 10 + u32::from(d - b'0')) <= 65535
    })
}

proptest! {
    /// The one-pass `valid_host` gives the answers of the two-pass one.
    #[test]
    fn valid_host_is_as_before(
        v in prop_oneof![
            "[a-zA-Z0-9.:%_~!@/\\[\\]-]{0,12}",
            "[a-f0-9.%]{0,6}(:[0-9]{0,6})?(:[0-9a-z]{0,3})?",
            "\\[[0-9a-fA-F:.v]{0,10}\\](:[0-9]{0,6})?[a-z]?",
            "[ -~]{0,10}",
        ],
    ) {
        prop_assert_eq!(valid_host(v.as_bytes()), valid_host_before(v.as_bytes()), "{:?}", v);
    }
}
