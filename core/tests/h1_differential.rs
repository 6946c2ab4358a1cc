//! Differential test of weir's HTTP/1 request parser (C-PATH-12) against hyper's
//! reading of the same bytes (hyper's server over an in-memory stream, the way the proxy used
//! it before weir had its own codec).
//!
//! The property: when weir accepts a message, hyper accepts it too and frames it identically
//! (method, target, header lines, body bytes). When weir refuses a message hyper accepts, the
//! refusal must be one of weir's documented stricter rules (docs/proxy.md, "HTTP/1 parsing
//! rules"): both Content-Length and Transfer-Encoding (hyper drops the length), a missing,
//! repeated or invalid Host (hyper reads any value; weir wants an RFC 3986 authority), Transfer-Encoding in HTTP/1.0 or other than one `chunked` alone (hyper
//! reads `gzip, chunked` as chunked), a repeated Content-Length, a request target outside RFC 9112 §3.2's forms (`*`
//! other than for OPTIONS, a fragment, an absolute-form authority that is not a valid Host). Anything else is a disagreement and fails.
#![cfg(not(loom))]

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weir_core::h1::FramingError;
use weir_core::h1::chunked::ChunkedDecoder;
use weir_core::h1::{
    BodyFraming, EMPTY_HEADER, HeadError, LengthBody, Limits, Parsed, parse_request,
};

/// One message as read: method, target, header lines (lower-case names, sorted), body.
type Message = (String, String, Vec<(String, Vec<u8>)>, Vec<u8>);

/// weir's reading of one message at the start of `raw`, or why it refused.
fn weir(raw: &[u8]) -> Result<Message, Option<HeadError>> {
    let limits = Limits {
        max_request_line: 64 * 1024,
        max_head_bytes: 64 * 1024,
    };
    let mut h = [EMPTY_HEADER; 100];
    let r = match parse_request(raw, &mut h, &limits) {
        Ok(Parsed::Complete(r)) => r,
        Ok(Parsed::Partial) => return Err(None),
        Err(e) => return Err(Some(e)),
    };
    let mut headers: Vec<(String, Vec<u8>)> = r
        .headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
        .collect();
    headers.sort();
    let rest = &raw[r.head_len..];
    let body = match r.body {
        BodyFraming::Empty | BodyFraming::UntilClose => Vec::new(),
        BodyFraming::Length(n) => {
            let mut b = LengthBody::new(n);
            let take = b.take(rest.len());
            if !b.is_done() {
                return Err(None);
            }
            rest[..take].to_vec()
        }
        BodyFraming::Chunked => {
            let mut d = ChunkedDecoder::new();
            let (mut data, mut at) = (Vec::new(), 0);
            while !d.is_done() {
                match d.decode(&rest[at..]) {
                    Ok(s) if s.consumed == 0 => return Err(None),
                    Ok(s) => {
                        data.extend_from_slice(s.data);
                        at += s.consumed;
                    }
                    Err(_) => return Err(None),
                }
            }
            data
        }
    };
    Ok((r.method.to_owned(), r.target.to_owned(), headers, body))
}

/// hyper's reading of the first message of `raw` (`None`: hyper refused it or its body).
async fn hyper_reads(raw: Vec<u8>) -> Option<Message> {
    let seen: Arc<Mutex<Vec<Option<Message>>>> = Arc::default();
    let (mut client, server) = tokio::io::duplex(256 * 1024);
    let record = Arc::clone(&seen);
    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let record = Arc::clone(&record);
        async move {
            let (parts, body) = req.into_parts();
            let body = body.collect().await.ok().map(|b| b.to_bytes().to_vec());
            let mut headers: Vec<(String, Vec<u8>)> = parts
                .headers
                .iter()
                .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
                .collect();
            headers.sort();
            let msg = body.map(|b| (parts.method.to_string(), parts.uri.to_string(), headers, b));
            record.lock().unwrap().push(msg);
            Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(Bytes::new())))
        }
    });
    let conn = tokio::spawn(
        http1::Builder::new()
            .half_close(true)
            .serve_connection(hyper_util_io::Io(server), service),
    );
    client.write_all(&raw).await.unwrap();
    client.shutdown().await.unwrap();
    let mut sink = Vec::new();
    let _ = client.read_to_end(&mut sink).await;
    let _ = conn.await;
    seen.lock().unwrap().first().cloned().flatten()
}

/// A tokio stream as hyper's IO (hyper 1 has its own IO traits; hyper-util's adapter is not a
/// dependency of core, so this is the few lines it takes).
mod hyper_util_io {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use hyper::rt::{Read, ReadBufCursor, Write};
    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

    pub struct Io<T>(pub T);

    impl<T: AsyncRead + Unpin> Read for Io<T> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            mut buf: ReadBufCursor<'_>,
        ) -> Poll<std::io::Result<()>> {
            let mut tmp = [0u8; 4096];
            let mut rb = ReadBuf::new(&mut tmp);
            match Pin::new(&mut self.0).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) => {
                    buf.put_slice(rb.filled());
                    Poll::Ready(Ok(()))
                }
                other => other,
            }
        }
    }

    impl<T: AsyncWrite + Unpin> Write for Io<T> {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            Pin::new(&mut self.0).poll_write(cx, buf)
        }
        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.0).poll_flush(cx)
        }
        fn poll_shutdown(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.0).poll_shutdown(cx)
        }
    }
}

/// weir's refusals that hyper does not make, by design (module doc).
fn stricter_by_design(e: &HeadError) -> bool {
    matches!(
        e,
        HeadError::Target
            | HeadError::Framing(
                FramingError::LengthAndTransferEncoding
                    | FramingError::HostMissing
                    | FramingError::HostRepeated
                    | FramingError::HostInvalid
                    | FramingError::TransferEncoding
                    | FramingError::ContentLength
            )
    )
}

fn check(raw: &[u8], rt: &tokio::runtime::Runtime) -> Result<(), TestCaseError> {
    let ours = weir(raw);
    let theirs = rt.block_on(hyper_reads(raw.to_vec()));
    let shown = String::from_utf8_lossy(raw);
    match (ours, theirs) {
        (Ok(a), Some(b)) => prop_assert_eq!(a, b, "framed differently: {:?}", shown),
        (Ok(a), None) => prop_assert!(false, "weir accepts {:?} as {:?}, hyper refuses", shown, a),
        (Err(_), None) => {}
        (Err(e), Some(b)) => prop_assert!(
            e.as_ref().is_some_and(stricter_by_design),
            "weir refuses ({:?}) what hyper reads as {:?}: {:?}",
            e,
            b,
            shown
        ),
    }
    Ok(())
}

fn header_line() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("Host: a".to_owned()),
        Just("Host: b.example:8080".to_owned()),
        Just("Host: user@b.example".to_owned()),
        Just("Host: [::1]:70000".to_owned()),
        Just("Host:".to_owned()),
        Just("Content-Length: 3".to_owned()),
        Just("Content-Length: 0".to_owned()),
        Just("Content-Length: 3, 3".to_owned()),
        Just("Content-Length: 4".to_owned()),
        Just("Content-Length: -1".to_owned()),
        Just("Transfer-Encoding: chunked".to_owned()),
        Just("Transfer-Encoding: gzip, chunked".to_owned()),
        Just("Transfer-Encoding: chunked, gzip".to_owned()),
        Just("transfer-encoding: CHUNKED".to_owned()),
        Just("Connection: close".to_owned()),
        Just("Connection: keep-alive, X-A".to_owned()),
        Just("Expect: 100-continue".to_owned()),
        Just("X-A: 1".to_owned()),
        Just("X-B:".to_owned()),
        Just(" folded".to_owned()),
        Just("X-C : 1".to_owned()),
        "[A-Za-z0-9!#$%&'*+.^_`|~-]{1,10}:[ \t]?[ -~]{0,16}",
    ]
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(Vec::new()),
        Just(b"abc".to_vec()),
        Just(b"3\r\nabc\r\n0\r\n\r\n".to_vec()),
        Just(b"3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\n".to_vec()),
        Just(b"A\r\n0123456789\r\n0\r\n\r\n".to_vec()),
        Just(b"3\r\nabcd\r\n0\r\n\r\n".to_vec()),
        prop::collection::vec(any::<u8>(), 0..12),
    ]
}

fn request() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![
            Just("GET"),
            Just("POST"),
            Just("PUT"),
            Just("DELETE"),
            Just("X-CUSTOM")
        ],
        prop_oneof![
            "/[a-zA-Z0-9/?=&%._~-]{0,16}",
            "/[!-~]{0,16}",
            Just("*".to_owned()),
        ],
        prop_oneof![Just("HTTP/1.1"), Just("HTTP/1.0")],
        prop::collection::vec(header_line(), 0..7),
        body(),
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

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// C-PATH-12: weir and hyper agree on generated requests (module doc).
    #[test]
    fn c_path_12_weir_frames_requests_as_hyper_does(raw in request()) {
        let rt = runtime();
        check(&raw, &rt)?;
    }

    /// The same property for a byte flipped anywhere in a generated request.
    #[test]
    fn c_path_12_weir_and_hyper_agree_on_mutated_requests(
        raw in request(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let mut raw = raw;
        let i = at.index(raw.len());
        raw[i] = byte;
        let rt = runtime();
        check(&raw, &rt)?;
    }
}

/// Fixed cases that must agree, whatever the generator draws.
#[test]
fn c_path_12_known_requests_agree_with_hyper() {
    let rt = runtime();
    for raw in [
        &b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"[..],
        b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
        b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n folded\r\n\r\n",
        b"GET / HTTP/1.0\r\n\r\n",
    ] {
        check(raw, &rt).unwrap();
    }
}
