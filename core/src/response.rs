//! Every response weir makes itself, in one place: status, headers and JSON body per outcome
//! (C-PATH-11), the headers weir adds to responses it passes on (C-PATH-4), and the protection
//! event each outcome counts (C-LOAD-3).
//!
//! The design doc asks for typed outcomes "mapped to a status code in one place": decisions
//! elsewhere in core are values ([`Reject`], [`Failure`], [`ManagementError`]), and this module is
//! the only code that knows which status, which headers and which message each one gets. The
//! adapters copy what it says onto the wire and format nothing themselves. Envoy does the same
//! with its local-reply mapper (one table from response flags to status and body).
//!
//! Everything here allocates nothing until a body is rendered: a [`SyntheticResponse`] is a small
//! `Copy` value (status, a static message, the request id and a fixed header list), and header
//! values are [`Text`], formatted by `Display` or turned into `http::HeaderValue`s.

use core::fmt;

use crate::flow::{Deliver, Failure};
use crate::h1::HeadError;
use crate::rate::HeaderText;
use crate::request_id::RequestId;
use crate::select::NoBackend;

pub use crate::outcome::{ProtectionReason, Reject};

/// Header names weir writes, lower-case (HTTP field names are case-insensitive; HTTP/2 requires
/// lower case and `http::HeaderName::from_static` accepts only that).
pub mod header {
    /// The id of the backend that produced a response (C-PATH-4).
    pub const BACKEND: &str = "x-balancer-backend";
    /// The attempt number that produced a response (C-PATH-4).
    pub const ATTEMPTS: &str = "x-balancer-attempts";
    /// The request id in force (C-PATH-3).
    pub const REQUEST_ID: &str = "x-request-id";
    /// `exhausted` when the retry budget stopped a retry (C-PATH-4).
    pub const RETRY_BUDGET: &str = "x-balancer-retry-budget";
    /// On upstream requests: the id of the backend the attempt goes to (C-PATH-4).
    pub const BACKEND_ATTEMPT: &str = "x-balancer-backend-attempt";
    /// `true` on an overload `503` (C-LOAD-1).
    pub const OVERLOADED: &str = "x-balancer-overloaded";
    /// Seconds to wait before trying again.
    pub const RETRY_AFTER: &str = "retry-after";
    /// `application/json` on every synthetic response (C-PATH-11).
    pub const CONTENT_TYPE: &str = "content-type";
    /// `no-store` on management JSON responses (C-MGMT-2).
    pub const CACHE_CONTROL: &str = "cache-control";
    /// The allowed methods on a `405`.
    pub const ALLOW: &str = "allow";
    /// `Bearer` on a `401` (RFC 6750).
    pub const WWW_AUTHENTICATE: &str = "www-authenticate";
    /// `close` on a response after which the client connection closes (C-PATH-12).
    pub const CONNECTION: &str = "connection";
}

/// The media type of every synthetic body.
pub const JSON: &str = "application/json";

/// A header value weir writes, formatted by `Display` without allocating.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Text<'a> {
    /// An integer.
    Int(u64),
    /// A string: a fixed token, a backend id, a request id.
    Str(&'a str),
    /// A rate: the shortest decimal that round-trips (`100`, `0.5`).
    Rate(f64),
    /// A request id: its text is read only where it is written (a head writer takes
    /// its bytes, not a `&str` checked for UTF-8 on every response).
    Id(&'a RequestId),
    /// A `grpc-message`: a message and a request id, percent-encoded (C-GRPC-3).
    Grpc(crate::grpc::Message<'a>),
    /// An IETF draft rate-limit header value (C-RATE-8).
    Draft(crate::rate::Draft),
}

impl fmt::Display for Text<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Text::Int(n) => write!(f, "{n}"),
            Text::Str(s) => f.write_str(s),
            Text::Rate(r) => write!(f, "{r}"),
            Text::Id(id) => f.write_str(id.as_str()),
            Text::Grpc(m) => write!(f, "{m}"),
            Text::Draft(d) => write!(f, "{d}"),
        }
    }
}

impl Text<'_> {
    /// The value as an `http::HeaderValue`; `None` if it holds bytes a header cannot carry
    /// (only possible for a string that was not validated, such as a malformed id).
    #[must_use]
    pub fn to_header_value(&self) -> Option<http::HeaderValue> {
        match self {
            Text::Int(n) => Some(http::HeaderValue::from(*n)),
            Text::Str(s) => http::HeaderValue::from_str(s).ok(),
            Text::Rate(_) | Text::Grpc(_) | Text::Draft(_) => {
                http::HeaderValue::from_str(&self.to_string()).ok()
            }
            Text::Id(id) => http::HeaderValue::from_bytes(id.as_bytes()).ok(),
        }
    }
}

impl From<HeaderText> for Text<'static> {
    fn from(t: HeaderText) -> Text<'static> {
        match t {
            HeaderText::Int(n) => Text::Int(n),
            HeaderText::Rate(r) => Text::Rate(r),
            HeaderText::Static(s) => Text::Str(s),
            HeaderText::Draft(d) => Text::Draft(d),
        }
    }
}

impl Reject {
    /// The status the client gets.
    #[must_use]
    pub const fn status(&self) -> u16 {
        match self {
            Reject::RateLimited(_) => 429,
            Reject::Overloaded(_)
            | Reject::StoreUnavailable
            | Reject::BulkheadFull(_)
            | Reject::NoBackend(_) => 503,
        }
    }

    /// The `message` of the JSON body.
    #[must_use]
    pub const fn message(&self) -> &'static str {
        match self {
            Reject::Overloaded(_) => "overloaded: too many requests in flight, retry later",
            Reject::RateLimited(_) => "rate limit exceeded",
            Reject::StoreUnavailable => "rate limit store unavailable",
            Reject::BulkheadFull(_) => "route at its concurrency limit (bulkhead full)",
            Reject::NoBackend(why) => match why {
                NoBackend::EmptyPool => "no backend available: empty_pool",
                NoBackend::AllTried => "no backend available: all_tried",
                NoBackend::NoHealthy => "no backend available: no_healthy_backend",
                NoBackend::AllOpen => "no backend available: all_circuits_open",
                NoBackend::AllSaturated => "no backend available: all_backends_saturated",
                NoBackend::AdaptiveLimit => {
                    "adaptive concurrency limit: every backend is at its limit, retry later"
                }
                NoBackend::NoneEnabled => "no backend available: no_enabled_backend",
            },
        }
    }
}

/// Errors of the management plane that weir answers itself (C-MGMT-1..4). Every management JSON
/// response carries `Cache-Control: no-store` (C-MGMT-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManagementError {
    /// No valid bearer token (C-MGMT-1): `401` with `WWW-Authenticate: Bearer`.
    Unauthorized,
    /// `Sec-Fetch-Site: cross-site` on a mutating request (C-MGMT-2): `403`.
    CrossSite,
    /// `X-Balancer-CSRF` is not exactly `1` (C-MGMT-2): `403`.
    CsrfHeader,
    /// The body is not `application/json` (C-MGMT-2): `415`.
    UnsupportedMediaType,
    /// `runtime_mutations` is off (C-MGMT-3): `403`.
    MutationsDisabled,
    /// The body is over 64 KiB (C-MGMT-2): `413`.
    PayloadTooLarge,
    /// The body is not exactly one JSON object of known fields (C-MGMT-2): `400`.
    BadRequest,
    /// Unknown path (C-MGMT-4): `404`.
    NotFound,
    /// Known path, wrong method (C-MGMT-4): `405` with `Allow`.
    MethodNotAllowed {
        /// The `Allow` value, e.g. `GET, HEAD`.
        allow: &'static str,
    },
}

impl ManagementError {
    /// The status the client gets.
    #[must_use]
    pub const fn status(&self) -> u16 {
        match self {
            ManagementError::Unauthorized => 401,
            ManagementError::CrossSite
            | ManagementError::CsrfHeader
            | ManagementError::MutationsDisabled => 403,
            ManagementError::UnsupportedMediaType => 415,
            ManagementError::PayloadTooLarge => 413,
            ManagementError::BadRequest => 400,
            ManagementError::NotFound => 404,
            ManagementError::MethodNotAllowed { .. } => 405,
        }
    }

    /// The `message` of the JSON body.
    #[must_use]
    pub const fn message(&self) -> &'static str {
        match self {
            ManagementError::Unauthorized => "missing or invalid bearer token",
            ManagementError::CrossSite => "cross-site requests are not allowed",
            ManagementError::CsrfHeader => "x-balancer-csrf: 1 is required",
            ManagementError::UnsupportedMediaType => "content type must be application/json",
            ManagementError::MutationsDisabled => {
                "runtime mutations are disabled: change the configuration and roll it out declaratively"
            }
            ManagementError::PayloadTooLarge => "request body is over 64 KiB",
            ManagementError::BadRequest => "request body must be one json object of known fields",
            ManagementError::NotFound => "not found",
            ManagementError::MethodNotAllowed { .. } => "method not allowed",
        }
    }
}

/// Which of the three causes keeps weir from being ready (C-OBS-4), checked in this
/// order; both `/readyz` endpoints name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NotReady {
    /// A graceful shutdown began (C-PATH-10).
    ShuttingDown,
    /// The shared rate-limit store is down and `rate_limit.failure_mode` is `fail-closed`
    /// (C-RATE-5).
    RateLimitStoreDown,
    /// No backend of any pool can take requests (unhealthy, disabled, draining or circuit-open).
    NoBackendAvailable,
}

impl NotReady {
    /// The cause's stable name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            NotReady::ShuttingDown => "shutting_down",
            NotReady::RateLimitStoreDown => "rate_limit_store_down",
            NotReady::NoBackendAvailable => "no_backend_available",
        }
    }

    /// The `message` of the `503`: the cause by name, then in words.
    #[must_use]
    pub const fn message(self) -> &'static str {
        match self {
            NotReady::ShuttingDown => "not ready (shutting_down): shutting down",
            NotReady::RateLimitStoreDown => {
                "not ready (rate_limit_store_down): the shared rate-limit store is down and rate_limit.failure_mode is fail-closed"
            }
            NotReady::NoBackendAvailable => {
                "not ready (no_backend_available): no backend can take requests (each is unhealthy, disabled, draining or circuit-open)"
            }
        }
    }
}

/// Errors of a data-plane request that weir answers itself although no flow outcome covers
/// them: the request is refused before any attempt, or the attempt loop cannot hand over what it
/// got. Every one has the C-PATH-11 shape (with `X-Request-ID` and, when the request was
/// allowed, the rate headers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientError {
    /// Request target `*` with a method other than `OPTIONS`: `400`.
    AsteriskWithoutOptions,
    /// A target that cannot be proxied (authority-form, malformed): `400`.
    UnsupportedTarget,
    /// A request body (buffered, or streamed to a backend) did not arrive within
    /// `server.read_timeout`: `408`.
    BodyTimeout,
    /// A body to be buffered could not be read: `400`.
    BodyUnreadable,
    /// The backend's path prefix and the target make an upstream target too long: `414`.
    TargetTooLong,
    /// `/readyz` while not ready (C-OBS-4): `503`, the body naming which cause holds.
    NotReady(NotReady),
    /// The backend answered `101` to a request that asked for no upgrade: `502`.
    UnrequestedUpgrade,
    /// The attempt loop ended without a response to pass on (an internal inconsistency, never
    /// expected): `502`.
    Incomplete,
    /// `TRACE` while `server.allow_trace` is false (`method::check`): `405` with `Allow`.
    MethodNotAllowed,
    /// An HTTP/2 request whose `host` names another entity than its `:authority` (RFC 9113
    /// §8.3.1, `h2::host_agrees`): malformed, `400`.
    HostMismatch,
    /// A gRPC call whose `grpc-timeout` is not 1 to 8 digits and a unit (C-GRPC-2): `400`,
    /// `INTERNAL` to the gRPC client, as grpc-go's server answers it.
    MalformedGrpcTimeout,
    /// A gRPC call's own deadline (its `grpc-timeout`) passed before a response head
    /// (C-GRPC-2): `504`, `DEADLINE_EXCEEDED` to the gRPC client; the attempt is cancelled.
    DeadlineExceeded,
}

impl From<crate::method::Refused> for ClientError {
    fn from(_: crate::method::Refused) -> Self {
        ClientError::MethodNotAllowed
    }
}

impl ClientError {
    /// The status the client gets.
    #[must_use]
    pub const fn status(&self) -> u16 {
        match self {
            ClientError::AsteriskWithoutOptions
            | ClientError::UnsupportedTarget
            | ClientError::BodyUnreadable
            | ClientError::HostMismatch
            | ClientError::MalformedGrpcTimeout => 400,
            ClientError::BodyTimeout => 408,
            ClientError::DeadlineExceeded => 504,
            ClientError::MethodNotAllowed => 405,
            ClientError::TargetTooLong => 414,
            ClientError::NotReady(_) => 503,
            ClientError::UnrequestedUpgrade | ClientError::Incomplete => 502,
        }
    }

    /// A stable snake_case name for the access log's `reason`.
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        match self {
            ClientError::AsteriskWithoutOptions | ClientError::UnsupportedTarget => "bad_target",
            ClientError::BodyTimeout => "body_timeout",
            ClientError::BodyUnreadable => "body_unreadable",
            ClientError::TargetTooLong => "target_too_long",
            ClientError::NotReady(_) => "not_ready",
            ClientError::UnrequestedUpgrade => "unrequested_upgrade",
            ClientError::Incomplete => "incomplete",
            ClientError::MethodNotAllowed => "method_not_allowed",
            // The reason the HTTP/1 codec gives a refused head (a bad `Host` among them).
            ClientError::HostMismatch => "malformed_request",
            ClientError::MalformedGrpcTimeout => "malformed_grpc_timeout",
            ClientError::DeadlineExceeded => "deadline_exceeded",
        }
    }

    /// The `message` of the JSON body.
    #[must_use]
    pub const fn message(&self) -> &'static str {
        match self {
            ClientError::AsteriskWithoutOptions => "request target '*' needs OPTIONS",
            ClientError::UnsupportedTarget => {
                "request target is not origin-, absolute- or asterisk-form"
            }
            ClientError::BodyTimeout => "request body was not received within read_timeout",
            ClientError::BodyUnreadable => "request body could not be read",
            ClientError::TargetTooLong => "upstream path and query are too long",
            ClientError::NotReady(cause) => cause.message(),
            ClientError::UnrequestedUpgrade => {
                "backend switched protocols without an upgrade request"
            }
            ClientError::Incomplete => "upstream request could not be completed",
            ClientError::MethodNotAllowed => {
                "method TRACE is not allowed (server.allow_trace is false)"
            }
            ClientError::HostMismatch => "host does not name the same authority as :authority",
            ClientError::MalformedGrpcTimeout => "grpc-timeout is not 1 to 8 digits and a unit",
            ClientError::DeadlineExceeded => "the call's deadline (grpc-timeout) passed",
        }
    }
}

/// Most headers a synthetic response adds besides `Content-Type` and `X-Request-ID` (the rate
/// headers of a `429` are the longest list: six, and the IETF draft's two, C-RATE-8).
const MAX_EXTRA: usize = 8;

/// A response weir makes itself (C-PATH-11): a status, a fixed header list and the JSON body
/// `{"code": <status>, "message": "...", "request_id": "..."}` with
/// `Content-Type: application/json`; or, to a gRPC request ([`SyntheticResponse::for_grpc`],
/// C-GRPC-3), the same outcome as a trailers-only gRPC answer. Build one with [`SyntheticResponse::reject`],
/// [`SyntheticResponse::failure`], [`SyntheticResponse::client_error`] or
/// [`SyntheticResponse::management`].
///
/// It is complete: it already carries `X-Request-ID` (C-PATH-3), so an adapter that adds that
/// header to every response must `insert` it, not `append` it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SyntheticResponse<'a> {
    status: u16,
    message: &'static str,
    request_id: &'a str,
    extra: [Option<(&'static str, Text<'static>)>; MAX_EXTRA],
    grpc: bool,
}

impl<'a> SyntheticResponse<'a> {
    fn new(status: u16, message: &'static str, request_id: &'a str) -> SyntheticResponse<'a> {
        SyntheticResponse {
            status,
            message,
            request_id,
            extra: [None; MAX_EXTRA],
            grpc: false,
        }
    }

    /// The same answer for a gRPC request when `grpc` (C-GRPC-3, `crate::grpc`): status `200`,
    /// `Content-Type: application/grpc`, `grpc-status` (the code of the outcome's own status,
    /// [`crate::grpc::code_for`]) and `grpc-message` (the message and the request id) among the
    /// headers, and no body, so that the head ends the stream (gRPC's "Trailers-Only"). The other
    /// headers (`X-Request-ID`, `Retry-After`, the rate headers) stay.
    #[must_use]
    pub fn for_grpc(mut self, grpc: bool) -> SyntheticResponse<'a> {
        self.grpc = grpc;
        self
    }

    /// Whether this is the gRPC form (see [`SyntheticResponse::for_grpc`]).
    #[must_use]
    pub fn is_grpc(&self) -> bool {
        self.grpc
    }

    /// The status of the outcome (weir's own, as in the JSON body's `code`), whatever the form
    /// on the wire: the access log and metrics count by it.
    #[must_use]
    pub fn outcome_status(&self) -> u16 {
        self.status
    }

    /// Add a header; the lists built here never exceed [`MAX_EXTRA`] (checked by the tests), and
    /// an overflow would drop the header rather than panic.
    fn with(mut self, name: &'static str, value: Text<'static>) -> SyntheticResponse<'a> {
        if let Some(free) = self.extra.iter_mut().find(|h| h.is_none()) {
            *free = Some((name, value));
        }
        self
    }

    /// The answer to a request turned away before any attempt.
    #[must_use]
    pub fn reject(reject: &Reject, request_id: &'a str) -> SyntheticResponse<'a> {
        let r = SyntheticResponse::new(reject.status(), reject.message(), request_id);
        match reject {
            Reject::Overloaded(_) => r
                .with(header::RETRY_AFTER, Text::Int(1))
                .with(header::OVERLOADED, Text::Str("true")),
            Reject::RateLimited(outcome) => outcome
                .headers()
                .fold(r, |r, (name, value)| r.with(name, value.into())),
            // A full bulkhead frees up as the route's requests end: worth retrying soon.
            Reject::BulkheadFull(_) => r.with(header::RETRY_AFTER, Text::Int(1)),
            // Slots free up as the backends' requests end, and the limit regrows (C-LOAD-4).
            Reject::NoBackend(NoBackend::AdaptiveLimit) => {
                r.with(header::RETRY_AFTER, Text::Int(1))
            }
            Reject::StoreUnavailable | Reject::NoBackend(_) => r,
        }
    }

    /// The answer when the last attempt failed without a response (C-RETRY-4): `502` or `504`,
    /// with `X-Balancer-Attempts` (how many attempts were made) and, when the budget stopped a
    /// retry, `X-Balancer-Retry-Budget: exhausted`. No `X-Balancer-Backend`: no backend produced
    /// it.
    #[must_use]
    pub fn failure(failure: &Failure, request_id: &'a str) -> SyntheticResponse<'a> {
        let message = match failure.cause {
            crate::flow::AttemptError::PerTryTimeout => "upstream timed out before responding",
            crate::flow::AttemptError::Connect => "upstream connection failed",
            crate::flow::AttemptError::Refused => {
                "upstream refused the request before processing it"
            }
            crate::flow::AttemptError::Saturated => {
                "every connection to the upstream is busy (max_conns_per_host)"
            }
            crate::flow::AttemptError::Transport | crate::flow::AttemptError::ClientGone => {
                "upstream connection broke before a response"
            }
            crate::flow::AttemptError::InvalidResponse => {
                "upstream sent an invalid response (status outside 100-599)"
            }
        };
        let r = SyntheticResponse::new(failure.status, message, request_id)
            .with(header::ATTEMPTS, Text::Int(u64::from(failure.attempts)));
        if failure.budget_exhausted {
            r.with(header::RETRY_BUDGET, Text::Str("exhausted"))
        } else {
            r
        }
    }

    /// The answer to a data-plane request that no flow outcome covers (see [`ClientError`]).
    #[must_use]
    pub fn client_error(error: &ClientError, request_id: &'a str) -> SyntheticResponse<'a> {
        let r = SyntheticResponse::new(error.status(), error.message(), request_id);
        match error {
            ClientError::MethodNotAllowed => r.with(header::ALLOW, Text::Str(crate::method::ALLOW)),
            _ => r,
        }
    }

    /// The answer to an HTTP/1 head the codec refused before any exchange began (`400`, `414`,
    /// `431`; docs/proxy.md, "HTTP/1 parsing rules"), whose `message` says which rule it broke.
    #[must_use]
    pub fn refused_head(error: &HeadError, request_id: &'a str) -> SyntheticResponse<'a> {
        SyntheticResponse::new(error.status(), error.message(), request_id)
    }

    /// The answer to a refused management request, with `Cache-Control: no-store`.
    #[must_use]
    pub fn management(error: &ManagementError, request_id: &'a str) -> SyntheticResponse<'a> {
        let r = SyntheticResponse::new(error.status(), error.message(), request_id)
            .with(header::CACHE_CONTROL, Text::Str("no-store"));
        match error {
            ManagementError::Unauthorized => r.with(header::WWW_AUTHENTICATE, Text::Str("Bearer")),
            ManagementError::MethodNotAllowed { allow } => r.with(header::ALLOW, Text::Str(allow)),
            _ => r,
        }
    }

    /// The status on the wire: the outcome's, or `200` in the gRPC form.
    #[must_use]
    pub fn status(&self) -> u16 {
        if self.grpc { 200 } else { self.status }
    }

    /// The body's `message`.
    #[must_use]
    pub fn message(&self) -> &'static str {
        self.message
    }

    /// Every header, in a fixed order: `Content-Type`, `X-Request-ID`, in the gRPC form
    /// `grpc-status` and `grpc-message`, then the outcome's own.
    pub fn headers(&self) -> impl Iterator<Item = (&'static str, Text<'a>)> + '_ {
        let content_type = if self.grpc {
            crate::grpc::CONTENT_TYPE
        } else {
            JSON
        };
        let grpc = self.grpc.then(|| {
            let code = crate::grpc::code_for(self.status);
            let message = crate::grpc::Message {
                message: self.message,
                request_id: self.request_id,
            };
            [
                (crate::grpc::STATUS, Text::Int(u64::from(code.as_u8()))),
                (crate::grpc::MESSAGE, Text::Grpc(message)),
            ]
        });
        [
            (header::CONTENT_TYPE, Text::Str(content_type)),
            (header::REQUEST_ID, Text::Str(self.request_id)),
        ]
        .into_iter()
        .chain(grpc.into_iter().flatten())
        .chain(self.extra.iter().flatten().copied())
    }

    /// The JSON body (C-PATH-11), empty in the gRPC form. Strings are escaped by `serde_json`.
    #[must_use]
    pub fn body(&self) -> String {
        if self.grpc {
            return String::new();
        }
        serde_json::json!({
            "code": self.status,
            "message": self.message,
            "request_id": self.request_id,
        })
        .to_string()
    }

    /// The whole response as an `http::Response`. A header whose value cannot be a header value
    /// (a request id that was never validated) is left out rather than failing the response.
    #[must_use]
    pub fn to_http(&self) -> http::Response<String> {
        let mut response = http::Response::new(self.body());
        *response.status_mut() = http::StatusCode::from_u16(self.status())
            .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
        let headers = response.headers_mut();
        for (name, value) in self.headers() {
            if let Some(value) = value.to_header_value() {
                // Every name is a lower-case constant of `header` (checked by the tests).
                headers.append(http::HeaderName::from_static(name), value);
            }
        }
        response
    }
}

/// The headers weir adds to a response it passes on from a backend (C-PATH-4, C-PATH-3):
/// `X-Balancer-Backend: <backend_id>`, `X-Balancer-Attempts: <attempt>`, `X-Request-ID` and,
/// when the budget stopped a retry, `X-Balancer-Retry-Budget: exhausted`. Set them with `insert`
/// (they replace any the backend sent).
pub fn delivered_headers<'a>(
    deliver: &Deliver,
    backend_id: &'a str,
    request_id: &'a RequestId,
) -> impl Iterator<Item = (&'static str, Text<'a>)> + use<'a> {
    [
        Some((header::BACKEND, Text::Str(backend_id))),
        Some((header::ATTEMPTS, Text::Int(u64::from(deliver.attempt)))),
        Some((header::REQUEST_ID, Text::Id(request_id))),
        deliver
            .budget_exhausted
            .then_some((header::RETRY_BUDGET, Text::Str("exhausted"))),
    ]
    .into_iter()
    .flatten()
}

/// The header weir adds to every upstream request: `X-Balancer-Backend-Attempt: <backend id>`
/// (C-PATH-4).
#[must_use]
pub fn upstream_attempt_header(backend_id: &str) -> (&'static str, Text<'_>) {
    (header::BACKEND_ATTEMPT, Text::Str(backend_id))
}

#[cfg(all(test, not(loom)))]
mod tests;
