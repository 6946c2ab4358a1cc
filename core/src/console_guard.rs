//! The web console's request guard (C-MGMT-1, C-MGMT-2): which requests the console
//! refuses before it adds the admin token and forwards them. Pure: the console server
//! (`weir-proxy`'s `console.rs`) passes the request's headers and target authority.
//!
//! The console adds the admin token to what it forwards, so it must only act for its own page:
//! - **DNS rebinding**: a page on `attacker.example` whose name later resolves to 127.0.0.1 is
//!   same-origin with the console as far as the browser knows, and only the `Host` it sends
//!   gives it away. The console answers only requests addressed to an IP literal or `localhost`
//!   (a rebinding needs a DNS name), else `421`. A proxy in front must pass such a `Host`.
//! - **Cross-site requests**: API calls whose `Sec-Fetch-Site` is not `same-origin`, or whose
//!   `Origin` is not `http://<Host>`, are refused with `403` before the token is added (a form
//!   post or `<img>` from any site would otherwise act with the admin's credential).
//! - **Who reaches it** ([`listen_refusal`], [`authenticated`]): whoever reaches the console acts
//!   with the admin token, so it listens beyond loopback only when the operator says how it is
//!   protected: `--allow-remote` (an authenticating proxy in front, or a network only such a
//!   proxy reaches) or its own bearer token (`--auth-token-env`), which every request must then
//!   carry (`401` otherwise, before anything else is looked at).

use std::net::SocketAddr;

use http::{HeaderMap, StatusCode};

use crate::config::Secret;

/// Why `weir console` must not listen on `addr`, if it must not: an address beyond loopback
/// needs `allow_remote` (the operator vouches for a protection in front) or `authenticated`
/// (the console's own bearer token). The message names the safe options.
#[must_use]
pub fn listen_refusal(addr: SocketAddr, allow_remote: bool, authenticated: bool) -> Option<String> {
    if addr.ip().to_canonical().is_loopback() || allow_remote || authenticated {
        return None;
    }
    Some(format!(
        "refusing to listen on {addr}: the console adds the admin token to every call it \
         forwards, so anyone who reaches it is an administrator. Listen on loopback (the default \
         127.0.0.1:3000; from elsewhere, an SSH tunnel or kubectl port-forward), or require a \
         bearer token of the console's own with --auth-token-env VAR, or, only behind an \
         authenticating proxy, say so with --allow-remote (docs/console.md)"
    ))
}

/// Whether a console request carries the console's own token (`--auth-token-env`): exactly one
/// `Authorization: Bearer <token>`, compared in constant time (as the management plane's,
/// C-MGMT-1). The console answers `401` otherwise and forwards nothing.
#[must_use]
pub fn authenticated(headers: &HeaderMap, token: &Secret) -> bool {
    crate::mgmt::bearer_matches(headers, token)
}

/// A refusal: the status and the message the console answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// `400`, `403` or `421`.
    pub status: StatusCode,
    /// What was wrong, for the JSON error body.
    pub message: &'static str,
}

/// Why the console refuses a request with `headers` and the target's authority `target` (an
/// absolute-form request's), before anything is forwarded, if it does; `api`: the request is an
/// API call (forwarded with the token), not one of the bundle's files.
#[must_use]
pub fn refusal(headers: &HeaderMap, target: Option<&str>, api: bool) -> Option<Refusal> {
    let refuse = |status, message| Some(Refusal { status, message });
    let mut hosts = headers.get_all(http::header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return refuse(StatusCode::BAD_REQUEST, "more than one Host header");
    }
    let host = host.map(|h| h.to_str().unwrap_or("\u{fffd}"));
    if host
        .into_iter()
        .chain(target)
        .any(|name| !addressed_here(name))
    {
        return refuse(
            StatusCode::MISDIRECTED_REQUEST,
            "the console answers only requests addressed to an IP address or localhost \
             (a DNS-rebinding guard); a proxy in front must pass such a Host",
        );
    }
    if !api {
        return None;
    }
    if headers
        .get("sec-fetch-site")
        .is_some_and(|v| v != "same-origin")
    {
        return refuse(
            StatusCode::FORBIDDEN,
            "cross-site request refused by the console",
        );
    }
    if let Some(origin) = headers.get(http::header::ORIGIN) {
        let same = host.is_some_and(|h| origin.as_bytes() == format!("http://{h}").as_bytes());
        if !same {
            return refuse(
                StatusCode::FORBIDDEN,
                "request from another origin refused by the console",
            );
        }
    }
    None
}

/// Whether an authority (`host[:port]`) names this machine by address or as `localhost`.
fn addressed_here(authority: &str) -> bool {
    let Ok(a) = authority.parse::<http::uri::Authority>() else {
        return false;
    };
    let host = a.host();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || bare.parse::<std::net::IpAddr>().is_ok()
}

#[cfg(test)]
mod tests;
