//! One backend as a probe sees it (C-HEALTH-1).

use core::fmt;

use http::Uri;
use http::uri::{Authority, Scheme};
use rustls::pki_types::ServerName;
use weir_core::backend::Protocol;
use weir_core::config::ProbeMode;
use weir_core::upstream::{BackendBase, BackendUrlError, UpstreamUriError};

/// Why a backend cannot be probed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeTargetError {
    /// the backend url is not a valid base url
    Url(BackendUrlError),
    /// the backend url's path joined with `health_check.path` is not a valid uri
    Path(UpstreamUriError),
    /// the backend host is not a valid tls server name
    ServerName,
}

impl fmt::Display for ProbeTargetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeTargetError::Url(e) => write!(f, "{e}"),
            ProbeTargetError::Path(e) => write!(f, "health_check.path: {e}"),
            ProbeTargetError::ServerName => {
                write!(f, "backend host is not a valid tls server name")
            }
        }
    }
}

impl std::error::Error for ProbeTargetError {}

/// A backend prepared for probing: where to connect, whether and how to speak TLS, and which
/// request to send (C-HEALTH-1). Built once per backend and reload; probing it allocates only the
/// connection.
///
/// Transport by `health_check.mode`:
/// - `tcp`: a connect to the URL's host and port;
/// - `http`: `GET` of the probe URI, over TLS when the backend URL is `https://` (plain HTTP to a
///   TLS port could only fail), in the clear otherwise;
/// - `https`: the same `GET`, always over TLS, also for an `http://` backend URL;
/// - `grpc`: `POST /grpc.health.v1.Health/Check` for [`grpc_service`](Self::grpc_service), TLS as
///   for `http` (C-GRPC-4).
///
/// The request goes over HTTP/1.1, or over HTTP/2 when the backend's `protocol` is `h2c` or `h2`
/// ([`with_protocol`](Self::with_protocol)): a probe speaks what the backend's traffic speaks.
///
/// The port is the URL's, or the default of the transport (443 with TLS, 80 without). The TLS
/// server name (SNI and the name the certificate must match) is the URL's host; an IP address
/// host is matched against the certificate's IP addresses and sends no SNI (RFC 6066 §3).
#[derive(Debug, Clone)]
pub struct ProbeTarget {
    key: Box<str>,
    url: Box<str>,
    /// `key` and `url` together: the id the schedule keeps state under, so a backend whose URL
    /// changes on reload starts over unhealthy, as the pool does (C-CONF-6).
    schedule_id: Box<str>,
    mode: ProbeMode,
    /// Host without IPv6 brackets, for the connect.
    host: Box<str>,
    port: u16,
    /// `Some` when the probe speaks TLS.
    server_name: Option<ServerName<'static>>,
    /// The `GET` target and `Host` header; `None` for `tcp`.
    request: Option<(Uri, Authority)>,
    /// Why the latest probe failed (`None` after a success): the cause a `backend down` line
    /// gives.
    last_error: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    /// `send_proxy_protocol`: an HTTP probe begins with a PROXY header saying "no client".
    send_proxy: Option<weir_core::proxy_proto::Version>,
    /// The backend's protocol: HTTP/2 backends are probed over HTTP/2.
    protocol: Protocol,
    /// `health_check.grpc_service` (mode `grpc`).
    grpc_service: Box<str>,
}

impl ProbeTarget {
    /// Prepares backend `url` for probes in `mode`, with `path` (`health_check.path`) joined to
    /// the URL's path. `key` is the caller's stable name for the backend (its id, or pool and
    /// id); the schedule keeps health state across reloads for the same `key` and `url`.
    pub fn new(
        key: &str,
        url: &str,
        mode: ProbeMode,
        path: &str,
    ) -> Result<ProbeTarget, ProbeTargetError> {
        let base = BackendBase::parse(url).map_err(ProbeTargetError::Url)?;
        let authority = base.authority().clone();
        let tls = match mode {
            ProbeMode::Https => true,
            ProbeMode::Http | ProbeMode::Grpc => *base.scheme() == Scheme::HTTPS,
            ProbeMode::Tcp => false,
        };
        let default_port = if tls || *base.scheme() == Scheme::HTTPS {
            443
        } else {
            80
        };
        let port = authority.port_u16().unwrap_or(default_port);
        let host = authority.host();
        let host: Box<str> = Box::from(
            host.strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .unwrap_or(host),
        );
        let server_name = if tls {
            Some(ServerName::try_from(host.to_string()).map_err(|_| ProbeTargetError::ServerName)?)
        } else {
            None
        };
        let request = match mode {
            ProbeMode::Tcp => None,
            ProbeMode::Http | ProbeMode::Https => {
                let uri = base.probe_uri(path).map_err(ProbeTargetError::Path)?;
                Some((uri, authority))
            }
            ProbeMode::Grpc => {
                let uri = base
                    .probe_uri(weir_core::grpc::health::CHECK_PATH)
                    .map_err(ProbeTargetError::Path)?;
                Some((uri, authority))
            }
        };
        Ok(ProbeTarget {
            key: Box::from(key),
            url: Box::from(url),
            schedule_id: format!("{key}\n{url}").into_boxed_str(),
            mode,
            host,
            port,
            server_name,
            request,
            last_error: std::sync::Arc::default(),
            send_proxy: None,
            protocol: Protocol::Http1,
            grpc_service: Box::from(""),
        })
    }

    /// The same target for a backend that speaks `protocol`: an HTTP/2 backend is probed over
    /// HTTP/2 (over TLS with ALPN `h2` for `h2`). The schedule knows it under another id, as the
    /// pool starts a backend whose protocol changed over.
    #[must_use]
    pub fn with_protocol(mut self, protocol: Protocol) -> Self {
        if protocol != Protocol::Http1 {
            self.schedule_id =
                format!("{}\nprotocol {protocol:?}", self.schedule_id).into_boxed_str();
        }
        self.protocol = protocol;
        self
    }

    /// The same target asking about `service` in mode `grpc` (`health_check.grpc_service`).
    #[must_use]
    pub fn with_grpc_service(mut self, service: &str) -> Self {
        self.grpc_service = Box::from(service);
        self
    }

    /// The same target checking `name` (`server.upstream.tls_server_name`) instead of the URL's
    /// host when it speaks TLS; `None` keeps the host.
    #[must_use]
    pub fn with_server_name(mut self, name: Option<ServerName<'static>>) -> Self {
        if let (Some(name), Some(_)) = (name, &self.server_name) {
            self.server_name = Some(name);
        }
        self
    }

    /// The backend's protocol (the probe's HTTP version).
    #[must_use]
    pub const fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The service a `grpc` probe asks about (`""`: the whole server).
    #[must_use]
    pub fn grpc_service(&self) -> &str {
        &self.grpc_service
    }

    /// The same target for a backend that wants a PROXY header of `version` (`None`: none).
    /// The schedule knows it under another id: the pool starts such a backend over too.
    #[must_use]
    pub fn with_send_proxy(mut self, version: Option<weir_core::proxy_proto::Version>) -> Self {
        if let Some(v) = version {
            self.schedule_id = format!("{}\nproxy {v}", self.schedule_id).into_boxed_str();
        }
        self.send_proxy = version;
        self
    }

    /// The PROXY header an HTTP probe begins with, if any.
    #[must_use]
    pub fn send_proxy(&self) -> Option<weir_core::proxy_proto::Version> {
        self.send_proxy
    }

    /// Note a probe's result: `Some(why)` for a failure, `None` for a success.
    pub fn note_result(&self, error: Option<String>) {
        if let Ok(mut e) = self.last_error.lock() {
            *e = error;
        }
    }

    /// Why the latest probe failed, if it did.
    #[must_use]
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|e| e.clone())
    }

    /// The caller's name for the backend.
    #[must_use]
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The backend URL as given.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The id the schedule knows the backend by (`key` and `url`).
    pub(crate) fn schedule_id(&self) -> &str {
        &self.schedule_id
    }

    /// How the backend is probed.
    #[must_use]
    pub const fn mode(&self) -> ProbeMode {
        self.mode
    }

    /// Host (IPv6 without brackets) and port the probe connects to.
    #[must_use]
    pub fn addr(&self) -> (&str, u16) {
        (&self.host, self.port)
    }

    /// Whether the probe speaks TLS.
    #[must_use]
    pub const fn is_tls(&self) -> bool {
        self.server_name.is_some()
    }

    /// The TLS server name, when the probe speaks TLS.
    #[must_use]
    pub const fn server_name(&self) -> Option<&ServerName<'static>> {
        self.server_name.as_ref()
    }

    /// The probe URI (`http`/`https` modes: the backend URL's path joined with
    /// `health_check.path`; `grpc`: with the health service's method).
    #[must_use]
    pub fn uri(&self) -> Option<&Uri> {
        self.request.as_ref().map(|(uri, _)| uri)
    }

    /// The `Host` header of the probe request (`http`/`https` modes): the URL's authority.
    #[must_use]
    pub fn host_header(&self) -> Option<&Authority> {
        self.request.as_ref().map(|(_, authority)| authority)
    }
}

#[cfg(test)]
mod tests;
