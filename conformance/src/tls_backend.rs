//! TLS test backends for the C-GRPC-5 cases: a private CA made with rcgen (its certificate
//! written as PEM for `server.upstream.tls_ca_file`), HTTP/1.1 backends over rustls with a
//! certificate it signed, optionally requiring a client certificate from another CA (mutual
//! TLS) and offering a chosen ALPN list.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A private certificate authority.
pub struct TestCa {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    der: CertificateDer<'static>,
    pem: String,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

/// A certificate and key signed by a [`TestCa`].
#[derive(Debug, Clone)]
pub struct Leaf {
    /// The certificate (PEM).
    pub cert_pem: String,
    /// The private key (PEM).
    pub key_pem: String,
    cert_der: CertificateDer<'static>,
    key_der: Vec<u8>,
}

impl Default for TestCa {
    fn default() -> Self {
        TestCa::new()
    }
}

impl TestCa {
    /// A new CA.
    pub fn new() -> TestCa {
        let key = rcgen::KeyPair::generate().expect("CA key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).expect("CA certificate");
        TestCa {
            der: cert.der().clone(),
            pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// Writes the CA certificate (PEM) to `dir/name` and returns its path.
    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, &self.pem).expect("write CA");
        path
    }

    /// A certificate for `names` signed by this CA.
    pub fn leaf(&self, names: &[&str]) -> Leaf {
        let key = rcgen::KeyPair::generate().expect("leaf key");
        let params = rcgen::CertificateParams::new(
            names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>(),
        )
        .expect("leaf params");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("leaf certificate");
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().clone(),
            key_der: key.serialize_der(),
        }
    }
}

impl Leaf {
    /// Writes certificate and key to `dir/<name>.crt` and `dir/<name>.key`.
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{name}.crt"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&cert, &self.cert_pem).expect("write cert");
        std::fs::write(&key, &self.key_pem).expect("write key");
        (cert, key)
    }
}

/// An HTTPS (HTTP/1.1) test backend answering `200` `secure <id>` to everything.
#[derive(Debug, Clone)]
pub struct TlsBackend {
    id: String,
    port: u16,
    handshakes: Arc<AtomicUsize>,
}

impl TlsBackend {
    /// A backend `id` serving `leaf`, offering `alpn` (empty: no ALPN), and requiring a client
    /// certificate issued by `client_ca` when given.
    pub async fn start(
        id: &str,
        leaf: &Leaf,
        alpn: &[&[u8]],
        client_ca: Option<&TestCa>,
    ) -> TlsBackend {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .expect("versions");
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                roots.add(ca.der.clone()).expect("client CA");
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .expect("client verifier");
                builder.with_client_cert_verifier(verifier)
            }
        };
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf.key_der.clone()));
        let mut config = builder
            .with_single_cert(vec![leaf.cert_der.clone()], key)
            .expect("server certificate");
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind TLS backend");
        let port = listener.local_addr().expect("address").port();
        let handshakes = Arc::new(AtomicUsize::new(0));
        let done = Arc::clone(&handshakes);
        let body = format!("secure {id}");
        tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let done = Arc::clone(&done);
                let body = body.clone();
                tokio::spawn(async move {
                    let Ok(s) = acceptor.accept(s).await else {
                        return;
                    };
                    done.fetch_add(1, Ordering::SeqCst);
                    let svc = hyper::service::service_fn(move |_req| {
                        let body = body.clone();
                        async move {
                            Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                                Bytes::from(body),
                            )))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(s), svc)
                        .await;
                });
            }
        });
        TlsBackend {
            id: id.to_string(),
            port,
            handshakes,
        }
    }

    /// Its id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Handshakes that completed (for a backend asking for one, with a valid client
    /// certificate).
    pub fn handshakes(&self) -> usize {
        self.handshakes.load(Ordering::SeqCst)
    }
}
