//! The TLS client configuration of HTTPS probes (C-HEALTH-1): rustls with the ring provider only
//! (two providers in one tree make rustls's default configuration panic; `cargo tree -i
//! aws-lc-rs -p weir-tokio` stays empty), TLS 1.2 and 1.3, and normal validation: the chain must
//! lead to a trusted root and the certificate must name the backend's host. The process's
//! configuration, with `server.upstream.tls_ca_file` and a client certificate, is built by
//! `services::upstream_tls` from these pieces and shared by probes and the data path; there is
//! no "skip verification" switch, because a probe that trusts anyone would mark a hijacked
//! backend healthy.

use std::sync::Arc;

use rustls::{ClientConfig, RootCertStore};

/// The process's trust anchors: the platform's native roots (rustls-native-certs); when none can
/// be loaded (a container without `ca-certificates`), the Mozilla roots compiled in from
/// webpki-roots. Certificates that fail to parse are skipped and logged.
#[must_use]
pub fn native_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    let loaded = rustls_native_certs::load_native_certs();
    for e in &loaded.errors {
        tracing::warn!(error = %e, "health probes: could not load some native root certificates");
    }
    let (added, ignored) = roots.add_parsable_certificates(loaded.certs);
    if ignored > 0 {
        tracing::warn!(
            ignored,
            "health probes: skipped unparsable native root certificates"
        );
    }
    if added == 0 {
        tracing::warn!("health probes: no native root certificates; using the webpki-roots set");
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    roots
}

/// A probe client configuration trusting `roots`: ring provider, TLS 1.2 and 1.3, ALPN
/// `http/1.1` (probes speak HTTP/1.1), no client certificate.
pub fn client_config(roots: RootCertStore) -> Result<Arc<ClientConfig>, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The production configuration: [`client_config`] over [`native_roots`].
pub fn native_client_config() -> Result<Arc<ClientConfig>, rustls::Error> {
    client_config(native_roots())
}

#[cfg(test)]
mod tests;
