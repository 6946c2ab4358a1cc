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

use core::fmt;
use std::net::IpAddr;

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use serde::Deserialize;

use crate::config::{self, ConfigError, Secret};
use crate::rate::ClientKey;
use crate::response::{ManagementError, SyntheticResponse, header};
use crate::rng::Rng;
use crate::runtime::{AdminState, Runtime};
use crate::time::Instant;

mod body;
mod patch;
mod status;

#[cfg(all(test, not(loom)))]
mod tests;

pub use patch::{ConfigPatch, HealthPatch, RatePatch, RetryPatch};
pub use status::{
    BackendStatus, BucketFacts, BucketStatus, BudgetStatus, HealthCheckStatus, OverloadStatus,
    PoolStatus, ProtectionStatus, RateLimitStatus, RetryStatus, RouteStatus, StatusDocument,
    StatusFacts, format_duration, status_document,
};

/// Largest request body, in bytes (C-MGMT-2). The adapter reads at most one byte more, so an
/// oversized body is seen as such and answered `413` without being read to the end.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The CSRF header every mutating request carries with the value `1` (C-MGMT-2).
pub const CSRF_HEADER: &str = "x-balancer-csrf";

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

/// Who may call, from the configuration in force.
#[derive(Debug, Clone, Copy)]
pub struct Access<'a> {
    /// The bearer token (C-MGMT-1).
    pub token: Option<&'a Secret>,
    /// No token needed (the process warned at start).
    pub allow_insecure: bool,
    /// Mutating endpoints allowed (C-MGMT-3).
    pub runtime_mutations: bool,
}

impl<'a> Access<'a> {
    /// The access rules of `runtime`'s configuration.
    #[must_use]
    pub fn of(runtime: &'a Runtime) -> Access<'a> {
        let m = &runtime.config().management;
        Access {
            token: m.auth_token.as_ref(),
            allow_insecure: m.allow_insecure,
            runtime_mutations: m.runtime_mutations,
        }
    }
}

/// Check the bearer token (C-MGMT-1): exactly one `Authorization` header of the form
/// `Bearer <token>` (scheme case-insensitive, RFC 7235) whose token matches in constant time.
/// `allow_insecure` lets every request through; without a configured token and without
/// `allow_insecure` nothing gets through.
pub fn authorize(
    req: &MgmtRequest<'_>,
    token: Option<&Secret>,
    allow_insecure: bool,
) -> Result<(), ManagementError> {
    if allow_insecure {
        return Ok(());
    }
    let Some(token) = token else {
        return Err(ManagementError::Unauthorized);
    };
    let mut values = req.headers.get_all(http::header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return Err(ManagementError::Unauthorized);
    };
    let v = value.as_bytes();
    let Some((scheme, rest)) = v.split_at_checked(6) else {
        return Err(ManagementError::Unauthorized);
    };
    if !scheme.eq_ignore_ascii_case(b"bearer") || rest.first() != Some(&b' ') {
        return Err(ManagementError::Unauthorized);
    }
    let candidate = rest.trim_ascii();
    if token.matches(candidate) {
        Ok(())
    } else {
        Err(ManagementError::Unauthorized)
    }
}

/// The header checks of a mutating request, in the contract's order (C-MGMT-2): cross-site,
/// CSRF header, media type, body size. The body's form is checked by [`parse`].
pub fn guard(req: &MgmtRequest<'_>) -> Result<(), ManagementError> {
    let cross_site = req.headers.get_all("sec-fetch-site").iter().any(|v| {
        v.as_bytes()
            .trim_ascii()
            .eq_ignore_ascii_case(b"cross-site")
    });
    if cross_site {
        return Err(ManagementError::CrossSite);
    }
    let mut csrf = req.headers.get_all(CSRF_HEADER).iter();
    match (csrf.next(), csrf.next()) {
        (Some(v), None) if v.as_bytes() == b"1" => {}
        _ => return Err(ManagementError::CsrfHeader),
    }
    let mut ct = req.headers.get_all(http::header::CONTENT_TYPE).iter();
    match (ct.next(), ct.next()) {
        (Some(v), None) if is_json(v) => {}
        _ => return Err(ManagementError::UnsupportedMediaType),
    }
    if req.body.len() > MAX_BODY_BYTES {
        return Err(ManagementError::PayloadTooLarge);
    }
    Ok(())
}

/// `application/json`, case-insensitive, parameters (`; charset=utf-8`) allowed.
fn is_json(v: &HeaderValue) -> bool {
    let b = v.as_bytes();
    let essence = b.split(|c| *c == b';').next().unwrap_or(b).trim_ascii();
    essence.eq_ignore_ascii_case(b"application/json")
}

/// A mutation, its body parsed.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Enable the first `count` backends of the default pool, disable the rest.
    SetCount {
        /// How many.
        count: u64,
    },
    /// Enable or disable one backend (enabling clears a drain).
    SetEnabled {
        /// Its id.
        id: String,
        /// The new state.
        enabled: bool,
    },
    /// Drain one backend.
    Drain {
        /// Its id.
        id: String,
    },
    /// Refill the caller's bucket to `capacity` tokens.
    Limit {
        /// Tokens the bucket holds afterwards.
        capacity: u64,
    },
    /// Change dynamic settings.
    Patch(Box<ConfigPatch>),
}

/// A request that passed every check: a read for the adapter to serve, or a mutation to apply.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    /// A read endpoint (never [`Endpoint::is_mutating`]).
    Read(Endpoint),
    /// A mutation, allowed by `runtime_mutations`.
    Mutate(Command),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CountBody {
    count: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EnabledBody {
    enabled: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EmptyBody {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitBody {
    capacity: u64,
}

/// The body as exactly one JSON object of known fields (C-MGMT-2): the first byte after
/// whitespace must open an object (serde would read a struct from an array too), and nothing
/// but whitespace may follow it; duplicate and unknown fields are rejected.
fn json_object<'de, T: Deserialize<'de>>(body: &'de [u8]) -> Result<T, ManagementError> {
    if body.trim_ascii_start().first() != Some(&b'{') {
        return Err(ManagementError::BadRequest);
    }
    serde_json::from_slice(body).map_err(|_| ManagementError::BadRequest)
}

/// Run every check of a request, in the order of the module doc, without touching any state:
/// authentication, routing, the C-MGMT-2 guards and body, then `runtime_mutations`.
pub fn parse(req: &MgmtRequest<'_>, access: &Access<'_>) -> Result<Parsed, ManagementError> {
    authorize(req, access.token, access.allow_insecure)?;
    let endpoint = route(req.method, req.path)?;
    if !endpoint.is_mutating() {
        return Ok(Parsed::Read(endpoint));
    }
    guard(req)?;
    let command = match endpoint {
        Endpoint::SetCount => Command::SetCount {
            count: json_object::<CountBody>(req.body)?.count,
        },
        Endpoint::SetEnabled { id } => Command::SetEnabled {
            id,
            enabled: json_object::<EnabledBody>(req.body)?.enabled,
        },
        Endpoint::Drain { id } => {
            json_object::<EmptyBody>(req.body)?;
            Command::Drain { id }
        }
        Endpoint::Limit => Command::Limit {
            capacity: json_object::<LimitBody>(req.body)?.capacity,
        },
        _ => Command::Patch(Box::new(json_object::<ConfigPatch>(req.body)?)),
    };
    if !access.runtime_mutations {
        return Err(ManagementError::MutationsDisabled);
    }
    Ok(Parsed::Mutate(command))
}

/// [`parse`] over raw parts, for fuzzing (`fuzz_targets/mgmt_request`) and replay: a method
/// that is not a token is refused `400` as an HTTP server would; a header that is not a valid
/// name or value is dropped; a path that is not UTF-8 names no endpoint (`404` once
/// authenticated). Never panics.
pub fn parse_raw(
    method: &[u8],
    path: &[u8],
    headers: &[(&[u8], &[u8])],
    body: &[u8],
    client: IpAddr,
    access: &Access<'_>,
) -> Result<Parsed, ManagementError> {
    let method = Method::from_bytes(method).map_err(|_| ManagementError::BadRequest)?;
    // Not UTF-8: no endpoint has that path; authentication still comes first.
    let path = core::str::from_utf8(path).unwrap_or("\u{fffd}");
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            map.append(n, v);
        }
    }
    parse(
        &MgmtRequest {
            method: &method,
            path,
            headers: &map,
            body,
            client,
        },
        access,
    )
}

/// One error of a rejected change: the configuration path and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FieldError {
    /// Configuration path, e.g. `rate_limit.capacity` or `server.retry.max_attempts`.
    pub path: String,
    /// What is wrong (never a secret, C-CONF-3).
    pub message: String,
}

impl From<&ConfigError> for FieldError {
    fn from(e: &ConfigError) -> FieldError {
        FieldError {
            path: e.path.clone(),
            message: e.message.clone(),
        }
    }
}

/// A management response. Every one is JSON with `Cache-Control: no-store` (C-MGMT-2).
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A refusal with the fixed answer of [`ManagementError`] (C-PATH-11 body).
    Refused(ManagementError),
    /// A refusal with a specific message and, for a rejected change, every error:
    /// `{"code", "message", "request_id", "errors": [{"path", "message"}]}`.
    Problem {
        /// `400` or `404`.
        status: u16,
        /// What is wrong.
        message: String,
        /// Field errors (may be empty).
        errors: Vec<FieldError>,
    },
    /// A success document.
    Json {
        /// `200` or `202`.
        status: u16,
        /// The body.
        body: serde_json::Value,
    },
}

impl Reply {
    fn applied(status: u16, body: serde_json::Value) -> Reply {
        Reply::Json { status, body }
    }

    fn invalid(message: impl Into<String>, errors: Vec<FieldError>) -> Reply {
        Reply::Problem {
            status: 400,
            message: message.into(),
            errors,
        }
    }

    /// The status.
    #[must_use]
    pub fn status(&self) -> u16 {
        match self {
            Reply::Refused(e) => e.status(),
            Reply::Problem { status, .. } | Reply::Json { status, .. } => *status,
        }
    }

    /// The JSON body.
    #[must_use]
    pub fn body(&self, request_id: &str) -> String {
        match self {
            Reply::Refused(e) => SyntheticResponse::management(e, request_id).body(),
            Reply::Problem {
                status,
                message,
                errors,
            } => serde_json::json!({
                "code": status,
                "message": message,
                "request_id": request_id,
                "errors": errors,
            })
            .to_string(),
            Reply::Json { body, .. } => body.to_string(),
        }
    }

    /// The whole response: status, `Content-Type: application/json`, `Cache-Control: no-store`,
    /// `X-Request-ID`, and for refusals the headers of [`SyntheticResponse::management`]
    /// (`WWW-Authenticate`, `Allow`).
    #[must_use]
    pub fn to_http(&self, request_id: &str) -> http::Response<String> {
        if let Reply::Refused(e) = self {
            return SyntheticResponse::management(e, request_id).to_http();
        }
        let mut response = http::Response::new(self.body(request_id));
        *response.status_mut() = http::StatusCode::from_u16(self.status())
            .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
        let h = response.headers_mut();
        h.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static(crate::response::JSON),
        );
        h.insert(
            http::header::CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        );
        if let Ok(v) = HeaderValue::from_str(request_id) {
            h.insert(HeaderName::from_static(header::REQUEST_ID), v);
        }
        response
    }
}

/// What the adapter does with a management request.
#[derive(Debug)]
pub enum Decision {
    /// Serve this read endpoint: `/healthz`, `/readyz`, `/metrics` from the adapter's own
    /// state; the status from [`status_document`]; the synthetic request through the data plane
    /// with [`dashboard_forward_headers`].
    Read(Endpoint),
    /// Answer with this reply; nothing else to do (a refusal, or a change already applied to
    /// the shared backend state).
    Reply(Reply),
    /// Set the caller's rate-limit bucket (in the store in force) to hold `tokens` tokens, then
    /// answer with `reply`.
    RefillBucket {
        /// The caller's key (C-RATE-2).
        key: ClientKey,
        /// Tokens the bucket holds afterwards (at most the capacity).
        tokens: u64,
        /// The answer.
        reply: Reply,
    },
    /// Publish this runtime exactly as a reload publishes one, then answer with `reply`.
    Publish {
        /// The next runtime.
        runtime: Box<Runtime>,
        /// The answer (`200 {"status":"applied"}`).
        reply: Reply,
    },
}

impl Decision {
    /// The reply to send (after the action, if any); `None` for [`Decision::Read`].
    #[must_use]
    pub fn reply(&self) -> Option<&Reply> {
        match self {
            Decision::Read(_) => None,
            Decision::Reply(r)
            | Decision::RefillBucket { reply: r, .. }
            | Decision::Publish { reply: r, .. } => Some(r),
        }
    }
}

/// Handle a management request against the runtime in force: [`parse`], then [`apply`].
/// The adapter serialises mutations (one at a time) and access-logs every one (C-MGMT-5).
pub fn handle(
    req: &MgmtRequest<'_>,
    runtime: &Runtime,
    now: Instant,
    rng: &mut dyn Rng,
) -> Decision {
    match parse(req, &Access::of(runtime)) {
        Err(ManagementError::BadRequest) => match route(req.method, req.path) {
            Ok(endpoint) if endpoint.is_mutating() => {
                Decision::Reply(body::problem(&endpoint, req.body))
            }
            _ => Decision::Reply(Reply::Refused(ManagementError::BadRequest)),
        },
        Err(e) => Decision::Reply(Reply::Refused(e)),
        Ok(Parsed::Read(endpoint)) => Decision::Read(endpoint),
        Ok(Parsed::Mutate(command)) => apply(command, runtime, req.client, now, rng),
    }
}

/// `404` naming the backend id that is not in the configuration (issue 20).
fn unknown_backend(id: &str) -> Reply {
    let shown: String = id.chars().take(128).collect();
    Reply::Problem {
        status: 404,
        message: format!("no backend with id {shown:?}"),
        errors: vec![FieldError {
            path: "id".to_owned(),
            message: format!("no backend with id {shown:?} in any pool"),
        }],
    }
}

/// Apply a mutation to `runtime` (C-MGMT-4). Backend flags are shared state and change at once;
/// a bucket refill and a configuration change come back as actions.
pub fn apply(
    command: Command,
    runtime: &Runtime,
    client: IpAddr,
    now: Instant,
    rng: &mut dyn Rng,
) -> Decision {
    match command {
        Command::SetCount { count } => Decision::Reply(set_count(runtime, count, now)),
        Command::SetEnabled { id, enabled } => match runtime.find_backend(&id) {
            None => Decision::Reply(unknown_backend(&id)),
            Some((_, b)) => {
                b.set_enabled(enabled, now);
                Decision::Reply(Reply::applied(
                    200,
                    serde_json::json!({"status": "applied", "id": id, "enabled": enabled}),
                ))
            }
        },
        Command::Drain { id } => match runtime.find_backend(&id) {
            None => Decision::Reply(unknown_backend(&id)),
            Some((_, b)) => {
                b.start_drain(now);
                Decision::Reply(Reply::applied(
                    202,
                    serde_json::json!({"status": "draining", "id": id}),
                ))
            }
        },
        Command::Limit { capacity } => {
            let rate = &runtime.config().rate;
            if capacity > rate.capacity() {
                return Decision::Reply(Reply::invalid(
                    format!(
                        "capacity must be within 0..={}, got {capacity}",
                        rate.capacity()
                    ),
                    Vec::new(),
                ));
            }
            Decision::RefillBucket {
                key: ClientKey::new(client, &rate.key()),
                tokens: capacity,
                reply: Reply::applied(
                    200,
                    serde_json::json!({"status": "applied", "tokens": capacity}),
                ),
            }
        }
        Command::Patch(p) => patch_config(&p, runtime, now, rng),
    }
}

/// `{"count": n}`: enable the first `n` backends of the default pool in config order, disable
/// the rest (`400` unless `1 ≤ n ≤ backends`). Only the default pool: it is the reference's one
/// backend list; named pools are changed one backend at a time.
fn set_count(runtime: &Runtime, count: u64, now: Instant) -> Reply {
    let Some(pool) = runtime.pool(0) else {
        return Reply::invalid("there is no default pool", Vec::new());
    };
    let backends = pool.backends();
    let n = backends.len() as u64;
    if !(1..=n).contains(&count) {
        return Reply::invalid(
            format!("count must be within 1..={n}, got {count}"),
            Vec::new(),
        );
    }
    for (i, b) in backends.iter().enumerate() {
        b.set_enabled((i as u64) < count, now);
    }
    Reply::applied(
        200,
        serde_json::json!({"status": "applied", "count": count}),
    )
}

/// `PATCH /api/dashboard/config`: see the module doc (C-CONF-8).
fn patch_config(p: &ConfigPatch, runtime: &Runtime, now: Instant, rng: &mut dyn Rng) -> Decision {
    let mut cfg = runtime.config().config.clone();
    let errors = p.apply_to(&mut cfg);
    if !errors.is_empty() {
        return Decision::Reply(Reply::invalid("invalid configuration", errors));
    }
    let valid = match config::validate_config(cfg, &runtime.secrets()) {
        Ok(v) => v,
        Err(e) => {
            return Decision::Reply(Reply::invalid(
                "invalid configuration",
                e.errors().iter().map(FieldError::from).collect(),
            ));
        }
    };
    match Runtime::build_with(valid, Some(runtime), AdminState::Keep, now, rng) {
        Ok(next) => Decision::Publish {
            runtime: Box::new(next),
            reply: Reply::applied(200, serde_json::json!({"status": "applied"})),
        },
        Err(e) => Decision::Reply(Reply::invalid(
            "invalid configuration",
            vec![FieldError {
                path: String::new(),
                message: e.to_string(),
            }],
        )),
    }
}

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

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
