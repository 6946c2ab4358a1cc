//! C-PATH-11, C-PATH-12: weir's errors, client limits and the request framing guard.

use std::time::{Duration, Instant};

use serde_json::json;

use super::super::{expect_status, expect_weir_error};
use crate::backend::{Backend, Mode};
use crate::client::{Conn, Raw, Req, get, send};
use crate::config::Config;
use crate::harness::{Binary, Proxy};
use crate::util::{ms, secs, stays, wait_until};

/// C-PATH-11: weir's own errors (503 no backend, 502 transport error, 504 per-try timeout) are
/// JSON `{"code","message","request_id"}`.
pub async fn c_path_11_weir_errors_are_json(bin: Binary) {
    let down = Backend::start("down-1").await;
    down.set_health(500);
    let reset = Backend::start("reset-1").await;
    reset.set_mode(Mode::Reset);
    let slow = Backend::start("slow-1").await;
    slow.set_mode(Mode::SlowHeaders(secs(60)));
    let cfg = Config::new(&[&down])
        .passive_off()
        .set("server.retry.per_try_timeout", "300ms")
        .pool("reset", "round_robin", &[&reset])
        .pool("slow", "round_robin", &[&slow])
        .route("/reset", "reset", None)
        .route("/slow", "slow", None);
    let p = Proxy::start(&bin, &cfg).await;
    expect_weir_error(&get(p.public, "/x").await, 503, "no healthy backend");
    expect_weir_error(&get(p.public, "/reset/x").await, 502, "connection reset");
    // The slow backend would answer after a minute, after the client gave up: the `504` is
    // the per-try timeout's.
    let r = get(p.public, "/slow/x").await;
    expect_weir_error(&r, 504, "per-try timeout");
    let r = send(
        p.public,
        &Req::new("POST", "/reset/y")
            .body("x")
            .header("x-request-id", "post-1"),
    )
    .await;
    expect_weir_error(&r, 502, "POST connection reset");
    assert_eq!(r.json()["request_id"], json!("post-1"));
}

/// C-PATH-12: a request whose headers do not complete within `read_header_timeout` has its
/// connection closed.
pub async fn c_path_12_slow_headers_connection_closed(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(
        &bin,
        &Config::new(&[&b]).set("server.read_header_timeout", "300ms"),
    )
    .await;
    let mut c = Raw::connect(p.public).await;
    c.write(b"GET /slowloris HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n")
        .await
        .expect("write partial head");
    let closed = c.wait_closed(secs(5)).await;
    let elapsed = closed.expect("connection with incomplete headers still open after 5s");
    assert!(
        elapsed >= ms(200),
        "closed after {elapsed:?}, before read_header_timeout"
    );
    // A connection that sends nothing at all: its head's timer runs from the accept (moved here
    // from adapter-tokio's smoke test, so both binaries run it).
    let mut silent = Raw::connect(p.public).await;
    let elapsed = silent
        .wait_closed(secs(5))
        .await
        .expect("connection that sent nothing still open after 5s");
    assert!(
        elapsed >= ms(200),
        "silent connection closed after {elapsed:?}, before read_header_timeout"
    );
    assert_eq!(b.count(), 0, "an incomplete request reached the backend");
}

/// C-PATH-12: headers over `max_header_bytes` get `431`; headers under it pass.
pub async fn c_path_12_oversized_headers_get_431(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(
        &bin,
        &Config::new(&[&b]).set("server.max_header_bytes", 4096),
    )
    .await;
    let small = "s".repeat(2000);
    let r = send(p.public, &Req::get("/small").header("x-small", &small)).await;
    expect_status(&r, 200, "2 KB of headers under a 4 KiB limit");
    let big = "b".repeat(16 * 1024);
    let mut c = Raw::connect(p.public).await;
    let _ = c
        .write(format!("GET /big HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n").as_bytes())
        .await;
    let head = c
        .read_head(secs(5))
        .await
        .expect("a response to oversized headers");
    assert_eq!(head.status, 431, "oversized headers: {head:?}");
    assert_eq!(b.count(), 1, "the oversized request reached the backend");
}

/// C-PATH-12: `Content-Length` with `Transfer-Encoding`, or conflicting `Content-Length`s, get
/// `400`, the connection closed, and nothing reaches a backend.
pub async fn c_path_12_ambiguous_framing_rejected(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(&bin, &Config::new(&[&b])).await;
    let requests: [&[u8]; 4] = [
        b"POST /smuggle HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"POST /smuggle HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
        b"POST /smuggle HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        b"POST /smuggle HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\nhello!",
    ];
    for raw in requests {
        let what = String::from_utf8_lossy(raw)
            .lines()
            .skip(2)
            .take(2)
            .collect::<Vec<_>>()
            .join(" | ");
        let mut c = Raw::connect(p.public).await;
        let _ = c.write(raw).await;
        expect_400_and_closed(&mut c, &what).await;
    }
    stays(ms(300), "nothing reaches the backend", || b.count() == 0).await;
}

/// The connection's next response is a `400`, and the proxy then closes the connection.
async fn expect_400_and_closed(c: &mut Raw, what: &str) {
    let head = c
        .read_head(secs(5))
        .await
        .unwrap_or_else(|e| panic!("{what}: no response: {e}"));
    assert_eq!(head.status, 400, "{what}: {head:?}");
    assert!(
        c.wait_closed(secs(5)).await.is_some(),
        "{what}: connection left open after 400"
    );
}

/// C-PATH-12: the framing guard follows the client's byte stream, not single reads: a
/// `Transfer-Encoding` name split across two TCP segments, and a CL+TE request pipelined behind
/// a good one in the same write, get `400` and the connection closed; the good one is served and
/// is the only request that reaches the backend.
pub async fn c_path_12_framing_guard_spans_reads_and_pipelines(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(&bin, &Config::new(&[&b])).await;

    let mut c = Raw::connect(p.public).await;
    c.stream.set_nodelay(true).expect("nodelay");
    let _ = c
        .write(b"POST /split HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Enc")
        .await;
    tokio::time::sleep(ms(150)).await;
    let _ = c
        .write(b"oding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
        .await;
    expect_400_and_closed(&mut c, "name split across segments").await;

    let mut c = Raw::connect(p.public).await;
    let _ = c
        .write(
            b"POST /first HTTP/1.1\r\nHost: x\r\nContent-Length: 31\r\n\r\n\
              \nTransfer-Encoding: chunked\r\n\r\n\
              POST /second HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\
              Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        )
        .await;
    let (first, _) = c
        .read_response(secs(5))
        .await
        .expect("a response to the first request");
    assert_eq!(first.status, 200, "the good request first: {first:?}");
    let second = c
        .read_head(secs(5))
        .await
        .expect("a response to the pipelined CL+TE request");
    assert_eq!(second.status, 400, "pipelined CL+TE: {second:?}");
    assert!(
        c.wait_closed(secs(5)).await.is_some(),
        "pipelined: connection left open after 400"
    );
    stays(ms(300), "only /first reaches the backend", || {
        b.count() == 1
    })
    .await;
    assert_eq!(
        b.last().map(|x| x.target.clone()).as_deref(),
        Some("/first")
    );
}

/// C-PATH-12 (RFC 9112 §3.2): an HTTP/1.1 request without `Host`, or any request with two, gets
/// `400` and the connection closed, and nothing reaches a backend; HTTP/1.0 needs no `Host`.
pub async fn c_path_12_host_required_once(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(&bin, &Config::new(&[&b])).await;
    let refused: [&[u8]; 3] = [
        b"GET /none HTTP/1.1\r\nAccept: */*\r\n\r\n",
        b"GET /two HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"GET /two10 HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n",
    ];
    for raw in refused {
        let what = String::from_utf8_lossy(raw).replace("\r\n", " | ");
        let mut c = Raw::connect(p.public).await;
        let _ = c.write(raw).await;
        expect_400_and_closed(&mut c, &what).await;
    }
    stays(ms(300), "nothing reaches the backend", || b.count() == 0).await;
    let mut c = Raw::connect(p.public).await;
    let _ = c.write(b"GET /old HTTP/1.0\r\n\r\n").await;
    let (head, _) = c
        .read_response(secs(5))
        .await
        .expect("an HTTP/1.0 response");
    assert_eq!(head.status, 200, "HTTP/1.0 without Host: {head:?}");
    assert_eq!(b.count(), 1, "the HTTP/1.0 request reached the backend");
}

/// C-PATH-12: an idle keep-alive connection is closed after `idle_timeout`.
pub async fn c_path_12_idle_keepalive_closed(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(
        &bin,
        &Config::new(&[&b]).set("server.idle_timeout", "300ms"),
    )
    .await;
    let mut c = Conn::open(p.public, None).await.expect("connect");
    let r = c.send(&Req::get("/one")).await.expect("request");
    expect_status(&r, 200, "request before idling");
    let start = Instant::now();
    wait_until(secs(5), "idle connection to be closed", || c.is_closed()).await;
    assert!(
        start.elapsed() >= ms(200),
        "closed after {:?}, before idle_timeout",
        start.elapsed()
    );
}

/// How long an idle HTTP/1 connection waits before weir parks it (1 s after the response, seen
/// by a watchdog that looks at least once a second) plus a margin: a case that sleeps this long
/// talks to a parked connection.
const PARKED: Duration = Duration::from_millis(2600);

/// C-PATH-12 (docs/proxy.md, "Idle connections"): a keep-alive connection idle long enough to
/// be parked (its HTTP machinery dropped, the socket kept) serves the next request on the same
/// socket, a pipelined pair included, and the next head gets a fresh `read_header_timeout`.
pub async fn c_path_12_parked_connection_serves_next_requests(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(
        &bin,
        &Config::new(&[&b])
            .set("server.idle_timeout", "30s")
            .set("server.read_header_timeout", "1s"),
    )
    .await;
    let mut c = Raw::connect(p.public).await;
    for round in 0..3 {
        tokio::time::sleep(if round == 0 { ms(0) } else { PARKED }).await;
        if round < 2 {
            c.write(format!("GET /parked-{round} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
                .await
                .expect("write after idling");
            let (head, _) = c.read_response(secs(5)).await.expect("response");
            assert_eq!(
                head.status, 200,
                "request {round} on the same socket: {head:?}"
            );
        } else {
            // Two requests in one write, after parking: both are answered, in order.
            c.write(b"GET /pipelined-a HTTP/1.1\r\nHost: x\r\n\r\nGET /pipelined-b HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .expect("write pipelined pair");
            for which in ["a", "b"] {
                let (head, _) = c.read_response(secs(5)).await.expect("pipelined response");
                assert_eq!(head.status, 200, "pipelined {which}: {head:?}");
            }
        }
    }
    let paths: Vec<String> = b.requests().iter().map(|r| r.target.clone()).collect();
    assert_eq!(
        paths,
        ["/parked-0", "/parked-1", "/pipelined-a", "/pipelined-b"],
        "every request reached the backend once, in order"
    );
    // A head that starts after parking and stalls is cut by read_header_timeout, measured
    // from its first byte, not from the end of the last response.
    tokio::time::sleep(PARKED).await;
    c.write(b"GET /slow HTTP/1.1\r\n")
        .await
        .expect("partial head");
    let closed = c.wait_closed(secs(6)).await;
    assert!(
        closed.is_some_and(|t| t >= ms(700)),
        "stalled head after parking: closed after {closed:?}, want about 1 s"
    );
}

/// C-PATH-12: a parked connection is still closed after `idle_timeout`, counted from the end
/// of its last response.
pub async fn c_path_12_parked_connection_closed_after_idle_timeout(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(&bin, &Config::new(&[&b]).set("server.idle_timeout", "3s")).await;
    let mut c = Raw::connect(p.public).await;
    c.write(b"GET /once HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let (head, _) = c.read_response(secs(5)).await.expect("response");
    assert_eq!(head.status, 200, "{head:?}");
    let closed = c.wait_closed(secs(8)).await;
    assert!(
        closed.is_some_and(|t| t >= ms(2500)),
        "closed after {closed:?}, want about idle_timeout (3 s)"
    );
}

/// C-PATH-12: `TE: trailers` is forwarded; other `TE` values are not.
pub async fn c_path_12_te_trailers_forwarded(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(&bin, &Config::new(&[&b])).await;
    let r = send(
        p.public,
        &Req::get("/te1")
            .header("te", "trailers")
            .header("connection", "TE"),
    )
    .await;
    expect_status(&r, 200, "TE: trailers");
    assert_eq!(
        b.last().map(|x| x.header_all("te")),
        Some(vec!["trailers".to_string()]),
        "TE: trailers upstream"
    );
    let r = send(p.public, &Req::get("/te2").header("te", "gzip, trailers")).await;
    expect_status(&r, 200, "TE: gzip, trailers");
    assert_eq!(
        b.last().map(|x| x.header_all("te")),
        Some(vec!["trailers".to_string()]),
        "only trailers kept"
    );
    let r = send(p.public, &Req::get("/te3").header("te", "gzip")).await;
    expect_status(&r, 200, "TE: gzip");
    assert!(
        !b.last().is_some_and(|x| x.has_header("te")),
        "TE: gzip forwarded"
    );
}
