//! The origin-form URI of an upstream attempt (C-PATH-5): core's join of the backend's path
//! prefix and the client's raw target, with a copy-free fast path.

use http::{Method, Uri};
use weir_core::response::ClientError;
use weir_core::upstream::BackendBase;

/// The origin-form URI of an attempt (C-PATH-5). For a backend without a path prefix and an
/// origin-form target this is the client's target itself (what [`BackendBase::upstream_uri`]
/// returns for it, byte for byte; checked by a test), without an allocation; otherwise core
/// joins the prefix and the raw target.
pub fn upstream_uri(base: &BackendBase, method: &Method, uri: &Uri) -> Result<Uri, ClientError> {
    let pq = uri.path_and_query();
    let raw = pq.map_or("/", http::uri::PathAndQuery::as_str);
    if base.path_prefix().is_empty() && raw.starts_with('/') {
        if uri.scheme().is_none() && uri.authority().is_none() {
            return Ok(uri.clone());
        }
        if let Some(pq) = pq {
            return Ok(Uri::from(pq.clone()));
        }
    }
    let full = base
        .upstream_uri(method, raw)
        .map_err(|_| ClientError::TargetTooLong)?;
    Ok(full
        .path_and_query()
        .map_or_else(|| Uri::from_static("/"), |pq| Uri::from(pq.clone())))
}

#[cfg(test)]
mod tests;
