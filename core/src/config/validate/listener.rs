//! `server.tls` and `server.proxy_protocol*` (C-TLS-1, C-TLS-3): what the public listener does
//! before HTTP. Files are not read here (core does no IO): the proxy loads each certificate
//! pair, and `check-config` reports a pair that does not load or match (docs/tls.md).

use core::time::Duration;

use ipnet::IpNet;

use super::{Check, parse_proxy};
// `handshake_timeout`'s range is checked with every other duration's (`bounds`).
use crate::config::schema::ServerConfig;
use crate::proxy_proto::Accept;

/// The lowest TLS version the listener accepts (`server.tls.min_version`). TLS 1.0 and 1.1 are
/// never offered (RFC 8996).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TlsVersion {
    /// TLS 1.2 and 1.3.
    Tls12,
    /// TLS 1.3 only.
    Tls13,
}

/// One certificate pair (paths as written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertPair {
    /// The chain, leaf first (PEM).
    pub cert_file: String,
    /// The leaf's private key (PEM).
    pub key_file: String,
}

/// TLS on the public listener (`server.tls`, C-TLS-1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerTls {
    /// The pairs in order; the first is the default (no SNI, or an unknown name).
    pub certificates: Vec<CertPair>,
    /// The lowest version accepted.
    pub min_version: TlsVersion,
    /// A handshake not done within this closes the connection.
    pub handshake_timeout: Duration,
    /// CA certificates that must have issued the client's certificate; `None`: none asked for.
    pub client_ca_file: Option<String>,
}

/// The PROXY protocol on the public listener (C-TLS-3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyProtocol {
    /// The versions accepted.
    pub accept: Accept,
    /// Peers allowed to send a header; from any other the connection is closed.
    pub trusted: Vec<IpNet>,
}

/// `server.tls` → `None` when it has no certificate (plain HTTP).
pub(super) fn check_tls(s: &ServerConfig, c: &mut Check<'_>) -> Option<ListenerTls> {
    let t = &s.tls;
    let min_version = match t.min_version.as_str() {
        "1.2" => TlsVersion::Tls12,
        "1.3" => TlsVersion::Tls13,
        other => {
            let hint = if matches!(other, "1.0" | "1.1") {
                " (TLS 1.0 and 1.1 are deprecated by RFC 8996 and not supported)"
            } else {
                ""
            };
            c.err(
                "server.tls.min_version",
                format!("must be \"1.2\" or \"1.3\", got {other:?}{hint}"),
            );
            TlsVersion::Tls12
        }
    };
    if t.certificates.is_empty() {
        let configured = t.client_ca_file.is_some();
        if configured {
            c.err(
                "server.tls.certificates",
                "client_ca_file is set but there is no certificate: TLS is on only with at \
                 least one {cert_file, key_file} pair",
            );
        }
        return None;
    }
    Some(ListenerTls {
        certificates: t
            .certificates
            .iter()
            .map(|p| CertPair {
                cert_file: p.cert_file.clone(),
                key_file: p.key_file.clone(),
            })
            .collect(),
        min_version,
        handshake_timeout: t.handshake_timeout,
        client_ca_file: t.client_ca_file.clone(),
    })
}

/// `server.proxy_protocol` and `server.proxy_protocol_trusted` → `None` when off.
pub(super) fn check_proxy_protocol(s: &ServerConfig, c: &mut Check<'_>) -> Option<ProxyProtocol> {
    let mut trusted = Vec::with_capacity(s.proxy_protocol_trusted.len());
    for (i, text) in s.proxy_protocol_trusted.iter().enumerate() {
        match parse_proxy(text) {
            Ok(net) => trusted.push(net),
            Err(msg) => c.err(&format!("server.proxy_protocol_trusted[{i}]"), msg),
        }
    }
    let accept = match s.proxy_protocol.as_str() {
        "off" => None,
        "v1" => Some(Accept::V1),
        "v2" => Some(Accept::V2),
        "any" => Some(Accept::Any),
        other => {
            c.err(
                "server.proxy_protocol",
                format!("must be one of off, v1, v2, any; got {other:?}"),
            );
            None
        }
    };
    let accept = accept?;
    if s.proxy_protocol_trusted.is_empty() {
        c.err(
            "server.proxy_protocol_trusted",
            "proxy_protocol is on but no peer is trusted to send it: list the load balancers' \
             addresses (CIDRs), or every connection would be closed",
        );
    }
    Some(ProxyProtocol { accept, trusted })
}
