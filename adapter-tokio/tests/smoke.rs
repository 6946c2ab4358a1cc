//! Real-socket smoke tests of the tokio data plane, in-process (`weir_tokio::start`). The full
//! black-box suite is `conformance/`; these cover the adapter's own mechanics: header rewriting,
//! retries, timeouts, smuggling and size limits, streaming, upgrades, cancellation, overload, rate
//! limiting, readiness and graceful shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weir_core::config::MapSecrets;
use weir_tokio::{Options, ProxyHandle};

type Body = BoxBody<Bytes, Infallible>;
type Handler = Arc<
    dyn Fn(Request<Incoming>) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>> + Send + Sync,
>;

/// What a test backend saw.
#[derive(Debug, Clone)]
struct Seen {
    target: String,
    headers: HeaderMap,
}

struct Backend {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// Connections closed by the peer (the proxy) while a request was in progress.
    cancelled: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Backend {
    fn hits(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
    fn last(&self) -> Seen {
        self.seen
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a request")
    }
}

fn full(status: u16, body: &'static str) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())).boxed());
    *r.status_mut() = StatusCode::from_u16(status).unwrap();
    r
}

/// A backend on 127.0.0.1 whose `/health` answers 200 and whose other requests go to `handler`.
async fn backend(handler: Handler) -> Backend {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let cancelled = Arc::new(AtomicUsize::new(0));
    let (seen2, cancelled2) = (Arc::clone(&seen), Arc::clone(&cancelled));
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (seen, cancelled, handler) = (
                Arc::clone(&seen2),
                Arc::clone(&cancelled2),
                Arc::clone(&handler),
            );
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let (seen, cancelled, handler) = (
                        Arc::clone(&seen),
                        Arc::clone(&cancelled),
                        Arc::clone(&handler),
                    );
                    async move {
                        if req.uri().path() == "/health" {
                            return Ok::<_, Infallible>(full(200, "ok"));
                        }
                        seen.lock().unwrap().push(Seen {
                            target: req.uri().to_string(),
                            headers: req.headers().clone(),
                        });
                        // Counts a cancellation when the proxy drops the request mid-way.
                        struct Watch(Arc<AtomicUsize>, bool);
                        impl Drop for Watch {
                            fn drop(&mut self) {
                                if !self.1 {
                                    self.0.fetch_add(1, Ordering::SeqCst);
                                }
                            }
                        }
                        let mut w = Watch(cancelled, false);
                        let resp = handler(req).await;
                        w.1 = true;
                        Ok(resp)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .with_upgrades()
                    .await;
            });
        }
    });
    Backend {
        addr,
        seen,
        cancelled,
        task,
    }
}

fn ok_backend(body: &'static str) -> Handler {
    Arc::new(move |_req| Box::pin(async move { full(200, body) }))
}

/// A proxy in front of `backends` with `extra` YAML (top-level sections other than backends).
async fn proxy(backends: &[&Backend], extra: &str) -> ProxyHandle {
    let mut text = String::from(extra);
    text.push_str("\nbackends:\n");
    for (i, b) in backends.iter().enumerate() {
        text.push_str(&format!("  - id: b{}\n    url: http://{}\n", i + 1, b.addr));
    }
    let cfg = weir_core::config::load(&text, &MapSecrets::new()).expect("valid test config");
    weir_tokio::start(
        cfg,
        Options {
            public_bind: Some("127.0.0.1:0".parse().unwrap()),
            workers: Some(2),
            ..Options::default()
        },
    )
    .await
    .expect("proxy starts")
}

const FAST: &str = "server:\n  read_header_timeout: 1s\n  idle_timeout: 2s\n  shutdown_timeout: 2s\n  retry:\n    per_try_timeout: 1s\nhealth_check:\n  interval: 1s\n  timeout: 500ms\n  jitter: 0s\n  slow_start: 0s\n";

/// One request on a fresh connection; the response with its whole body.
async fn send(addr: SocketAddr, req: Request<Full<Bytes>>) -> Response<Bytes> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let resp = tx.send_request(req).await.expect("response");
    let (parts, body) = resp.into_parts();
    Response::from_parts(parts, body.collect().await.expect("body").to_bytes())
}

fn get(addr: SocketAddr, target: &str) -> Request<Full<Bytes>> {
    Request::builder()
        .uri(target)
        .header("host", addr.to_string())
        .body(Full::new(Bytes::new()))
        .unwrap()
}

fn header(r: &Response<Bytes>, name: &str) -> String {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// Raw bytes in, everything until close (or `wait`) out.
async fn raw(addr: SocketAddr, bytes: &[u8], wait: Duration) -> (String, bool) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let closed = tokio::time::timeout(wait, s.read_to_end(&mut out))
        .await
        .is_ok();
    (String::from_utf8_lossy(&out).into_owned(), closed)
}

/// C-PATH-3, -4, -5, -6, C-FWD-2: headers both ways, raw path kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_path_4_headers_and_raw_path() {
    let b = backend(Arc::new(|_req| {
        Box::pin(async {
            let mut r = full(200, "hello");
            r.headers_mut()
                .insert("connection", "x-secret".parse().unwrap());
            r.headers_mut().insert("x-secret", "1".parse().unwrap());
            r.headers_mut()
                .insert("keep-alive", "timeout=5".parse().unwrap());
            r
        })
    }))
    .await;
    let p = proxy(&[&b], FAST).await;
    let addr = p.public_addr();
    let req = Request::builder()
        .uri("/a/%2F..%2Fb//c?q=%2E&x")
        .header("host", "client.example")
        .header("x-request-id", "abc-123")
        .header("x-forwarded-for", "6.6.6.6")
        .header("connection", "x-drop")
        .header("x-drop", "1")
        .header("te", "trailers, gzip")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = send(addr, req).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.body().as_ref(), b"hello");
    assert_eq!(header(&resp, "x-balancer-backend"), "b1");
    assert_eq!(header(&resp, "x-balancer-attempts"), "1");
    assert_eq!(header(&resp, "x-request-id"), "abc-123");
    assert!(
        resp.headers().get("x-secret").is_none(),
        "hop-by-hop from the backend removed"
    );
    assert!(resp.headers().get("keep-alive").is_none());
    let seen = b.last();
    assert_eq!(seen.target, "/a/%2F..%2Fb//c?q=%2E&x");
    let h = &seen.headers;
    assert_eq!(h["host"], "client.example");
    assert_eq!(h["x-request-id"], "abc-123");
    assert_eq!(h["x-forwarded-for"], "127.0.0.1");
    assert_eq!(h["x-real-ip"], "127.0.0.1");
    assert_eq!(h["x-forwarded-host"], "client.example");
    assert_eq!(h["x-forwarded-proto"], "http");
    assert_eq!(h["x-balancer-backend-attempt"], "b1");
    assert_eq!(h["te"], "trailers");
    assert!(h.get("x-drop").is_none());
    // An invalid id is replaced by a generated one, upstream and back.
    let bad = Request::builder()
        .uri("/")
        .header("host", "h")
        .header("x-request-id", "bad id!")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = send(addr, bad).await;
    let id = header(&resp, "x-request-id");
    assert_eq!(id.len(), 32);
    assert_eq!(b.last().headers["x-request-id"], id.as_str());
    p.stop().await;
}

/// C-RETRY-1, C-RETRY-4, C-PATH-4: a 503 is retried on the other backend for GET; POST gets the
/// backend's 503 as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_retry_1_retries_503_on_another_backend() {
    let bad = backend(Arc::new(|_req| Box::pin(async { full(503, "busy") }))).await;
    let good = backend(ok_backend("fine")).await;
    let p = proxy(&[&bad, &good], FAST).await;
    let addr = p.public_addr();
    // Two POSTs on one connection (it stays on one worker, whose round-robin cursor alternates;
    // slow start is off in FAST, so nothing skips a backend): the one that lands
    // on the bad backend gets its 503 as it was (no retry for POST, C-RETRY-4).
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut by_backend = Vec::new();
    for _ in 0..2 {
        tx.ready().await.unwrap();
        let post = Request::builder()
            .method("POST")
            .uri("/x")
            .header("host", "h")
            .body(Full::new(Bytes::from_static(b"data")))
            .unwrap();
        let r = tx.send_request(post).await.unwrap();
        let (parts, body) = r.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        let backend = parts.headers["x-balancer-backend"]
            .to_str()
            .unwrap()
            .to_owned();
        by_backend.push((backend, parts.status.as_u16(), body));
    }
    by_backend.sort();
    assert_eq!(by_backend[0].0, "b1");
    assert_eq!(by_backend[0].1, 503);
    assert_eq!(by_backend[0].2.as_ref(), b"busy");
    assert_eq!(by_backend[1].1, 200);
    // GETs: the 503 is retried on the other backend (or the bad one's circuit is open).
    for _ in 0..4 {
        let r = send(addr, get(addr, "/x")).await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "x-balancer-backend"), "b2");
        let attempts = header(&r, "x-balancer-attempts");
        assert!(attempts == "1" || attempts == "2");
    }
    assert!(bad.hits() >= 1, "the bad backend was tried");
    p.stop().await;
}

/// C-RETRY-4, C-RETRY-5: no headers within per_try_timeout → 504 (single backend, no retry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_retry_5_per_try_timeout_gives_504() {
    let slow = backend(Arc::new(|_req| {
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            full(200, "late")
        })
    }))
    .await;
    let p = proxy(&[&slow], FAST).await;
    let addr = p.public_addr();
    let started = std::time::Instant::now();
    let r = send(addr, get(addr, "/slow")).await;
    assert_eq!(r.status(), 504);
    assert!(started.elapsed() < Duration::from_millis(2500));
    assert_eq!(header(&r, "content-type"), "application/json");
    let v: serde_json::Value = serde_json::from_slice(r.body()).unwrap();
    assert_eq!(v["code"], 504);
    assert_eq!(v["request_id"], header(&r, "x-request-id").as_str());
    p.stop().await;
}

/// C-PATH-12: both Content-Length and Transfer-Encoding → 400, closed, nothing upstream;
/// conflicting Content-Length → 400 (hyper); oversized headers → 431.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_path_12_smuggling_and_header_limits() {
    let b = backend(ok_backend("x")).await;
    let p = proxy(
        &[&b],
        &FAST.replacen("server:\n", "server:\n  max_header_bytes: 4096\n", 1),
    )
    .await;
    let addr = p.public_addr();
    let (resp, closed) = raw(addr, b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n", Duration::from_secs(3)).await;
    assert!(resp.starts_with("HTTP/1.1 400"), "{resp}");
    assert!(closed, "connection closed after the 400");
    let (resp, _) = raw(addr, b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", Duration::from_secs(3)).await;
    assert!(resp.starts_with("HTTP/1.1 400"), "{resp}");
    let (resp, _) = raw(
        addr,
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        Duration::from_secs(3),
    )
    .await;
    assert!(resp.starts_with("HTTP/1.1 400"), "{resp}");
    assert_eq!(b.hits(), 0, "nothing reached the backend");
    let big = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n",
        "a".repeat(8000)
    );
    let (resp, _) = raw(addr, big.as_bytes(), Duration::from_secs(3)).await;
    assert!(resp.starts_with("HTTP/1.1 431"), "{resp}");
    // A chunked body alone is fine.
    let (resp, _) = raw(addr, b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n", Duration::from_secs(3)).await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    p.stop().await;
}

/// C-PATH-12: slow headers are cut at read_header_timeout; an idle keep-alive connection is closed
/// after idle_timeout, not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_path_12_header_and_idle_timeouts() {
    let b = backend(ok_backend("x")).await;
    let p = proxy(&[&b], FAST).await;
    let addr = p.public_addr();
    // Slowloris: part of a head, then nothing.
    let started = std::time::Instant::now();
    let (_, closed) = raw(
        addr,
        b"GET / HTTP/1.1\r\nHost: a\r\n",
        Duration::from_secs(4),
    )
    .await;
    assert!(closed, "closed by the proxy");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(2500),
        "{took:?}"
    );
    // Connect and send nothing.
    let started = std::time::Instant::now();
    let (_, closed) = raw(addr, b"", Duration::from_secs(4)).await;
    assert!(closed && started.elapsed() < Duration::from_millis(2500));
    // Idle keep-alive: one request, then silence; closed after ~2s (idle_timeout), not ~1s.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let started = std::time::Instant::now();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
    let idle = started.elapsed();
    assert!(
        idle >= Duration::from_millis(1500) && idle < Duration::from_millis(4000),
        "{idle:?}"
    );
    p.stop().await;
}

/// C-PATH-7: the first bytes reach the client before the backend finished the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_path_7_responses_stream() {
    let b = backend(Arc::new(|_req| {
        Box::pin(async {
            let body = chunks(vec![
                (Duration::ZERO, "first\n"),
                (Duration::from_millis(800), "second\n"),
            ]);
            Response::new(body.boxed())
        })
    }))
    .await;
    let p = proxy(&[&b], FAST).await;
    let addr = p.public_addr();
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let started = std::time::Instant::now();
    let resp = tx.send_request(get(addr, "/sse")).await.unwrap();
    let mut body = resp.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first.as_ref(), b"first\n");
    assert!(
        started.elapsed() < Duration::from_millis(600),
        "first chunk streamed early"
    );
    let second = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(second.as_ref(), b"second\n");
    p.stop().await;
}

/// A body that sends `parts`, each after its delay.
struct Chunks {
    parts: std::collections::VecDeque<(Duration, &'static str)>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl hyper::body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        use std::task::Poll;
        loop {
            if let Some(sleep) = self.sleep.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.sleep = None;
                let Some((_, text)) = self.parts.pop_front() else {
                    return Poll::Ready(None);
                };
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(text.as_bytes())))));
            }
            let Some((delay, _)) = self.parts.front() else {
                return Poll::Ready(None);
            };
            self.sleep = Some(Box::pin(tokio::time::sleep(*delay)));
        }
    }
}

fn chunks(parts: Vec<(Duration, &'static str)>) -> Chunks {
    Chunks {
        parts: parts.into(),
        sleep: None,
    }
}

/// C-PATH-9: a client that disconnects cancels the upstream attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_path_9_client_disconnect_cancels_upstream() {
    let b = backend(Arc::new(|_req| {
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            full(200, "never")
        })
    }))
    .await;
    let p = proxy(
        &[&b],
        &FAST.replace("per_try_timeout: 1s", "per_try_timeout: 20s"),
    )
    .await;
    let addr = p.public_addr();
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /wait HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(b.hits(), 1);
    drop(s);
    let mut cancelled = false;
    for _ in 0..40 {
        if b.cancelled.load(Ordering::SeqCst) == 1 {
            cancelled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(cancelled, "the backend saw its request cancelled");
    // Not a passive failure: the backend stays available.
    assert!(p.shared().ready());
    p.stop().await;
}

/// C-PATH-8: an upgrade is tunnelled both ways after the backend's 101.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_path_8_upgrade_is_tunnelled() {
    let b = backend(Arc::new(|mut req| {
        Box::pin(async move {
            let on = hyper::upgrade::on(&mut req);
            tokio::spawn(async move {
                if let Ok(up) = on.await {
                    let mut io = TokioIo::new(up);
                    let mut buf = [0u8; 64];
                    while let Ok(n) = io.read(&mut buf).await {
                        if n == 0 || io.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                }
            });
            let mut r = Response::new(Empty::new().boxed());
            *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
            r.headers_mut()
                .insert("connection", "upgrade".parse().unwrap());
            r.headers_mut().insert("upgrade", "echo".parse().unwrap());
            r
        })
    }))
    .await;
    let p = proxy(&[&b], FAST).await;
    let addr = p.public_addr();
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 1024];
    let n = s.read(&mut buf).await.unwrap();
    let head = String::from_utf8_lossy(&buf[..n]).to_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("upgrade: echo"));
    assert_eq!(b.last().headers["upgrade"], "echo");
    s.write_all(b"ping").await.unwrap();
    let n = s.read(&mut buf).await.unwrap();
    assert_eq!(&buf[..n], b"ping");
    // The slot is held while the tunnel is open.
    let rt = p.shared().runtime.load();
    assert_eq!(rt.pools()[0].backends()[0].in_flight(), 1);
    drop(rt);
    drop(s);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        p.shared().runtime.load().pools()[0].backends()[0].in_flight(),
        0
    );
    p.stop().await;
}

/// C-LOAD-1: over the limit with no queue → 503 with Retry-After and X-Balancer-Overloaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_load_1_overload_answer() {
    let b = backend(Arc::new(|_req| {
        Box::pin(async {
            tokio::time::sleep(Duration::from_millis(600)).await;
            full(200, "slow")
        })
    }))
    .await;
    let cfg = FAST.replace(
        "  retry:\n",
        "  overload:\n    max_concurrent_requests: 1\n    queue_timeout: 0s\n  retry:\n",
    );
    let p = proxy(&[&b], &cfg).await;
    let addr = p.public_addr();
    let first = tokio::spawn(send(addr, get(addr, "/1")));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = send(addr, get(addr, "/2")).await;
    assert_eq!(r.status(), 503);
    assert_eq!(header(&r, "retry-after"), "1");
    assert_eq!(header(&r, "x-balancer-overloaded"), "true");
    assert_eq!(first.await.unwrap().status(), 200);
    // /healthz passes the gate.
    p.stop().await;
}

/// C-RATE-1: allowed responses carry the rate headers; the bucket runs dry → 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_1_local_limit() {
    let b = backend(ok_backend("x")).await;
    let cfg =
        format!("{FAST}rate_limit:\n  enabled: true\n  capacity: 3\n  refill_per_second: 0.1\n");
    let p = proxy(&[&b], &cfg).await;
    let addr = p.public_addr();
    let mut statuses = Vec::new();
    for i in 0..4 {
        let r = send(addr, get(addr, "/")).await;
        statuses.push(r.status().as_u16());
        assert_eq!(header(&r, "x-ratelimit-limit"), "3");
        assert_eq!(header(&r, "x-ratelimit-storage"), "local");
        if i < 3 {
            assert_eq!(header(&r, "x-ratelimit-remaining"), (2 - i).to_string());
        } else {
            assert_eq!(header(&r, "retry-after"), "10");
        }
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
    p.stop().await;
}

/// C-OBS-4, C-HEALTH-1: ready with a healthy backend; /readyz 503 and requests 503 when none is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_obs_4_readiness_follows_backends() {
    let b = backend(ok_backend("x")).await;
    let p = proxy(&[&b], FAST).await;
    let addr = p.public_addr();
    assert_eq!(send(addr, get(addr, "/readyz")).await.status(), 200);
    assert_eq!(send(addr, get(addr, "/healthz")).await.status(), 200);
    drop(b); // the backend goes away
    let mut ready = true;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        if send(addr, get(addr, "/readyz")).await.status() == 503 {
            ready = false;
            break;
        }
    }
    assert!(!ready, "readyz turned 503");
    let r = send(addr, get(addr, "/x")).await;
    assert_eq!(r.status(), 503);
    assert_eq!(send(addr, get(addr, "/healthz")).await.status(), 200);
    p.stop().await;
}

/// C-PATH-10: in-flight requests finish, new connections are refused, idle ones closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_path_10_graceful_shutdown() {
    let b = backend(Arc::new(|_req| {
        Box::pin(async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            full(200, "done")
        })
    }))
    .await;
    let p = proxy(&[&b], FAST).await;
    let addr = p.public_addr();
    let idle = TcpStream::connect(addr).await.unwrap();
    let inflight = tokio::spawn(send(addr, get(addr, "/slow")));
    tokio::time::sleep(Duration::from_millis(150)).await;
    let stopping = tokio::spawn(p.stop());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(TcpStream::connect(addr).await.is_err(), "listener closed");
    let r = inflight.await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.body().as_ref(), b"done");
    let mut idle = idle;
    let mut buf = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(2), idle.read_to_end(&mut buf)).await;
    assert!(closed.is_ok(), "idle connection closed");
    tokio::time::timeout(Duration::from_secs(3), stopping)
        .await
        .expect("stopped in time")
        .unwrap();
}

/// h2c with prior knowledge is served too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_prior_knowledge() {
    let b = backend(ok_backend("over h2")).await;
    let p = proxy(&[&b], FAST).await;
    let addr = p.public_addr();
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut tx, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let req = Request::builder()
        .uri(format!("http://{addr}/h2?x=1"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = tx.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-balancer-backend"], "b1");
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body.as_ref(), b"over h2");
    let seen = b.last();
    assert_eq!(seen.target, "/h2?x=1");
    assert_eq!(seen.headers["host"], addr.to_string().as_str());
    p.stop().await;
}
