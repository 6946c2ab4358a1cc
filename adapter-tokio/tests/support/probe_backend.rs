//! Test backends for the probe tests: raw HTTP/1.1 servers on 127.0.0.1 (plain or TLS) whose
//! answer can be switched at run time, a test PKI made with rcgen, and a recorder for flips.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// `status` value: read the request and never answer (the connection stays open).
pub const HANG: u16 = 0;
/// `status` value: read the request and close without answering.
pub const CLOSE: u16 = 1;

/// A test backend; aborted on drop.
pub struct TestServer {
    pub addr: SocketAddr,
    /// The status to answer with, or [`HANG`] / [`CLOSE`].
    pub status: Arc<AtomicU16>,
    /// Request heads received, in order.
    pub requests: Arc<Mutex<Vec<String>>>,
    /// Connections accepted.
    pub accepted: Arc<AtomicUsize>,
    /// Connections the client closed (EOF seen by the server).
    pub closed_by_client: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestServer {
    pub fn url(&self, scheme: &str) -> String {
        format!("{scheme}://{}", self.addr)
    }

    pub fn set_status(&self, status: u16) {
        self.status.store(status, Ordering::SeqCst);
    }

    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }

    /// Waits (real time, up to 5 s) until the client has closed `n` connections.
    pub async fn wait_closed(&self, n: usize) -> bool {
        for _ in 0..500 {
            if self.closed_by_client.load(Ordering::SeqCst) >= n {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        false
    }
}

/// A plain HTTP backend answering `status`.
pub async fn http_server(status: u16) -> TestServer {
    serve(status, None).await
}

/// An HTTPS backend answering `status` with `config`'s certificate.
pub async fn https_server(status: u16, config: Arc<ServerConfig>) -> TestServer {
    serve(status, Some(tokio_rustls::TlsAcceptor::from(config))).await
}

async fn serve(status: u16, tls: Option<tokio_rustls::TlsAcceptor>) -> TestServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let status = Arc::new(AtomicU16::new(status));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let accepted = Arc::new(AtomicUsize::new(0));
    let closed_by_client = Arc::new(AtomicUsize::new(0));
    let shared = (
        Arc::clone(&status),
        Arc::clone(&requests),
        Arc::clone(&accepted),
        Arc::clone(&closed_by_client),
    );
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            shared.2.fetch_add(1, Ordering::SeqCst);
            let (status, requests, closed) = (
                Arc::clone(&shared.0),
                Arc::clone(&shared.1),
                Arc::clone(&shared.3),
            );
            let tls = tls.clone();
            conns.spawn(async move {
                match tls {
                    None => handle(stream, &status, &requests, &closed).await,
                    Some(acceptor) => {
                        if let Ok(s) = acceptor.accept(stream).await {
                            handle(s, &status, &requests, &closed).await;
                        }
                    }
                }
            });
            // Reap finished connections.
            while conns.try_join_next().is_some() {}
        }
    });
    TestServer {
        addr,
        status,
        requests,
        accepted,
        closed_by_client,
        task,
    }
}

async fn handle<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    status: &AtomicU16,
    requests: &Mutex<Vec<String>>,
    closed: &AtomicUsize,
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                closed.fetch_add(1, Ordering::SeqCst);
                return;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    requests
        .lock()
        .unwrap()
        .push(String::from_utf8_lossy(&buf).into_owned());
    match status.load(Ordering::SeqCst) {
        HANG => {
            // Hold the connection until the client goes away.
            loop {
                match s.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            closed.fetch_add(1, Ordering::SeqCst);
        }
        CLOSE => {}
        code => {
            let head = if code == 204 || code == 304 || code < 200 {
                format!("HTTP/1.1 {code} Test\r\nconnection: close\r\n\r\n")
            } else {
                format!("HTTP/1.1 {code} Test\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
            };
            let _ = s.write_all(head.as_bytes()).await;
            let _ = s.flush().await;
            let _ = s.shutdown().await;
        }
    }
}

/// A test certificate authority and what it signs.
pub struct TestPki {
    /// Trust store holding only the test CA.
    pub roots: RootCertStore,
    /// Server config whose certificate (for `localhost` and 127.0.0.1) the CA signed.
    pub server: Arc<ServerConfig>,
    /// Server config whose certificate the CA signed for another name only.
    pub wrong_name: Arc<ServerConfig>,
    /// Server config with a self-signed certificate for `localhost` and 127.0.0.1.
    pub self_signed: Arc<ServerConfig>,
}

pub fn test_pki() -> TestPki {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);

    let leaf = |names: &[&str], signer: Option<&Issuer<'_, KeyPair>>| {
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .unwrap();
        let cert = match signer {
            Some(issuer) => params.signed_by(&key, issuer).unwrap(),
            None => params.self_signed(&key).unwrap(),
        };
        let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut chain: Vec<CertificateDer<'static>> = vec![cert.der().clone()];
        if signer.is_some() {
            chain.push(ca_cert.der().clone());
        }
        server_config(chain, key_der)
    };

    let mut roots = RootCertStore::empty();
    roots.add(ca_cert.der().clone()).unwrap();
    TestPki {
        roots,
        server: leaf(&["localhost", "127.0.0.1"], Some(&issuer)),
        wrong_name: leaf(&["other.example"], Some(&issuer)),
        self_signed: leaf(&["localhost", "127.0.0.1"], None),
    }
}

fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Arc<ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    Arc::new(config)
}

/// Records flips `(backend_index, healthy, now)` from a driver callback.
pub struct Flips {
    rx: mpsc::UnboundedReceiver<(usize, bool, weir_core::Instant)>,
    tx: mpsc::UnboundedSender<(usize, bool, weir_core::Instant)>,
}

impl Flips {
    pub fn new() -> Flips {
        let (tx, rx) = mpsc::unbounded_channel();
        Flips { rx, tx }
    }

    /// A callback that records into this.
    pub fn recorder(&self) -> impl FnMut(usize, bool, weir_core::Instant) + Send + 'static {
        let tx = self.tx.clone();
        move |i, healthy, now| {
            let _ = tx.send((i, healthy, now));
        }
    }

    /// Every flip recorded so far.
    pub fn drain(&mut self) -> Vec<(usize, bool, weir_core::Instant)> {
        let mut out = Vec::new();
        while let Ok(f) = self.rx.try_recv() {
            out.push(f);
        }
        out
    }

    /// The next flip (waits; bound it with a timeout in real-time tests).
    pub async fn next(&mut self) -> (usize, bool, weir_core::Instant) {
        self.rx.recv().await.unwrap()
    }
}
