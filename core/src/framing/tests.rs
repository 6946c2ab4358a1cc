//! C-PATH-12: request framing verdicts, whole and split at every byte.

use proptest::prelude::*;

use super::{FramingError, RequestFraming, Verdict};

/// Every verdict for `bytes` fed in one piece.
fn verdicts(bytes: &[u8]) -> Vec<Verdict> {
    feed(&[bytes])
}

fn feed(pieces: &[&[u8]]) -> Vec<Verdict> {
    let mut f = RequestFraming::new();
    for p in pieces {
        f.handle_bytes(p);
    }
    std::iter::from_fn(|| f.poll_verdict()).collect()
}

/// `bytes` split at every position, and byte by byte: the verdicts never depend on the reads.
fn same_however_split(bytes: &[u8]) -> Vec<Verdict> {
    let whole = verdicts(bytes);
    for i in 0..=bytes.len() {
        let (a, b) = bytes.split_at(i);
        assert_eq!(feed(&[a, b]), whole, "split at {i}");
    }
    let singles: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(feed(&singles), whole, "byte by byte");
    whole
}

const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";

#[test]
fn c_path_12_plain_requests_pass() {
    assert_eq!(same_however_split(GET), vec![Ok(())]);
    let post = b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello";
    assert_eq!(same_however_split(post), vec![Ok(())]);
    let chunked = b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nX-T: 1\r\n\r\n";
    assert_eq!(same_however_split(chunked), vec![Ok(())]);
    // HTTP/1.0 needs no Host; bare line feeds and leading empty lines are accepted.
    assert_eq!(
        same_however_split(b"\r\nGET / HTTP/1.0\nAccept: */*\n\n"),
        vec![Ok(())]
    );
    assert_eq!(
        same_however_split(b"GET /old HTTP/1.0\r\n\r\n"),
        vec![Ok(())]
    );
}

#[test]
fn c_path_12_length_and_transfer_encoding_rejected_in_either_order_and_case() {
    for raw in [
        &b"POST / HTTP/1.1\r\nHost: a\r\ncontent-LENGTH: 5\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
        b"POST / HTTP/1.1\r\nHost: a\r\ntransfer-encoding: chunked\r\nContent-Length: 5\r\n\r\n",
    ] {
        assert_eq!(
            same_however_split(raw),
            vec![Err(FramingError::LengthAndTransferEncoding)]
        );
    }
}

/// The hole of the per-read guard: a name split across two reads.
#[test]
fn c_path_12_name_split_across_reads_is_seen() {
    let v = feed(&[
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Enc",
        b"oding: chunked\r\n\r\n0\r\n\r\n",
    ]);
    assert_eq!(v, vec![Err(FramingError::LengthAndTransferEncoding)]);
}

/// The other hole: a CL+TE request pipelined behind a good one, in the same read, after a body.
#[test]
fn c_path_12_pipelined_requests_each_get_their_verdict() {
    let raw = [
        &b"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 31\r\n\r\n"[..],
        b"\nTransfer-Encoding: chunked\r\n\r\n", // body bytes that look like a header: ignored
        GET,
        b"POST /b HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        b"POST /c HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
        GET,
    ]
    .concat();
    assert_eq!(
        same_however_split(&raw),
        vec![
            Ok(()),
            Ok(()),
            Ok(()),
            Err(FramingError::LengthAndTransferEncoding),
        ],
        "nothing after the rejected head gets a verdict"
    );
}

#[test]
fn c_path_12_host_rules() {
    assert_eq!(
        same_however_split(b"GET / HTTP/1.1\r\nAccept: */*\r\n\r\n"),
        vec![Err(FramingError::HostMissing)]
    );
    assert_eq!(
        same_however_split(b"GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n"),
        vec![Err(FramingError::HostRepeated)]
    );
    assert_eq!(
        same_however_split(b"GET / HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n"),
        vec![Err(FramingError::HostRepeated)]
    );
    // A header whose name only starts with "host" is another header.
    assert_eq!(
        verdicts(b"GET / HTTP/1.1\r\nHost: a\r\nHostname: b\r\n\r\n"),
        vec![Ok(())]
    );
}

#[test]
fn c_path_12_content_length_rules() {
    let head = |cl: &str| format!("POST / HTTP/1.1\r\nHost: a\r\n{cl}\r\n\r\n").into_bytes();
    for bad in [
        "Content-Length: 5, 6",
        "Content-Length: -1",
        "Content-Length: 0x5",
        "Content-Length:",
        "Content-Length: 99999999999999999999",
    ] {
        assert_eq!(
            verdicts(&head(bad)),
            vec![Err(FramingError::ContentLength)],
            "{bad}"
        );
    }
    assert_eq!(
        verdicts(&head("Content-Length: 5\r\nContent-Length: 6")),
        vec![Err(FramingError::ContentLength)]
    );
    // Repeats are refused even when equal (issue 14: as nginx and hyper), as a list or as lines.
    for repeated in [
        "Content-Length: 2, 2",
        "Content-Length: 2\r\nContent-Length: 2",
    ] {
        assert_eq!(
            same_however_split(&head(repeated)),
            vec![Err(FramingError::ContentLength)],
            "{repeated}"
        );
    }
}

#[test]
fn c_path_12_transfer_encoding_rules() {
    let head = |te: &str| format!("POST / HTTP/1.1\r\nHost: a\r\n{te}\r\n\r\n").into_bytes();
    for bad in [
        "Transfer-Encoding: gzip",
        "Transfer-Encoding: chunked, gzip",
        "Transfer-Encoding: chunked, chunked",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
        "Transfer-Encoding:",
    ] {
        assert_eq!(
            verdicts(&head(bad)),
            vec![Err(FramingError::TransferEncoding)],
            "{bad}"
        );
    }
    // The streaming guard shares the rule: a list ending in chunked is refused too.
    for bad in [
        "Transfer-Encoding: gzip, CHUNKED",
        "Transfer-Encoding: identity, chunked",
        "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked",
    ] {
        assert_eq!(
            same_however_split(&head(bad)),
            vec![Err(FramingError::TransferEncoding)],
            "{bad}"
        );
    }
    assert_eq!(
        verdicts(&head("Transfer-Encoding:  CHUNKED ")),
        vec![Ok(())]
    );
}

#[test]
fn c_path_12_obsolete_fold_rejected() {
    assert_eq!(
        same_however_split(b"GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n\tchunked\r\n\r\n"),
        vec![Err(FramingError::ObsoleteFold)]
    );
}

#[test]
fn c_path_12_malformed_chunk_stops_following() {
    let raw = [
        &b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"[..],
        GET,
    ]
    .concat();
    let mut f = RequestFraming::new();
    f.handle_bytes(&raw);
    assert_eq!(f.poll_verdict(), Some(Ok(())));
    assert_eq!(f.poll_verdict(), None, "no verdict after a malformed chunk");
    assert!(f.is_opaque());
    // A chunk size over 64 bits is malformed too.
    let mut f = RequestFraming::new();
    f.handle_bytes(
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n",
    );
    assert!(f.is_opaque());
}

#[test]
fn c_path_12_upgrade_stops_following() {
    let mut f = RequestFraming::new();
    f.handle_bytes(
        b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
    );
    assert_eq!(f.poll_verdict(), Some(Ok(())));
    f.handle_upgrade();
    f.handle_bytes(GET);
    assert_eq!(f.poll_verdict(), None, "tunnel bytes are not requests");
}

#[test]
fn c_path_12_long_lines_keep_their_meaning() {
    let long = "v".repeat(10_000);
    let raw = format!("GET / HTTP/1.1\r\nX-Long: {long}\r\nHost: a\r\n\r\n");
    assert_eq!(same_however_split(raw.as_bytes()), vec![Ok(())]);
    // A framing header too long to keep is refused rather than guessed.
    let pad = " ".repeat(200);
    let raw = format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {pad}5\r\n\r\n");
    assert_eq!(
        verdicts(raw.as_bytes()),
        vec![Err(FramingError::ContentLength)]
    );
}

proptest! {
    /// C-PATH-12: however the reads split the stream, the verdicts are the same.
    #[test]
    fn c_path_12_verdicts_do_not_depend_on_reads(
        parts in proptest::collection::vec(0usize..6, 1..6),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let pieces: [&[u8]; 6] = [
            GET,
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nz\r\n0\r\n\r\n",
            b"GET / HTTP/1.1\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET / HTTP/1.0\n\n",
        ];
        let stream: Vec<u8> = parts.iter().flat_map(|&i| pieces[i].iter().copied()).collect();
        let whole = verdicts(&stream);
        let mut at: Vec<usize> = cuts.iter().map(|c| c.index(stream.len() + 1)).collect();
        at.sort_unstable();
        let mut reads = Vec::new();
        let mut start = 0;
        for &i in &at {
            reads.push(&stream[start..i]);
            start = i;
        }
        reads.push(&stream[start..]);
        prop_assert_eq!(feed(&reads), whole);
    }
}

/// C-PATH-12: the streaming guard refuses an invalid Host as the codec does, whole or split; a
/// value longer than the kept prefix is checked byte by byte, within the prefix.
#[test]
fn c_path_12_invalid_host_rejected() {
    let head = |host: &str| format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes();
    for bad in ["", "user@a", "a/b", "a:99999", "[::1", "a b"] {
        assert_eq!(
            same_however_split(&head(bad)),
            vec![Err(FramingError::HostInvalid)],
            "{bad:?}"
        );
    }
    for good in ["a", "a.example:8080", "[::1]:443", "10.0.0.1"] {
        assert_eq!(verdicts(&head(good)), vec![Ok(())], "{good}");
    }
    let long = "a".repeat(200);
    assert_eq!(verdicts(&head(&long)), vec![Ok(())]);
    // A bad byte within the kept prefix is seen; past it, only weir's codec, which has the
    // whole line, can see it (the guard keeps 96 bytes of a line).
    let long_bad = format!("a/{long}");
    assert_eq!(
        verdicts(&head(&long_bad)),
        vec![Err(FramingError::HostInvalid)]
    );
}
