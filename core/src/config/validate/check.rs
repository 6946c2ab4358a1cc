//! What every check of phase 3 shares: [`Check`], the errors collected into the reader, and the
//! two parsers several sections use ([`parse_proxy`], [`parse_host_port`] and its [`HostPort`]).

use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

use ipnet::IpNet;

use crate::config::read::Reader;

/// `host:port`; an empty host means every interface (listeners only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    /// Host name or address (IPv6 without brackets); may be empty for a listener.
    pub host: String,
    /// Port, 1..=65535.
    pub port: u16,
}

impl core::fmt::Display for HostPort {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Checks collect into the reader (which knows every path's position).
pub(super) struct Check<'r> {
    pub(super) r: &'r mut Reader,
}

impl Check<'_> {
    pub(super) fn err(&mut self, path: &str, message: impl Into<String>) {
        self.r.error(path, None, message);
    }

    /// An error from a core constructor, unless the reader already rejected that field. The
    /// constructor's own field prefix (`health_check.interval must...`, `methods: ...`) is
    /// dropped: the path says it.
    pub(super) fn core_err(&mut self, path: &str, message: impl Into<String>) {
        if self.r.errors.iter().any(|e| e.path == path) {
            return;
        }
        let message = message.into();
        let section = path.split('.').next().unwrap_or("");
        let field = path.rsplit('.').next().unwrap_or("");
        let mut m = message.as_str();
        m = m.strip_prefix(&format!("{path}: ")).unwrap_or(m);
        m = m.strip_prefix(&format!("{section}.")).unwrap_or(m);
        m = m.strip_prefix(&format!("{field}: ")).unwrap_or(m);
        let m = m.to_owned();
        self.err(path, m);
    }
}

/// A trusted proxy: a CIDR without host bits, or a bare address (a /32 or /128).
pub(super) fn parse_proxy(text: &str) -> Result<IpNet, String> {
    if text.contains('/') {
        let net = IpNet::from_str(text)
            .map_err(|_| format!("{text:?} is not a CIDR such as 10.0.0.0/8 or fd00::/8"))?;
        if net.trunc() != net {
            return Err(format!(
                "{text:?} has host bits set; did you mean {}?",
                net.trunc()
            ));
        }
        Ok(net)
    } else {
        IpAddr::from_str(text)
            .map(IpNet::from)
            .map_err(|_| format!("{text:?} is not an IP address or a CIDR"))
    }
}

/// Parse `host:port` (`[v6]:port` for IPv6). `listener`: the host may be empty (every interface).
pub(super) fn parse_host_port(text: &str, listener: bool) -> Result<HostPort, String> {
    let bad = || {
        if listener {
            format!("expected [host]:port such as :9090 or 127.0.0.1:9090, got {text:?}")
        } else {
            format!("expected host:port such as redis:6379, got {text:?}")
        }
    };
    let (host, port) = text.rsplit_once(':').ok_or_else(bad)?;
    let port = port
        .parse::<u16>()
        .ok()
        .filter(|p| *p >= 1 && port.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(bad)?;
    let host = if let Some(inner) = host.strip_prefix('[') {
        let inner = inner.strip_suffix(']').ok_or_else(bad)?;
        Ipv6Addr::from_str(inner).map_err(|_| bad())?;
        inner
    } else {
        let ok = host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_');
        if !ok {
            return Err(bad());
        }
        host
    };
    if host.is_empty() && !listener {
        return Err(bad());
    }
    Ok(HostPort {
        host: host.to_owned(),
        port,
    })
}
