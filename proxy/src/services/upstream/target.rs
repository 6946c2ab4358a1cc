//! A backend as the upstream pools see it ([`Target`]: its parsed URL, where to connect and
//! how) and its key in the HTTP/1 idle pools ([`PoolKey`]).

use std::net::SocketAddr;
use std::sync::Arc;

use http::HeaderValue;
use http::uri::Scheme;
use rustls::pki_types::ServerName;
use weir_core::backend::Protocol;
use weir_core::proxy_proto;
use weir_core::upstream::{BackendBase, BackendUrlError};

/// A backend's key in the HTTP/1 idle pools (`h1::upstream_conn`): its URL, with the URL's hash made
/// once when the [`Target`] is built, so that a request's pool look-ups hash one number rather
/// than the URL's bytes. Equal exactly when the URLs are (the same backend URL
/// shares its idle connections across reloads, as before); the URL itself is compared only
/// when the hashes are equal and the two keys are not the same allocation.
#[derive(Debug, Clone)]
pub struct PoolKey {
    hash: u64,
    url: Arc<str>,
}

impl PoolKey {
    /// The key of the backend at `url`.
    #[must_use]
    pub fn new(url: &str) -> PoolKey {
        use std::hash::BuildHasher;
        PoolKey {
            hash: foldhash::quality::FixedState::default().hash_one(url),
            url: Arc::from(url),
        }
    }
}

impl PartialEq for PoolKey {
    fn eq(&self, other: &PoolKey) -> bool {
        self.hash == other.hash && (Arc::ptr_eq(&self.url, &other.url) || self.url == other.url)
    }
}

impl Eq for PoolKey {}

impl std::hash::Hash for PoolKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl From<&PoolKey> for PoolKey {
    fn from(key: &PoolKey) -> PoolKey {
        key.clone()
    }
}

/// The two ends of a downstream (client) connection, as a backend's PROXY header names them
/// (C-TLS-3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DownstreamEnds {
    /// The client (C-FWD-1's peer: the socket peer, or the PROXY source weir received).
    pub peer: SocketAddr,
    /// The address it connected to (the listener's, or the PROXY destination weir received).
    pub local: SocketAddr,
}

/// One backend as the pool sees it: the parsed base URL, where to connect, and how.
#[derive(Debug)]
pub struct Target {
    pub(super) id: Box<str>,
    pub(super) id_value: HeaderValue,
    pub(super) url: Box<str>,
    pub(super) pool_key: PoolKey,
    pub(super) base: BackendBase,
    pub(super) host: Box<str>,
    pub(super) port: u16,
    pub(super) tls: Option<ServerName<'static>>,
    pub(super) host_header: HeaderValue,
    /// `send_proxy_protocol`: a PROXY header starts each new connection, which is then never
    /// pooled (docs/tls.md, "Sending the PROXY protocol to backends").
    pub(super) send_proxy: Option<proxy_proto::Version>,
    /// `protocol`: HTTP/1.1, or HTTP/2 multiplexed over a few shared connections (C-GRPC-1).
    pub(super) protocol: Protocol,
}

impl Target {
    /// Parse backend `id`'s URL (`http` or `https`).
    pub fn new(id: &str, url: &str) -> Result<Target, BackendUrlError> {
        let base = BackendBase::parse(url)?;
        let https = *base.scheme() == Scheme::HTTPS;
        let authority = base.authority();
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let host = authority.host();
        let host: Box<str> = Box::from(
            host.strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .unwrap_or(host),
        );
        let tls = if https {
            Some(ServerName::try_from(host.to_string()).map_err(|_| BackendUrlError::NoHost)?)
        } else {
            None
        };
        let host_header =
            HeaderValue::from_str(authority.as_str()).map_err(|_| BackendUrlError::Invalid)?;
        let id_value = HeaderValue::from_str(id).map_err(|_| BackendUrlError::Invalid)?;
        Ok(Target {
            id: Box::from(id),
            id_value,
            url: Box::from(url),
            pool_key: PoolKey::new(url),
            base,
            host,
            port,
            tls,
            host_header,
            send_proxy: None,
            protocol: Protocol::Http1,
        })
    }

    /// The same target with a PROXY header of `version` at the start of each new connection
    /// (`None`: none).
    #[must_use]
    pub fn with_send_proxy(mut self, version: Option<proxy_proto::Version>) -> Target {
        self.send_proxy = version;
        self
    }

    /// The same target spoken to in `protocol` (C-GRPC-1).
    #[must_use]
    pub fn with_protocol(mut self, protocol: Protocol) -> Target {
        self.protocol = protocol;
        self
    }

    /// How weir speaks HTTP to this target.
    #[must_use]
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// Whether a connection to this target may serve another client's request (weir-core's
    /// `idle_pool::poolable`: not when it began with a PROXY header naming one client).
    #[must_use]
    pub fn poolable(&self) -> bool {
        weir_core::idle_pool::poolable(self.send_proxy)
    }

    /// The PROXY protocol version each new connection begins with (`send_proxy_protocol`).
    #[must_use]
    pub fn send_proxy(&self) -> Option<proxy_proto::Version> {
        self.send_proxy
    }

    /// The PROXY header a new connection for `client` begins with, if any: from the client
    /// to the address it connected to.
    pub(super) fn preface(&self, client: DownstreamEnds) -> Option<proxy_proto::Encoded> {
        self.send_proxy
            .map(|v| proxy_proto::encode(v, client.peer, client.local))
    }

    /// The backend id.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The backend id as a header value (`X-Balancer-Backend`, `X-Balancer-Backend-Attempt`),
    /// made once per backend when a snapshot is built (`snapshot::Snapshot::build`).
    #[must_use]
    pub fn id_value(&self) -> &HeaderValue {
        &self.id_value
    }

    /// The backend URL as configured.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Its key in the HTTP/1 idle pools.
    #[must_use]
    pub fn pool_key(&self) -> &PoolKey {
        &self.pool_key
    }

    /// The parsed base (scheme, authority, path prefix) for [`BackendBase::upstream_uri`].
    #[must_use]
    pub fn base(&self) -> &BackendBase {
        &self.base
    }

    /// The URL's host (a name or an address literal): what is dialled.
    #[must_use]
    pub fn host(&self) -> &str {
        &self.host
    }

    /// `host[:port]` of the URL, the `Host` of a request that came without one.
    #[must_use]
    pub fn host_header(&self) -> &HeaderValue {
        &self.host_header
    }
}
