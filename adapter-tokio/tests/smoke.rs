//! Real-socket smoke tests of the tokio data plane, in-process (`weir_tokio::start`). The full
//! black-box suite is `conformance/`, which both binaries run; the cases it covers were removed
//! from here (issue 13). What remains reads the in-process state (slots, readiness) or is still
//! to be moved: header rewriting, retries, smuggling and size limits, upgrades, readiness.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
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
    let seen2 = Arc::clone(&seen);
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (seen, handler) = (Arc::clone(&seen2), Arc::clone(&handler));
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let (seen, handler) = (Arc::clone(&seen), Arc::clone(&handler));
                    async move {
                        if req.uri().path() == "/health" {
                            return Ok::<_, Infallible>(full(200, "ok"));
                        }
                        seen.lock().unwrap().push(Seen {
                            target: req.uri().to_string(),
                            headers: req.headers().clone(),
                        });
                        Ok(handler(req).await)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .with_upgrades()
                    .await;
            });
        }
    });
    Backend { addr, seen, task }
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
