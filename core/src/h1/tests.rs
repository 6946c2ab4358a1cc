//! C-PATH-6, C-PATH-12: weir's HTTP/1 head parsers, writers and body machines.

use std::net::{IpAddr, Ipv4Addr};

use super::chunked::{
    ChunkError, ChunkedDecoder, MAX_TRAILER_LINE, trailer_forwarded, write_chunk_size,
};
use super::*;
use crate::forward::Proto;

/// Method, target, version, framing, head length.
type Head = (String, String, Version, BodyFraming, usize);

fn req(raw: &[u8]) -> Result<Parsed<Head>, HeadError> {
    let mut h = [EMPTY_HEADER; 16];
    parse_request(raw, &mut h, &Limits::default()).map(|p| match p {
        Parsed::Complete(r) => Parsed::Complete((
            r.method.to_owned(),
            r.target.to_owned(),
            r.version,
            r.body,
            r.head_len,
        )),
        Parsed::Partial => Parsed::Partial,
    })
}

fn req_err(raw: &[u8]) -> HeadError {
    req(raw).expect_err(&String::from_utf8_lossy(raw))
}

fn body(raw: &[u8]) -> BodyFraming {
    match req(raw) {
        Ok(Parsed::Complete((_, _, _, b, _))) => b,
        other => panic!("{other:?}"),
    }
}

#[test]
fn c_path_12_plain_heads_parse_with_their_framing() {
    let get = b"GET /a?b HTTP/1.1\r\nHost: x\r\n\r\nNEXT";
    assert_eq!(
        req(get),
        Ok(Parsed::Complete((
            "GET".into(),
            "/a?b".into(),
            Version::Http11,
            BodyFraming::Empty,
            get.len() - 4
        )))
    );
    assert_eq!(
        body(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n"),
        BodyFraming::Length(12)
    );
    assert_eq!(
        body(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:  Chunked \r\n\r\n"),
        BodyFraming::Chunked
    );
    // HTTP/1.0 needs no Host; leading empty lines are skipped (RFC 9112 §2.2).
    assert_eq!(body(b"\r\n\r\nGET / HTTP/1.0\r\n\r\n"), BodyFraming::Empty);
    assert_eq!(req(b"GET / HTTP/1.1\r\nHost: x\r\n"), Ok(Parsed::Partial));
    assert_eq!(req(b"GE"), Ok(Parsed::Partial));
}

#[test]
fn c_path_12_framing_defects_are_400() {
    use crate::h1::FramingError as F;
    for (raw, want) in [
        (
            &b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
            F::LengthAndTransferEncoding,
        ),
        (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", F::ContentLength),
        (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1, 2\r\n\r\n", F::ContentLength),
        (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1, 1\r\n\r\n", F::ContentLength),
        (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", F::ContentLength),
        (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +1\r\n\r\n", F::ContentLength),
        (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n", F::ContentLength),
        (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", F::TransferEncoding),
        // C-PATH-12: one coding, `chunked`, alone; a list is refused, never rewritten.
        (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", F::TransferEncoding),
        (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity, chunked\r\n\r\n", F::TransferEncoding),
        (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n", F::TransferEncoding),
        (b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", F::TransferEncoding),
        (
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            F::TransferEncoding,
        ),
        (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", F::TransferEncoding),
        (b"GET / HTTP/1.1\r\n\r\n", F::HostMissing),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", F::HostRepeated),
        (b"GET / HTTP/1.0\r\nHost: a\r\nhost: b\r\n\r\n", F::HostRepeated),
    ] {
        let e = req_err(raw);
        assert_eq!(e, HeadError::Framing(want), "{}", String::from_utf8_lossy(raw));
        assert_eq!(e.status(), 400);
    }
}

#[test]
fn c_path_12_syntax_defects_are_400() {
    for raw in [
        &b"GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n folded\r\n\r\n"[..], // obs-fold
        b"GET / HTTP/1.1\r\nHost : x\r\n\r\n",                          // space before colon
        b"GET / HTTP/1.1\r\nHost\t: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n", // NUL in a value
        b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n", // bare CR in a value
        b"GET / HTTP/1.1\r\nHost: x\r\n: empty\r\n\r\n",
        b"GET / HTTP/2.0\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.1 \r\nHost: x\r\n\r\n",
        b"G(T / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET  / HTTP/1.1\r\nHost: x\r\n\r\n",
    ] {
        let e = req_err(raw);
        assert!(matches!(e, HeadError::Malformed(_)), "{e:?} for {raw:?}");
        assert_eq!(e.status(), 400);
    }
}

#[test]
fn c_path_12_request_targets_in_their_forms_only() {
    for (method, target, ok) in [
        ("GET", "/a/b?c=d&e", true),
        ("GET", "/%2F..%2e/x", true),
        ("GET", "/{\"json\"}", true),
        ("GET", "http://h.example/a", true),
        ("GET", "HTTPS://h.example:8443/", true),
        ("OPTIONS", "*", true),
        ("CONNECT", "h.example:443", true),
        ("GET", "*", false),
        ("GET", "h.example:443", false),
        ("CONNECT", "/x", false),
        ("GET", "/a#frag", false),
        ("GET", "/a<b", false),
        ("GET", "/a?b<c", false),
        ("GET", "/a?b`{c}^", true),
        ("GET", "/a`", false),
        ("GET", "/a?\"", false),
        ("GET", "\"", false),
        ("GET", "ftp://h/", false),
        ("GET", "http://", false),
    ] {
        assert_eq!(
            valid_target(method, target.as_bytes()),
            ok,
            "{method} {target}"
        );
    }
    assert_eq!(
        req_err(b"GET x HTTP/1.1\r\nHost: a\r\n\r\n"),
        HeadError::Target
    );
    assert_eq!(HeadError::Target.status(), 400);
}

#[test]
fn c_path_12_limits_are_414_and_431() {
    let limits = Limits {
        max_request_line: 32,
        max_head_bytes: 128,
    };
    let mut h = [EMPTY_HEADER; 4];
    let long = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(40));
    let e = parse_request(long.as_bytes(), &mut h, &limits).unwrap_err();
    assert_eq!((e, e.status()), (HeadError::RequestLineTooLong, 414));
    // Still incomplete, but already too long.
    let e = parse_request(&long.as_bytes()[..36], &mut h, &limits).unwrap_err();
    assert_eq!(e, HeadError::RequestLineTooLong);
    let big = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-A: {}\r\n\r\n",
        "b".repeat(120)
    );
    let e = parse_request(big.as_bytes(), &mut h, &limits).unwrap_err();
    assert_eq!((e, e.status()), (HeadError::HeadTooLarge, 431));
    let e = parse_request(&big.as_bytes()[..130], &mut h, &limits).unwrap_err();
    assert_eq!(e, HeadError::HeadTooLarge, "a partial head over the limit");
    let many = b"GET / HTTP/1.1\r\nHost: x\r\na: 1\r\nb: 1\r\nc: 1\r\nd: 1\r\n\r\n";
    let e = parse_request(many, &mut h, &limits).unwrap_err();
    assert_eq!((e, e.status()), (HeadError::TooManyHeaders, 431));
}

#[test]
fn connection_facts_keep_alive_upgrade_expect() {
    let mut h = [EMPTY_HEADER; 8];
    let mut parse = |raw: &'static [u8]| match parse_request(raw, &mut h, &Limits::default()) {
        Ok(Parsed::Complete(r)) => (r.keep_alive(), r.upgrade(), r.expect_continue()),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        parse(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
        (true, false, false)
    );
    assert_eq!(
        parse(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: foo, Close\r\n\r\n"),
        (false, false, false)
    );
    assert_eq!(parse(b"GET / HTTP/1.0\r\n\r\n"), (false, false, false));
    assert_eq!(
        parse(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"),
        (true, false, false)
    );
    assert_eq!(
        parse(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"),
        (true, true, false)
    );
    // C-PATH-8: h2c is not an upgrade weir makes.
    assert_eq!(
        parse(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\r\n"),
        (true, false, false)
    );
    assert_eq!(
        parse(
            b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c, websocket\r\n\r\n"
        ),
        (true, true, false)
    );
    // Upgrade and Expect mean nothing in HTTP/1.0.
    assert_eq!(
        parse(b"GET / HTTP/1.0\r\nConnection: upgrade\r\nUpgrade: websocket\r\nExpect: 100-continue\r\n\r\n"),
        (false, false, false)
    );
    assert_eq!(
        parse(b"PUT / HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n"),
        (true, false, true)
    );
}

/// Pipelining: the head length leaves the next request in the buffer.
#[test]
fn pipelined_requests_parse_one_after_the_other() {
    let raw = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET /b HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut h = [EMPTY_HEADER; 8];
    let Ok(Parsed::Complete(a)) = parse_request(raw, &mut h, &Limits::default()) else {
        panic!()
    };
    let mut body = LengthBody::new(3);
    let rest = &raw[a.head_len..];
    let n = body.take(rest.len());
    assert_eq!((&rest[..n], body.is_done()), (&b"abc"[..], true));
    let mut h2 = [EMPTY_HEADER; 8];
    let Ok(Parsed::Complete(b)) = parse_request(&rest[n..], &mut h2, &Limits::default()) else {
        panic!()
    };
    assert_eq!((b.target, b.head_len), ("/b", rest.len() - n));
}

fn upstream(raw: &[u8], extra: &[(&str, &[u8])]) -> String {
    let mut h = [EMPTY_HEADER; 32];
    let Ok(Parsed::Complete(r)) = parse_request(raw, &mut h, &Limits::default()) else {
        panic!("{raw:?}")
    };
    let mut out = Vec::new();
    write_upstream_request(
        &r,
        &UpstreamRequest {
            target: b"/api/x",
            client: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7)),
            proto: Proto::Https,
            extra,
        },
        &mut out,
    );
    String::from_utf8(out).unwrap()
}

/// C-PATH-6, C-FWD-2: hop-by-hop and forwarding lines dropped, weir's appended, in one buffer.
#[test]
fn c_path_6_upstream_head_drops_hop_by_hop_and_appends_forwarding() {
    let raw = b"POST /x HTTP/1.0\r\nHost: shop\r\nConnection: keep-alive, X-Secret, host\r\nX-Secret: s\r\n\
Keep-Alive: 5\r\nProxy-Connection: x\r\nTE: trailers, deflate\r\nTrailer: X-T\r\nUpgrade: h2c\r\n\
X-Forwarded-For: 6.6.6.6\r\nForwarded: for=6.6.6.6\r\nX-Real-IP: 6.6.6.6\r\nX-Request-ID: bad id\r\n\
Accept: */*\r\nContent-Length:  2 \r\n\r\n";
    let out = upstream(raw, &[("x-request-id", b"abc")]);
    assert_eq!(
        out,
        "POST /api/x HTTP/1.1\r\nHost: shop\r\nAccept: */*\r\ncontent-length: 2\r\nte: trailers\r\n\
x-forwarded-for: 10.0.0.7\r\nx-real-ip: 10.0.0.7\r\nx-forwarded-host: shop\r\n\
x-forwarded-proto: https\r\nx-request-id: abc\r\n\r\n"
    );
}

/// C-PATH-7: weir answers `Expect: 100-continue` itself, so no `Expect` line (any
/// value, any spelling) reaches the upstream; the request is otherwise unchanged.
#[test]
fn c_path_7_expect_is_not_forwarded_upstream() {
    let out = upstream(
        b"PUT /u HTTP/1.1\r\nHost: h\r\nEXPECT: 100-continue\r\nX-A: 1\r\nexpect: x\r\n\
Content-Length: 3\r\n\r\n",
        &[],
    );
    assert!(!out.to_ascii_lowercase().contains("expect"), "{out}");
    assert!(
        out.starts_with("PUT /api/x HTTP/1.1\r\nHost: h\r\nX-A: 1\r\ncontent-length: 3\r\n"),
        "{out}"
    );
}

/// C-PATH-8: an upgrade keeps `Upgrade` and says `Connection: upgrade`; chunked passes through.
#[test]
fn c_path_8_upgrade_and_chunked_in_the_upstream_head() {
    let out = upstream(
        b"GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        &[],
    );
    assert!(
        out.starts_with(
            "GET /api/x HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nconnection: upgrade\r\n"
        ),
        "{out}"
    );
    let out = upstream(
        b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n",
        &[],
    );
    assert!(out.contains("\r\ntransfer-encoding: chunked\r\n"), "{out}");
    assert!(!out.contains("Transfer-Encoding"), "{out}");
}

/// C-FWD-2: the flat writer drops the client's forwarding lines in either spelling too.
#[test]
fn c_fwd_2_upstream_head_drops_underscore_spellings() {
    let raw = b"GET / HTTP/1.1\r\nHost: h\r\nX_Forwarded_For: 6.6.6.6\r\nX-Real_IP: 6.6.6.6\r\n\
X_Forwarded_Proto: https\r\nX-Forwarded-Port: 443\r\nX-Forwarded-Prefix: /admin\r\n\
x_forwarded_host: evil\r\nX_Custom: kept\r\n\r\n";
    let out = upstream(raw, &[]);
    assert_eq!(
        out,
        "GET /api/x HTTP/1.1\r\nHost: h\r\nX_Custom: kept\r\nx-forwarded-for: 10.0.0.7\r\n\
x-real-ip: 10.0.0.7\r\nx-forwarded-host: h\r\nx-forwarded-proto: https\r\n\r\n"
    );
}

/// C-PATH-8: `Upgrade: h2c` is not an upgrade weir makes: alone (with its `HTTP2-Settings`) it
/// is a plain request without them; beside another protocol only `h2c` leaves the list. A
/// backend's `101` to `h2c` is a bad response.
#[test]
fn c_path_8_h2c_is_never_tunnelled() {
    let mut h = [EMPTY_HEADER; 8];
    let raw =
        b"GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\
HTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n";
    let Ok(Parsed::Complete(r)) = parse_request(raw, &mut h, &Limits::default()) else {
        panic!()
    };
    assert!(!r.upgrade());
    assert_eq!(
        upstream(raw, &[]),
        "GET /api/x HTTP/1.1\r\nHost: h\r\nx-forwarded-for: 10.0.0.7\r\nx-real-ip: 10.0.0.7\r\n\
x-forwarded-host: h\r\nx-forwarded-proto: https\r\n\r\n"
    );
    // HTTP2-Settings goes even when Connection does not name it; H2C in any case.
    let out = upstream(
        b"GET / HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\nUpgrade: H2C\r\nHTTP2-Settings: x\r\n\r\n",
        &[],
    );
    assert!(!out.to_ascii_lowercase().contains("upgrade"), "{out}");
    assert!(
        !out.to_ascii_lowercase().contains("http2-settings"),
        "{out}"
    );
    // Another protocol beside h2c: an upgrade to that one only.
    let out = upstream(
        b"GET / HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\nUpgrade: h2c, websocket\r\n\r\n",
        &[],
    );
    assert!(
        out.starts_with(
            "GET /api/x HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nconnection: upgrade\r\n"
        ),
        "{out}"
    );
    let ctx = ResponseContext {
        head: false,
        upgrade: true,
    };
    let mut h = [EMPTY_HEADER; 8];
    for raw in [
        &b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n"[..],
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\n\r\n",
    ] {
        assert_eq!(
            response(raw, &mut h, ctx).unwrap_err(),
            BadResponse::UnrequestedSwitch,
            "{raw:?}"
        );
    }
}

/// C-PATH-12: a Host must be a valid authority (RFC 3986 reg-name, IPv4 or IP-literal,
/// optional port 0-65535, no userinfo, no path), in HTTP/1.0 too when it is there.
#[test]
fn c_path_12_host_must_be_a_valid_authority() {
    use crate::h1::FramingError as F;
    for good in [
        "a",
        "shop.example.com",
        "shop.example.com:8080",
        "xn--bcher-kva.example",
        "under_score.example",
        "10.0.0.1",
        "10.0.0.1:0",
        "localhost:65535",
        "[::1]",
        "[2001:db8::1]:443",
        "[v1.fe80::a+en1]",
        "%41bc",
        "a!$&'()*+,;=b",
    ] {
        assert!(valid_host(good.as_bytes()), "{good}");
        let raw = format!("GET / HTTP/1.1\r\nHost:  {good} \r\n\r\n");
        assert!(
            matches!(req(raw.as_bytes()), Ok(Parsed::Complete(_))),
            "{good}"
        );
    }
    for bad in [
        "",
        "user@host",
        "user:pw@host",
        "host/path",
        "host?q",
        "host#f",
        "host:",
        "host:65536",
        "host:123456",
        "host:8o",
        "host:80:80",
        ":80",
        "[::1",
        "[::1]x",
        "[::1]:",
        "[fe80::1%25eth0]",
        "[not-an-ip]",
        "[v1.]",
        "a b",
        "a\\b",
        "%4",
        "%zz",
        "h\"",
        "<h>",
    ] {
        assert!(!valid_host(bad.as_bytes()), "{bad:?}");
        for version in ["1.1", "1.0"] {
            let raw = format!("GET / HTTP/{version}\r\nHost: {bad}\r\n\r\n");
            match req(raw.as_bytes()) {
                Err(e) => assert!(
                    matches!(
                        e,
                        HeadError::Framing(F::HostInvalid) | HeadError::Malformed(_)
                    ),
                    "{bad:?}: {e:?}"
                ),
                other => panic!("{bad:?} accepted: {other:?}"),
            }
        }
    }
    assert_eq!(
        req_err(b"GET / HTTP/1.1\r\nHost: a@b\r\n\r\n").status(),
        400
    );
    // A response's Host line means nothing to its framing: not a bad response.
    let mut h = [EMPTY_HEADER; 4];
    assert!(
        response(
            b"HTTP/1.1 200 OK\r\nHost: a@b\r\nContent-Length: 0\r\n\r\n",
            &mut h,
            ResponseContext::default()
        )
        .is_ok()
    );
}

/// RFC 9112 §3.2.2: an absolute-form target's authority wins over Host and replaces it
/// upstream (X-Forwarded-Host too); one with userinfo or an invalid authority is a 400.
#[test]
fn absolute_form_authority_replaces_host() {
    let out = upstream(
        b"GET http://real.example:8080/p?q HTTP/1.1\r\nHost: other\r\nAccept: */*\r\n\r\n",
        &[],
    );
    assert_eq!(
        out,
        "GET /api/x HTTP/1.1\r\nHost: real.example:8080\r\nAccept: */*\r\n\
x-forwarded-for: 10.0.0.7\r\nx-real-ip: 10.0.0.7\r\nx-forwarded-host: real.example:8080\r\n\
x-forwarded-proto: https\r\n\r\n"
    );
    // HTTP/1.0 without Host: the target's authority is written, an extra Host is not.
    let out = upstream(
        b"GET http://real.example/ HTTP/1.0\r\n\r\n",
        &[("host", b"fallback")],
    );
    assert!(
        out.starts_with("GET /api/x HTTP/1.1\r\nhost: real.example\r\n"),
        "{out}"
    );
    assert!(!out.contains("fallback"), "{out}");
    for bad in [
        &b"GET http://user@real.example/ HTTP/1.1\r\nHost: real.example\r\n\r\n"[..],
        b"GET http://u:p@real.example/ HTTP/1.1\r\nHost: real.example\r\n\r\n",
        b"GET http://real.example:99999/ HTTP/1.1\r\nHost: real.example\r\n\r\n",
        b"GET http:///p HTTP/1.1\r\nHost: real.example\r\n\r\n",
    ] {
        assert_eq!(req_err(bad), HeadError::Target, "{bad:?}");
    }
}

/// C-PATH-12: a POST with an empty body reaches the backend with `Content-Length: 0` (a
/// backend may refuse a POST without a length, `411`); a GET without one gets none.
#[test]
fn c_path_12_upstream_head_keeps_an_explicit_zero_length() {
    let out = upstream(
        b"POST /f HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n",
        &[],
    );
    assert!(out.contains("\r\ncontent-length: 0\r\n"), "{out}");
    let out = upstream(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", &[]);
    assert!(
        !out.to_ascii_lowercase().contains("content-length"),
        "{out}"
    );
}

fn response<'h, 'b>(
    raw: &'b [u8],
    h: &'h mut [Header<'b>],
    ctx: ResponseContext,
) -> Result<ResponseHead<'h, 'b>, BadResponse> {
    match parse_response(raw, h, &Limits::default(), ctx)? {
        Parsed::Complete(r) => Ok(r),
        Parsed::Partial => panic!("partial"),
    }
}

#[test]
fn c_path_12_response_framing_by_status_and_method() {
    let mut h = [EMPTY_HEADER; 8];
    let get = ResponseContext::default();
    let head = ResponseContext {
        head: true,
        upgrade: false,
    };
    let cases: [(&[u8], ResponseContext, BodyFraming); 7] = [
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
            get,
            BodyFraming::Length(5),
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
            head,
            BodyFraming::Empty,
        ),
        (b"HTTP/1.1 204 No Content\r\n\r\n", get, BodyFraming::Empty),
        (
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
            get,
            BodyFraming::Empty,
        ),
        (
            b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n",
            get,
            BodyFraming::Empty,
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            get,
            BodyFraming::Chunked,
        ),
        (b"HTTP/1.0 200 OK\r\n\r\n", get, BodyFraming::UntilClose),
    ];
    for (raw, ctx, want) in cases {
        assert_eq!(response(raw, &mut h, ctx).unwrap().body, want, "{raw:?}");
    }
    let r = response(b"HTTP/1.1 103 Early Hints\r\n\r\n", &mut h, get).unwrap();
    assert!(r.is_interim() && !r.switching());
    let r = response(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", &mut h, get).unwrap();
    assert!(!r.reusable(), "HTTP/1.0 without keep-alive");
    let r = response(b"HTTP/1.1 200 OK\r\n\r\n", &mut h, get).unwrap();
    assert!(!r.reusable(), "close-delimited");
    let r = response(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", &mut h, get).unwrap();
    assert!(r.reusable());
}

/// C-PATH-12: a bad response is a typed error (502, no reuse).
#[test]
fn c_path_12_bad_responses() {
    let mut h = [EMPTY_HEADER; 8];
    let get = ResponseContext::default();
    for (raw, want) in [
        (&b"HTTP/1.1 600 Odd\r\n\r\n"[..], BadResponse::Status(600)),
        (b"HTTP/1.1 099 Odd\r\n\r\n", BadResponse::Status(99)),
        (
            b"HTTP/1.1 101 Switching\r\nUpgrade: x\r\n\r\n",
            BadResponse::UnrequestedSwitch,
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            BadResponse::Framing(crate::h1::FramingError::LengthAndTransferEncoding),
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            BadResponse::Framing(crate::h1::FramingError::ContentLength),
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            BadResponse::Framing(crate::h1::FramingError::TransferEncoding),
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            BadResponse::Framing(crate::h1::FramingError::TransferEncoding),
        ),
    ] {
        assert_eq!(response(raw, &mut h, get).unwrap_err(), want, "{raw:?}");
    }
    for raw in [
        &b"HTTP/1.1 200 OK\r\nX-A : 1\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-A: a\0b\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/3 200 OK\r\n\r\n",
    ] {
        assert!(
            matches!(response(raw, &mut h, get), Err(BadResponse::Malformed(_))),
            "{raw:?}"
        );
    }
    assert_eq!(BadResponse::STATUS, 502);
}

fn client_head(raw: &[u8], client: ClientSide) -> (String, ResponseOut) {
    let mut h = [EMPTY_HEADER; 16];
    let ctx = ResponseContext {
        head: false,
        upgrade: true,
    };
    let r = response(raw, &mut h, ctx).unwrap();
    let mut out = Vec::new();
    let decided = write_response_head(&r, client, &[("x-balancer-backend", b"b1")], &mut out);
    (String::from_utf8(out).unwrap(), decided)
}

/// RFC 9110 §2.5: weir answers HTTP/1.1; keep-alive to HTTP/1.0 only with a length.
#[test]
fn response_head_speaks_weirs_version_and_keeps_alive_only_with_a_length() {
    let c10 = ClientSide {
        version: Version::Http10,
        keep_alive: true,
    };
    let c11 = ClientSide {
        version: Version::Http11,
        keep_alive: true,
    };
    let (out, d) = client_head(
        b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: close, X-Up\r\nX-Up: 1\r\nKeep-Alive: 1\r\nServer: s\r\n\r\n",
        c11,
    );
    assert_eq!(
        out,
        "HTTP/1.1 200 OK\r\nServer: s\r\ncontent-length: 2\r\nx-balancer-backend: b1\r\n\r\n"
    );
    assert_eq!(
        d,
        ResponseOut {
            keep_alive: true,
            body: BodyOut::Length(2)
        }
    );
    let (out, d) = client_head(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", c10);
    assert!(out.contains("\r\nconnection: keep-alive\r\n"), "{out}");
    assert!(d.keep_alive);
    let (out, d) = client_head(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        c10,
    );
    assert!(
        !out.contains("transfer-encoding") && out.contains("connection: close"),
        "{out}"
    );
    assert_eq!(
        d,
        ResponseOut {
            keep_alive: false,
            body: BodyOut::DecodeChunked
        }
    );
    let (out, d) = client_head(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        c11,
    );
    assert!(out.contains("\r\ntransfer-encoding: chunked\r\n"), "{out}");
    assert_eq!(
        d,
        ResponseOut {
            keep_alive: true,
            body: BodyOut::PassChunked
        }
    );
    let (_, d) = client_head(b"HTTP/1.1 200 OK\r\n\r\n", c11);
    assert_eq!(
        d,
        ResponseOut {
            keep_alive: false,
            body: BodyOut::UntilClose
        }
    );
    let (out, d) = client_head(
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
        c11,
    );
    assert!(
        out.starts_with(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nconnection: upgrade\r\n"
        ),
        "{out}"
    );
    assert_eq!(d.body, BodyOut::Tunnel);
    assert!(relay_interim(Version::Http11) && !relay_interim(Version::Http10));
}

fn decode_all(stream: &[u8]) -> Result<(Vec<u8>, usize), ChunkError> {
    let mut d = ChunkedDecoder::new();
    let mut data = Vec::new();
    let mut at = 0;
    loop {
        let step = d.decode(&stream[at..])?;
        data.extend_from_slice(step.data);
        at += step.consumed;
        if step.done || step.consumed == 0 {
            return Ok((data, at));
        }
    }
}

#[test]
fn c_path_12_chunked_decoder() {
    let body = b"5;ext=1\r\nhello\r\n1A \r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-T: 1\r\n\r\nNEXT";
    let (data, used) = decode_all(body).unwrap();
    assert_eq!(data, b"helloabcdefghijklmnopqrstuvwxyz");
    assert_eq!(&body[used..], b"NEXT", "the next message stays");
    for bad in [
        &b"zz\r\n"[..],
        b"5\nhello\r\n",          // bare LF after the size
        b"5;a\nhello\r\n",        // bare LF ending an extension
        b"5\r\nhelloX\r\n",       // data longer than its size
        b"5\r\nhello\n0\r\n\r\n", // bare LF after data
        b"10000000000000000\r\n", // over 64 bits
        b"\r\n",                  // no digits
        b"0\r\nX: 1\n\r\n",       // bare LF in a trailer
        b"5;a\x01\r\n",           // control byte in an extension
    ] {
        assert_eq!(decode_all(bad), Err(ChunkError::Malformed), "{bad:?}");
    }
    let long = format!("1;{}\r\n", "e".repeat(5000));
    assert_eq!(decode_all(long.as_bytes()), Err(ChunkError::LineTooLong));
    let trailers = format!("0\r\nX: {}\r\n\r\n", "t".repeat(20_000));
    assert_eq!(
        decode_all(trailers.as_bytes()),
        Err(ChunkError::TrailersTooLarge)
    );
}

#[test]
fn length_body_takes_only_its_bytes() {
    let mut b = LengthBody::new(5);
    assert_eq!(b.take(3), 3);
    assert_eq!((b.remaining(), b.take(10), b.is_done()), (2, 2, true));
    assert_eq!(b.take(10), 0);
}

/// Found by the `h1_request` fuzz target: a syntax error after the request-line limit must not
/// turn a `414` into a `400` (or back) depending on how much of the line has arrived. Every
/// prefix is `Partial` or the whole buffer's answer.
#[test]
fn c_path_12_limits_and_syntax_errors_in_stream_order() {
    let limits = Limits {
        max_request_line: 16,
        max_head_bytes: 48,
    };
    let cases: [&[u8]; 5] = [
        b"POST /\x12aaaaaaaaaaaaaaaaaaaaaaaa HTTP/1.1\r\n\r\n", // error before the limit: 400
        b"POST /aaaaaaaaaaaaaaaaaaaaaaaaaaa\x12 HTTP/1.1\r\n\r\n", // after it: 414
        b"GET /aaaaaaaaaaaa\r\n",                               // 16 bytes and CRLF: fine so far
        b"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\nY: 22222222222222222222\x01\r\n\r\n",
        b"GET /aaaaaaaaaaa\r\r\n",
    ];
    for raw in cases {
        let mut h = [EMPTY_HEADER; 8];
        let whole = parse_request(raw, &mut h, &limits).map(|p| matches!(p, Parsed::Partial));
        for cut in 0..raw.len() {
            let mut h = [EMPTY_HEADER; 8];
            match parse_request(&raw[..cut], &mut h, &limits) {
                Ok(Parsed::Partial) => {}
                other => assert_eq!(
                    other.map(|p| matches!(p, Parsed::Partial)),
                    whole,
                    "{raw:?} cut at {cut}"
                ),
            }
        }
    }
    let mut h = [EMPTY_HEADER; 8];
    assert!(matches!(
        parse_request(cases[0], &mut h, &limits),
        Err(HeadError::Malformed(_))
    ));
    assert_eq!(
        parse_request(cases[1], &mut h, &limits),
        Err(HeadError::RequestLineTooLong)
    );
    assert_eq!(
        parse_request(cases[3], &mut h, &limits),
        Err(HeadError::HeadTooLarge)
    );
}

/// Re-frames `stream` fed in `pieces`, keeping what a call leaves unused (a partial trailer
/// line) in front of the next piece, as a read buffer does.
fn rechunk_pieces(pieces: &[&[u8]]) -> Result<(Vec<u8>, bool, usize), ChunkError> {
    let mut d = ChunkedDecoder::new();
    let (mut out, mut kept, mut used) = (Vec::new(), Vec::new(), 0);
    for p in pieces {
        kept.extend_from_slice(p);
        let r = d.rechunk(&kept, &mut out)?;
        used += r.consumed;
        kept.drain(..r.consumed);
        if r.done {
            return Ok((out, true, used));
        }
    }
    Ok((out, false, used))
}

/// C-PATH-12: weir re-emits chunked framing of its own: canonical size lines (lower-case hex,
/// no leading zeros, no extensions), trailers parsed like header lines and the framing,
/// routing and hop-by-hop names dropped; however the input is split.
#[test]
fn c_path_12_rechunk_writes_canonical_framing_and_filters_trailers() {
    let stream: &[u8] = b"005;ext=1\r\nhello\r\n0A \t;a=\"b\"\r\n0123456789\r\n000\r\n\
X-T: 1 \r\nTransfer-Encoding: chunked\r\ncontent-length: 5\r\nHost: evil\r\nConnection: close\r\n\
X_Forwarded_For: 6.6.6.6\r\nServer-Timing: db;dur=53\r\n\r\nNEXT";
    let want: &[u8] =
        b"5\r\nhello\r\na\r\n0123456789\r\n0\r\nX-T: 1\r\nServer-Timing: db;dur=53\r\n\r\n";
    let whole = rechunk_pieces(&[stream]).unwrap();
    assert_eq!(
        (String::from_utf8_lossy(&whole.0), whole.1, whole.2),
        (String::from_utf8_lossy(want), true, stream.len() - 4)
    );
    for cut in 0..=stream.len() {
        let (a, b) = stream.split_at(cut);
        assert_eq!(rechunk_pieces(&[a, b]).unwrap(), whole, "cut at {cut}");
    }
    let singles: Vec<&[u8]> = stream.chunks(1).collect();
    assert_eq!(rechunk_pieces(&singles).unwrap(), whole, "byte by byte");
    // The output is canonical: re-framing it again changes nothing.
    assert_eq!(
        rechunk_pieces(&[want]).unwrap(),
        (want.to_vec(), true, want.len())
    );
    // The pieces, in order.
    let mut d = ChunkedDecoder::new();
    let mut at = 0;
    let mut pieces = Vec::new();
    while let (n, Some(p)) = d.next(&want[at..]).unwrap() {
        at += n;
        pieces.push(format!("{p:?}"));
    }
    assert_eq!(
        pieces,
        [
            "Chunk(5)",
            "Data([104, 101, 108, 108, 111])",
            "ChunkEnd",
            "Chunk(10)",
            "Data([48, 49, 50, 51, 52, 53, 54, 55, 56, 57])",
            "ChunkEnd",
            "Last",
            "Trailer { name: [88, 45, 84], value: [49] }",
            "Trailer { name: [83, 101, 114, 118, 101, 114, 45, 84, 105, 109, 105, 110, 103], value: [100, 98, 59, 100, 117, 114, 61, 53, 51] }",
            "End",
        ]
    );
}

/// C-PATH-12: trailer lines must be field lines; a long one is refused, not buffered.
#[test]
fn c_path_12_rechunk_refuses_malformed_trailers() {
    for bad in [
        &b"0\r\nX-A : 1\r\n\r\n"[..],
        b"0\r\n folded\r\n\r\n",
        b"0\r\nX-A: 1\r\n\tfolded\r\n\r\n",
        b"0\r\nno colon\r\n\r\n",
        b"0\r\n: empty\r\n\r\n",
        b"0\r\nX(A): 1\r\n\r\n",
        b"0\r\nX-A: a\x00b\r\n\r\n",
        b"0\r\nX-A: 1\n\r\n",
    ] {
        assert_eq!(
            rechunk_pieces(&[bad]),
            Err(ChunkError::Malformed),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    let mut long = b"0\r\nX-A: ".to_vec();
    long.resize(3 + MAX_TRAILER_LINE, b'a');
    assert_eq!(rechunk_pieces(&[&long]), Err(ChunkError::TrailersTooLarge));
    long.extend_from_slice(b"\r\n\r\n");
    assert_eq!(rechunk_pieces(&[&long]), Err(ChunkError::TrailersTooLarge));
    for (name, kept) in [
        ("X-Checksum", true),
        ("grpc-status", true),
        ("Trailer", false),
        ("TE", false),
        ("Upgrade", false),
        ("Content-Type", false),
        ("Set-Cookie", false),
        ("X-Real_IP", false),
    ] {
        assert_eq!(trailer_forwarded(name.as_bytes()), kept, "{name}");
    }
}

#[test]
fn chunk_size_lines_are_canonical_and_allocate_nothing() {
    let mut out = Vec::with_capacity(64);
    let at = out.as_ptr();
    for n in [0, 1, 0xf, 0x10, 255, 4096, u64::MAX] {
        write_chunk_size(&mut out, n);
    }
    assert_eq!(
        out,
        b"0\r\n1\r\nf\r\n10\r\nff\r\n1000\r\nffffffffffffffff\r\n".to_vec()
    );
    assert_eq!(out.as_ptr(), at, "appended in place");
    // A body re-framed into a buffer with room does not reallocate it.
    let mut out = Vec::with_capacity(256);
    let at = out.as_ptr();
    let mut d = ChunkedDecoder::new();
    let r = d
        .rechunk(b"3\r\nabc\r\n03\r\ndef\r\n0\r\nX: y\r\n\r\n", &mut out)
        .unwrap();
    assert!(r.done);
    assert_eq!(out, b"3\r\nabc\r\n3\r\ndef\r\n0\r\nX: y\r\n\r\n".to_vec());
    assert_eq!(out.as_ptr(), at);
}

#[test]
fn c_path_7_a_client_connection_persists_only_when_wanted_drained_and_not_draining() {
    let persists = |raw: &[u8], shutting_down, body_read| {
        let mut h = [EMPTY_HEADER; 16];
        match parse_request(raw, &mut h, &Limits::default()) {
            Ok(Parsed::Complete(r)) => r.persists(shutting_down, body_read),
            other => panic!("{other:?}"),
        }
    };
    let get11 = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    assert!(persists(get11, false, true));
    assert!(!persists(get11, true, true), "weir is draining");
    assert!(!persists(get11, false, false), "body bytes left unread");
    assert!(!persists(
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        false,
        true
    ));
    assert!(!persists(b"GET / HTTP/1.0\r\n\r\n", false, true));
    assert!(persists(
        b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        false,
        true
    ));
}

/// C-OBS-3, C-PATH-12: a refused head's status and access-log reason go together.
#[test]
fn c_obs_3_a_refused_head_has_a_reason_for_its_status() {
    let limits = Limits {
        max_request_line: 32,
        max_head_bytes: 128,
    };
    let mut h = [EMPTY_HEADER; 4];
    let cases: [(&[u8], u16, &str); 5] = [
        (
            b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
            400,
            "malformed_request",
        ),
        (
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            400,
            "malformed_request",
        ),
        (b"GET x HTTP/1.1\r\nHost: a\r\n\r\n", 400, "bad_target"),
        (
            b"GET /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa HTTP/1.1\r\n\r\n",
            414,
            "uri_too_long",
        ),
        (
            b"GET / HTTP/1.1\r\nHost: x\r\na: 1\r\nb: 1\r\nc: 1\r\nd: 1\r\n\r\n",
            431,
            "header_too_large",
        ),
    ];
    for (raw, status, reason) in cases {
        let e = parse_request(raw, &mut h, &limits).unwrap_err();
        assert_eq!((e.status(), e.reason()), (status, reason), "{e:?}");
    }
}

#[test]
fn push_decimal_writes_what_display_writes() {
    for n in [0u64, 7, 9, 10, 99, 100, 4_096, 1_000_000_007, u64::MAX] {
        let mut out = b"x".to_vec();
        push_decimal(&mut out, n);
        assert_eq!(out, format!("x{n}").into_bytes());
    }
}
