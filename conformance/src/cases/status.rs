//! What weir refuses to pass on (issue 21; docs/proxy.md): a backend status outside 100..=599
//! is a `502` and a failure of that backend (C-PATH-12, C-RETRY-1, C-HEALTH-3), and `TRACE` is
//! answered `405` unless `server.allow_trace` is set.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use super::{expect_status, expect_weir_error};
use crate::backend::Backend;
use crate::client::{Req, send};
use crate::config::Config;
use crate::harness::{Binary, Proxy};
use crate::util::ms;

/// A backend that answers its health path (`GET /health`) with `200` and every other request
/// with `HTTP/1.1 <status> Odd`: a raw socket, since a real HTTP server refuses to write such a
/// status. Counts the ordinary requests, and the most any one connection carried.
struct OddBackend {
    addr: SocketAddr,
    requests: Arc<AtomicUsize>,
    most_per_conn: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl OddBackend {
    async fn start(status: u16) -> OddBackend {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let requests = Arc::new(AtomicUsize::new(0));
        let most_per_conn = Arc::new(AtomicUsize::new(0));
        let (r, m) = (Arc::clone(&requests), Arc::clone(&most_per_conn));
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let (r, m) = (Arc::clone(&r), Arc::clone(&m));
                tokio::spawn(serve_odd(conn, status, r, m));
            }
        });
        OddBackend {
            addr,
            requests,
            most_per_conn,
            task,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for OddBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One connection: bodiless requests, keep-alive, until the peer closes.
async fn serve_odd(
    mut conn: TcpStream,
    status: u16,
    requests: Arc<AtomicUsize>,
    most_per_conn: Arc<AtomicUsize>,
) {
    let mut buf = Vec::new();
    let mut served = 0usize;
    loop {
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            let mut chunk = [0u8; 4096];
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let head: Vec<u8> = buf.drain(..end + 4).collect();
        let answer = if head.starts_with(b"GET /health ") {
            "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".to_owned()
        } else {
            requests.fetch_add(1, Ordering::SeqCst);
            served += 1;
            most_per_conn.fetch_max(served, Ordering::SeqCst);
            format!("HTTP/1.1 {status} Odd\r\ncontent-length: 4\r\n\r\nodd\n")
        };
        if conn.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// C-PATH-12, C-RETRY-1, C-HEALTH-3 (issue 21): a backend answering `999` (then `600`) is a
/// failed attempt: a retryable `GET` goes on to the next backend, the failure counts against the
/// odd backend (its circuit opens, so the next request skips it), a `POST` gets weir's own `502`,
/// and a connection that carried an odd status is never reused.
pub async fn c_path_12_upstream_status_outside_100_599_is_502(bin: Binary) {
    for status in [999u16, 600] {
        let odd = OddBackend::start(status).await;
        let good = Backend::start("good").await;
        // pick_first: the odd backend is tried first while it is available.
        let cfg = Config::new(&[&good])
            .set(
                "backends",
                json!([{"id": "odd", "url": odd.url()}, {"id": "good", "url": good.url()}]),
            )
            .set("balancing.policy", "pick_first")
            .set("health_check.cooldown", "1s");
        let p = Proxy::start(&bin, &cfg).await;

        let r = send(p.public, &Req::get("/x")).await;
        expect_status(&r, 200, &format!("GET after a {status} (retried)"));
        assert_eq!(r.backend().as_deref(), Some("good"), "{}", r.summary());
        assert_eq!(r.attempts(), Some(2), "{}", r.summary());
        assert_eq!(odd.requests(), 1);

        // failure_threshold 1: the odd status opened the odd backend's circuit.
        let r = send(p.public, &Req::get("/y")).await;
        expect_status(&r, 200, "GET while the odd backend's circuit is open");
        assert_eq!(r.backend().as_deref(), Some("good"));
        assert_eq!(r.attempts(), Some(1), "the odd backend was skipped");
        assert_eq!(odd.requests(), 1, "no request reached the open circuit");

        // After the cooldown the half-open trial goes to the odd backend: a POST is not retried,
        // so the client gets weir's own 502 (the backend's status never reaches it).
        let mut last = None;
        for _ in 0..100 {
            let r = send(p.public, &Req::post("/z", "hi")).await;
            if r.backend().as_deref() != Some("good") {
                last = Some(r);
                break;
            }
            tokio::time::sleep(ms(50)).await;
        }
        let r = last.expect("a POST reached the odd backend after its cooldown");
        expect_weir_error(&r, 502, &format!("POST answered {status} by the backend"));
        let message = r.json()["message"].as_str().unwrap_or_default().to_owned();
        assert!(message.contains("invalid response"), "{message}");
        assert_eq!(odd.requests(), 2);
        assert_eq!(
            odd.most_per_conn.load(Ordering::SeqCst),
            1,
            "a connection that carried an odd status was reused"
        );
    }
}

/// Issue 21 (docs/proxy.md "Methods"): `TRACE` is answered `405` with `Allow` and weir's JSON
/// body, and reaches no backend; with `server.allow_trace: true` it is proxied.
pub async fn c_path_12_trace_is_refused_with_405(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(&bin, &Config::new(&[&b])).await;
    let r = send(p.public, &Req::new("TRACE", "/x")).await;
    expect_weir_error(&r, 405, "TRACE");
    let allow = r.header("allow").unwrap_or_default();
    assert!(
        allow.contains("GET") && !allow.contains("TRACE"),
        "Allow: {allow:?}"
    );
    assert_eq!(b.count(), 0, "TRACE reached a backend");
    // Other methods are unaffected.
    expect_status(&send(p.public, &Req::get("/x")).await, 200, "GET");
    drop(p);

    let p = Proxy::start(&bin, &Config::new(&[&b]).set("server.allow_trace", true)).await;
    let r = send(p.public, &Req::new("TRACE", "/t")).await;
    expect_status(&r, 200, "TRACE with allow_trace");
    assert_eq!(r.backend().as_deref(), Some("b-1"));
    let last = b.last().expect("the backend saw the TRACE");
    assert_eq!(
        (last.method.as_str(), last.target.as_str()),
        ("TRACE", "/t")
    );
}
