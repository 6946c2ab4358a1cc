//! The benchmark backend: a static HTTP/1.1 responder with keep-alive.
//!
//! All three proxies face the same two backends, so the backend's own cost is the same in every
//! column; what differs is the proxy. Every path answers `200` with a fixed body and a
//! `Content-Length` (the health path `/health` included), on a multi-threaded tokio runtime.
//! Optionally, paths under `/big` get a larger body (load/h2-abuse: a zero-window client).

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
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
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let (body, big) = (body.clone(), big.clone());
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let body = if !big.is_empty() && req.uri().path().starts_with("/big") {
                    big.clone()
                } else {
                    body.clone()
                };
                async move {
                    let mut resp = Response::new(Full::new(body));
                    resp.headers_mut().insert(
                        hyper::header::CONTENT_TYPE,
                        hyper::header::HeaderValue::from_static("text/plain"),
                    );
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

/// Binds `addr` and serves on it (`big_bytes` under `/big`, when not 0).
pub async fn run(addr: SocketAddr, body_bytes: usize, big_bytes: usize) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    serve_with(listener, body(body_bytes), body(big_bytes)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn body_has_the_asked_size() {
        assert_eq!(body(0).len(), 0);
        assert_eq!(&body(1)[..], b"\n");
        assert_eq!(&body(4)[..], b"xxx\n");
    }

    #[tokio::test]
    async fn big_paths_get_the_big_body() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(serve_with(listener, body(2), body(5)));
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        for (path, want) in [
            ("/big/1", &b"xxxx\n"[..]),
            ("/small", b"x\n"),
            ("/big", b"xxxx\n"),
        ] {
            let req = format!("GET {path} HTTP/1.1\r\nHost: b\r\n\r\n");
            conn.write_all(req.as_bytes()).await.unwrap();
            let resp = crate::idle::read_response(&mut conn).await.unwrap();
            assert_eq!(&resp.body[..], want, "{path}");
        }
        server.abort();
    }

    #[tokio::test]
    async fn answers_two_requests_on_one_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(serve(listener, body(3)));
        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        for path in ["/", "/health"] {
            let req = format!("GET {path} HTTP/1.1\r\nHost: b\r\n\r\n");
            conn.write_all(req.as_bytes()).await.unwrap();
            let resp = crate::idle::read_response(&mut conn).await.unwrap();
            assert_eq!(resp.status, 200);
            assert_eq!(&resp.body[..], b"xx\n");
        }
        conn.shutdown().await.unwrap();
        let mut rest = Vec::new();
        let _ = conn.read_to_end(&mut rest).await;
        server.abort();
    }
}
