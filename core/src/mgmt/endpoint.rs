//! Which endpoint a management request names (C-MGMT-4): the request as the handler sees it,
//! the endpoint table and the routing answer (`404`, `405` with `Allow`).

use core::fmt;
use std::net::IpAddr;

use http::{HeaderMap, Method};

use crate::response::ManagementError;

/// `Allow` of the read endpoints.
pub const ALLOW_READ: &str = "GET, HEAD";

/// A management request as the handler sees it.
#[derive(Debug, Clone, Copy)]
pub struct MgmtRequest<'a> {
    /// The method.
    pub method: &'a Method,
    /// The path, without the query (a `?` and what follows are ignored).
    pub path: &'a str,
    /// The request headers.
    pub headers: &'a HeaderMap,
    /// The body as read (at most [`MAX_BODY_BYTES`] + 1 bytes are needed).
    pub body: &'a [u8],
    /// The caller's address, resolved as on the data plane (trusted proxies, C-FWD-1): the
    /// status document's `client_ip` and the bucket `/api/dashboard/limit` refills.
    pub client: IpAddr,
}

/// A management endpoint (C-MGMT-4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `GET /healthz`: liveness.
    Healthz,
    /// `GET /readyz`: readiness.
    Readyz,
    /// `GET /metrics`: Prometheus exposition.
    Metrics,
    /// `GET /api/dashboard/status`: the [`StatusDocument`].
    Status,
    /// `GET /api/dashboard/request`: one synthetic `GET /` through the data plane.
    DashboardRequest,
    /// `POST /api/dashboard/backends` `{"count": n}`.
    SetCount,
    /// `POST /api/dashboard/backends/{id}` `{"enabled": bool}`.
    SetEnabled {
        /// The backend id (percent-decoded).
        id: String,
    },
    /// `POST /api/dashboard/backends/{id}/drain` `{}`.
    Drain {
        /// The backend id (percent-decoded).
        id: String,
    },
    /// `POST /api/dashboard/limit` `{"capacity": n}`.
    Limit,
    /// `PATCH /api/dashboard/config`.
    PatchConfig,
}

impl Endpoint {
    /// Whether the endpoint changes state (C-MGMT-2 guards, C-MGMT-3, C-MGMT-5 access log).
    #[must_use]
    pub fn is_mutating(&self) -> bool {
        !matches!(
            self,
            Endpoint::Healthz
                | Endpoint::Readyz
                | Endpoint::Metrics
                | Endpoint::Status
                | Endpoint::DashboardRequest
        )
    }

    /// The methods the endpoint accepts, as an `Allow` value.
    #[must_use]
    pub fn allow(&self) -> &'static str {
        match self {
            Endpoint::PatchConfig => "PATCH",
            e if e.is_mutating() => "POST",
            _ => ALLOW_READ,
        }
    }

    /// A short name for logs and metrics labels (`status`, `set_enabled`, ...). Never an id.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Endpoint::Healthz => "healthz",
            Endpoint::Readyz => "readyz",
            Endpoint::Metrics => "metrics",
            Endpoint::Status => "status",
            Endpoint::DashboardRequest => "request",
            Endpoint::SetCount => "set_count",
            Endpoint::SetEnabled { .. } => "set_enabled",
            Endpoint::Drain { .. } => "drain",
            Endpoint::Limit => "limit",
            Endpoint::PatchConfig => "patch_config",
        }
    }
}

/// Which endpoint `method` + `path` names (C-MGMT-4): unknown path `404`; known path, wrong
/// method `405` with `Allow`. Paths match exactly (no trailing `/`); a backend id is one
/// percent-decoded segment, so an id with `/` is written `%2F`.
pub fn route(method: &Method, path: &str) -> Result<Endpoint, ManagementError> {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let endpoint = match path {
        "/healthz" => Endpoint::Healthz,
        "/readyz" => Endpoint::Readyz,
        "/metrics" => Endpoint::Metrics,
        "/api/dashboard/status" => Endpoint::Status,
        "/api/dashboard/request" => Endpoint::DashboardRequest,
        "/api/dashboard/backends" => Endpoint::SetCount,
        "/api/dashboard/limit" => Endpoint::Limit,
        "/api/dashboard/config" => Endpoint::PatchConfig,
        _ => {
            let rest = path
                .strip_prefix("/api/dashboard/backends/")
                .ok_or(ManagementError::NotFound)?;
            let (segment, drain) = match rest.strip_suffix("/drain") {
                Some(s) => (s, true),
                None => (rest, false),
            };
            if segment.is_empty() || segment.contains('/') {
                return Err(ManagementError::NotFound);
            }
            let id = percent_decode(segment).ok_or(ManagementError::NotFound)?;
            if drain {
                Endpoint::Drain { id }
            } else {
                Endpoint::SetEnabled { id }
            }
        }
    };
    let allowed = match endpoint.allow() {
        ALLOW_READ => method == Method::GET || method == Method::HEAD,
        "PATCH" => method == Method::PATCH,
        _ => method == Method::POST,
    };
    if allowed {
        Ok(endpoint)
    } else {
        Err(ManagementError::MethodNotAllowed {
            allow: endpoint.allow(),
        })
    }
}

/// `%XX` decoded; `None` for a bad escape or a result that is not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            let hex = core::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
