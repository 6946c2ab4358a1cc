//! The benchmark backend: a static HTTP/1.1 responder with keep-alive.
//!
//! All three proxies face the same two backends, so the backend's own cost is the same in every
//! column; what differs is the proxy. Every path answers `200` with a fixed body and a
//! `Content-Length` (the health path `/health` included), on a multi-threaded tokio runtime.
//! Optionally, paths under `/big` get a larger body (load/h2-abuse: a zero-window client).
//!
//! A named backend (`--name b1`, the load profiles and drills) identifies itself the way the
//! compose stack's demo backends (traefik/whoami) do, so `EXPECTED_BACKENDS` works against both:
//! its body starts with `Hostname: b1` and it also sends `X-Backend: b1`. `--delay-ms` holds each
//! answer back (the overload profiles need requests to pile up in the proxy).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// The body every response carries: `size` bytes of `x` ending in a newline.
pub fn body(size: usize) -> Bytes {
    let mut v = vec![b'x'; size];
    if let Some(last) = v.last_mut() {
        *last = b'\n';
    }
    Bytes::from(v)
}

/// Serves forever on `listener`.
pub async fn serve(listener: TcpListener, body: Bytes) -> std::io::Result<()> {
    serve_with(listener, body, Bytes::new()).await
}

/// Serves forever on `listener`; paths under `/big` get `big` instead (when it is not empty).
pub async fn serve_with(listener: TcpListener, body: Bytes, big: Bytes) -> std::io::Result<()> {
    serve_named(listener, body, big, None, Duration::ZERO).await
}

/// The body of a named backend: `Hostname: NAME` on the first line (as traefik/whoami writes it),
/// padded with `x` to `size` bytes when that is longer.
pub fn named_body(name: &str, size: usize) -> Bytes {
    let mut v = format!("Hostname: {name}\n").into_bytes();
    if v.len() < size {
        let pad = body(size - v.len());
        v.extend_from_slice(&pad);
    }
    Bytes::from(v)
}

/// [`serve_with`], answering with `X-Backend: name` when named and after `delay`.
pub async fn serve_named(
    listener: TcpListener,
    body: Bytes,
    big: Bytes,
    name: Option<HeaderValue>,
    delay: Duration,
) -> std::io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let (body, big, name) = (body.clone(), big.clone(), name.clone());
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let body = if !big.is_empty() && req.uri().path().starts_with("/big") {
                    big.clone()
                } else {
                    body.clone()
                };
                let name = name.clone();
                async move {
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    let mut resp = Response::new(Full::new(body));
                    resp.headers_mut().insert(
                        hyper::header::CONTENT_TYPE,
                        HeaderValue::from_static("text/plain"),
                    );
                    if let Some(name) = name {
                        resp.headers_mut().insert("x-backend", name);
                    }
                    Ok::<_, Infallible>(resp)
                }
            });
            let _ = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// A gRPC answer: one length-prefixed message, then `grpc-status: 0` in trailers.
///
/// The benchmark's gRPC backend answers every call with it; a health check
/// (`/grpc.health.v1.Health/Check`) gets `SERVING`, so weir's `mode: grpc` probes pass too.
#[derive(Debug)]
pub struct GrpcBody {
    message: Option<Bytes>,
    trailers: Option<hyper::HeaderMap>,
}

impl GrpcBody {
    /// An answer carrying `payload` as its one message.
    pub fn new(payload: &[u8]) -> GrpcBody {
        let mut framed = Vec::with_capacity(5 + payload.len());
        framed.push(0);
        let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        framed.extend_from_slice(&len.to_be_bytes());
        framed.extend_from_slice(payload);
        let mut trailers = hyper::HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        GrpcBody {
            message: Some(Bytes::from(framed)),
            trailers: Some(trailers),
        }
    }
}

impl hyper::body::Body for GrpcBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        let frame = if let Some(data) = self.message.take() {
            Some(hyper::body::Frame::data(data))
        } else {
            self.trailers.take().map(hyper::body::Frame::trailers)
        };
        std::task::Poll::Ready(frame.map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        self.message.is_none() && self.trailers.is_none()
    }
}

/// `grpc.health.v1.HealthCheckResponse { status: SERVING }`.
const HEALTH_SERVING: &[u8] = &[0x08, 0x01];

/// The path whose answer's message is the number of calls served so far (decimal ASCII): the
/// benchmark checks with it that every call a client counted as a success reached a backend
/// (a proxy's own trailers-only error is a `200` too).
pub const CALLS_PATH: &str = "/weir-load/calls";

/// Serves gRPC over h2c (HTTP/2 with prior knowledge) forever on `listener`: every call is
/// answered `200`, `application/grpc`, with a `payload` message and `grpc-status: 0`, after the
/// request body has been read whole (as a unary server does).
pub async fn serve_grpc(
    listener: TcpListener,
    payload: Bytes,
    delay: Duration,
) -> std::io::Result<()> {
    use http_body_util::BodyExt as _;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    let calls = Arc::new(AtomicU64::new(0));
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let payload = payload.clone();
        let calls = Arc::clone(&calls);
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let payload = payload.clone();
                let calls = Arc::clone(&calls);
                async move {
                    let path = req.uri().path();
                    let health = path == "/grpc.health.v1.Health/Check";
                    let stats = path == CALLS_PATH;
                    if !health && !stats {
                        calls.fetch_add(1, Ordering::Relaxed);
                    }
                    let count = Bytes::from(calls.load(Ordering::Relaxed).to_string());
                    // A unary call: the whole request message first.
                    let _ = req.into_body().collect().await;
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    let message: &[u8] = if health {
                        HEALTH_SERVING
                    } else if stats {
                        &count
                    } else {
                        &payload
                    };
                    let body = GrpcBody::new(message);
                    let mut resp = Response::new(body);
                    resp.headers_mut().insert(
                        hyper::header::CONTENT_TYPE,
                        HeaderValue::from_static("application/grpc"),
                    );
                    Ok::<_, Infallible>(resp)
                }
            });
            let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                .max_concurrent_streams(1000)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// What `weir-load backend` serves.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// gRPC over h2c instead of HTTP/1.1 (`body_bytes` is then the message size).
    pub grpc: bool,
    /// Response body size in bytes.
    pub body_bytes: usize,
    /// Body size under `/big` (0: the same as every path).
    pub big_bytes: usize,
    /// The backend's name (`X-Backend`, `Hostname:` line), if any.
    pub name: Option<String>,
    /// How long each answer is held back.
    pub delay: Duration,
}

/// Binds `addr` and serves on it as `opts` says.
pub async fn run(addr: SocketAddr, opts: Options) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    if opts.grpc {
        return serve_grpc(listener, body(opts.body_bytes), opts.delay).await;
    }
    let (main, name) = match &opts.name {
        Some(n) => {
            let value = HeaderValue::from_str(n).map_err(|_| {
                std::io::Error::other(format!("backend name {n:?} is not a header value"))
            })?;
            (named_body(n, opts.body_bytes), Some(value))
        }
        None => (body(opts.body_bytes), None),
    };
    serve_named(listener, main, body(opts.big_bytes), name, opts.delay).await
}

#[cfg(test)]
mod tests;
