//! gRPC deadlines and cancellation (C-GRPC-2), against the slow h2c backend
//! ([`crate::h2slow`]) that sees `RST_STREAM` on the wire. The client side speaks HTTP/2
//! through the `h2` crate directly, so that it can reset its own stream.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Request};
use serde_json::json;

use super::expect_status;
use super::obs::{line_of, metrics, sample};
use crate::client::{Raw, Req, connect, send};
use crate::config::Config;
use crate::h2backend::H2Backend;
use crate::h2slow::{Ending, SlowBackend, SlowCall};
use crate::harness::{Binary, Proxy};
use crate::util::{eventually, secs};

/// The default pool of one slow h2c backend, probed over TCP (it speaks only HTTP/2). The
/// per-try timeout is far beyond the cases' waits, so that only the call's own deadline or
/// the client's cancel can end the backend's stream in time.
fn slow_config(b: &SlowBackend) -> Config {
    Config::new(&[])
        .set(
            "backends",
            json!([{"id": b.id(), "url": b.url(), "protocol": "h2c"}]),
        )
        .set("health_check.mode", "tcp")
        .set("server.retry.per_try_timeout", "60s")
        .set("server.upstream.response_header_timeout", "60s")
}

/// One HTTP/2 (prior knowledge) client connection to `addr` on the `h2` crate.
async fn h2_client(addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
    let stream = connect(addr, None).await.expect("connect");
    let (tx, conn) = h2::client::handshake(stream).await.expect("h2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    tx
}

/// A unary gRPC call's head (`POST`, `content-type: application/grpc`, `te: trailers`), with
/// `grpc-timeout: <timeout>` when given.
fn call_head(addr: SocketAddr, timeout: Option<&str>) -> Request<()> {
    let mut b = Request::post(format!("http://{addr}/pkg.Slow/Call"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(t) = timeout {
        b = b.header("grpc-timeout", t);
    }
    b.body(()).expect("request")
}

/// One uncompressed two-byte gRPC message.
const MESSAGE: &[u8] = b"\0\0\0\0\x02hi";

/// The backend's one call, once it arrived.
async fn the_call(b: &SlowBackend) -> SlowCall {
    eventually(secs(10), "the call reaches the backend", || async {
        b.calls().pop()
    })
    .await
}

/// The backend's one call, once it ended (answered or reset).
async fn ended(b: &SlowBackend, within: Duration) -> SlowCall {
    eventually(within, "the backend's stream ends", || async {
        b.calls().pop().filter(|c| c.ending != Ending::Pending)
    })
    .await
}

fn header(h: &HeaderMap, name: &str) -> Option<String> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// A `grpc-timeout` value as a duration (the test's own reading of the wire format).
fn grpc_timeout(v: &str) -> Duration {
    let (digits, unit) = v.split_at(v.len() - 1);
    let n: u64 = digits.parse().expect("grpc-timeout digits");
    match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        other => panic!("grpc-timeout unit {other:?}"),
    }
}

/// C-GRPC-2: a call with `grpc-timeout: 300m` to a backend that takes 5 s gets weir's
/// trailers-only `DEADLINE_EXCEEDED` (`grpc-status: 4`) soon after 300 ms, and the backend's
/// stream is reset (`RST_STREAM` `CANCEL`, on the same connection: not a closed connection)
/// then, not when it would have answered. The backend was told what remained of the deadline:
/// more than nothing and no more than the client's 300 ms (core's
/// `c_grpc_2_the_timeout_sent_upstream_is_lowered_by_the_time_spent` shows the lowering; here
/// the call is sent within the clock's resolution of its arrival).
pub async fn c_grpc_2_deadline_exceeded_answers_and_resets_the_backend_stream(bin: Binary) {
    let b = SlowBackend::start("slow-1", secs(5)).await;
    let p = Proxy::start(&bin, &slow_config(&b)).await;
    let mut tx = h2_client(p.public).await;
    let started = Instant::now();
    let (resp, mut body) = tx
        .send_request(call_head(p.public, Some("300m")), false)
        .expect("send the call");
    body.send_data(Bytes::from_static(MESSAGE), true)
        .expect("send the message");
    let resp = tokio::time::timeout(secs(10), resp)
        .await
        .expect("answered before the backend would have")
        .expect("a response");
    let answered = started.elapsed();
    let (parts, _) = resp.into_parts();
    assert_eq!(parts.status, 200, "{parts:?}");
    assert_eq!(
        header(&parts.headers, "grpc-status").as_deref(),
        Some("4"),
        "DEADLINE_EXCEEDED, trailers-only: {parts:?}"
    );
    assert!(
        answered >= Duration::from_millis(300) && answered < secs(3),
        "answered after {answered:?}, at the 300 ms deadline"
    );
    let call = ended(&b, secs(3)).await;
    let Ending::Reset(reason, at) = call.ending else {
        panic!("the backend's stream was reset, not {:?}", call.ending);
    };
    assert_eq!(reason, h2::Reason::CANCEL, "{call:?}");
    assert!(
        at.duration_since(call.received) < secs(2),
        "reset at the deadline, not at the backend's 5 s"
    );
    let sent = call
        .grpc_timeout
        .as_deref()
        .expect("grpc-timeout passed on");
    let sent = grpc_timeout(sent);
    assert!(
        sent > Duration::ZERO && sent <= Duration::from_millis(300),
        "what remains of the client's 300 ms: {sent:?}"
    );
    // An HTTP/1.1 client's gRPC call: the same answer and the same reset.
    let r = send(
        p.public,
        &Req::post("/pkg.Slow/Call", "x")
            .header("content-type", "application/grpc")
            .header("grpc-timeout", "200m"),
    )
    .await;
    expect_status(&r, 200, "HTTP/1.1 gRPC call past its deadline");
    assert_eq!(r.header("grpc-status").as_deref(), Some("4"), "{r:?}");
    let call = ended(&b, secs(3)).await;
    assert!(
        matches!(call.ending, Ending::Reset(h2::Reason::CANCEL, _)),
        "{call:?}"
    );
    let sent = grpc_timeout(
        call.grpc_timeout
            .as_deref()
            .expect("grpc-timeout passed on"),
    );
    assert!(
        sent > Duration::ZERO && sent <= Duration::from_millis(200),
        "{sent:?}"
    );
}

/// C-GRPC-2: a client's `RST_STREAM` (`CANCEL`) reaches the backend as a reset of its stream at
/// once (the backend would answer only after 5 s); an HTTP/1.1 client that closes its
/// connection mid-call does the same.
pub async fn c_grpc_2_client_cancel_resets_the_backend_stream(bin: Binary) {
    let b = SlowBackend::start("slow-2", secs(5)).await;
    let p = Proxy::start(&bin, &slow_config(&b)).await;
    let mut tx = h2_client(p.public).await;
    let (_resp, mut body) = tx
        .send_request(call_head(p.public, None), false)
        .expect("send the call");
    body.send_data(Bytes::from_static(MESSAGE), true)
        .expect("send the message");
    let call = the_call(&b).await;
    assert_eq!(call.grpc_timeout, None, "no deadline, none invented");
    let cancelled = Instant::now();
    body.send_reset(h2::Reason::CANCEL);
    let call = ended(&b, secs(3)).await;
    let Ending::Reset(reason, at) = call.ending else {
        panic!("the backend's stream was reset, not {:?}", call.ending);
    };
    assert_eq!(reason, h2::Reason::CANCEL);
    assert!(
        at.duration_since(cancelled) < secs(2),
        "at once, not at the backend's answer"
    );
    // An HTTP/1.1 client's gRPC call, its connection closed mid-call.
    let b = SlowBackend::start("slow-3", secs(5)).await;
    let p = Proxy::start(&bin, &slow_config(&b)).await;
    let mut raw = Raw::connect(p.public).await;
    let mut req = format!(
        "POST /pkg.Slow/Call HTTP/1.1\r\nHost: x\r\ncontent-type: application/grpc\r\n\
         content-length: {}\r\n\r\n",
        MESSAGE.len()
    )
    .into_bytes();
    req.extend_from_slice(MESSAGE);
    raw.write(&req).await.expect("write");
    the_call(&b).await;
    let closed = Instant::now();
    drop(raw);
    let call = ended(&b, secs(3)).await;
    let at = match call.ending {
        Ending::Reset(_, at) | Ending::ConnectionLost(at) => at,
        other => panic!("the backend's call was cancelled, not {other:?}"),
    };
    assert!(
        at.duration_since(closed) < secs(2),
        "at once, not at the backend's answer"
    );
}

/// A gRPC call with `x-request-id: rid` and `grpc-timeout` (when given) on a new HTTP/2
/// connection: the response head and the trailers, if any.
async fn traced_call(
    addr: SocketAddr,
    path: &str,
    rid: &str,
    timeout: Option<&str>,
) -> (http::response::Parts, Option<HeaderMap>) {
    let mut tx = h2_client(addr).await;
    let mut head = call_head(addr, timeout);
    *head.uri_mut() = format!("http://{addr}{path}").parse().expect("uri");
    head.headers_mut().insert(
        "x-request-id",
        http::HeaderValue::from_str(rid).expect("rid"),
    );
    let (resp, mut body) = tx.send_request(head, false).expect("send the call");
    body.send_data(Bytes::from_static(MESSAGE), true)
        .expect("send the message");
    let fut = async move {
        let (parts, mut body) = resp.await.expect("a response").into_parts();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.expect("body");
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        let trailers = body.trailers().await.expect("trailers");
        (parts, trailers)
    };
    tokio::time::timeout(secs(20), fut)
        .await
        .expect("answered within 20 s")
}

/// C-GRPC-2 / C-GRPC-3, observability: the access line of a gRPC call carries `grpc_status`
/// (a backend's from its trailers, a trailers-only answer's from its head, weir's own
/// `DEADLINE_EXCEEDED`), and `load_balancer_http_requests_total` counts gRPC calls with a
/// bounded `grpc_status` label, while other requests keep their series without it.
pub async fn c_grpc_2_access_log_and_requests_metric_carry_the_grpc_status(bin: Binary) {
    let ok = H2Backend::start("ok-1", None, 0).await;
    let bad = H2Backend::unavailable("bad-1").await;
    let slow = SlowBackend::start("slow-4", secs(5)).await;
    let h2c = |id: &str, url: String| json!([{"id": id, "url": url, "protocol": "h2c"}]);
    let cfg = slow_config(&slow)
        .set("backends", h2c(ok.id(), ok.url()))
        .set("pools.bad.backends", h2c(bad.id(), bad.url()))
        .set("pools.slow.backends", h2c(slow.id(), slow.url()))
        .route("/bad", "bad", None)
        .route("/slow", "slow", None)
        .set("server.access_log_sample_rate", 1.0)
        .management();
    let p = Proxy::start(&bin, &cfg).await;
    let (parts, trailers) = traced_call(p.public, "/pkg.Ok/Call", "g-ok", None).await;
    assert_eq!(parts.status, 200);
    let trailers = trailers.expect("the backend's trailers");
    assert_eq!(header(&trailers, "grpc-status").as_deref(), Some("0"));
    let (parts, _) = traced_call(p.public, "/bad/pkg.Bad/Call", "g-bad", None).await;
    assert_eq!(header(&parts.headers, "grpc-status").as_deref(), Some("14"));
    let (parts, _) = traced_call(p.public, "/slow/pkg.Slow/Call", "g-late", Some("100m")).await;
    assert_eq!(header(&parts.headers, "grpc-status").as_deref(), Some("4"));
    // An HTTP/1.1 client's gRPC call: the status from the trailers relayed as chunked ones.
    let r = send(
        p.public,
        &Req::post("/pkg.Ok/Call", "x")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("x-request-id", "h1-ok"),
    )
    .await;
    expect_status(&r, 200, "HTTP/1.1 gRPC call");
    let r = send(
        p.public,
        &Req::get("/plain").header("x-request-id", "plain-1"),
    )
    .await;
    expect_status(&r, 200, "a request that is not gRPC");

    let calls = [
        ("g-ok", 200, 0),
        ("h1-ok", 200, 0),
        ("g-bad", 200, 14),
        ("g-late", 504, 4),
    ];
    for (rid, status, grpc) in calls {
        let line = line_of(&p, rid).await;
        assert_eq!(line["fields"]["status"], status, "{line}");
        assert_eq!(line["fields"]["grpc_status"], grpc, "{line}");
    }
    let line = line_of(&p, "plain-1").await;
    assert!(line["fields"].get("grpc_status").is_none(), "{line}");

    let text = metrics(&p).await;
    let name = "load_balancer_http_requests_total";
    let public = "listener=\"public\"";
    for (code, grpc, n) in [("200", "0", 2.0), ("200", "14", 1.0), ("504", "4", 1.0)] {
        let labels = [
            public,
            &format!("code=\"{code}\""),
            &format!("grpc_status=\"{grpc}\""),
        ];
        assert_eq!(
            sample(&text, name, &labels),
            Some(n),
            "{code}/{grpc}:\n{text}"
        );
    }
    // The plain request is in the series without the label, which the gRPC calls are not.
    let plain = text
        .lines()
        .find(|l| {
            l.starts_with(name)
                && l.contains(public)
                && l.contains("code=\"200\"")
                && !l.contains("grpc_status")
        })
        .expect("the plain 200 series");
    assert!(plain.ends_with(" 1"), "{plain}");
}
