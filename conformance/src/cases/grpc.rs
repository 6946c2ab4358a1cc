//! HTTP/2 backends (C-GRPC-1): `protocol: h2c` backends served to HTTP/2 and HTTP/1.1 clients,
//! each request balanced on its own, trailers passed, the backend's stream limit respected.

use std::net::SocketAddr;

use bytes::Bytes;
use http::{HeaderMap, Request};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};

use super::expect_status;
use crate::client::{Raw, Req, connect, send};
use crate::config::Config;
use crate::h2backend::H2Backend;
use crate::harness::{Binary, Proxy};
use crate::util::{eventually, secs};

/// The default pool of `backends`, all `protocol: h2c`, probed over TCP (they speak only
/// HTTP/2).
fn h2c_config(backends: &[&H2Backend]) -> Config {
    let list: Vec<Value> = backends
        .iter()
        .map(|b| json!({"id": b.id(), "url": b.url(), "protocol": "h2c"}))
        .collect();
    Config::new(&[])
        .set("backends", Value::Array(list))
        .set("health_check.mode", "tcp")
}

/// One HTTP/2 (prior knowledge) client connection to `addr`.
async fn h2_client(addr: SocketAddr) -> SendRequest<Full<Bytes>> {
    let stream = connect(addr, None).await.expect("connect");
    let (tx, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake::<_, Full<Bytes>>(TokioIo::new(stream))
        .await
        .expect("h2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    tx
}

/// What a gRPC-style call through the proxy got back.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: HeaderMap,
    body: Bytes,
    trailers: Option<HeaderMap>,
}

/// A unary gRPC-style call (`POST`, `content-type: application/grpc`, `te: trailers`) on
/// `tx`, read to its trailers.
async fn call(tx: SendRequest<Full<Bytes>>, addr: SocketAddr, path: &str) -> Answer {
    send_call(
        tx,
        grpc_request(addr, path)
            .body(unary_body())
            .expect("request"),
    )
    .await
}

/// A gRPC-style POST to `path` (content type and `te: trailers`), its body still to give.
fn grpc_request(addr: SocketAddr, path: &str) -> http::request::Builder {
    Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
}

/// One uncompressed two-byte gRPC message.
fn unary_body() -> Full<Bytes> {
    Full::new(Bytes::from_static(b"\0\0\0\0\x02hi"))
}

/// `req` sent on `tx`, read to its trailers.
async fn send_call(mut tx: SendRequest<Full<Bytes>>, req: Request<Full<Bytes>>) -> Answer {
    let fut = async move {
        let resp = tx.send_request(req).await.expect("h2 call");
        let (parts, body) = resp.into_parts();
        let collected = body.collect().await.expect("h2 body");
        let trailers = collected.trailers().cloned();
        Answer {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: collected.to_bytes(),
            trailers,
        }
    };
    tokio::time::timeout(secs(20), fut)
        .await
        .expect("call answered within 20 s")
}

/// A `method` call to `/pkg.Trailers/<method>` on a new HTTP/2 connection whose body
/// `streamed` is followed by the trailer `x-checksum: 42`.
async fn call_with_trailers(addr: SocketAddr, method: &str) -> Answer {
    type Trailed = http_body_util::combinators::WithTrailers<
        Full<Bytes>,
        std::future::Ready<Option<Result<HeaderMap, std::convert::Infallible>>>,
    >;
    let stream = connect(addr, None).await.expect("connect");
    let (mut tx, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake::<_, Trailed>(TokioIo::new(stream))
        .await
        .expect("h2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut trailers = HeaderMap::new();
    trailers.insert("x-checksum", http::HeaderValue::from_static("42"));
    let body = Full::new(Bytes::from_static(b"streamed"))
        .with_trailers(std::future::ready(Some(Ok(trailers))));
    let req = Request::builder()
        .method(method)
        .uri(format!("http://{addr}/pkg.Trailers/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(body)
        .expect("request");
    let fut = async move {
        let resp = tx.send_request(req).await.expect("h2 call");
        let (parts, body) = resp.into_parts();
        let collected = body.collect().await.expect("h2 body");
        let trailers = collected.trailers().cloned();
        Answer {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: collected.to_bytes(),
            trailers,
        }
    };
    tokio::time::timeout(secs(20), fut)
        .await
        .expect("call answered within 20 s")
}

fn header(h: &HeaderMap, name: &str) -> Option<String> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// C-GRPC-1: one HTTP/2 client connection makes 30 calls; weir balances each on its own over
/// three h2c backends (round robin: 10 each); every call reaches its backend as HTTP/2 with
/// `te: trailers`, and the backend's trailers (`grpc-status`, `grpc-message`) reach the client.
pub async fn c_grpc_1_h2_client_calls_are_balanced_over_h2c_backends_with_trailers(bin: Binary) {
    let mut bs = Vec::new();
    for i in 1..=3 {
        bs.push(H2Backend::start(&format!("g-{i}"), None, 0).await);
    }
    let refs: Vec<&H2Backend> = bs.iter().collect();
    let cfg = h2c_config(&refs).set("server.retry.methods", json!(["GET", "PUT"]));
    let p = Proxy::start(&bin, &cfg).await;
    let tx = h2_client(p.public).await;
    for i in 0..30 {
        let a = call(tx.clone(), p.public, "/pkg.Echo/Call").await;
        assert_eq!(a.status, 200, "call {i}: {a:?}");
        let backend = header(&a.headers, "x-balancer-backend").expect("x-balancer-backend");
        assert_eq!(a.body, format!("backend {backend}\n"), "call {i}");
        let trailers = a.trailers.as_ref().expect("trailers reach the client");
        assert_eq!(
            header(trailers, "grpc-status").as_deref(),
            Some("0"),
            "{a:?}"
        );
        assert_eq!(
            header(trailers, "grpc-message").as_deref(),
            Some("ok"),
            "{a:?}"
        );
    }
    let counts: Vec<usize> = bs.iter().map(H2Backend::count).collect();
    assert_eq!(counts, [10, 10, 10], "each call is balanced on its own");
    for b in &bs {
        for r in b.requests() {
            assert_eq!(r.version, http::Version::HTTP_2, "{}: {r:?}", b.id());
            assert_eq!(r.path, "/pkg.Echo/Call");
            assert_eq!(header(&r.headers, "te").as_deref(), Some("trailers"));
            assert!(header(&r.headers, "x-forwarded-for").is_some(), "{r:?}");
            assert!(header(&r.headers, "x-request-id").is_some(), "{r:?}");
            assert_eq!(&r.body[..], b"\0\0\0\0\x02hi");
        }
    }
    // Request trailers reach the backend, from a streamed body (POST) and from one buffered
    // for replay (PUT is made replayable here).
    for method in ["POST", "PUT"] {
        let a = call_with_trailers(p.public, method).await;
        assert_eq!(a.status, 200, "{method}: {a:?}");
        let path = format!("/pkg.Trailers/{method}");
        let got = bs
            .iter()
            .flat_map(H2Backend::requests)
            .find(|r| r.path == path)
            .expect("the call reached a backend");
        assert_eq!(&got.body[..], b"streamed", "{method}");
        let t = got
            .trailers
            .as_ref()
            .unwrap_or_else(|| panic!("{method}: request trailers reach the backend: {got:?}"));
        assert_eq!(header(t, "x-checksum").as_deref(), Some("42"), "{method}");
    }
}

/// C-GRPC-1 (translation): an HTTP/1.1 client's request reaches an h2c backend as HTTP/2, with
/// its body, and the client gets the backend's answer and body.
pub async fn c_grpc_1_http1_client_is_served_by_an_h2c_backend(bin: Binary) {
    let b = H2Backend::start("t-1", None, 0).await;
    let p = Proxy::start(&bin, &h2c_config(&[&b])).await;
    for body in ["", "hello"] {
        let req = if body.is_empty() {
            Req::get("/plain?x=1")
        } else {
            Req::post("/plain?x=1", body)
        };
        let r = send(p.public, &req).await;
        expect_status(&r, 200, "HTTP/1.1 client, h2c backend");
        assert_eq!(r.text(), "backend t-1\n");
        assert_eq!(r.header("x-balancer-backend").as_deref(), Some("t-1"));
        let rec = b.requests().pop().expect("the backend got the request");
        assert_eq!(rec.version, http::Version::HTTP_2);
        assert_eq!(rec.path, "/plain?x=1");
        assert_eq!(&rec.body[..], body.as_bytes());
        assert!(header(&rec.headers, "x-forwarded-for").is_some(), "{rec:?}");
        assert!(header(&rec.headers, "connection").is_none(), "{rec:?}");
    }
    // The backend's stream has no declared length: chunked for an HTTP/1.1 client, its
    // trailers passed as chunked trailers.
    let mut raw = Raw::connect(p.public).await;
    raw.write(b"GET /raw HTTP/1.1\r\nHost: x\r\nTE: trailers\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let mut bytes = Vec::new();
    while let Ok(more) = raw.read_some(secs(10)).await {
        if more.is_empty() {
            break;
        }
        bytes.extend(more);
    }
    let text = String::from_utf8_lossy(&bytes).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 200"), "{text}");
    assert!(text.contains("transfer-encoding: chunked\r\n"), "{text}");
    assert!(
        text.ends_with("\r\n0\r\ngrpc-status: 0\r\ngrpc-message: ok\r\n\r\n"),
        "{text}"
    );
}

/// C-GRPC-1: a backend that allows 2 concurrent streams per connection gets 6 concurrent calls
/// (held until all 6 are in flight at once): weir opens more connections rather than putting a
/// third stream on one (never more than 2 in flight on any connection) or queueing the calls;
/// all 6 are answered.
pub async fn c_grpc_1_backend_max_concurrent_streams_is_respected(bin: Binary) {
    let b = H2Backend::start("m-1", Some(2), 6).await;
    let p = Proxy::start(&bin, &h2c_config(&[&b])).await;
    let tx = h2_client(p.public).await;
    let calls: Vec<_> = (0..6)
        .map(|_| tokio::spawn(call(tx.clone(), p.public, "/pkg.Slow/Call")))
        .collect();
    for c in calls {
        let a = c.await.expect("call task");
        assert_eq!(a.status, 200, "{a:?}");
        assert_eq!(a.body, "backend m-1\n");
    }
    assert!(
        b.max_streams_per_connection() <= 2,
        "{} streams on one connection",
        b.max_streams_per_connection()
    );
    assert_eq!(
        b.max_in_flight(),
        6,
        "the calls were not all in flight at once"
    );
    assert!(b.connections() >= 3, "{} connections", b.connections());
    // The connections stay usable: one more call is answered.
    eventually(secs(10), "a call after the burst", || async {
        let a = call(tx.clone(), p.public, "/pkg.Slow/Call").await;
        (a.status == 200).then_some(())
    })
    .await;
}

/// `server.upstream.max_conns_per_host: 2` against a backend that allows 2 concurrent streams
/// per connection: 16 concurrent calls never take more than 2 connections nor more than 2
/// streams on one; the calls beyond the places wait for a stream to free up (within
/// `dial_timeout`) and are all answered (docs/proxy.md, "Connections per backend").
pub async fn c_grpc_1_max_conns_per_host_bounds_h2_connections(bin: Binary) {
    let b = H2Backend::start("mc-1", Some(2), 0).await;
    // One check cycle in the case's life: its TCP probe is the one connection not weir's pool's.
    let cfg = h2c_config(&[&b])
        .set("server.upstream.max_conns_per_host", 2)
        .set("health_check.interval", "60s");
    let p = Proxy::start(&bin, &cfg).await;
    let tx = h2_client(p.public).await;
    let calls: Vec<_> = (0..16)
        .map(|_| tokio::spawn(call(tx.clone(), p.public, "/pkg.Slow/Call")))
        .collect();
    for c in calls {
        let a = c.await.expect("call task");
        assert_eq!(a.status, 200, "{a:?}");
        assert_eq!(a.body, "backend mc-1\n");
    }
    assert_eq!(b.count(), 16, "every call reached the backend once");
    assert!(
        b.connections() <= 2 + 1,
        "{} connections (one of them the first cycle's TCP probe)",
        b.connections()
    );
    assert!(
        b.max_streams_per_connection() <= 2,
        "{} streams on one connection",
        b.max_streams_per_connection()
    );
}

/// A unary gRPC-style call with `x-request-id: rid` on a new HTTP/2 connection.
async fn call_with_id(addr: SocketAddr, path: &str, rid: &str) -> Answer {
    let req = grpc_request(addr, path)
        .header("x-request-id", rid)
        .body(unary_body())
        .expect("request");
    send_call(h2_client(addr).await, req).await
}

/// weir's own gRPC answer (C-GRPC-3): `200`, `content-type: application/grpc`, the status in
/// the head and nothing after it (trailers-only), `grpc-message` naming the reason and the
/// request id.
fn expect_grpc_answer(a: &Answer, code: &str, reason: &str, rid: &str) {
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(
        header(&a.headers, "content-type").as_deref(),
        Some("application/grpc"),
        "{a:?}"
    );
    assert_eq!(
        header(&a.headers, "grpc-status").as_deref(),
        Some(code),
        "{a:?}"
    );
    let message = header(&a.headers, "grpc-message").expect("grpc-message");
    assert!(message.contains(reason), "{message:?} names {reason:?}");
    assert!(message.contains(rid), "{message:?} names the request id");
    assert_eq!(
        header(&a.headers, "x-request-id").as_deref(),
        Some(rid),
        "{a:?}"
    );
    assert!(a.body.is_empty(), "trailers-only: no body: {a:?}");
    assert!(a.trailers.is_none(), "trailers-only: no trailers: {a:?}");
}

/// An `http://` url where nothing listens (the port was free a moment ago).
fn dead_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let addr = l.local_addr().expect("address");
    drop(l);
    format!("http://{addr}")
}

/// C-GRPC-3: with its only backend down, a gRPC call (HTTP/2, and HTTP/1.1 too) gets weir's
/// answer as gRPC: `200`, trailers-only `grpc-status: 14` (UNAVAILABLE) with the reason and the
/// request id in `grpc-message`; a request that is not gRPC still gets the JSON `503`.
pub async fn c_grpc_3_no_backend_is_a_trailers_only_unavailable(bin: Binary) {
    let cfg = Config::new(&[])
        .set(
            "backends",
            json!([{"id": "down-1", "url": dead_url(), "protocol": "h2c"}]),
        )
        .set("health_check.mode", "tcp");
    let p = Proxy::start(&bin, &cfg).await;
    let a = call_with_id(p.public, "/pkg.Echo/Call", "grpc-down-1").await;
    expect_grpc_answer(&a, "14", "no backend available", "grpc-down-1");
    // An HTTP/1.1 client's gRPC-typed request gets the same form.
    let r = send(
        p.public,
        &Req::post("/pkg.Echo/Call", "x")
            .header("content-type", "application/grpc+proto")
            .header("x-request-id", "grpc-down-2"),
    )
    .await;
    expect_status(&r, 200, "HTTP/1.1 gRPC request, no backend");
    assert_eq!(r.header("grpc-status").as_deref(), Some("14"), "{r:?}");
    let message = r.header("grpc-message").expect("grpc-message");
    assert!(message.contains("grpc-down-2"), "{message:?}");
    assert_eq!(r.text(), "", "no body");
    // Not gRPC: weir's JSON answer (C-PATH-11).
    let r = send(p.public, &Req::get("/plain")).await;
    expect_status(&r, 503, "plain request, no backend");
    assert!(r.header("grpc-status").is_none(), "{r:?}");
}

/// C-GRPC-3: a gRPC call over the rate limit gets trailers-only `grpc-status: 8`
/// (RESOURCE_EXHAUSTED) naming the reason and the request id.
pub async fn c_grpc_3_rate_limited_call_is_resource_exhausted(bin: Binary) {
    let b = H2Backend::start("rl-g", None, 0).await;
    let p = Proxy::start(&bin, &h2c_config(&[&b]).rate_limit(1, 0.001)).await;
    let a = call_with_id(p.public, "/pkg.Echo/Call", "grpc-rl-1").await;
    assert_eq!(a.status, 200, "the first call has a token: {a:?}");
    let trailers = a.trailers.as_ref().expect("the backend's trailers");
    assert_eq!(header(trailers, "grpc-status").as_deref(), Some("0"));
    let a = call_with_id(p.public, "/pkg.Echo/Call", "grpc-rl-2").await;
    expect_grpc_answer(&a, "8", "rate limit exceeded", "grpc-rl-2");
    assert_eq!(b.count(), 1, "the limited call reached no backend");
}

/// C-GRPC-3: a backend's trailers-only `grpc-status: 14` is a failure, as a `503`: a
/// replayable call (POST allowed for retries, its body buffered) goes on to the other backend
/// and succeeds there; without a retry allowed the client gets the backend's answer as it is.
pub async fn c_grpc_3_backend_unavailable_is_retried_on_another_backend(bin: Binary) {
    let bad = H2Backend::unavailable("bad").await;
    let good = H2Backend::start("good", None, 0).await;
    let cfg = h2c_config(&[&bad, &good]).set("server.retry.methods", json!(["POST"]));
    let p = Proxy::start(&bin, &cfg).await;
    for i in 0..4 {
        let a = call_with_id(p.public, "/pkg.Echo/Call", &format!("grpc-retry-{i}")).await;
        assert_eq!(a.status, 200, "call {i}: {a:?}");
        assert_eq!(
            header(&a.headers, "x-balancer-backend").as_deref(),
            Some("good"),
            "call {i}: {a:?}"
        );
        let trailers = a.trailers.as_ref().expect("the good backend's trailers");
        assert_eq!(
            header(trailers, "grpc-status").as_deref(),
            Some("0"),
            "call {i}"
        );
    }
    assert!(bad.count() >= 1, "the unavailable backend was tried");
    assert_eq!(
        good.count(),
        4,
        "every call was answered by the good backend"
    );
    drop(p);
    // No retry allowed (POST not in retry.methods): the backend's answer is passed on.
    let p = Proxy::start(&bin, &h2c_config(&[&bad])).await;
    let a = call_with_id(p.public, "/pkg.Echo/Call", "grpc-pass-1").await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(
        header(&a.headers, "grpc-status").as_deref(),
        Some("14"),
        "{a:?}"
    );
    assert_eq!(
        header(&a.headers, "x-balancer-backend").as_deref(),
        Some("bad")
    );
}

/// C-GRPC-3, C-RETRY-9: a call whose body streams from an HTTP/2 client (the `h2` crate sends
/// it in eight chunks, 20 ms apart; `POST` not in `retry.methods` and the body over
/// `body_limit`: never replayable) is refused with `REFUSED_STREAM` by the first backend it
/// goes to, before that backend read its body: weir keeps what it handed to the refused stream
/// and sends the call to the other backend, which gets the whole body once and answers.
pub async fn c_grpc_3_h2_client_streamed_call_refused_goes_to_another_backend(bin: Binary) {
    let refusing = H2Backend::refusing("rs-1").await;
    let good = H2Backend::start("rs-2", None, 0).await;
    let cfg = h2c_config(&[&refusing, &good])
        .passive_off()
        .set("server.retry.body_limit", 64);
    let p = Proxy::start(&bin, &cfg).await;
    let tx = h2_crate_client(p.public).await;
    let mut sent = Vec::new();
    let mut retried = 0;
    for i in 0..6 {
        let chunks: Vec<Bytes> = (0..8)
            .map(|k| Bytes::from(format!("call {i} chunk {k};").repeat(60)))
            .collect();
        sent.push(chunks.concat());
        let a = streamed_call(&tx, p.public, chunks).await;
        assert_eq!(a.status, 200, "call {i}: {a:?}");
        assert_eq!(
            header(&a.headers, "x-balancer-backend").as_deref(),
            Some("rs-2"),
            "call {i}: {a:?}"
        );
        let trailers = a.trailers.as_ref().expect("the backend's trailers");
        assert_eq!(
            header(trailers, "grpc-status").as_deref(),
            Some("0"),
            "call {i}"
        );
        if header(&a.headers, "x-balancer-attempts").as_deref() == Some("2") {
            retried += 1;
        }
    }
    assert!(
        retried >= 1 && refusing.refused() >= 1,
        "no call was refused: retried {retried}, refused {}",
        refusing.refused()
    );
    let mut got: Vec<Bytes> = good.requests().into_iter().map(|r| r.body).collect();
    got.sort();
    sent.sort();
    assert!(
        got == sent,
        "every body arrived whole, once, at the backend that answered: {} of {}",
        got.len(),
        sent.len()
    );
}

/// One HTTP/2 (prior knowledge) client connection to `addr` on the `h2` crate.
async fn h2_crate_client(addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
    let stream = connect(addr, None).await.expect("connect");
    let (tx, conn) = h2::client::handshake(stream).await.expect("h2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    tx
}

/// A gRPC-style call on `tx` whose body is `chunks`, sent 20 ms apart, read to its trailers.
async fn streamed_call(
    tx: &h2::client::SendRequest<Bytes>,
    addr: SocketAddr,
    chunks: Vec<Bytes>,
) -> Answer {
    let req = grpc_request(addr, "/pkg.Upload/Call")
        .body(())
        .expect("request");
    let mut tx = tx.clone().ready().await.expect("h2 connection ready");
    let (resp, mut body) = tx.send_request(req, false).expect("h2 call");
    let last = chunks.len().saturating_sub(1);
    let feed = tokio::spawn(async move {
        for (k, c) in chunks.into_iter().enumerate() {
            if k > 0 {
                tokio::time::sleep(crate::util::ms(20)).await;
            }
            // The answer may come while the body is still going: a closed stream ends it.
            if body.send_data(c, k == last).is_err() {
                return;
            }
        }
    });
    let a = tokio::time::timeout(secs(20), async {
        let resp = resp.await.expect("h2 answer");
        let (parts, mut body) = resp.into_parts();
        let mut data = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.expect("h2 body");
            let _ = body.flow_control().release_capacity(chunk.len());
            data.extend_from_slice(&chunk);
        }
        let trailers = body.trailers().await.expect("h2 trailers");
        Answer {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: Bytes::from(data),
            trailers,
        }
    })
    .await
    .expect("call answered within 20 s");
    feed.abort();
    a
}

/// C-GRPC-3, C-RETRY-9, the bound: a call whose body streams from an HTTP/2 client is refused
/// (`REFUSED_STREAM`) by a backend that read more than 64 KiB of it first (ten chunks of 10 KiB).
/// weir kept no more than 64 KiB, so it cannot send the call whole again: the client gets weir's
/// trailers-only `UNAVAILABLE`, as before the resend buffer existed, and the other backend never
/// sees a part of such a call; calls that went to the other backend first arrive whole.
pub async fn c_grpc_3_h2_client_call_refused_after_64_kib_is_not_sent_again(bin: Binary) {
    let refusing = H2Backend::refusing_after("rb-1", 70_000).await;
    let good = H2Backend::start("rb-2", None, 0).await;
    let cfg = h2c_config(&[&refusing, &good])
        .passive_off()
        .set("server.retry.body_limit", 64);
    let p = Proxy::start(&bin, &cfg).await;
    let tx = h2_crate_client(p.public).await;
    let (mut answered, mut refused) = (Vec::new(), 0);
    for i in 0..4u8 {
        let chunks: Vec<Bytes> = (0..10u8)
            .map(|k| Bytes::from(vec![b'a' + (i * 10 + k) % 26; 10_240]))
            .collect();
        let whole = chunks.concat();
        let a = streamed_call(&tx, p.public, chunks).await;
        assert_eq!(a.status, 200, "call {i}: {a:?}");
        match header(&a.headers, "x-balancer-backend").as_deref() {
            Some("rb-2") => answered.push(Bytes::from(whole)),
            _ => {
                assert_eq!(
                    header(&a.headers, "grpc-status").as_deref(),
                    Some("14"),
                    "call {i}: weir's UNAVAILABLE: {a:?}"
                );
                refused += 1;
            }
        }
    }
    assert!(
        refused >= 1 && refusing.refused() == refused,
        "refused calls: {refused}, streams the backend refused: {}",
        refusing.refused()
    );
    let got: Vec<Bytes> = good.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(got.len(), answered.len(), "no refused call was sent again");
    assert!(got == answered, "the answered calls' bodies arrived whole");
}

/// C-OUT-1: one of three h2c backends answers every call `grpc-status: 13` (`INTERNAL`), every
/// other one trailers-only and the rest in trailers after a body: the `200` heads are answers
/// to retries and the breaker, but the status is a failure to outlier detection, so the
/// backend is ejected once an interval (1 s) judged it, and then gets none of the next 30
/// calls.
pub async fn c_out_1_backend_answering_grpc_internal_is_ejected(bin: Binary) {
    let bad = H2Backend::failing("oi-1", "13").await;
    let good = [
        H2Backend::start("oi-2", None, 0).await,
        H2Backend::start("oi-3", None, 0).await,
    ];
    let cfg = h2c_config(&[&bad, &good[0], &good[1]])
        .set("server.retry.max_attempts", 1)
        .set("health_check.outlier.interval", "1s")
        .set("health_check.outlier.failure_percentage_request_volume", 5)
        .set("health_check.outlier.base_ejection_time", "30s");
    let p = Proxy::start(&bin, &cfg).await;
    let tx = h2_client(p.public).await;
    let ejected = |p: &Proxy| {
        p.logs()
            .stdout()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|v| v["fields"]["event"] == "outlier_ejected" && v["fields"]["backend"] == "oi-1")
    };
    eventually(secs(30), "oi-1's outlier_ejected line", || {
        let found = ejected(&p);
        let (tx, addr) = (tx.clone(), p.public);
        async move {
            if found {
                return Some(());
            }
            let a = call(tx, addr, "/pkg.Echo/Call").await;
            assert_eq!(a.status, 200, "{a:?}");
            tokio::time::sleep(crate::util::ms(5)).await;
            None
        }
    })
    .await;
    let internal = bad.count();
    assert!(
        internal >= 5,
        "oi-1 answered {internal} calls before its ejection"
    );
    let mut to_bad = 0;
    for i in 0..30 {
        let a = call(tx.clone(), p.public, "/pkg.Echo/Call").await;
        assert_eq!(a.status, 200, "call {i}: {a:?}");
        if header(&a.headers, "x-balancer-backend").as_deref() == Some("oi-1") {
            to_bad += 1;
        }
    }
    assert_eq!(
        to_bad, 0,
        "{to_bad} of 30 calls went to the ejected backend"
    );
}
