//! The upstream request URI: backend base URL + the client's raw path and query (C-PATH-5), and
//! the health-probe URI (C-HEALTH-1).
//!
//! A backend URL may carry a path prefix (`http://b:8080/base`); the upstream path is that
//! prefix followed by the client's path **byte for byte**: percent-encodings (`%2F`, `%2E`,
//! `%252F`) are neither decoded nor normalised, dot-segments (`/a/../b`) are not resolved, empty
//! segments (`//x`) are kept, and the query string passes unchanged. Decoding or normalising
//! would make the path a backend sees differ from the path the route table matched (C-ROUTE-1
//! matches on the same raw bytes), so one request could be routed by one reading of its path and
//! served by another. This is what HAProxy does by default (the target is forwarded as received
//! unless `normalize-uri` is configured) and what Go's `httputil.ReverseProxy` does with
//! `URL.RawPath`; the join follows Go's `singleJoiningSlash`: never a double slash between the
//! prefix and the path.
//!
//! Request-target forms (RFC 9112 §3.2):
//! - origin-form `/p?q` — the usual case;
//! - absolute-form `http://host/p?q` — only its path and query are used (the authority is not
//!   the backend's); an empty path is `/`;
//! - asterisk-form `*` — only with `OPTIONS`: forwarded as `*` to a backend without a path
//!   prefix, and as the prefix itself (`OPTIONS /base`) to one with a prefix, since `*` means
//!   "the server as a whole" and that server is rooted at the prefix;
//! - authority-form (`CONNECT host:443`) — not proxied: an error.
//!
//! A fragment (`#...`), which clients must not send, is dropped, as the `http` crate does.

use core::fmt;

use http::uri::{Authority, Parts, PathAndQuery, Scheme};
use http::{Method, Uri};

/// The longest path-and-query the `http` crate accepts.
pub const MAX_PATH_AND_QUERY_BYTES: usize = u16::MAX as usize - 1;

/// Why a backend URL cannot serve as a base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendUrlError {
    /// the backend url is not a valid absolute URL
    Invalid,
    /// the backend url scheme must be http or https
    Scheme,
    /// the backend url must have a host
    NoHost,
    /// the backend url must not contain user information (`user@`)
    UserInfo,
    /// the backend url must not have a query string or a fragment
    QueryOrFragment,
}

impl fmt::Display for BackendUrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendUrlError::Invalid => "backend url is not a valid absolute url",
            BackendUrlError::Scheme => "backend url scheme must be http or https",
            BackendUrlError::NoHost => "backend url must have a host",
            BackendUrlError::UserInfo => "backend url must not contain user information",
            BackendUrlError::QueryOrFragment => {
                "backend url must not have a query string or a fragment"
            }
        })
    }
}

impl std::error::Error for BackendUrlError {}

/// Why no upstream URI could be built for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamUriError {
    /// the request target is not origin-, absolute- or asterisk-form (e.g. `CONNECT host:443`)
    UnsupportedTarget,
    /// the asterisk-form target `*` is only valid with OPTIONS
    AsteriskWithoutOptions,
    /// the joined path and query are too long for a URI
    TooLong,
    /// the joined path and query are not a valid URI path (a byte the URI grammar forbids)
    Invalid,
}

impl fmt::Display for UpstreamUriError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UpstreamUriError::UnsupportedTarget => {
                "request target is not origin-, absolute- or asterisk-form"
            }
            UpstreamUriError::AsteriskWithoutOptions => "request target '*' needs OPTIONS",
            UpstreamUriError::TooLong => "upstream path and query are too long",
            UpstreamUriError::Invalid => "upstream path and query are not a valid uri path",
        })
    }
}

impl std::error::Error for UpstreamUriError {}

/// A backend URL split for joining: scheme, authority and path prefix (C-PATH-5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendBase {
    scheme: Scheme,
    authority: Authority,
    /// The URL's path without trailing slashes: `""` for `http://b` and `http://b/`,
    /// `/base` for `http://b/base/`.
    prefix: String,
}

impl BackendBase {
    /// Splits a backend URL (`http` or `https`, with a host, optional port and path prefix, no
    /// user information, query or fragment).
    pub fn parse(url: &str) -> Result<BackendBase, BackendUrlError> {
        if url.contains('#') {
            return Err(BackendUrlError::QueryOrFragment);
        }
        let uri: Uri = url.parse().map_err(|_| BackendUrlError::Invalid)?;
        let scheme = match uri.scheme_str() {
            Some(s) if s.eq_ignore_ascii_case("http") => Scheme::HTTP,
            Some(s) if s.eq_ignore_ascii_case("https") => Scheme::HTTPS,
            Some(_) => return Err(BackendUrlError::Scheme),
            None => return Err(BackendUrlError::Invalid),
        };
        let authority = uri.authority().ok_or(BackendUrlError::NoHost)?.clone();
        if authority.as_str().contains('@') {
            return Err(BackendUrlError::UserInfo);
        }
        if authority.host().is_empty() {
            return Err(BackendUrlError::NoHost);
        }
        if uri.query().is_some() || url.ends_with('?') {
            return Err(BackendUrlError::QueryOrFragment);
        }
        let prefix = uri.path().trim_end_matches('/').to_owned();
        Ok(BackendBase {
            scheme,
            authority,
            prefix,
        })
    }

    /// `http` or `https`.
    #[must_use]
    pub fn scheme(&self) -> &Scheme {
        &self.scheme
    }

    /// Host and optional port.
    #[must_use]
    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// The path prefix without trailing slashes (`""` when the URL has no path).
    #[must_use]
    pub fn path_prefix(&self) -> &str {
        &self.prefix
    }

    /// The upstream URI for a request (C-PATH-5): this backend's scheme and authority, and its
    /// path prefix followed by the client's path and query exactly as received. `target` is the
    /// raw request target (`req.uri().path_and_query()`'s text, or the whole target for
    /// absolute- and asterisk-form).
    pub fn upstream_uri(&self, method: &Method, target: &str) -> Result<Uri, UpstreamUriError> {
        let target = target.split_once('#').map_or(target, |(before, _)| before);
        if target == "*" {
            if method != Method::OPTIONS {
                return Err(UpstreamUriError::AsteriskWithoutOptions);
            }
            let pq = if self.prefix.is_empty() {
                "*"
            } else {
                self.prefix.as_str()
            };
            return self.build(pq.to_owned());
        }
        let path_and_query = if target.starts_with('/') {
            target
        } else {
            absolute_form_path_and_query(target).ok_or(UpstreamUriError::UnsupportedTarget)?
        };
        self.build(self.join(path_and_query))
    }

    /// The active health-check URI (C-HEALTH-1): the backend URL's path joined with
    /// `health_check.path` (a leading `/` is added when missing; a query is kept).
    pub fn probe_uri(&self, health_path: &str) -> Result<Uri, UpstreamUriError> {
        let mut joined = String::with_capacity(self.prefix.len() + health_path.len() + 1);
        joined.push_str(&self.prefix);
        if !health_path.starts_with('/') {
            joined.push('/');
        }
        joined.push_str(health_path);
        self.build(joined)
    }

    /// `prefix` + `path_and_query`; a target that is only a query gets the path `/`.
    fn join(&self, path_and_query: &str) -> String {
        let mut joined = String::with_capacity(self.prefix.len() + path_and_query.len() + 1);
        joined.push_str(&self.prefix);
        if !path_and_query.starts_with('/') {
            joined.push('/');
        }
        joined.push_str(path_and_query);
        joined
    }

    fn build(&self, path_and_query: String) -> Result<Uri, UpstreamUriError> {
        if path_and_query.len() > MAX_PATH_AND_QUERY_BYTES {
            return Err(UpstreamUriError::TooLong);
        }
        let path_and_query =
            PathAndQuery::try_from(path_and_query).map_err(|_| UpstreamUriError::Invalid)?;
        let mut parts = Parts::default();
        parts.scheme = Some(self.scheme.clone());
        parts.authority = Some(self.authority.clone());
        parts.path_and_query = Some(path_and_query);
        Uri::from_parts(parts).map_err(|_| UpstreamUriError::Invalid)
    }
}

/// The path and query of an absolute-form target (`http://host:port/p?q` → `/p?q`,
/// `http://host?q` → `?q`, `http://host` → `/`); `None` for anything else. Only `http` and
/// `https` (any case) are accepted.
fn absolute_form_path_and_query(target: &str) -> Option<&str> {
    let (scheme, rest) = target.split_once("://")?;
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return None;
    }
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    if end == 0 {
        return None;
    }
    match &rest[end..] {
        "" => Some("/"),
        pq => Some(pq),
    }
}

/// [`BackendBase::upstream_uri`] as a free function.
pub fn upstream_uri(
    base: &BackendBase,
    method: &Method,
    target: &str,
) -> Result<Uri, UpstreamUriError> {
    base.upstream_uri(method, target)
}

#[cfg(test)]
mod tests;
