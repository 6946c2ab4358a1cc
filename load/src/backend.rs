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

/// What `weir-load backend` serves.
#[derive(Debug, Clone, Default)]
pub struct Options {
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
