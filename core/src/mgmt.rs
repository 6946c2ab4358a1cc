//! The management API's semantics as plain functions (C-MGMT-1..5, C-CONF-8): who may call it,
//! which endpoint a request names, the checks a mutating request passes before anything
//! changes, and what each mutation does to the runtime. The adapter owns the listener, reads the
//! body (at most [`MAX_BODY_BYTES`] + 1 bytes), calls [`handle`] and carries out the
//! [`Decision`]; it formats nothing itself.
//!
//! Order of checks (each failure answers at once and changes nothing):
//! 1. authentication, for every endpoint including `/metrics`, `/healthz` and `/readyz`, before
//!    anything else looks at the request (C-MGMT-1): `Authorization: Bearer <token>` compared in
//!    constant time ([`Secret::matches`]); `401` otherwise, unless `allow_insecure`;
//! 2. routing: unknown path `404`, known path with a wrong method `405` with `Allow`
//!    (C-MGMT-4); `HEAD` is allowed wherever `GET` is;
//! 3. for mutating endpoints (`/api/dashboard/*` with a method other than `GET`/`HEAD`), the
//!    guards of C-MGMT-2 in the contract's order: `Sec-Fetch-Site: cross-site` → `403`;
//!    `X-Balancer-CSRF` not exactly `1` → `403`; media type not `application/json` → `415`;
//!    body over 64 KiB → `413`; body not exactly one JSON object of known fields → `400`;
//! 4. `management.runtime_mutations: false` → `403` telling to roll out declaratively
//!    (C-MGMT-3). It comes after every C-MGMT-2 check: those run "before the handler", and this
//!    refusal is the handler's answer; so a request that would be refused anyway for its form
//!    gets the same answer whether or not mutations are on;
//! 5. the handler: range checks (`count`), unknown backend ids (`404`), and for `PATCH` the
//!    whole-configuration validation.
//!
//! Why a CSRF header and `Sec-Fetch-Site` on top of a bearer token: the console's nginx adds the
//! token server-side, so to a browser the token is an ambient credential like a cookie; a page
//! on another site could make the browser send a "simple" cross-site `POST`. Such a request can
//! carry neither a custom header nor `Content-Type: application/json` without a CORS preflight,
//! which the management plane never grants (the OWASP "custom request header" defence; Fetch
//! Metadata as a second, independent line).
//!
//! `PATCH /api/dashboard/config` edits a copy of the configuration in force
//! (`runtime.config().config`), validates it with [`config::validate_config`] (the checks a
//! reload runs, C-CONF-8) and builds the next runtime with [`Runtime::build_with`] from the one
//! in force; the adapter publishes it exactly as it publishes a reload. The YAML file is never
//! written, so the next SIGHUP reload replaces the patched values with the file's.

use http::{HeaderMap, HeaderName};

mod access;
mod body;
mod command;
mod decision;
mod endpoint;
mod patch;
mod reply;
mod status;

#[cfg(all(test, not(loom)))]
mod tests;

/// Re-exported from [`crate::config`], where durations are read.
pub use crate::config::format_duration;
pub use access::{Access, CSRF_HEADER, MAX_BODY_BYTES, authorize, bearer_matches, guard};
pub use command::{Command, Parsed, parse, parse_raw};
pub use decision::{Decision, apply, handle};
pub use endpoint::{ALLOW_READ, Endpoint, MgmtRequest, route};
pub use patch::{ConfigPatch, HealthPatch, RatePatch, RetryPatch};
pub use reply::{FieldError, Reply};
pub use status::{
    BackendStatus, BucketFacts, BucketStatus, BudgetStatus, DnsFacts, DnsStatus, HealthCheckStatus,
    OverloadStatus, PoolStatus, ProtectionStatus, RateLimitStatus, RetryStatus, RouteStatus,
    StatusDocument, StatusFacts, status_document,
};

/// Headers the synthetic `GET /` of `/api/dashboard/request` carries into the data plane
/// (C-MGMT-4): only `Accept`, `Accept-Language`, `User-Agent`, `X-Request-ID`, `traceparent`
/// and `tracestate`; never `Authorization`, `Cookie`, `Proxy-Authorization`, `X-Balancer-CSRF`
/// or anything else. Every value of an allowed header is kept.
#[must_use]
pub fn dashboard_forward_headers(headers: &HeaderMap) -> HeaderMap {
    const ALLOWED: [HeaderName; 6] = [
        http::header::ACCEPT,
        http::header::ACCEPT_LANGUAGE,
        http::header::USER_AGENT,
        HeaderName::from_static("x-request-id"),
        HeaderName::from_static("traceparent"),
        HeaderName::from_static("tracestate"),
    ];
    let mut out = HeaderMap::new();
    for name in ALLOWED {
        for v in headers.get_all(&name) {
            out.append(name.clone(), v.clone());
        }
    }
    out
}
