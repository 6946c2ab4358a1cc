//! The public listener's front: the PROXY protocol (C-TLS-3) and TLS termination with
//! certificate reload (C-TLS-1, C-TLS-2). Operating it: docs/tls.md.
//!
//! **One provider.** rustls with the `ring` provider, the one the probes and upstream TLS
//! already use (`probe::tls`): two providers in one tree make rustls's default
//! configuration panic, ring builds with a C compiler alone (aws-lc-rs needs cmake and, for
//! FIPS, Go), and its suites cover what the listener offers (TLS 1.2 and 1.3, ECDSA, RSA and
//! Ed25519 keys).
//!
//! **No lock on the handshake path.** The rustls `ServerConfig` is built once at start (its
//! versions, ALPN `h2` + `http/1.1` and client verification are restart-only); its certificate
//! resolver ([`Resolver`]) holds the certificate set in an [`ArcSwap`]. A handshake does one
//! lock-free load; a reload builds a whole new set off the data plane, validates every pair,
//! and publishes it with one store, so a handshake sees the old set or the new one, never a
//! mix and never none (C-TLS-2; sozu#313 is what a gap costs).
//!
//! **Reload.** On SIGHUP and when a certificate's directory changes (`watch`), every pair is
//! loaded again. A pair that fails (unreadable, a key written a moment after its certificate,
//! a mismatch) keeps that position's old certificate, is logged with its reason and counted;
//! the pairs that did load are published. The watch looks at the directory's entries, not at
//! the file: a Kubernetes Secret volume swaps its `..data` symlink, and a watch on the old file
//! sees nothing (kubernetes#111947, envoy#9359).

use std::net::IpAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};
use weir_core::config::{ListenerTls, ServerSettings, TlsVersion};
use weir_core::forward::TrustedProxies;
use weir_core::proxy_proto::Accept;

pub mod certs;
mod expiry;
pub mod tls_metrics;

use certs::{CertSet, Loaded, PairError};
use tls_metrics::{ReloadResult, TlsMetrics};

use crate::base::error_chain::chain;

/// ALPN protocols offered, in preference order (C-TLS-1).
pub const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// Why the listener's TLS cannot be set up (start) or checked (`check-config`). Each message
/// names the setting; the library's own error is the `source()`.
#[derive(Debug, thiserror::Error)]
pub enum ListenerTlsError {
    /// A certificate pair does not load or its key does not match.
    #[error("server.tls.certificates[{index}]")]
    Pair {
        /// Its position in `server.tls.certificates`.
        index: usize,
        /// Why.
        #[source]
        error: PairError,
    },
    /// The crypto provider cannot serve the configured protocol versions.
    #[error("server.tls.min_version: the TLS versions cannot be offered")]
    Versions(#[source] rustls::Error),
    /// The client CA file cannot be read.
    #[error("server.tls.client_ca_file: cannot read {file}")]
    ClientCaRead {
        /// The file.
        file: String,
        /// Why.
        #[source]
        error: std::io::Error,
    },
    /// The client CA file's PEM is broken.
    #[error("server.tls.client_ca_file {file}: malformed PEM")]
    ClientCaPem {
        /// The file.
        file: String,
        /// Why.
        #[source]
        error: rustls::pki_types::pem::Error,
    },
    /// A certificate of the client CA file is not a usable trust anchor.
    #[error("server.tls.client_ca_file {file}: a certificate cannot be trusted as a CA")]
    ClientCaCertificate {
        /// The file.
        file: String,
        /// Why.
        #[source]
        error: rustls::Error,
    },
    /// The client CA file holds no certificate.
    #[error("server.tls.client_ca_file {file}: no PEM certificate in it")]
    ClientCaEmpty {
        /// The file.
        file: String,
    },
    /// No client certificate verifier can be built from the client CAs.
    #[error("server.tls.client_ca_file {file}: cannot build the client certificate verifier")]
    ClientVerifier {
        /// The file.
        file: String,
        /// Why.
        #[source]
        error: rustls::server::VerifierBuilderError,
    },
}

/// What the public listener does before HTTP: the PROXY protocol and TLS, each when configured.
#[derive(Debug)]
pub struct Front {
    /// The PROXY protocol versions accepted (`None`: off).
    pub proxy_protocol: Option<Accept>,
    /// Who may send a PROXY header.
    proxy_trusted: TrustedProxies,
    /// TLS (`None`: plain HTTP).
    pub tls: Option<TlsListener>,
    /// Handshakes, PROXY headers, reloads, expiry.
    pub metrics: TlsMetrics,
}

impl Front {
    /// Plain TCP, no PROXY protocol (the management plane's in-process requests, tests).
    #[must_use]
    pub fn plain() -> Front {
        Front {
            proxy_protocol: None,
            proxy_trusted: TrustedProxies::none(),
            tls: None,
            metrics: TlsMetrics::default(),
        }
    }

    /// The front of `server` (blocking: reads the certificate files).
    ///
    /// # Errors
    /// A certificate pair or the client CA file does not load: weir does not start without
    /// every configured certificate (C-TLS-1).
    pub fn build(server: &ServerSettings) -> Result<Front, ListenerTlsError> {
        let tls = server.tls.as_ref().map(TlsListener::build).transpose()?;
        let front = Front {
            proxy_protocol: server.proxy_protocol.as_ref().map(|p| p.accept),
            proxy_trusted: TrustedProxies::new(
                server
                    .proxy_protocol
                    .as_ref()
                    .map_or_else(Vec::new, |p| p.trusted.clone()),
            ),
            tls,
            metrics: TlsMetrics::default(),
        };
        if let Some(t) = &front.tls {
            front.metrics.set_expiry(&t.resolver.set.load());
        }
        Ok(front)
    }

    /// Whether `peer` may send a PROXY header.
    #[must_use]
    pub fn proxy_trusted(&self, peer: IpAddr) -> bool {
        self.proxy_trusted.contains(peer)
    }

    /// Load every certificate again and publish what loaded (module doc); blocking. `source`
    /// names the trigger for logs and metrics (`signal`, `watch`).
    pub fn reload(&self, source: &'static str) {
        let Some(tls) = &self.tls else {
            return;
        };
        let old = tls.resolver.set.load_full();
        let (set, failures) = tls.load_over(&old);
        for (cert_file, e) in &failures {
            tracing::error!(
                target: "weir::tls",
                source,
                cert_file = %cert_file,
                reason = e.reason(),
                error = %chain(e),
                "certificate reload failed; the previous certificate stays in force"
            );
        }
        let changed = set
            .pairs
            .iter()
            .zip(&old.pairs)
            .filter(|(a, b)| a.key.cert != b.key.cert)
            .count();
        self.metrics.set_expiry(&set);
        tls.resolver.set.store(Arc::new(set));
        let result = if failures.is_empty() {
            ReloadResult::Applied
        } else {
            ReloadResult::Failed
        };
        self.metrics.reload(result, failures.len());
        tracing::info!(
            target: "weir::tls",
            source,
            changed,
            failed = failures.len(),
            "certificates reloaded"
        );
    }
}

/// TLS on the public listener.
#[derive(Debug)]
pub struct TlsListener {
    /// The handshake configuration (its resolver is [`TlsListener::resolver`]).
    pub config: Arc<ServerConfig>,
    /// The certificates in force.
    pub resolver: Arc<Resolver>,
    /// The pairs as configured.
    pub settings: ListenerTls,
    provider: Arc<CryptoProvider>,
}

impl TlsListener {
    /// Load every pair and build the configuration (blocking).
    ///
    /// # Errors
    /// A pair or the client CA does not load; the message names the setting and the file.
    pub fn build(settings: &ListenerTls) -> Result<TlsListener, ListenerTlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let pairs = load_all(settings, &provider)?;
        let resolver = Arc::new(Resolver {
            set: ArcSwap::from_pointee(CertSet { pairs }),
        });
        let versions: &[&rustls::SupportedProtocolVersion] = match settings.min_version {
            TlsVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
            TlsVersion::Tls13 => &[&rustls::version::TLS13],
        };
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(versions)
            .map_err(ListenerTlsError::Versions)?;
        let builder = match &settings.client_ca_file {
            None => builder.with_no_client_auth(),
            Some(file) => {
                let roots = client_roots(file)?;
                let verifier = WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    Arc::clone(&provider),
                )
                .build()
                .map_err(|error| ListenerTlsError::ClientVerifier {
                    file: file.clone(),
                    error,
                })?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder.with_cert_resolver(Arc::clone(&resolver) as _);
        config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
        Ok(TlsListener {
            config: Arc::new(config),
            resolver,
            settings: settings.clone(),
            provider,
        })
    }

    /// Every pair loaded again; a pair that fails keeps its entry of `old`.
    fn load_over(&self, old: &CertSet) -> (CertSet, Vec<(String, PairError)>) {
        let mut pairs = Vec::with_capacity(self.settings.certificates.len());
        let mut failures = Vec::new();
        for (i, pair) in self.settings.certificates.iter().enumerate() {
            match certs::load(pair, &self.provider) {
                Ok(p) => pairs.push(p),
                Err(e) => {
                    failures.push((pair.cert_file.clone(), e));
                    if let Some(prev) = old.pairs.get(i) {
                        pairs.push(Loaded {
                            key: Arc::clone(&prev.key),
                            names: prev.names.clone(),
                            not_after: prev.not_after,
                            cert_file: prev.cert_file.clone(),
                        });
                    }
                }
            }
        }
        (CertSet { pairs }, failures)
    }
}

/// Every configured pair, or the first failure (start; `check-config` reports them all).
///
/// # Errors
/// The first pair that does not load ([`ListenerTlsError::Pair`]).
pub fn load_all(
    settings: &ListenerTls,
    provider: &CryptoProvider,
) -> Result<Vec<Loaded>, ListenerTlsError> {
    settings
        .certificates
        .iter()
        .enumerate()
        .map(|(index, p)| {
            certs::load(p, provider).map_err(|error| ListenerTlsError::Pair { index, error })
        })
        .collect()
}

/// `check-config`: every pair of `server.tls` loads and matches, and the client CA loads.
///
/// # Errors
/// One error per failure.
pub fn check(server: &ServerSettings) -> Result<(), Vec<ListenerTlsError>> {
    let Some(t) = &server.tls else {
        return Ok(());
    };
    let provider = rustls::crypto::ring::default_provider();
    let mut errors: Vec<ListenerTlsError> = t
        .certificates
        .iter()
        .enumerate()
        .filter_map(|(index, p)| {
            certs::load(p, &provider)
                .err()
                .map(|error| ListenerTlsError::Pair { index, error })
        })
        .collect();
    if let Some(file) = &t.client_ca_file
        && let Err(e) = client_roots(file)
    {
        errors.push(e);
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

fn client_roots(file: &str) -> Result<RootCertStore, ListenerTlsError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let pem = std::fs::read(file).map_err(|error| ListenerTlsError::ClientCaRead {
        file: file.to_owned(),
        error,
    })?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|error| ListenerTlsError::ClientCaPem {
            file: file.to_owned(),
            error,
        })?;
        roots
            .add(cert)
            .map_err(|error| ListenerTlsError::ClientCaCertificate {
                file: file.to_owned(),
                error,
            })?;
    }
    if roots.is_empty() {
        return Err(ListenerTlsError::ClientCaEmpty {
            file: file.to_owned(),
        });
    }
    Ok(roots)
}

/// The certificate resolver: SNI over the set in force, one lock-free load per handshake.
#[derive(Debug)]
pub struct Resolver {
    /// The set in force (swapped whole by [`Front::reload`]).
    pub set: ArcSwap<CertSet>,
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.set.load().pick(hello.server_name()).cloned()
    }
}
