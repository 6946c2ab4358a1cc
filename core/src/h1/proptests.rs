//! issue 14, C-PATH-12: split invariance (any split of the byte stream gives the same result)
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
