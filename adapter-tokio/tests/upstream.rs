//! Backend connections and their pool, on tokio (moved out of weir-proxy, which has no runtime
//! of its own).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::sync::atomic::AtomicUsize;
use weir_tokio::services::upstream::{
    Conn, SendError, Target, UpBody, Upstream, UpstreamConfig, drive_until,
};

fn config() -> UpstreamConfig {
    UpstreamConfig {
        dial_timeout: Duration::from_secs(1),
        tls_handshake_timeout: Duration::from_secs(1),
        idle_conn_timeout: Some(Duration::from_secs(30)),
        max_idle_per_host: 4,
        max_idle_total: 16,
        expect_continue_timeout: Duration::from_secs(1),
        tls_server_name: None,
        max_conns_per_host: None,
    }
}

fn get(host: &str) -> Request<UpBody> {
    let mut req = Request::new(UpBody::Empty);
    *req.uri_mut() = Uri::from_static("/x");
    req.headers_mut()
        .insert(http::header::HOST, HeaderValue::from_str(host).unwrap());
    req
}

/// The whole body, driving the connection meanwhile (it has no task of its own).
async fn read_body(resp: Response<Incoming>, conn: &mut Conn) -> Bytes {
    drive_until(conn, resp.into_body().collect())
        .await
        .unwrap()
        .to_bytes()
}

/// A keep-alive backend answering `body` of `len` bytes; counts accepted connections.
async fn keepalive_backend(len: usize) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else {
                continue;
            };
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |_req| async move {
                    Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from(
                        vec![b'x'; len],
                    ))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    (addr, accepted)
}

/// Connections are reused after a body read to the end; a response dropped unread takes its
/// connection with it (C-RETRY-6).
#[tokio::test]
async fn c_retry_6_pool_reuses_only_finished_connections() {
    let (addr, accepted) = keepalive_backend(100_000).await;
    let up = Upstream::new(weir_tokio::rt(), config(), None);
    let target = Arc::new(Target::new("b", &format!("http://{addr}")).unwrap());
    for _ in 0..3 {
        let (resp, mut conn) = up
            .send(&target, None, get("b"), std::time::Instant::now(), client())
            .await
            .unwrap();
        let body = read_body(resp, &mut conn).await;
        assert_eq!(body.len(), 100_000);
        up.release(conn, std::time::Instant::now());
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "one connection, reused");
    assert_eq!(up.idle_count(), 1);
    // Dropped unread: not returned, the next request needs a new connection.
    let (resp, conn) = up
        .send(&target, None, get("b"), std::time::Instant::now(), client())
        .await
        .unwrap();
    drop(resp);
    drop(conn);
    let (resp, mut conn) = up
        .send(&target, None, get("b"), std::time::Instant::now(), client())
        .await
        .unwrap();
    let _ = read_body(resp, &mut conn).await;
    up.release(conn, std::time::Instant::now());
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    up.clear();
    assert_eq!(up.idle_count(), 0);
}

/// `max_conns_per_host: 1` on an HTTP/1 backend: while the one connection is lent, a second
/// request waits; released, the connection is closed for the waiter (not kept idle), which
/// opens its own, never a second at once. With nobody releasing, the wait ends after
/// `dial_timeout` as saturated (nothing sent, C-RETRY-9).
#[tokio::test]
async fn max_conns_per_host_bounds_http1_connections() {
    let (addr, accepted) = keepalive_backend(10).await;
    let cfg = UpstreamConfig {
        max_conns_per_host: Some(1),
        dial_timeout: Duration::from_millis(300),
        ..config()
    };
    let up = Arc::new(Upstream::new(weir_tokio::rt(), cfg, None));
    let target = Arc::new(Target::new("b", &format!("http://{addr}")).unwrap());
    let (resp, mut first) = up
        .send(&target, None, get("b"), std::time::Instant::now(), client())
        .await
        .unwrap();
    let _ = read_body(resp, &mut first).await;
    // Nobody releases within dial_timeout: saturated.
    let started = std::time::Instant::now();
    let saturated = up
        .send(&target, None, get("b"), std::time::Instant::now(), client())
        .await;
    assert!(
        matches!(saturated, Err(SendError::Saturated)),
        "{saturated:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    // A waiter gets the place once the first connection is released (and closed for it).
    let (up2, t2) = (Arc::clone(&up), Arc::clone(&target));
    let waiter = tokio::spawn(async move {
        let (resp, mut conn) = up2
            .send(&t2, None, get("b"), std::time::Instant::now(), client())
            .await
            .unwrap();
        let body = read_body(resp, &mut conn).await;
        up2.release(conn, std::time::Instant::now());
        body.len()
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "the waiter waits");
    up.release(first, std::time::Instant::now());
    assert_eq!(waiter.await.unwrap(), 10);
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    assert_eq!(up.idle_count(), 1, "kept idle once nobody waits");
}

/// A refused connection is a connect error.
#[tokio::test]
async fn refused_is_a_connect_error() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    let up = Upstream::new(weir_tokio::rt(), config(), None);
    let target = Arc::new(Target::new("b", &format!("http://{addr}")).unwrap());
    assert!(matches!(
        up.send(&target, None, get("b"), std::time::Instant::now(), client())
            .await,
        Err(SendError::Connect(_))
    ));
}

/// A TLS backend (HTTP/1.1 over rustls) with a certificate for `localhost`, signed by a
/// CA when `ca` is given, self-signed otherwise. Returns its port.
async fn tls_backend(ca: Option<&rcgen::Issuer<'_, rcgen::KeyPair>>) -> u16 {
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    let cert = match ca {
        Some(issuer) => params.signed_by(&key, issuer).unwrap(),
        None => params.self_signed(&key).unwrap(),
    };
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(s) = acceptor.accept(s).await else {
                    return;
                };
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                        Bytes::from_static(b"secure"),
                    )))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    port
}

/// A test CA: its issuer, for backend certificates, and a client configuration trusting only it.
fn test_ca() -> (
    rcgen::Issuer<'static, rcgen::KeyPair>,
    Arc<rustls::ClientConfig>,
) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca_cert.der().clone()).unwrap();
    let tls = weir_tokio::services::probe::client_tls::client_config(roots).unwrap();
    (issuer, tls)
}

/// HTTPS backends: a chain to a trusted root for the backend's name works; a self-signed
/// certificate is a connect error (normal validation).
#[tokio::test]
async fn https_backends_validate_certificates() {
    let (issuer, tls) = test_ca();
    let good = tls_backend(Some(&issuer)).await;
    let bad = tls_backend(None).await;
    let up = Upstream::new(weir_tokio::rt(), config(), Some(tls));
    let t = Arc::new(Target::new("good", &format!("https://localhost:{good}")).unwrap());
    let (resp, mut conn) = up
        .send(
            &t,
            None,
            get("localhost"),
            std::time::Instant::now(),
            client(),
        )
        .await
        .expect("tls ok");
    assert_eq!(resp.status(), 200);
    let body = read_body(resp, &mut conn).await;
    assert_eq!(body.as_ref(), b"secure");
    let t = Arc::new(Target::new("bad", &format!("https://localhost:{bad}")).unwrap());
    assert!(matches!(
        up.send(
            &t,
            None,
            get("localhost"),
            std::time::Instant::now(),
            client()
        )
        .await,
        Err(SendError::Connect(_))
    ));
}

/// The client a request is sent for (no backend here asks for a PROXY header).
fn client() -> weir_proxy::services::upstream::DownstreamEnds {
    weir_proxy::services::upstream::DownstreamEnds {
        peer: std::net::SocketAddr::from(([127, 0, 0, 1], 1)),
        local: std::net::SocketAddr::from(([127, 0, 0, 1], 8080)),
    }
}

/// An HTTP/2-only TLS backend (ALPN `h2`) with a certificate for `localhost` signed by `ca`,
/// answering `HTTP/2 <n>` where n counts the connections it accepted. Returns its port.
async fn tls_h2_backend(ca: &rcgen::Issuer<'_, rcgen::KeyPair>) -> u16 {
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    let cert = params.signed_by(&key, ca).unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            let n = accepted.fetch_add(1, Ordering::SeqCst) + 1;
            tokio::spawn(async move {
                let Ok(s) = acceptor.accept(s).await else {
                    return;
                };
                let alpn = s.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
                assert_eq!(alpn.as_deref(), Some(&b"h2"[..]), "ALPN");
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| async move {
                    let body = format!("{:?} {n}", req.version());
                    Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from(
                        body,
                    ))))
                });
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(TokioIo::new(s), svc)
                        .await;
            });
        }
    });
    port
}

/// C-GRPC-1: a `protocol: h2` backend is spoken to as HTTP/2 over TLS with ALPN `h2`, its
/// certificate validated; sequential requests share one connection.
#[tokio::test]
async fn c_grpc_1_h2_backend_over_tls_with_alpn() {
    let (issuer, tls) = test_ca();
    let port = tls_h2_backend(&issuer).await;
    let up = Upstream::new(weir_tokio::rt(), config(), Some(tls));
    let t = Target::new("h2", &format!("https://localhost:{port}"))
        .unwrap()
        .with_protocol(weir_core::backend::Protocol::H2);
    let t = Arc::new(t);
    for _ in 0..3 {
        let (resp, lent) = up
            .send_lent(
                &t,
                None,
                get("localhost"),
                std::time::Instant::now(),
                client(),
            )
            .await
            .expect("h2 over tls");
        assert_eq!(resp.version(), http::Version::HTTP_2);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body.as_ref(), b"HTTP/2.0 1", "one shared connection");
        up.release_lent(lent, std::time::Instant::now());
    }
    assert_eq!(up.h2_count(), 1);
}

/// A plain HTTP/2 (h2c) backend answering `ok`; counts accepted connections.
async fn h2c_backend() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else {
                continue;
            };
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                        Bytes::from_static(b"ok"),
                    )))
                });
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(TokioIo::new(s), svc)
                        .await;
            });
        }
    });
    (addr, accepted)
}

/// C-GRPC-1: an HTTP/2 connection with no stream in use for `idle_conn_timeout` is closed by
/// the sweep; one in use is kept; the next request opens a new one.
#[tokio::test]
async fn c_grpc_1_idle_h2_connection_closed_by_the_sweep() {
    let (addr, accepted) = h2c_backend().await;
    let cfg = UpstreamConfig {
        idle_conn_timeout: Some(Duration::from_millis(50)),
        ..config()
    };
    let up = Upstream::new(weir_tokio::rt(), cfg, None);
    let t = Target::new("h2c", &format!("http://{addr}"))
        .unwrap()
        .with_protocol(weir_core::backend::Protocol::H2c);
    let t = Arc::new(t);
    let send = || up.send_lent(&t, None, get("x"), std::time::Instant::now(), client());
    let (resp, held) = send().await.expect("h2c");
    assert_eq!(resp.version(), http::Version::HTTP_2);
    // In use: sweeps across more than the idle timeout keep it.
    for _ in 0..3 {
        up.sweep();
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    assert_eq!(up.h2_count(), 1, "a connection in use is kept");
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body.as_ref(), b"ok");
    up.release_lent(held, std::time::Instant::now());
    // Idle: the first sweep notes it, a later one past the timeout closes it.
    for _ in 0..3 {
        up.sweep();
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    up.sweep();
    assert_eq!(up.h2_count(), 0, "an idle connection is closed");
    let (resp, _held) = send().await.expect("h2c again");
    assert_eq!(resp.status(), 200);
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
    assert_eq!(up.h2_count(), 1);
}
