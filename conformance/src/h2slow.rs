//! A slow HTTP/2 (h2c) test backend written on the `h2` crate directly, so that it sees the
//! frames a library would hide: each call waits `delay` before its answer, and records the
//! `grpc-timeout` it received, when it arrived, and whether and when its stream was reset
//! (`RST_STREAM` and its error code, read by h2's `poll_reset`) before the answer went out.
//! A reset stream is not the same as a closed connection: [`SlowBackend::connections`] tells
//! how many HTTP/2 connections it accepted, and a call on a connection that closed reads as
//! [`Ending::ConnectionLost`]. It answers like a gRPC server: `200`, `content-type:
//! application/grpc`, one message and the trailers `grpc-status: 0`; or, once told
//! ([`SlowBackend::set_answer`]), with another status and header fields of the case's own
//! (`503` with `Retry-After`, say). Its delay may be changed as it runs
//! ([`SlowBackend::set_delay`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response};
use tokio::net::TcpListener;
use tokio::task::AbortHandle;

use crate::backend::lock;

/// How a call ended at the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Still waiting (neither answered nor reset yet).
    Pending,
    /// Answered after its delay.
    Answered,
    /// Its stream was reset by the peer with this error code, at this time.
    Reset(h2::Reason, Instant),
    /// Its connection ended before the answer (no `RST_STREAM` for it), at this time.
    ConnectionLost(Instant),
}

/// One call the backend received.
#[derive(Debug, Clone)]
pub struct SlowCall {
    /// `:path`.
    pub path: String,
    /// The call's `grpc-timeout`, as received.
    pub grpc_timeout: Option<String>,
    /// The request's header fields.
    pub headers: HeaderMap,
    /// When its head arrived.
    pub received: Instant,
    /// How it ended.
    pub ending: Ending,
}

#[derive(Debug)]
struct Inner {
    id: String,
    addr: SocketAddr,
    delay: Mutex<Duration>,
    /// The status and extra header fields of each answer.
    answer: Mutex<(u16, Vec<(String, String)>)>,
    calls: Mutex<Vec<SlowCall>>,
    connections: AtomicUsize,
    accept: Mutex<Option<AbortHandle>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(h) = lock(&self.accept).take() {
            h.abort();
        }
    }
}

/// The slow h2c backend (cheap to clone; every clone is the same server).
#[derive(Debug, Clone)]
pub struct SlowBackend {
    inner: Arc<Inner>,
}

impl SlowBackend {
    /// A backend `id` that answers each call `delay` after its head arrived.
    pub async fn start(id: &str, delay: Duration) -> SlowBackend {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind slow h2 backend");
        let inner = Arc::new(Inner {
            id: id.to_string(),
            addr: listener.local_addr().expect("backend address"),
            delay: Mutex::new(delay),
            answer: Mutex::new((200, Vec::new())),
            calls: Mutex::new(Vec::new()),
            connections: AtomicUsize::new(0),
            accept: Mutex::new(None),
        });
        let weak = Arc::downgrade(&inner);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                tokio::spawn(serve(inner, stream));
            }
        });
        *lock(&inner.accept) = Some(task.abort_handle());
        SlowBackend { inner }
    }

    /// Its id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// Its URL (`http://127.0.0.1:<port>`).
    pub fn url(&self) -> String {
        format!("http://{}", self.inner.addr)
    }

    /// Every call received, in order.
    pub fn calls(&self) -> Vec<SlowCall> {
        lock(&self.inner.calls).clone()
    }

    /// HTTP/2 connections accepted (their handshake done: TCP probes not counted).
    pub fn connections(&self) -> usize {
        self.inner.connections.load(Ordering::SeqCst)
    }

    /// Calls received.
    pub fn count(&self) -> usize {
        lock(&self.inner.calls).len()
    }

    /// Answer calls arriving from now on after `delay`.
    pub fn set_delay(&self, delay: Duration) {
        *lock(&self.inner.delay) = delay;
    }

    /// Answer calls from now on with `status` and the header fields `headers` (besides
    /// `content-type`); the body and trailers stay as they were.
    pub fn set_answer(&self, status: u16, headers: &[(&str, &str)]) {
        *lock(&self.inner.answer) = (
            status,
            headers
                .iter()
                .map(|(n, v)| ((*n).to_string(), (*v).to_string()))
                .collect(),
        );
    }
}

async fn serve(inner: Arc<Inner>, stream: tokio::net::TcpStream) {
    // A TCP health probe connects and leaves without a preface: not an HTTP/2 connection.
    let Ok(mut conn) = h2::server::handshake(stream).await else {
        return;
    };
    inner.connections.fetch_add(1, Ordering::SeqCst);
    // Accepting drives the connection: the calls' tasks make progress while this loop runs.
    while let Some(Ok((req, respond))) = conn.accept().await {
        tokio::spawn(call(Arc::clone(&inner), req, respond));
    }
}

async fn call(
    inner: Arc<Inner>,
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    let received = Instant::now();
    let delay = *lock(&inner.delay);
    let (parts, mut body) = req.into_parts();
    let index = {
        let mut calls = lock(&inner.calls);
        calls.push(SlowCall {
            path: parts
                .uri
                .path_and_query()
                .map_or_else(String::new, |p| p.as_str().to_string()),
            grpc_timeout: parts
                .headers
                .get("grpc-timeout")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
            headers: parts.headers.clone(),
            received,
            ending: Ending::Pending,
        });
        calls.len() - 1
    };
    let set = |ending: Ending| lock(&inner.calls)[index].ending = ending;
    // The request body is read (and its window given back) while the answer waits.
    let drain = async {
        while let Some(chunk) = body.data().await {
            match chunk {
                Ok(c) => {
                    let _ = body.flow_control().release_capacity(c.len());
                }
                Err(_) => break,
            }
        }
        std::future::pending::<()>().await;
    };
    let reset = tokio::select! {
        r = std::future::poll_fn(|cx| respond.poll_reset(cx)) => Some(r),
        () = tokio::time::sleep(delay) => None,
        () = drain => None,
    };
    match reset {
        Some(Ok(reason)) => return set(Ending::Reset(reason, Instant::now())),
        Some(Err(_)) => return set(Ending::ConnectionLost(Instant::now())),
        None => {}
    }
    let mut head = Response::new(());
    let (status, extra) = lock(&inner.answer).clone();
    *head.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
    head.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/grpc"));
    for (name, value) in &extra {
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            head.headers_mut().insert(n, v);
        }
    }
    let Ok(mut send) = respond.send_response(head, false) else {
        return set(Ending::ConnectionLost(Instant::now()));
    };
    let _ = send.send_data(Bytes::from(format!("backend {}\n", inner.id)), false);
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    let _ = send.send_trailers(trailers);
    set(Ending::Answered);
}
