//! What a store failure means for the request (C-RATE-5), and the typed outcome the adapter
//! turns into a status and headers (C-RATE-1).
//!
//! A shared store (Redis, PostgreSQL) can be slow or down. The operator picks what that costs:
//! availability (`fail-open`: let everything through), protection (`fail-closed`: refuse with
//! `503` and leave the load balancer pool via readiness), or both, approximately
//! (`local-fallback`, the default: each replica limits on its own, so the effective limit is up
//! to replicas × capacity until the store returns). This is Envoy's `failure_mode_deny` of the
//! global rate-limit filter, with the local limiter as the third answer.

use core::fmt;
use core::str::FromStr;
use core::time::Duration;

use crate::bucket::{self, BucketParams, Take};

/// Errors parsing policy settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyError {
    /// `failure_mode` must be fail-open, fail-closed or local-fallback
    FailureMode(String),
    /// `storage` must be local, redis or postgres
    Storage(String),
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::FailureMode(s) => write!(
                f,
                "failure_mode must be fail-open, fail-closed or local-fallback, got {s:?}"
            ),
            PolicyError::Storage(s) => {
                write!(f, "storage must be local, redis or postgres, got {s:?}")
            }
        }
    }
}

impl std::error::Error for PolicyError {}

/// `rate_limit.failure_mode`: what to do when the shared store fails or times out (C-RATE-5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FailureMode {
    /// `fail-open`: allow the request, marked degraded.
    FailOpen,
    /// `fail-closed`: refuse with `503` and report not ready until the store answers again.
    FailClosed,
    /// `local-fallback` (the default): the local store decides, marked degraded.
    #[default]
    LocalFallback,
}

impl FailureMode {
    /// The config spelling.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            FailureMode::FailOpen => "fail-open",
            FailureMode::FailClosed => "fail-closed",
            FailureMode::LocalFallback => "local-fallback",
        }
    }
}

impl FromStr for FailureMode {
    type Err = PolicyError;
    /// Exactly the config spellings `fail-open`, `fail-closed`, `local-fallback`.
    fn from_str(s: &str) -> Result<FailureMode, PolicyError> {
        match s {
            "fail-open" => Ok(FailureMode::FailOpen),
            "fail-closed" => Ok(FailureMode::FailClosed),
            "local-fallback" => Ok(FailureMode::LocalFallback),
            _ => Err(PolicyError::FailureMode(s.to_owned())),
        }
    }
}

impl fmt::Display for FailureMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which store decided (`X-RateLimit-Storage`, C-RATE-1; `bucket.storage` in the status, C-MGMT-4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum StorageKind {
    /// The per-process store (the default).
    #[default]
    Local,
    /// The shared Redis store.
    Redis,
    /// The shared PostgreSQL store.
    Postgres,
    /// Rate limiting is off (`rate_limit.enabled: false`); only reported by the status endpoint.
    Disabled,
}

impl StorageKind {
    /// The header and status label: `local`, `redis`, `postgres` or `disabled`.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            StorageKind::Local => "local",
            StorageKind::Redis => "redis",
            StorageKind::Postgres => "postgres",
            StorageKind::Disabled => "disabled",
        }
    }

    /// Whether this is a shared store, whose calls can fail and then go through
    /// [`on_store_failure`].
    #[must_use]
    pub const fn is_shared(self) -> bool {
        matches!(self, StorageKind::Redis | StorageKind::Postgres)
    }
}

impl FromStr for StorageKind {
    type Err = PolicyError;
    /// The config values of `rate_limit.storage`: `local`, `redis`, `postgres`. (`disabled` is
    /// not a storage setting: it is what `enabled: false` reports.)
    fn from_str(s: &str) -> Result<StorageKind, PolicyError> {
        match s {
            "local" => Ok(StorageKind::Local),
            "redis" => Ok(StorageKind::Redis),
            "postgres" => Ok(StorageKind::Postgres),
            _ => Err(PolicyError::Storage(s.to_owned())),
        }
    }
}

impl fmt::Display for StorageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// What to do with a request whose shared-store call failed or timed out (C-RATE-5, C-RATE-6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureDecision {
    /// `fail-open`: allow without a bucket; the response says degraded
    /// ([`RateOutcome::fail_open`]).
    AllowDegraded,
    /// `fail-closed`: answer `503`; readiness is false until the store answers again.
    Reject,
    /// `local-fallback`: take from the local store and mark the outcome degraded
    /// ([`RateOutcome::from_take`] with `StorageKind::Local`, `degraded: true`).
    DecideLocally,
}

impl FailureDecision {
    /// The status to answer with instead of proxying, if any (`503` for [`Self::Reject`]).
    #[must_use]
    pub const fn status(self) -> Option<u16> {
        match self {
            FailureDecision::Reject => Some(503),
            FailureDecision::AllowDegraded | FailureDecision::DecideLocally => None,
        }
    }

    /// Whether `/readyz` may stay ready while the store is down (C-OBS-4, failure matrix).
    #[must_use]
    pub const fn ready(self) -> bool {
        !matches!(self, FailureDecision::Reject)
    }

    /// Whether responses decided this way carry `X-RateLimit-Degraded: true` and the degraded
    /// metric is 1.
    #[must_use]
    pub const fn degraded(self) -> bool {
        !matches!(self, FailureDecision::Reject)
    }
}

/// The decision for a request whose shared-store call failed (error, timeout after
/// `operation_timeout`, or a Redis `maxmemory` error: C-RATE-5, C-RATE-6).
#[must_use]
pub const fn on_store_failure(mode: FailureMode) -> FailureDecision {
    match mode {
        FailureMode::FailOpen => FailureDecision::AllowDegraded,
        FailureMode::FailClosed => FailureDecision::Reject,
        FailureMode::LocalFallback => FailureDecision::DecideLocally,
    }
}

/// Allowed or denied, with what the client needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RateDecision {
    /// Proxy the request.
    Allowed,
    /// Answer `429`; one token is back after `retry_after`.
    Denied {
        /// Exact time until one whole token is there.
        retry_after: Duration,
    },
}

/// The rate limiter's answer for one request: the decision and the headers every rate-limited
/// response carries, allowed or denied (C-RATE-1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateOutcome {
    /// Allowed or denied.
    pub decision: RateDecision,
    /// Bucket capacity (`X-RateLimit-Limit`).
    pub limit: u64,
    /// Whole tokens left after this request's own token (`X-RateLimit-Remaining`); 0 when denied.
    pub remaining: u64,
    /// Configured refill rate (`X-RateLimit-Refill-Per-Second`).
    pub refill_per_second: f64,
    /// Which store decided (`X-RateLimit-Storage`).
    pub storage: StorageKind,
    /// A fallback decided (`X-RateLimit-Degraded: true`).
    pub degraded: bool,
}

/// What the limiter did with one request (`result` label of
/// `load_balancer_rate_limit_decisions_total`, C-RATE-8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DecisionResult {
    /// Within the limit.
    Allowed,
    /// Over the limit: answered `429`.
    Limited,
    /// Over the limit in dry run: passed to its backend all the same.
    DryRunLimited,
}

impl DecisionResult {
    /// Every result, in label order.
    pub const ALL: [DecisionResult; 3] = [
        DecisionResult::Allowed,
        DecisionResult::Limited,
        DecisionResult::DryRunLimited,
    ];

    /// The metric label value (and the access log's `reason` for a dry-run decision).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            DecisionResult::Allowed => "allowed",
            DecisionResult::Limited => "limited",
            DecisionResult::DryRunLimited => "dry_run_limited",
        }
    }
}

/// Header names of C-RATE-1, lower-case as HTTP/2 requires and `http::HeaderName::from_static`
/// accepts (HTTP field names are case-insensitive).
pub mod header {
    /// Bucket capacity.
    pub const LIMIT: &str = "x-ratelimit-limit";
    /// Whole tokens left.
    pub const REMAINING: &str = "x-ratelimit-remaining";
    /// Refill rate, tokens per second.
    pub const REFILL_PER_SECOND: &str = "x-ratelimit-refill-per-second";
    /// `local`, `redis`, `postgres` or `disabled`.
    pub const STORAGE: &str = "x-ratelimit-storage";
    /// `true`, only when a fallback decided.
    pub const DEGRADED: &str = "x-ratelimit-degraded";
    /// Whole seconds until one token, rounded up, at least 1; only on `429`.
    pub const RETRY_AFTER: &str = "retry-after";
    /// The IETF draft's policy (draft-ietf-httpapi-ratelimit-headers):
    /// `"default";q=<capacity>;w=<seconds for a full refill>` (C-RATE-8).
    pub const POLICY: &str = "ratelimit-policy";
    /// The IETF draft's state: `"default";r=<tokens left>;t=<seconds until the next token>`
    /// (C-RATE-8).
    pub const RATELIMIT: &str = "ratelimit";
}

/// A value of the IETF draft's rate-limit headers (draft-ietf-httpapi-ratelimit-headers, a
/// Structured Fields list of one item named after weir's only policy, `"default"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Draft {
    /// `RateLimit-Policy`: the quota and its window.
    Policy {
        /// `q`: the bucket's capacity.
        quota: u64,
        /// `w`: whole seconds an empty bucket takes to fill, rounded up.
        window_secs: u64,
    },
    /// `RateLimit`: where the client stands.
    Limit {
        /// `r`: whole tokens left.
        remaining: u64,
        /// `t`: whole seconds until the next token, rounded up.
        next_secs: u64,
    },
}

impl fmt::Display for Draft {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Draft::Policy { quota, window_secs } => {
                write!(f, "\"default\";q={quota};w={window_secs}")
            }
            Draft::Limit {
                remaining,
                next_secs,
            } => write!(f, "\"default\";r={remaining};t={next_secs}"),
        }
    }
}

/// A header value, formatted by `Display` without allocating (adapters can map the integers to
/// `http::HeaderValue::from(u64)` directly).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HeaderText {
    /// An integer.
    Int(u64),
    /// The refill rate: shortest decimal that round-trips (`100`, `0.5`).
    Rate(f64),
    /// A fixed token (`local`, `true`).
    Static(&'static str),
    /// A value of the IETF draft headers (C-RATE-8).
    Draft(Draft),
}

impl fmt::Display for HeaderText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderText::Int(n) => write!(f, "{n}"),
            HeaderText::Rate(r) => write!(f, "{r}"),
            HeaderText::Static(s) => f.write_str(s),
            HeaderText::Draft(d) => write!(f, "{d}"),
        }
    }
}

impl RateOutcome {
    /// The outcome of a bucket take by `storage`: `refill_per_second` is the configured rate
    /// (the bucket keeps only its rounded interval).
    #[must_use]
    pub fn from_take(
        take: Take,
        params: &BucketParams,
        refill_per_second: f64,
        storage: StorageKind,
        degraded: bool,
    ) -> RateOutcome {
        let (decision, remaining) = match take {
            Take::Allowed { remaining } => (RateDecision::Allowed, remaining),
            Take::Denied { retry_after } => (RateDecision::Denied { retry_after }, 0),
        };
        RateOutcome {
            decision,
            limit: params.capacity(),
            remaining,
            refill_per_second,
            storage,
            degraded,
        }
    }

    /// `fail-open` with the store `storage` down: allowed, degraded, reported as if a full
    /// bucket had served it (remaining = capacity − 1), since the real count is unknown.
    #[must_use]
    pub fn fail_open(
        params: &BucketParams,
        refill_per_second: f64,
        storage: StorageKind,
    ) -> RateOutcome {
        RateOutcome {
            decision: RateDecision::Allowed,
            limit: params.capacity(),
            remaining: params.capacity().saturating_sub(1),
            refill_per_second,
            storage,
            degraded: true,
        }
    }

    /// A denial as dry run lets it through (C-RATE-8): allowed, with no whole token left (the
    /// headers say `remaining` 0 and no `Retry-After`, as an allowed response at the limit would).
    /// An allowed outcome is returned as it is.
    #[must_use]
    pub const fn let_through(self) -> RateOutcome {
        if self.is_allowed() {
            return self;
        }
        RateOutcome {
            decision: RateDecision::Allowed,
            remaining: 0,
            ..self
        }
    }

    /// Whether the request may proceed.
    #[must_use]
    pub const fn is_allowed(&self) -> bool {
        matches!(self.decision, RateDecision::Allowed)
    }

    /// `429` when denied, `None` when the request proceeds.
    #[must_use]
    pub const fn status(&self) -> Option<u16> {
        match self.decision {
            RateDecision::Allowed => None,
            RateDecision::Denied { .. } => Some(429),
        }
    }

    /// `Retry-After` seconds when denied: rounded up, at least 1 (C-RATE-1).
    #[must_use]
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self.decision {
            RateDecision::Allowed => None,
            RateDecision::Denied { retry_after } => Some(bucket::retry_after_secs(retry_after)),
        }
    }

    /// Whole seconds an empty bucket takes to fill (`w` of `RateLimit-Policy`), rounded up.
    #[must_use]
    pub fn window_secs(&self) -> u64 {
        ceil_secs(self.limit as f64 / self.refill_per_second)
    }

    /// Whole seconds until the next token (`t` of `RateLimit`), rounded up: when denied, the
    /// `Retry-After`; when allowed, one token's refill interval, the longest the next token can
    /// take (the stores report whole tokens left, not the fraction of the next one).
    #[must_use]
    pub fn next_token_secs(&self) -> u64 {
        self.retry_after_secs()
            .unwrap_or_else(|| ceil_secs(1.0 / self.refill_per_second))
    }

    /// The C-RATE-1 headers in a fixed order: limit, remaining, refill, storage, then
    /// `x-ratelimit-degraded: true` only when degraded and `retry-after` only when denied;
    /// then the IETF draft's `ratelimit-policy` and `ratelimit` (C-RATE-8).
    pub fn headers(&self) -> impl Iterator<Item = (&'static str, HeaderText)> + use<> {
        let degraded = self
            .degraded
            .then_some((header::DEGRADED, HeaderText::Static("true")));
        let retry = self
            .retry_after_secs()
            .map(|s| (header::RETRY_AFTER, HeaderText::Int(s)));
        [
            Some((header::LIMIT, HeaderText::Int(self.limit))),
            Some((header::REMAINING, HeaderText::Int(self.remaining))),
            Some((
                header::REFILL_PER_SECOND,
                HeaderText::Rate(self.refill_per_second),
            )),
            Some((header::STORAGE, HeaderText::Static(self.storage.label()))),
            degraded,
            retry,
            Some((
                header::POLICY,
                HeaderText::Draft(Draft::Policy {
                    quota: self.limit,
                    window_secs: self.window_secs(),
                }),
            )),
            Some((
                header::RATELIMIT,
                HeaderText::Draft(Draft::Limit {
                    remaining: self.remaining,
                    next_secs: self.next_token_secs(),
                }),
            )),
        ]
        .into_iter()
        .flatten()
    }

    /// [`Self::headers`] as `(name, String)` pairs (allocates; for tests and slow paths).
    #[must_use]
    pub fn header_strings(&self) -> Vec<(&'static str, String)> {
        self.headers().map(|(n, v)| (n, v.to_string())).collect()
    }
}

/// `x` seconds rounded up to a whole number (0 for a non-positive or non-finite `x`).
fn ceil_secs(x: f64) -> u64 {
    if x.is_finite() && x > 0.0 {
        x.ceil() as u64
    } else {
        0
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
