use super::*;

#[test]
fn head_with_length() {
    let head = b"HTTP/1.1 200 OK\r\ncontent-length: 12\r\nx: y\r\n\r\n";
    assert_eq!(parse_head(head).unwrap(), (200, Framing::Length(12)));
}

#[test]
fn head_chunked_or_until_close() {
    let chunked = b"HTTP/1.1 503 x\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(parse_head(chunked).unwrap(), (503, Framing::Chunked));
    let close = b"HTTP/1.0 200 OK\r\nServer: s\r\n\r\n";
    assert_eq!(parse_head(close).unwrap(), (200, Framing::UntilClose));
    let empty = b"HTTP/1.1 204 No Content\r\n\r\n";
    assert_eq!(parse_head(empty).unwrap(), (204, Framing::Length(0)));
    assert!(parse_head(b"SSH-2.0\r\n\r\n").is_err());
    assert!(parse_head(b"HTTP/1.1 abc\r\n\r\n").is_err());
}

#[test]
fn dechunks_whole_and_partial_bodies() {
    assert_eq!(
        dechunk(b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n").unwrap(),
        Some(b"abcde".to_vec())
    );
    assert_eq!(dechunk(b"3\r\nab").unwrap(), None);
    assert_eq!(dechunk(b"3\r\nabc\r\n0\r\n").unwrap(), None);
    assert!(dechunk(b"zz\r\n").is_err());
}

#[test]
fn sources_spread_over_loopback() {
    assert_eq!(sources(10_000, 20_000), [IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    let s = sources(50_000, 20_000);
    assert_eq!(s.len(), 3);
    assert_eq!(s[2], IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3)));
    assert_eq!(sources(0, 0).len(), 1);
}

#[tokio::test]
async fn opens_and_holds_connections() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(crate::backend::serve(listener, crate::backend::body(5)));
    // 40 connections over two source addresses (20 per source) to exercise binding.
    let opened = open(
        addr,
        Shape {
            n: 40,
            per_source: 20,
            parallel: 8,
            proto: Proto::Http1,
        },
    )
    .await;
    assert_eq!(opened.failures, 0, "{:?}", opened.sample_errors);
    assert_eq!(opened.streams.len(), 40);
    let peers: std::collections::BTreeSet<IpAddr> = opened
        .streams
        .iter()
        .map(|s| s.local_addr().unwrap().ip())
        .collect();
    assert_eq!(peers.len(), 2);
    assert_eq!(still_open(&opened.streams), 40);
    server.abort();
}

#[tokio::test]
async fn still_open_sees_a_closed_peer() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let client = TcpStream::connect(addr).await.unwrap();
    let (server_side, _) = listener.accept().await.unwrap();
    assert_eq!(still_open(std::slice::from_ref(&client)), 1);
    drop(server_side);
    tokio::time::sleep(Duration::from_millis(50)).await;
    client.readable().await.unwrap();
    assert_eq!(still_open(std::slice::from_ref(&client)), 0);
}

/// HTTP/2 idle clients: each opens h2c, gets one `200` on stream 1 and stays open.
#[tokio::test]
async fn h2c_clients_get_their_answer_and_stay_open() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(crate::backend::serve_grpc(
        listener,
        Bytes::from_static(b"hi"),
        Duration::ZERO,
    ));
    let opened = open(
        addr,
        Shape {
            n: 6,
            per_source: 20,
            parallel: 3,
            proto: Proto::H2c,
        },
    )
    .await;
    assert_eq!(opened.failures, 0, "{:?}", opened.sample_errors);
    assert_eq!(opened.streams.len(), 6);
    assert_eq!(still_open(&opened.streams), 6);
    server.abort();
}
