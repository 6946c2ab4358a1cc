//! HTTP/2 test backends (h2c, prior knowledge): hyper 1's HTTP/2 server on `127.0.0.1:0` that
//! answers like a gRPC server: `200`, `content-type: application/grpc`, the body
//! `backend <id>\n`, then the trailers `grpc-status: 0` and `grpc-message: ok`. It counts requests
//! and connections, and the streams in flight on each connection (the most seen on any one), so
//! a case can check that the proxy never opened more streams on a connection than the backend's
//! `SETTINGS_MAX_CONCURRENT_STREAMS` allows. It can hold every request until a number of them
//! are in flight at once (over all its connections), so a case can check that they were.
//! It speaks only HTTP/2: cases probe it with `health_check.mode: tcp`, or with `http`/`grpc`
//! (weir probes an `h2c` backend over HTTP/2). One started
//! with [`H2Backend::unavailable`] answers every call trailers-only with `grpc-status: 14`
//! (`UNAVAILABLE`): `200`, `content-type: application/grpc` and the status in the one HEADERS
//! frame that ends the stream. One started with [`H2Backend::refusing`] resets every stream
//! with `REFUSED_STREAM` as its HEADERS arrive, before reading any of its body; one started with
//! [`H2Backend::going_away`] (a hand-built HTTP/2 server, RFC 9113) answers the first HEADERS
//! frame of each connection with `GOAWAY` whose `last_stream_id` is 0: no stream was processed
//! (C-RETRY-9). Both count the streams they turned away ([`H2Backend::refused`]), as does one
//! started with [`H2Backend::refusing_after`], which reads a stream's body past a number of
//! bytes before it resets the stream with `REFUSED_STREAM`. One started
//! with [`H2Backend::failing`] answers every call with the `grpc-status` it was given, its
//! odd-numbered calls trailers-only and the even-numbered ones in trailers after a body (C-OUT-1).
//!
//! Health probes are answered apart and not counted as requests: `grpc.health.v1.Health/Check`
//! with the serving status set by [`H2Backend::set_health`] (`SERVING` at first), and a `GET
//! /health` with `200` (C-GRPC-4). [`H2Backend::probes`] lists them.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::task::AbortHandle;

use crate::backend::lock;

/// What one request brought.
#[derive(Debug, Clone)]
pub struct H2Request {
    /// `:path` (path and query).
    pub path: String,
    /// The HTTP version hyper saw (HTTP/2 for every request here).
    pub version: http::Version,
    /// The request's header fields.
    pub headers: HeaderMap,
    /// The request body.
    pub body: Bytes,
    /// The request's trailers, if it had any.
    pub trailers: Option<HeaderMap>,
}

#[derive(Debug)]
struct Inner {
    id: String,
    addr: SocketAddr,
    /// Each request waits until this many are in flight at once (or [`HOLD_LIMIT`] passed).
    hold_until: usize,
    /// Answer trailers-only `grpc-status: 14`.
    unavailable: bool,
    /// Answer every call with this `grpc-status` (trailers-only, then after a body, in turn).
    failing: Option<&'static str>,
    /// Reset every stream with `REFUSED_STREAM`.
    refuse: bool,
    /// Reset every stream with `REFUSED_STREAM` once more than this much of its body came.
    refuse_after: Option<usize>,
    /// Streams turned away (refused, or past a `GOAWAY`).
    refused: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    requests: Mutex<Vec<H2Request>>,
    connections: AtomicUsize,
    /// The most streams seen in flight on any one connection.
    max_per_conn: AtomicUsize,
    accept: Mutex<Option<AbortHandle>>,
    /// The health service's state and the probes seen.
    health: HealthService,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(h) = lock(&self.accept).take() {
            h.abort();
        }
    }
}

/// An h2c test backend (cheap to clone; every clone is the same server).
#[derive(Debug, Clone)]
pub struct H2Backend {
    inner: Arc<Inner>,
}

impl H2Backend {
    /// A backend `id` advertising `SETTINGS_MAX_CONCURRENT_STREAMS` = `max_streams` (hyper's
    /// default when `None`) that answers each request once `hold_until` requests are in flight
    /// at once (at once when 0).
    pub async fn start(id: &str, max_streams: Option<u32>, hold_until: usize) -> H2Backend {
        H2Backend::start_with(id, max_streams, hold_until, Kind::Answer).await
    }

    /// A backend `id` that answers every call trailers-only with `grpc-status: 14`.
    pub async fn unavailable(id: &str) -> H2Backend {
        H2Backend::start_with(id, None, 0, Kind::Unavailable).await
    }

    /// A backend `id` that answers every call `grpc-status: <code>` (module doc).
    pub async fn failing(id: &str, code: &'static str) -> H2Backend {
        H2Backend::start_with(id, None, 0, Kind::Failing(code)).await
    }

    /// A backend `id` that reads more than `n` bytes of each stream's body, then resets it
    /// with `REFUSED_STREAM` (module doc).
    pub async fn refusing_after(id: &str, n: usize) -> H2Backend {
        H2Backend::start_with(id, None, 0, Kind::RefuseAfter(n)).await
    }

    /// A backend `id` that resets every stream with `REFUSED_STREAM` (module doc).
    pub async fn refusing(id: &str) -> H2Backend {
        H2Backend::start_with(id, None, 0, Kind::Refuse).await
    }

    /// A backend `id` that answers each connection's first stream with `GOAWAY` and a
    /// `last_stream_id` of 0 (module doc).
    pub async fn going_away(id: &str) -> H2Backend {
        H2Backend::start_with(id, None, 0, Kind::GoAway).await
    }

    async fn start_with(
        id: &str,
        max_streams: Option<u32>,
        hold_until: usize,
        kind: Kind,
    ) -> H2Backend {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind h2 test backend");
        let inner = Arc::new(Inner {
            id: id.to_string(),
            addr: listener.local_addr().expect("backend address"),
            hold_until,
            unavailable: kind == Kind::Unavailable,
            failing: match kind {
                Kind::Failing(code) => Some(code),
                _ => None,
            },
            refuse: kind == Kind::Refuse,
            refuse_after: match kind {
                Kind::RefuseAfter(n) => Some(n),
                _ => None,
            },
            refused: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            requests: Mutex::new(Vec::new()),
            connections: AtomicUsize::new(0),
            max_per_conn: AtomicUsize::new(0),
            accept: Mutex::new(None),
            health: HealthService::default(),
        });
        let weak = Arc::downgrade(&inner);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                if kind == Kind::GoAway {
                    tokio::spawn(go_away(inner, stream));
                } else {
                    tokio::spawn(serve(inner, stream, max_streams));
                }
            }
        });
        *lock(&inner.accept) = Some(task.abort_handle());
        H2Backend { inner }
    }

    /// Its id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// Its URL (`http://127.0.0.1:<port>`).
    pub fn url(&self) -> String {
        format!("http://{}", self.inner.addr)
    }

    /// Requests received.
    pub fn count(&self) -> usize {
        lock(&self.inner.requests).len()
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<H2Request> {
        lock(&self.inner.requests).clone()
    }

    /// Connections accepted.
    pub fn connections(&self) -> usize {
        self.inner.connections.load(Ordering::SeqCst)
    }

    /// The most requests that were in flight at once, over all connections.
    pub fn max_in_flight(&self) -> usize {
        self.inner.max_in_flight.load(Ordering::SeqCst)
    }

    /// Streams turned away with `REFUSED_STREAM` or a `GOAWAY` (not in [`H2Backend::count`]).
    pub fn refused(&self) -> usize {
        self.inner.refused.load(Ordering::SeqCst)
    }

    /// The most streams that were in flight at once on any one connection.
    pub fn max_streams_per_connection(&self) -> usize {
        self.inner.max_per_conn.load(Ordering::SeqCst)
    }
}

/// How a backend answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Answer,
    Unavailable,
    Failing(&'static str),
    Refuse,
    RefuseAfter(usize),
    GoAway,
}

/// How long a held request waits at most for the others.
pub const HOLD_LIMIT: Duration = Duration::from_secs(10);

/// Counts a request out of the backend's total in flight.
struct AllInFlight(Arc<Inner>);

impl Drop for AllInFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Decrements a connection's in-flight count when a request's answer is done (or dropped).
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn serve(inner: Arc<Inner>, stream: tokio::net::TcpStream, max_streams: Option<u32>) {
    inner.connections.fetch_add(1, Ordering::SeqCst);
    let in_flight = Arc::new(AtomicUsize::new(0));
    let svc = service_fn(move |req: Request<Incoming>| {
        let inner = Arc::clone(&inner);
        let in_flight = Arc::clone(&in_flight);
        async move {
            if inner.refuse {
                // hyper resets the stream with the h2 reason it finds in the service's error.
                inner.refused.fetch_add(1, Ordering::SeqCst);
                return Err(h2::Error::from(h2::Reason::REFUSED_STREAM));
            }
            if let Some(n) = inner.refuse_after {
                let mut body = req.into_body();
                let mut read = 0;
                while read <= n {
                    match body.frame().await {
                        Some(Ok(f)) => read += f.data_ref().map_or(0, Bytes::len),
                        _ => break,
                    }
                }
                inner.refused.fetch_add(1, Ordering::SeqCst);
                return Err(h2::Error::from(h2::Reason::REFUSED_STREAM));
            }
            let req = match answer_probe(&inner, req).await {
                Ok(resp) => return Ok(resp),
                Err(req) => req,
            };
            let n = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            inner.max_per_conn.fetch_max(n, Ordering::SeqCst);
            let guard = InFlight(in_flight);
            let total = inner.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            inner.max_in_flight.fetch_max(total, Ordering::SeqCst);
            let all = AllInFlight(Arc::clone(&inner));
            let (parts, body) = req.into_parts();
            let (body, trailers) = match body.collect().await {
                Ok(c) => {
                    let trailers = c.trailers().cloned();
                    (c.to_bytes(), trailers)
                }
                Err(_) => (Bytes::new(), None),
            };
            let nth = {
                let mut requests = lock(&inner.requests);
                requests.push(H2Request {
                    path: parts
                        .uri
                        .path_and_query()
                        .map_or_else(String::new, |p| p.as_str().to_string()),
                    version: parts.version,
                    headers: parts.headers,
                    body,
                    trailers,
                });
                requests.len()
            };
            let start = tokio::time::Instant::now();
            while inner.in_flight.load(Ordering::SeqCst) < inner.hold_until
                && inner.max_in_flight.load(Ordering::SeqCst) < inner.hold_until
                && start.elapsed() < HOLD_LIMIT
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            drop(all);
            if inner.unavailable {
                return Ok(unavailable_answer(&inner.id, "14", guard));
            }
            if let Some(code) = inner.failing
                && nth % 2 == 1
            {
                return Ok(unavailable_answer(&inner.id, code, guard));
            }
            let mut trailers = HeaderMap::new();
            trailers.insert(
                "grpc-status",
                HeaderValue::from_static(inner.failing.unwrap_or("0")),
            );
            trailers.insert("grpc-message", HeaderValue::from_static("ok"));
            let mut resp = Response::new(GrpcBody {
                data: Some(Bytes::from(format!("backend {}\n", inner.id))),
                trailers: Some(trailers),
                _guard: guard,
            });
            let h = resp.headers_mut();
            h.insert("content-type", HeaderValue::from_static("application/grpc"));
            if let Ok(v) = HeaderValue::from_str(&inner.id) {
                h.insert("x-test-backend", v);
            }
            Ok::<_, h2::Error>(resp)
        }
    });
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder.max_concurrent_streams(max_streams);
    let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
}

/// A hand-built HTTP/2 server (RFC 9113 §3.4, §6.8): its SETTINGS, an ACK of the client's, and
/// to the first HEADERS frame a `GOAWAY` (`NO_ERROR`) whose `last_stream_id` is 0; then it reads
/// until the client closes.
async fn go_away(inner: Arc<Inner>, stream: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use crate::h2raw::{frame, kind, settings};
    inner.connections.fetch_add(1, Ordering::SeqCst);
    let (mut rd, mut wr) = stream.into_split();
    if wr.write_all(&settings(&[])).await.is_err() {
        return;
    }
    let mut preface = [0u8; 24];
    if rd.read_exact(&mut preface).await.is_err() {
        return;
    }
    let mut sent = false;
    loop {
        let mut head = [0u8; 9];
        if rd.read_exact(&mut head).await.is_err() {
            return;
        }
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0u8; len];
        if rd.read_exact(&mut payload).await.is_err() {
            return;
        }
        let reply = match head[3] {
            kind::SETTINGS if head[4] & 0x1 == 0 => frame(kind::SETTINGS, 0x1, 0, &[]),
            kind::HEADERS if !sent => {
                sent = true;
                inner.refused.fetch_add(1, Ordering::SeqCst);
                // last_stream_id 0, error code NO_ERROR.
                frame(kind::GOAWAY, 0, 0, &[0u8; 8])
            }
            _ => continue,
        };
        if wr.write_all(&reply).await.is_err() {
            return;
        }
    }
}

/// A trailers-only answer with `grpc-status: <code>` (`UNAVAILABLE` for the unavailable
/// backend): the status in the head, no body (the head ends the stream).
fn unavailable_answer(id: &str, code: &'static str, guard: InFlight) -> Response<GrpcBody> {
    let mut resp = Response::new(GrpcBody {
        data: None,
        trailers: None,
        _guard: guard,
    });
    let h = resp.headers_mut();
    h.insert("content-type", HeaderValue::from_static("application/grpc"));
    h.insert("grpc-status", HeaderValue::from_static(code));
    h.insert("grpc-message", HeaderValue::from_static("going%20away"));
    if let Ok(v) = HeaderValue::from_str(id) {
        h.insert("x-test-backend", v);
    }
    resp
}

/// A body of one data frame and then trailers; holds the stream's in-flight count until done.
struct GrpcBody {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
    _guard: InFlight,
}

impl Body for GrpcBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if let Some(d) = this.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(d))));
        }
        Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none() && self.trailers.is_none()
    }
}

/// What [`H2Backend::set_health`] makes `grpc.health.v1.Health/Check` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// `HealthCheckResponse.status` = this number (1 `SERVING`, 2 `NOT_SERVING`, 0 `UNKNOWN`,
    /// 3 `SERVICE_UNKNOWN`), `grpc-status: 0`.
    Status(u8),
    /// Trailers-only `grpc-status: 12` (`UNIMPLEMENTED`): a server without the service.
    Unimplemented,
}

/// The health service of a test backend.
#[derive(Debug)]
struct HealthService {
    answer: Mutex<Health>,
    probes: Mutex<Vec<Probe>>,
}

impl Default for HealthService {
    fn default() -> Self {
        HealthService {
            answer: Mutex::new(Health::Status(1)),
            probes: Mutex::new(Vec::new()),
        }
    }
}

/// A health probe the backend answered.
#[derive(Debug, Clone)]
pub struct Probe {
    /// `:path`.
    pub path: String,
    /// The HTTP version it came in.
    pub version: http::Version,
    /// The request's `content-type`, if any.
    pub content_type: Option<String>,
    /// The request body (for a gRPC check: the framed `HealthCheckRequest`).
    pub body: Bytes,
}

impl H2Backend {
    /// What the health service answers from now on.
    pub fn set_health(&self, health: Health) {
        *lock(&self.inner.health.answer) = health;
    }

    /// Every health probe answered, in order.
    pub fn probes(&self) -> Vec<Probe> {
        lock(&self.inner.health.probes).clone()
    }
}

/// The path of the gRPC health check.
const HEALTH_CHECK: &str = "/grpc.health.v1.Health/Check";

/// `req` answered when it is a health probe (`Health/Check` or `GET /health`), else given back.
async fn answer_probe(
    inner: &Inner,
    req: Request<Incoming>,
) -> Result<Response<GrpcBody>, Request<Incoming>> {
    let path = req.uri().path().to_string();
    let grpc = path == HEALTH_CHECK;
    let http_probe = path == "/health" && req.method() == http::Method::GET;
    if !(grpc || http_probe) {
        return Err(req);
    }
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    lock(&inner.health.probes).push(Probe {
        path,
        version: parts.version,
        content_type: parts
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        body,
    });
    // Not a request the cases count: its own in-flight counter.
    let guard = InFlight(Arc::new(AtomicUsize::new(1)));
    if !grpc {
        return Ok(Response::new(GrpcBody {
            data: Some(Bytes::from_static(b"ok\n")),
            trailers: None,
            _guard: guard,
        }));
    }
    let answer = *lock(&inner.health.answer);
    let mut resp = match answer {
        Health::Status(n) => {
            // A HealthCheckResponse: field 1 (varint) = n; proto3 leaves 0 out.
            let message: Vec<u8> = if n == 0 { Vec::new() } else { vec![0x08, n] };
            let mut framed = vec![0, 0, 0, 0, message.len() as u8];
            framed.extend_from_slice(&message);
            let mut trailers = HeaderMap::new();
            trailers.insert("grpc-status", HeaderValue::from_static("0"));
            Response::new(GrpcBody {
                data: Some(Bytes::from(framed)),
                trailers: Some(trailers),
                _guard: guard,
            })
        }
        Health::Unimplemented => {
            let mut resp = Response::new(GrpcBody {
                data: None,
                trailers: None,
                _guard: guard,
            });
            resp.headers_mut()
                .insert("grpc-status", HeaderValue::from_static("12"));
            resp
        }
    };
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/grpc"));
    Ok(resp)
}
