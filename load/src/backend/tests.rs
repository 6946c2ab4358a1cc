use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[test]
fn body_has_the_asked_size() {
    assert_eq!(body(0).len(), 0);
    assert_eq!(&body(1)[..], b"\n");
    assert_eq!(&body(4)[..], b"xxx\n");
}

#[test]
fn named_body_starts_with_the_whoami_line() {
    assert_eq!(&named_body("b1", 0)[..], b"Hostname: b1\n");
    let b = named_body("b1", 20);
    assert_eq!(b.len(), 20);
    assert!(b.starts_with(b"Hostname: b1\n"));
}

#[tokio::test]
async fn a_named_backend_says_its_name() {
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let listener = TcpListener::bind(addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let name = Some(HeaderValue::from_static("b7"));
    let server = tokio::spawn(serve_named(
        listener,
        named_body("b7", 0),
        Bytes::new(),
        name,
        Duration::ZERO,
    ));
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(b"GET / HTTP/1.1\r\nHost: b\r\n\r\n")
        .await
        .unwrap();
    let resp = crate::idle::read_response(&mut conn).await.unwrap();
    assert_eq!(resp.status, 200);
    assert_eq!(&resp.body[..], b"Hostname: b7\n");
    server.abort();
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

/// A call to the gRPC backend over h2c: the message, then `grpc-status: 0` in trailers; the
/// health service says SERVING.
#[tokio::test]
async fn the_grpc_backend_answers_calls_with_a_message_and_status_in_trailers() {
    use http_body_util::BodyExt as _;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(serve_grpc(listener, body(10), Duration::ZERO));
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    for (path, message) in [
        ("/bench.Echo/Unary", &body(10)[..]),
        ("/grpc.health.v1.Health/Check", HEALTH_SERVING),
        ("/bench.Echo/Unary", &body(10)[..]),
        // Two calls so far; the health check and this question do not count.
        (CALLS_PATH, b"2"),
    ] {
        let req = Request::post(format!("http://{addr}{path}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Full::new(Bytes::from_static(&[0, 0, 0, 0, 0])))
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "application/grpc");
        let collected = resp.into_body().collect().await.unwrap();
        let trailers = collected.trailers().cloned().expect("trailers");
        assert_eq!(trailers["grpc-status"], "0");
        let bytes = collected.to_bytes();
        assert_eq!(&bytes[..5], &[0, 0, 0, 0, message.len() as u8]);
        assert_eq!(&bytes[5..], message);
    }
    server.abort();
}
