//! Which request methods the data plane proxies (docs/proxy.md "Methods").
//!
//! Every method is proxied except `TRACE`, which is answered `405` unless
//! `server.allow_trace: true`. A `TRACE` echoes the request back as the last server received it,
//! headers included: through a proxy that adds headers (`X-Forwarded-For`, `X-Real-IP`, the
//! request id) it reveals to a client what the proxy added, and, in a browser, what cookies and
//! credentials the request carried (cross-site tracing). nginx refuses `TRACE` with `405`
//! outright; HAProxy and Envoy leave it to configuration. weir follows nginx by default and lets
//! an operator who needs it (a debugging backend) turn it back on.
//!
//! `CONNECT` is not refused here: its authority-form target is refused as an unsupported target
//! (`400`) by the request-target rules of the upstream URI (C-PATH-5).

use http::Method;

#[cfg(all(test, not(loom)))]
mod tests;

/// The `Allow` value of the `405` for a refused `TRACE`: the methods the data plane proxies
/// (RFC 9110 §15.5.6 requires the list; extension methods are proxied too but cannot be listed).
pub const ALLOW: &str = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS";

/// A method the data plane refuses: answered `405` with [`ALLOW`]
/// (`crate::response::ClientError::MethodNotAllowed`, which converts from this value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused;

/// Whether the data plane proxies `method`: `Err` otherwise (`TRACE` while `allow_trace` is
/// false).
///
/// # Errors
/// The method is refused.
pub fn check(method: &Method, allow_trace: bool) -> Result<(), Refused> {
    if *method == Method::TRACE && !allow_trace {
        return Err(Refused);
    }
    Ok(())
}
