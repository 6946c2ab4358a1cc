//! The front's metrics (C-OBS-1; docs/tls.md "Metrics"): handshakes by result and failure
//! reason, PROXY headers by result, certificate reloads, and the seconds left before each
//! certificate expires. Counters are plain atomics, as everywhere on the data plane; a scrape
//! reads them into the owned snapshot (`crate::observe::metrics`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;

use super::certs::CertSet;
use crate::base::exposition::{FamilySnapshot, counter, gauge, labels};

/// Why a TLS handshake failed (`reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// Not done within `server.tls.handshake_timeout`.
    Timeout,
    /// The client offers nothing weir accepts (TLS 1.0/1.1 only, no common cipher suite).
    Incompatible,
    /// Not a TLS ClientHello, or a malformed message.
    Malformed,
    /// Client certificate missing or not issued by `client_ca_file`.
    ClientCertificate,
    /// The client sent an alert (it did not accept weir's certificate, usually).
    Alert,
    /// The connection closed or failed during the handshake.
    Io,
    /// Anything else rustls refused.
    Other,
}

impl HandshakeFailure {
    /// Every reason, in exposition order.
    pub const ALL: [HandshakeFailure; 7] = [
        HandshakeFailure::Timeout,
        HandshakeFailure::Incompatible,
        HandshakeFailure::Malformed,
        HandshakeFailure::ClientCertificate,
        HandshakeFailure::Alert,
        HandshakeFailure::Io,
        HandshakeFailure::Other,
    ];

    /// The label value.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            HandshakeFailure::Timeout => "timeout",
            HandshakeFailure::Incompatible => "incompatible",
            HandshakeFailure::Malformed => "malformed",
            HandshakeFailure::ClientCertificate => "client_certificate",
            HandshakeFailure::Alert => "alert",
            HandshakeFailure::Io => "io",
            HandshakeFailure::Other => "other",
        }
    }

    /// The reason of a failed handshake's error (the adapters' TLS crates carry rustls's
    /// error inside the `io::Error`).
    #[must_use]
    pub fn of(e: &std::io::Error) -> HandshakeFailure {
        use rustls::Error as E;
        let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<E>()) else {
            return HandshakeFailure::Io;
        };
        match tls {
            E::PeerIncompatible(_) => HandshakeFailure::Incompatible,
            E::InappropriateMessage { .. }
            | E::InappropriateHandshakeMessage { .. }
            | E::InvalidMessage(_)
            | E::DecryptError
            | E::PeerMisbehaved(_) => HandshakeFailure::Malformed,
            E::NoCertificatesPresented | E::InvalidCertificate(_) => {
                HandshakeFailure::ClientCertificate
            }
            E::AlertReceived(_) => HandshakeFailure::Alert,
            _ => HandshakeFailure::Other,
        }
    }
}

/// Why a PROXY header was refused (`reason` label); the connection is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyRefusal {
    /// The peer is not in `server.proxy_protocol_trusted`.
    Untrusted,
    /// No whole header within `server.read_header_timeout`.
    Timeout,
    /// The connection closed or failed before the header was whole.
    Io,
    /// Not a header of an accepted version.
    Malformed,
}

impl ProxyRefusal {
    const ALL: [ProxyRefusal; 4] = [
        ProxyRefusal::Untrusted,
        ProxyRefusal::Timeout,
        ProxyRefusal::Io,
        ProxyRefusal::Malformed,
    ];

    const fn as_str(self) -> &'static str {
        match self {
            ProxyRefusal::Untrusted => "untrusted",
            ProxyRefusal::Timeout => "timeout",
            ProxyRefusal::Io => "io",
            ProxyRefusal::Malformed => "malformed",
        }
    }
}

/// How a certificate reload ended (`result` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadResult {
    /// Every pair loaded.
    Applied,
    /// Some pair failed and kept its previous certificate.
    Failed,
}

/// The counters and the expiry table.
#[derive(Debug, Default)]
pub struct TlsMetrics {
    handshakes_tls12: AtomicU64,
    handshakes_tls13: AtomicU64,
    failures: [AtomicU64; HandshakeFailure::ALL.len()],
    proxy_accepted: AtomicU64,
    proxy_refused: [AtomicU64; ProxyRefusal::ALL.len()],
    reloads_applied: AtomicU64,
    reloads_failed: AtomicU64,
    pair_failures: AtomicU64,
    /// `(cert_file, notAfter)` of the set in force.
    expiry: ArcSwap<Vec<(String, Option<i64>)>>,
}

impl TlsMetrics {
    /// A handshake that succeeded with `version`.
    pub fn handshake(&self, version: Option<rustls::ProtocolVersion>) {
        let c = if version == Some(rustls::ProtocolVersion::TLSv1_2) {
            &self.handshakes_tls12
        } else {
            &self.handshakes_tls13
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// A handshake that failed.
    pub fn handshake_failed(&self, reason: HandshakeFailure) {
        let i = HandshakeFailure::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(HandshakeFailure::ALL.len() - 1);
        self.failures[i].fetch_add(1, Ordering::Relaxed);
    }

    /// A PROXY header accepted.
    pub fn proxy_accepted(&self) {
        self.proxy_accepted.fetch_add(1, Ordering::Relaxed);
    }

    /// A PROXY header refused.
    pub fn proxy_refused(&self, reason: ProxyRefusal) {
        let i = ProxyRefusal::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0);
        self.proxy_refused[i].fetch_add(1, Ordering::Relaxed);
    }

    /// A reload ended; `failed_pairs` kept their old certificate.
    pub fn reload(&self, result: ReloadResult, failed_pairs: usize) {
        let c = match result {
            ReloadResult::Applied => &self.reloads_applied,
            ReloadResult::Failed => &self.reloads_failed,
        };
        c.fetch_add(1, Ordering::Relaxed);
        self.pair_failures
            .fetch_add(failed_pairs as u64, Ordering::Relaxed);
    }

    /// The set now in force (for the expiry gauge).
    pub fn set_expiry(&self, set: &CertSet) {
        self.expiry.store(std::sync::Arc::new(
            set.pairs
                .iter()
                .map(|p| (p.cert_file.clone(), p.not_after))
                .collect(),
        ));
    }

    /// Certificate reloads that ended with `result` (tests).
    #[must_use]
    pub fn reloads(&self, result: ReloadResult) -> u64 {
        match result {
            ReloadResult::Applied => self.reloads_applied.load(Ordering::Relaxed),
            ReloadResult::Failed => self.reloads_failed.load(Ordering::Relaxed),
        }
    }
}

/// The front's families for a scrape.
pub(crate) fn families(m: &TlsMetrics) -> Vec<FamilySnapshot> {
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let handshakes = vec![
        (labels([("version", "1.2")]), load(&m.handshakes_tls12)),
        (labels([("version", "1.3")]), load(&m.handshakes_tls13)),
    ];
    let failures = HandshakeFailure::ALL
        .iter()
        .zip(&m.failures)
        .map(|(r, c)| (labels([("reason", r.as_str())]), load(c)))
        .collect();
    let mut proxy = vec![(
        labels([("result", "accepted"), ("reason", "")]),
        load(&m.proxy_accepted),
    )];
    proxy.extend(
        ProxyRefusal::ALL
            .iter()
            .zip(&m.proxy_refused)
            .map(|(r, c)| {
                (
                    labels([("result", "refused"), ("reason", r.as_str())]),
                    load(c),
                )
            }),
    );
    let reloads = vec![
        (labels([("result", "applied")]), load(&m.reloads_applied)),
        (labels([("result", "failed")]), load(&m.reloads_failed)),
    ];
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let expiry = m
        .expiry
        .load()
        .iter()
        .filter_map(|(file, t)| {
            t.map(|t| (labels([("certificate", file.as_str())]), (t - now) as f64))
        })
        .collect();
    vec![
        counter(
            "load_balancer_tls_handshakes",
            "TLS handshakes completed on the public listener, by version.",
            handshakes,
        ),
        counter(
            "load_balancer_tls_handshake_failures",
            "TLS handshakes on the public listener that failed, by reason.",
            failures,
        ),
        counter(
            "load_balancer_proxy_protocol_headers",
            "PROXY protocol headers on the public listener, accepted or refused (connection closed) by reason.",
            proxy,
        ),
        counter(
            "load_balancer_tls_certificate_reloads",
            "Certificate reloads (SIGHUP, directory change); failed: some pair kept its previous certificate.",
            reloads,
        ),
        counter(
            "load_balancer_tls_certificate_pair_failures",
            "Certificate pairs that failed to load on a reload (unreadable, malformed, key mismatch).",
            vec![(Vec::new(), load(&m.pair_failures))],
        ),
        gauge(
            "load_balancer_tls_certificate_expiry_seconds",
            "Seconds until the certificate in force expires (negative: expired), by certificate file.",
            expiry,
        ),
    ]
}
