//! TLS to backends (C-GRPC-5): how weir verifies a backend's certificate and which client
//! certificate it shows, from `server.upstream.tls_*`. One rustls client configuration serves
//! the data path and the health probes, so a probe trusts exactly what real traffic trusts.
//!
//! - **Roots.** The system's (rustls-native-certs, webpki-roots as the fallback, see
//!   [`client_tls::native_roots`](super::probe::client_tls::native_roots)), or, with
//!   `tls_ca_file`, *only* the CA certificates in that file: a private CA is trusted on purpose
//!   and public CAs are then not trusted for backends (Envoy's `trusted_ca`, nginx's
//!   `proxy_ssl_trusted_certificate`).
//! - **Name.** Each backend's certificate must name the URL's host (which is also the SNI), or
//!   `tls_server_name` when set (nginx's `proxy_ssl_name`, Envoy's `sni`), for every backend.
//! - **Client certificate.** `tls_cert_file` + `tls_key_file`: shown to a backend that asks
//!   (mutual TLS). The pair is loaded and matched as the listener's pairs are.
//! - **Verified always.** There is no switch to skip verification.
//!
//! The files are read at start (`weir run` refuses to start on a bad one), by `check-config`, and
//! by a reload, which is rejected as a whole when a file does not load. The keys are
//! restart-only: the configuration in force is the one built at start.

use std::sync::Arc;

use rustls::client::ResolvesClientCert;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, SignatureScheme};
use weir_core::config::{CertPair, UpstreamTls};

use crate::observe::listener_tls::certs::{self, PairError};

/// Why the upstream TLS configuration cannot be built. Each message names the key and the file.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamTlsError {
    /// The CA file cannot be read.
    #[error("server.upstream.tls_ca_file: cannot read {file}")]
    CaRead {
        /// The file.
        file: String,
        /// Why.
        #[source]
        error: std::io::Error,
    },
    /// The CA file's PEM is broken.
    #[error("server.upstream.tls_ca_file {file}: malformed PEM")]
    CaPem {
        /// The file.
        file: String,
        /// Why.
        #[source]
        error: rustls::pki_types::pem::Error,
    },
    /// The CA file holds no certificate.
    #[error("server.upstream.tls_ca_file {file}: no PEM certificate in it")]
    CaEmpty {
        /// The file.
        file: String,
    },
    /// A certificate of the CA file is not a usable trust anchor.
    #[error("server.upstream.tls_ca_file {file}: a certificate cannot be trusted as a CA")]
    CaCertificate {
        /// The file.
        file: String,
        /// Why.
        #[source]
        error: rustls::Error,
    },
    /// The client certificate pair does not load or does not match.
    #[error("server.upstream.{key}: {error}")]
    ClientPair {
        /// `tls_cert_file` or `tls_key_file`: which of the two is at fault.
        key: &'static str,
        /// Why (names the file).
        error: PairError,
    },
    /// `tls_server_name` is not a name a certificate can be checked against.
    #[error("server.upstream.tls_server_name: {0:?} is not a DNS name or an IP address")]
    ServerName(String),
    /// The crypto provider cannot offer TLS 1.2 and 1.3.
    #[error("server.upstream: the TLS versions cannot be offered")]
    Versions(#[source] rustls::Error),
}

/// The client side of TLS to backends.
#[derive(Debug, Clone)]
pub struct ClientTls {
    /// ALPN `http/1.1`; the HTTP/2 paths derive an `h2`-only copy.
    pub config: Arc<ClientConfig>,
    /// `tls_server_name`: checked and sent instead of each URL's host.
    pub server_name: Option<ServerName<'static>>,
}

/// Build the configuration of `settings` (blocking: reads the files).
///
/// # Errors
/// The first file that does not load, or a bad server name.
pub fn build(settings: &UpstreamTls) -> Result<ClientTls, UpstreamTlsError> {
    let roots = match &settings.ca_file {
        Some(file) => ca_roots(file)?,
        None => super::probe::client_tls::native_roots(),
    };
    let server_name = settings
        .server_name
        .as_ref()
        .map(|n| {
            ServerName::try_from(n.clone()).map_err(|_| UpstreamTlsError::ServerName(n.clone()))
        })
        .transpose()?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(UpstreamTlsError::Versions)?
        .with_root_certificates(roots);
    let mut config = match &settings.client_cert {
        None => builder.with_no_client_auth(),
        Some((cert_file, key_file)) => {
            let pair = CertPair {
                cert_file: cert_file.clone(),
                key_file: key_file.clone(),
            };
            let loaded =
                certs::load(&pair, &provider).map_err(|error| client_pair(&pair, error))?;
            builder.with_client_cert_resolver(Arc::new(OneClientCert(loaded.key)))
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(ClientTls {
        config: Arc::new(config),
        server_name,
    })
}

/// `check-config` and reload: every file of `settings` loads (all failures, not the first).
///
/// # Errors
/// One error per failure.
pub fn check(settings: &UpstreamTls) -> Result<(), Vec<UpstreamTlsError>> {
    let mut errors = Vec::new();
    if let Some(file) = &settings.ca_file
        && let Err(e) = ca_roots(file)
    {
        errors.push(e);
    }
    if let Some((cert_file, key_file)) = &settings.client_cert {
        let pair = CertPair {
            cert_file: cert_file.clone(),
            key_file: key_file.clone(),
        };
        let provider = rustls::crypto::ring::default_provider();
        if let Err(error) = certs::load(&pair, &provider) {
            errors.push(client_pair(&pair, error));
        }
    }
    if let Some(n) = &settings.server_name
        && ServerName::try_from(n.clone()).is_err()
    {
        errors.push(UpstreamTlsError::ServerName(n.clone()));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Which key a pair error is about: the key file's own failures and a mismatch name
/// `tls_key_file`, the rest `tls_cert_file`.
fn client_pair(pair: &CertPair, error: PairError) -> UpstreamTlsError {
    let key = match &error {
        PairError::Read { file, .. } if *file == pair.key_file => "tls_key_file",
        PairError::BadKey(..) | PairError::Mismatch { .. } => "tls_key_file",
        _ => "tls_cert_file",
    };
    UpstreamTlsError::ClientPair { key, error }
}

fn ca_roots(file: &str) -> Result<RootCertStore, UpstreamTlsError> {
    let pem = std::fs::read(file).map_err(|error| UpstreamTlsError::CaRead {
        file: file.to_owned(),
        error,
    })?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|error| UpstreamTlsError::CaPem {
            file: file.to_owned(),
            error,
        })?;
        roots
            .add(cert)
            .map_err(|error| UpstreamTlsError::CaCertificate {
                file: file.to_owned(),
                error,
            })?;
    }
    if roots.is_empty() {
        return Err(UpstreamTlsError::CaEmpty {
            file: file.to_owned(),
        });
    }
    Ok(roots)
}

/// The one client certificate weir shows to every backend that asks.
#[derive(Debug)]
struct OneClientCert(Arc<CertifiedKey>);

impl ResolvesClientCert for OneClientCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.0))
    }

    fn has_certs(&self) -> bool {
        true
    }
}
