//! The retry policy: when a failed attempt may be retried (C-RETRY-1), how an attempt counts for
//! retries and the passive breaker (C-RETRY-1, C-RETRY-8, C-PATH-9), and what the client gets when
//! no retry is possible (C-RETRY-4).
//!
//! The predicate is split in two, by what it needs to know:
//! - [`RetryPolicy::decide`] is pure: it looks only at facts of this request (method, outcome,
//!   body, attempts so far, whether the client is still there) and answers [`RetryVerdict`].
//! - The two conditions that touch shared state are checked afterwards by the flow machine, in
//!   this order (C-RETRY-3): first reserve another available backend not yet tried (C-RETRY-2),
//!   *then* withdraw a token from the process-wide [`RetryBudget`] (C-RETRY-7). A retry that finds
//!   no backend costs no token. [`reserve_then_spend`] is that order, in one place.
//!
//! This follows Envoy's `retry_on` / `retriable_status_codes` and HAProxy's `retry-on` in naming
//! the retryable failures explicitly, and tower's `retry::Policy` in returning a decision value;
//! unlike Envoy (which retries on `5xx` by class) a status outside `statuses`, `500` included, is a
//! success, for retries and for the breaker alike (C-RETRY-1, C-HEALTH-3).
//!
//! Hot-path calls (`decide`, `classify`, `allows_method`) allocate nothing: methods are compared
//! with `eq_ignore_ascii_case` against upper-case tokens stored at construction.

use core::fmt;
use core::time::Duration;

use crate::bucket::{BucketError, BucketParams};
use crate::budget::RetryBudget;
use crate::time::Instant;

/// Lowest and highest allowed `max_attempts` (C-RETRY-1).
pub const MAX_ATTEMPTS_RANGE: core::ops::RangeInclusive<u32> = 1..=5;
/// Range of a status in `statuses`.
pub const STATUS_RANGE: core::ops::RangeInclusive<u16> = 400..=599;

/// The `server.retry` settings as written in configuration (before validation).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryParams {
    /// Attempts per request, the first included [2, 1..=5].
    pub max_attempts: u32,
    /// Wait for response headers per attempt [5s, > 0] (C-RETRY-5).
    pub per_try_timeout: Duration,
    /// Largest `Content-Length` that is buffered and so replayable [1 MiB].
    pub body_limit: u64,
    /// Methods that may be retried, any case [GET, HEAD, OPTIONS].
    pub methods: Vec<String>,
    /// Statuses that count as failures and may be retried, each in 400..=599 [502, 503, 504].
    pub statuses: Vec<u16>,
    /// Retry budget size in tokens [100, >= 1] (C-RETRY-7).
    pub budget_capacity: u64,
    /// Retry budget refill in tokens per second [10, > 0] (C-RETRY-7).
    pub budget_refill_per_second: f64,
    /// The full-jitter backoff before retry k is below `backoff_base` × 2^(k−1) [25ms; `0s`:
    /// no backoff] (C-RETRY-10).
    pub backoff_base: Duration,
    /// ... and below `backoff_max` [250ms, >= `backoff_base`] (C-RETRY-10).
    pub backoff_max: Duration,
    /// A replayable request in `methods` with no response head this long after its attempt
    /// was sent gets one more attempt on another backend [0s: no hedging] (C-HEDGE-1).
    pub hedge_delay: Duration,
}

impl Default for RetryParams {
    fn default() -> RetryParams {
        RetryParams {
            max_attempts: 2,
            per_try_timeout: Duration::from_secs(5),
            body_limit: 1024 * 1024,
            methods: vec!["GET".into(), "HEAD".into(), "OPTIONS".into()],
            statuses: vec![502, 503, 504],
            budget_capacity: 100,
            budget_refill_per_second: 10.0,
            backoff_base: Duration::from_millis(25),
            backoff_max: Duration::from_millis(250),
            hedge_delay: Duration::ZERO,
        }
    }
}

/// Errors in retry settings; each names its field (`field()`).
#[derive(Debug, Clone, PartialEq)]
pub enum RetryError {
    /// `max_attempts` is outside 1..=5
    MaxAttempts(u32),
    /// `per_try_timeout` is zero
    PerTryTimeout,
    /// `methods` holds an entry that is not an HTTP method token
    Method(String),
    /// `statuses` holds a status outside 400..=599
    Status(u16),
    /// `statuses` holds `429`: a backend's `429` is an answer, never retried (C-RETRY-11)
    TooManyRequests,
    /// `budget_capacity` is zero
    BudgetCapacity,
    /// `budget_refill_per_second` is not a finite number above zero
    BudgetRefill(f64),
    /// `budget_capacity` is too large for `budget_refill_per_second`
    BudgetTooLarge,
    /// `backoff_max` is below `backoff_base`
    BackoffMax,
}

impl RetryError {
    /// The configuration field at fault, as spelled under `server.retry`.
    #[must_use]
    pub fn field(&self) -> &'static str {
        match self {
            RetryError::MaxAttempts(_) => "max_attempts",
            RetryError::PerTryTimeout => "per_try_timeout",
            RetryError::Method(_) => "methods",
            RetryError::Status(_) | RetryError::TooManyRequests => "statuses",
            RetryError::BudgetCapacity | RetryError::BudgetTooLarge => "budget_capacity",
            RetryError::BudgetRefill(_) => "budget_refill_per_second",
            RetryError::BackoffMax => "backoff_max",
        }
    }
}

impl fmt::Display for RetryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetryError::MaxAttempts(n) => write!(f, "max_attempts must be in 1..=5, got {n}"),
            RetryError::PerTryTimeout => write!(f, "per_try_timeout must be above zero"),
            RetryError::Method(m) => write!(f, "methods: {m:?} is not an http method token"),
            RetryError::Status(s) => write!(f, "statuses: {s} is outside 400..=599"),
            RetryError::TooManyRequests => write!(
                f,
                "statuses: 429 is a backend's answer (passed on with its Retry-After), never retried"
            ),
            RetryError::BudgetCapacity => write!(f, "budget_capacity must be at least 1"),
            RetryError::BudgetRefill(r) => {
                write!(
                    f,
                    "budget_refill_per_second must be a finite number above 0, got {r}"
                )
            }
            RetryError::BudgetTooLarge => {
                write!(
                    f,
                    "budget_capacity is too large for budget_refill_per_second"
                )
            }
            RetryError::BackoffMax => write!(f, "backoff_max must be at least backoff_base"),
        }
    }
}

impl std::error::Error for RetryError {}

/// How an upstream attempt ended, as the flow machine saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// Response headers arrived with this status.
    Status(u16),
    /// The connection to the backend could not be established (refused, dial timeout, TLS):
    /// nothing of the request was written (C-RETRY-9).
    Connect,
    /// The backend refused the attempt before processing any of it, and weir still holds all of
    /// it to send again: an HTTP/2 stream reset with `REFUSED_STREAM`, or above the
    /// `last_stream_id` of the backend's `GOAWAY` (RFC 9113 §8.7, C-RETRY-9).
    Refused,
    /// No connection to the backend could be had: every one was full at `max_conns_per_host`
    /// for the whole connect timeout. Nothing was sent, and the backend is not at fault
    /// (neutral), yet the call may go elsewhere whatever its method and body (C-RETRY-9).
    Saturated,
    /// The connection failed after it was established, before response headers (reset, EOF).
    Transport,
    /// No response headers within `per_try_timeout` (C-RETRY-5).
    PerTryTimeout,
    /// The client went away; the attempt was cancelled (C-PATH-9).
    ClientGone,
}

impl AttemptOutcome {
    /// Whether nothing of the attempt reached the backend, so that it may be sent again
    /// whatever its method and body (C-RETRY-9): a connect error or a refused stream.
    #[must_use]
    pub fn nothing_sent(self) -> bool {
        matches!(
            self,
            AttemptOutcome::Connect | AttemptOutcome::Refused | AttemptOutcome::Saturated
        ) || (matches!(self, AttemptOutcome::Transport)
            && mutated!(TRANSPORT_COUNTS_AS_NOTHING_SENT))
    }
}

/// The request body, as far as replaying it is concerned (C-RETRY-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// No body.
    None,
    /// A body of `Content-Length` bytes; replayable when it fits `body_limit` (it is buffered).
    Sized(u64),
    /// A chunked or otherwise streaming body: never replayable.
    Streaming,
}

/// The facts of one request after a failed or finished attempt, for [`RetryPolicy::decide`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryFacts<'a> {
    /// The request method, any case.
    pub method: &'a str,
    /// How the latest attempt ended.
    pub outcome: AttemptOutcome,
    /// The request body.
    pub body: BodyKind,
    /// Attempts made so far, the latest included (1 after the first attempt).
    pub attempts: u32,
    /// Whether the client is still connected.
    pub client_present: bool,
}

/// Why a request is not retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NoRetryReason {
    /// The client went away (or the attempt ended because it did).
    ClientGone,
    /// The outcome is a success for retry purposes (a status not in `statuses`).
    OutcomeNotRetryable,
    /// The method is not in `methods`.
    MethodNotAllowed,
    /// The body is streaming or larger than `body_limit`.
    BodyNotReplayable,
    /// `attempts` reached `max_attempts`.
    AttemptsExhausted,
    /// No other available backend could be reserved (set by the flow, never by `decide`).
    NoOtherBackend,
    /// A backend was reserved but the retry budget had no token (set by the flow, never by
    /// `decide`); the response carries `X-Balancer-Retry-Budget: exhausted` (C-PATH-4).
    BudgetExhausted,
}

impl NoRetryReason {
    /// A stable snake-case label for logs and bounded metric labels.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            NoRetryReason::ClientGone => "client_gone",
            NoRetryReason::OutcomeNotRetryable => "outcome_not_retryable",
            NoRetryReason::MethodNotAllowed => "method_not_allowed",
            NoRetryReason::BodyNotReplayable => "body_not_replayable",
            NoRetryReason::AttemptsExhausted => "attempts_exhausted",
            NoRetryReason::NoOtherBackend => "no_other_backend",
            NoRetryReason::BudgetExhausted => "budget_exhausted",
        }
    }
}

/// The answer of [`RetryPolicy::decide`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryVerdict {
    /// Every per-request condition holds: reserve another backend, then spend a budget token
    /// ([`reserve_then_spend`]).
    Retry,
    /// Do not retry; answer the client per [`no_retry_response`].
    NoRetry(NoRetryReason),
}

/// How an attempt counts for retries and for the passive breaker (C-HEALTH-3): the breaker's
/// [`Outcome`], so the flow hands the classification straight to the slot.
pub use crate::breaker::Outcome as AttemptClass;

/// What the client receives when the request is not retried (C-RETRY-4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRetryResponse {
    /// Deliver the backend's response as it was: its status, headers and body.
    Deliver,
    /// No backend response exists: answer with this synthetic status.
    Synthetic(u16),
    /// Nobody to answer: the client is gone.
    Abandon,
}

/// What the client gets when `outcome` was the last attempt and no retry follows (C-RETRY-4):
/// a response is delivered as it was (a `503` with its body, not a synthetic `502`); a connect or
/// transport error with no response gives `502`; a per-try timeout gives `504`.
#[must_use]
pub const fn no_retry_response(outcome: AttemptOutcome) -> NoRetryResponse {
    match outcome {
        AttemptOutcome::Status(_) => NoRetryResponse::Deliver,
        AttemptOutcome::Connect | AttemptOutcome::Refused | AttemptOutcome::Transport => {
            NoRetryResponse::Synthetic(502)
        }
        AttemptOutcome::PerTryTimeout => NoRetryResponse::Synthetic(504),
        // The backend was busy, not broken: the answer of a saturated pool (C-POOL-6).
        AttemptOutcome::Saturated => NoRetryResponse::Synthetic(503),
        AttemptOutcome::ClientGone => NoRetryResponse::Abandon,
    }
}

/// The last two conditions of C-RETRY-1, in the order C-RETRY-3 requires: `reserve` another
/// available, untried backend (C-RETRY-2) and only if that succeeds withdraw a token from
/// `budget`; if the budget is empty the reservation is handed to `release` and nothing is spent.
/// Call it only after [`RetryPolicy::decide`] said [`RetryVerdict::Retry`].
pub fn reserve_then_spend<R>(
    budget: &RetryBudget,
    now: Instant,
    reserve: impl FnOnce() -> Option<R>,
    release: impl FnOnce(R),
) -> Result<R, NoRetryReason> {
    let Some(reservation) = reserve() else {
        return Err(NoRetryReason::NoOtherBackend);
    };
    if budget.try_withdraw(now) {
        Ok(reservation)
    } else {
        release(reservation);
        Err(NoRetryReason::BudgetExhausted)
    }
}

/// The validated retry policy (C-RETRY-1, C-RETRY-4, C-RETRY-5, C-RETRY-8).
///
/// Kinds: getters only (it holds no state; the shared budget is a [`RetryBudget`]). Build one
/// with [`RetryPolicy::new`]; `Default` is the contract's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    max_attempts: u32,
    per_try_timeout: Duration,
    body_limit: u64,
    /// Upper-case, deduplicated, in configuration order.
    methods: Vec<String>,
    /// Sorted, deduplicated.
    statuses: Vec<u16>,
    budget: BucketParams,
    budget_refill_per_second: f64,
    backoff_base: Duration,
    backoff_max: Duration,
    hedge_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        // Invariant: the contract's defaults pass validation (checked by `defaults_are_the_contracts`).
        #[allow(clippy::expect_used)]
        RetryPolicy::new(RetryParams::default()).expect("the default retry settings are valid")
    }
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

impl RetryPolicy {
    /// Validate `params`. Methods are stored upper-case and deduplicated (so `get` and `GET` are
    /// one); statuses are sorted and deduplicated. Empty `methods` or `statuses` lists are
    /// accepted: no method is retried, or only connect/transport errors and timeouts are.
    pub fn new(params: RetryParams) -> Result<RetryPolicy, RetryError> {
        let RetryParams {
            max_attempts,
            per_try_timeout,
            body_limit,
            methods,
            statuses,
            budget_capacity,
            budget_refill_per_second,
            backoff_base,
            backoff_max,
            hedge_delay,
        } = params;
        if !MAX_ATTEMPTS_RANGE.contains(&max_attempts) {
            return Err(RetryError::MaxAttempts(max_attempts));
        }
        if per_try_timeout.is_zero() {
            return Err(RetryError::PerTryTimeout);
        }
        let mut upper: Vec<String> = Vec::with_capacity(methods.len());
        for m in methods {
            if m.is_empty() || !m.bytes().all(is_tchar) {
                return Err(RetryError::Method(m));
            }
            let m = m.to_ascii_uppercase();
            if !upper.contains(&m) {
                upper.push(m);
            }
        }
        let mut statuses = statuses;
        if let Some(&bad) = statuses.iter().find(|s| !STATUS_RANGE.contains(s)) {
            return Err(RetryError::Status(bad));
        }
        // A `429` asks the client to slow down: retrying it elsewhere would defeat it, and
        // counting it as a failure would eject a backend for protecting itself.
        if statuses.contains(&429) {
            return Err(RetryError::TooManyRequests);
        }
        statuses.sort_unstable();
        statuses.dedup();
        // A zero base turns backoff off whatever the cap; otherwise the cap cannot be below it.
        if !backoff_base.is_zero() && backoff_max < backoff_base {
            return Err(RetryError::BackoffMax);
        }
        let budget =
            BucketParams::new(budget_capacity, budget_refill_per_second).map_err(|e| match e {
                BucketError::ZeroCapacity => RetryError::BudgetCapacity,
                BucketError::BadRefill(r) => RetryError::BudgetRefill(r),
                BucketError::TooLarge => RetryError::BudgetTooLarge,
            })?;
        Ok(RetryPolicy {
            max_attempts,
            per_try_timeout,
            body_limit,
            methods: upper,
            statuses,
            budget,
            budget_refill_per_second,
            backoff_base,
            backoff_max,
            hedge_delay,
        })
    }

    /// The policy as settings again (methods upper-case, statuses sorted).
    #[must_use]
    pub fn to_params(&self) -> RetryParams {
        RetryParams {
            max_attempts: self.max_attempts,
            per_try_timeout: self.per_try_timeout,
            body_limit: self.body_limit,
            methods: self.methods.clone(),
            statuses: self.statuses.clone(),
            budget_capacity: self.budget.capacity(),
            budget_refill_per_second: self.budget_refill_per_second,
            backoff_base: self.backoff_base,
            backoff_max: self.backoff_max,
            hedge_delay: self.hedge_delay,
        }
    }

    /// How long an attempt may wait for its response head before a hedge is sent beside it;
    /// `None` when hedging is off (C-HEDGE-1).
    #[must_use]
    pub fn hedge_delay(&self) -> Option<Duration> {
        (!self.hedge_delay.is_zero()).then_some(self.hedge_delay)
    }

    /// Whether a request with `method` and `body` may be hedged: hedging is on, the method may
    /// be retried and the body is replayable (C-HEDGE-1). `max_attempts`, another backend and a
    /// budget token are checked when the hedge is due.
    #[must_use]
    pub fn may_hedge(&self, method: &str, body: BodyKind) -> bool {
        self.hedge_delay().is_some() && self.allows_method(method) && self.body_replayable(body)
    }

    /// The exclusive upper bound of the backoff before retry `k` (1 for the first retry):
    /// `min(backoff_max, backoff_base × 2^(k−1))`, zero when backoff is off or `k` is 0
    /// (C-RETRY-10).
    #[must_use]
    pub fn backoff_cap(&self, k: u32) -> Duration {
        if k == 0 || self.backoff_base.is_zero() {
            return Duration::ZERO;
        }
        let doubled = self
            .backoff_base
            .checked_mul(1u32.checked_shl(k - 1).unwrap_or(u32::MAX))
            .unwrap_or(Duration::MAX);
        if mutated!(BACKOFF_UNCAPPED) {
            return doubled;
        }
        doubled.min(self.backoff_max)
    }

    /// The full-jitter wait before retry `k` (AWS's "full jitter": uniform in
    /// `[0, backoff_cap(k))`, whole nanoseconds), drawn from `rng` (C-RETRY-10). Full jitter
    /// spreads the retries of many requests that failed at once over the whole window instead
    /// of sending them together again.
    pub fn backoff(&self, k: u32, rng: &mut dyn crate::rng::Rng) -> Duration {
        let cap = u64::try_from(self.backoff_cap(k).as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rng.below(cap))
    }

    /// Attempts per request, the first included.
    #[must_use]
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// How long an attempt may wait for response headers (C-RETRY-5).
    #[must_use]
    pub fn per_try_timeout(&self) -> Duration {
        self.per_try_timeout
    }

    /// The deadline for response headers of an attempt sent at `sent` (C-RETRY-5). Once headers
    /// have arrived the deadline no longer applies: a body that has started streaming is never
    /// cut by it.
    #[must_use]
    pub fn header_deadline(&self, sent: Instant) -> Instant {
        sent + self.per_try_timeout
    }

    /// Largest replayable `Content-Length`.
    #[must_use]
    pub fn body_limit(&self) -> u64 {
        self.body_limit
    }

    /// Retryable methods, upper-case.
    #[must_use]
    pub fn methods(&self) -> &[String] {
        &self.methods
    }

    /// Retryable statuses, sorted.
    #[must_use]
    pub fn statuses(&self) -> &[u16] {
        &self.statuses
    }

    /// The retry budget's shape, for [`RetryBudget::new`] and [`RetryBudget::reload`].
    #[must_use]
    pub fn budget_params(&self) -> BucketParams {
        self.budget
    }

    /// The budget capacity as configured.
    #[must_use]
    pub fn budget_capacity(&self) -> u64 {
        self.budget.capacity()
    }

    /// The budget refill rate as configured (for status pages; the bucket rounds the interval up).
    #[must_use]
    pub fn budget_refill_per_second(&self) -> f64 {
        self.budget_refill_per_second
    }

    /// Whether `method` (any case) may be retried.
    #[must_use]
    pub fn allows_method(&self, method: &str) -> bool {
        self.methods.iter().any(|m| m.eq_ignore_ascii_case(method))
    }

    /// Whether `status` is one of `statuses`.
    #[must_use]
    pub fn is_retryable_status(&self, status: u16) -> bool {
        self.statuses.binary_search(&status).is_ok()
    }

    /// Whether `body` can be sent again: none, or a `Content-Length` within `body_limit`.
    #[must_use]
    pub fn body_replayable(&self, body: BodyKind) -> bool {
        match body {
            BodyKind::None => true,
            BodyKind::Sized(len) => len <= self.body_limit,
            BodyKind::Streaming => false,
        }
    }

    /// How `outcome` counts for retries and for the breaker: a status in `statuses` is a failure,
    /// any other status (`500` included) a success (C-RETRY-1); connect and transport errors and
    /// per-try timeouts are failures (C-RETRY-8); a refused stream is a failure as a refused
    /// connection is (the backend turned the attempt away); a client that went away is neutral
    /// (C-PATH-9).
    #[must_use]
    pub fn classify(&self, outcome: AttemptOutcome) -> AttemptClass {
        match outcome {
            AttemptOutcome::Status(s) if self.is_retryable_status(s) => AttemptClass::Failure,
            AttemptOutcome::Status(_) => AttemptClass::Success,
            AttemptOutcome::Connect
            | AttemptOutcome::Refused
            | AttemptOutcome::Transport
            | AttemptOutcome::PerTryTimeout => AttemptClass::Failure,
            AttemptOutcome::ClientGone | AttemptOutcome::Saturated => AttemptClass::Neutral,
        }
    }

    /// The per-request part of C-RETRY-1. When several conditions fail, the reason reported is
    /// the first of: client gone, outcome not retryable, method not allowed, body not
    /// replayable, attempts exhausted. An attempt of which nothing was sent
    /// ([`AttemptOutcome::nothing_sent`]) skips the method and body conditions: it may be sent
    /// again whatever they are (C-RETRY-9). A [`RetryVerdict::Retry`] still needs another
    /// backend and a budget token, in that order ([`reserve_then_spend`], C-RETRY-3).
    #[must_use]
    pub fn decide(&self, facts: &RetryFacts<'_>) -> RetryVerdict {
        let reason = if !facts.client_present || facts.outcome == AttemptOutcome::ClientGone {
            NoRetryReason::ClientGone
        } else if self.classify(facts.outcome) != AttemptClass::Failure
            && facts.outcome != AttemptOutcome::Saturated
        {
            NoRetryReason::OutcomeNotRetryable
        } else if !facts.outcome.nothing_sent() && !self.allows_method(facts.method) {
            NoRetryReason::MethodNotAllowed
        } else if !facts.outcome.nothing_sent() && !self.body_replayable(facts.body) {
            NoRetryReason::BodyNotReplayable
        } else if facts.attempts >= self.max_attempts + u32::from(mutated!(RETRY_ATTEMPTS_PLUS_ONE))
        {
            NoRetryReason::AttemptsExhausted
        } else {
            return RetryVerdict::Retry;
        };
        RetryVerdict::NoRetry(reason)
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
