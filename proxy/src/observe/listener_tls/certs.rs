//! Certificate pairs: loading one from its PEM files, checking that key and certificate
//! belong together, and the certificate set the resolver picks from by SNI (C-TLS-1).
//!
//! **Selection** follows nginx's `server_name` and Envoy's filter-chain matching: an exact
//! DNS name of a certificate first, then a wildcard (`*.example.com` covers exactly one more
//! label, as RFC 6125 §6.4.3 allows), otherwise the first certificate of the list, which is also
//! the answer when the client sent no SNI. Names are the certificate's DNS subject alternative
//! names, read by rustls-webpki (the parser rustls itself verifies with), compared without
//! regard to case.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use weir_core::config::CertPair;

use super::expiry;

/// One loaded pair.
#[derive(Debug)]
pub struct Loaded {
    /// The chain and signing key rustls serves.
    pub key: Arc<CertifiedKey>,
    /// The leaf's DNS names, lower-case (`*.` prefixes kept).
    pub names: Vec<String>,
    /// The leaf's `notAfter`, in seconds since the Unix epoch (`None`: unreadable).
    pub not_after: Option<i64>,
    /// The certificate file, as configured (metric label, logs).
    pub cert_file: String,
}

/// Why a pair cannot be served.
#[derive(Debug)]
pub enum PairError {
    /// A file could not be read (the system's error is the `source()`).
    Read {
        /// The file.
        file: String,
        /// Why.
        error: std::io::Error,
    },
    /// The certificate file holds no PEM certificate.
    NoCertificate(String),
    /// The certificate file's PEM is broken.
    BadPem(String, String),
    /// The key file holds no usable private key.
    BadKey(String, String),
    /// The leaf certificate does not parse.
    BadLeaf(String, String),
    /// The key is not the leaf certificate's.
    Mismatch {
        /// The certificate file.
        cert_file: String,
        /// The key file.
        key_file: String,
    },
}

impl fmt::Display for PairError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PairError::Read { file, .. } => write!(f, "cannot read {file}"),
            PairError::NoCertificate(file) => write!(f, "{file}: no PEM certificate in it"),
            PairError::BadPem(file, e) => write!(f, "{file}: malformed PEM: {e}"),
            PairError::BadKey(file, e) => write!(f, "{file}: no usable private key: {e}"),
            PairError::BadLeaf(file, e) => write!(f, "{file}: the first certificate: {e}"),
            PairError::Mismatch {
                cert_file,
                key_file,
            } => write!(
                f,
                "{key_file} is not the private key of the certificate in {cert_file}"
            ),
        }
    }
}

impl std::error::Error for PairError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PairError::Read { error, .. } => Some(error),
            _ => None,
        }
    }
}

impl PairError {
    /// A short label for metrics and structured logs.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            PairError::Read { .. } => "unreadable",
            PairError::NoCertificate(_) | PairError::BadPem(..) | PairError::BadLeaf(..) => {
                "bad_certificate"
            }
            PairError::BadKey(..) => "bad_key",
            PairError::Mismatch { .. } => "mismatch",
        }
    }
}

fn read(file: &str) -> Result<Vec<u8>, PairError> {
    std::fs::read(Path::new(file)).map_err(|error| PairError::Read {
        file: file.to_owned(),
        error,
    })
}

/// Load `pair` (blocking file reads): the chain, the key, and the check that they match.
///
/// # Errors
/// See [`PairError`].
pub fn load(pair: &CertPair, provider: &CryptoProvider) -> Result<Loaded, PairError> {
    let cert_pem = read(&pair.cert_file)?;
    let key_pem = read(&pair.key_file)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PairError::BadPem(pair.cert_file.clone(), e.to_string()))?;
    let Some(leaf) = chain.first() else {
        return Err(PairError::NoCertificate(pair.cert_file.clone()));
    };
    let key_der = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| PairError::BadKey(pair.key_file.clone(), e.to_string()))?;
    let signing = provider
        .key_provider
        .load_private_key(key_der)
        .map_err(|e| PairError::BadKey(pair.key_file.clone(), e.to_string()))?;
    let names = leaf_names(leaf).map_err(|e| PairError::BadLeaf(pair.cert_file.clone(), e))?;
    let not_after = expiry::not_after(leaf);
    let key = CertifiedKey::new(chain, signing);
    key.keys_match().map_err(|_| PairError::Mismatch {
        cert_file: pair.cert_file.clone(),
        key_file: pair.key_file.clone(),
    })?;
    Ok(Loaded {
        key: Arc::new(key),
        names,
        not_after,
        cert_file: pair.cert_file.clone(),
    })
}

fn leaf_names(leaf: &CertificateDer<'_>) -> Result<Vec<String>, String> {
    let cert = webpki::EndEntityCert::try_from(leaf).map_err(|e| e.to_string())?;
    Ok(cert
        .valid_dns_names()
        .map(str::to_ascii_lowercase)
        .collect())
}

/// Every certificate in force, in configuration order (the first is the default).
#[derive(Debug)]
pub struct CertSet {
    /// The pairs.
    pub pairs: Vec<Loaded>,
}

impl CertSet {
    /// The certificate for `sni` (module doc); `None` only for an empty set.
    #[must_use]
    pub fn pick(&self, sni: Option<&str>) -> Option<&Arc<CertifiedKey>> {
        let default = self.pairs.first().map(|p| &p.key);
        let Some(name) = sni else {
            return default;
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(p) = self.pairs.iter().find(|p| p.names.contains(&name)) {
            return Some(&p.key);
        }
        if let Some((_, parent)) = name.split_once('.') {
            let wildcard = format!("*.{parent}");
            if let Some(p) = self.pairs.iter().find(|p| p.names.contains(&wildcard)) {
                return Some(&p.key);
            }
        }
        default
    }
}

#[cfg(test)]
mod tests;
