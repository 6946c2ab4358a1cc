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
    /// `budget_capacity` is zero
    BudgetCapacity,
    /// `budget_refill_per_second` is not a finite number above zero
    BudgetRefill(f64),
    /// `budget_capacity` is too large for `budget_refill_per_second`
    BudgetTooLarge,
}

impl RetryError {
    /// The configuration field at fault, as spelled under `server.retry`.
    #[must_use]
    pub fn field(&self) -> &'static str {
        match self {
            RetryError::MaxAttempts(_) => "max_attempts",
            RetryError::PerTryTimeout => "per_try_timeout",
            RetryError::Method(_) => "methods",
            RetryError::Status(_) => "statuses",
            RetryError::BudgetCapacity | RetryError::BudgetTooLarge => "budget_capacity",
            RetryError::BudgetRefill(_) => "budget_refill_per_second",
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
        }
    }
}

impl std::error::Error for RetryError {}

/// How an upstream attempt ended, as the flow machine saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// Response headers arrived with this status.
    Status(u16),
    /// The connection to the backend could not be established (refused, dial timeout, TLS).
    Connect,
    /// The connection failed after it was established, before response headers (reset, EOF).
    Transport,
    /// No response headers within `per_try_timeout` (C-RETRY-5).
    PerTryTimeout,
    /// The client went away; the attempt was cancelled (C-PATH-9).
    ClientGone,
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
        AttemptOutcome::Connect | AttemptOutcome::Transport => NoRetryResponse::Synthetic(502),
        AttemptOutcome::PerTryTimeout => NoRetryResponse::Synthetic(504),
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
        statuses.sort_unstable();
        statuses.dedup();
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
        }
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
    /// per-try timeouts are failures (C-RETRY-8); a client that went away is neutral (C-PATH-9).
    #[must_use]
    pub fn classify(&self, outcome: AttemptOutcome) -> AttemptClass {
        match outcome {
            AttemptOutcome::Status(s) if self.is_retryable_status(s) => AttemptClass::Failure,
            AttemptOutcome::Status(_) => AttemptClass::Success,
            AttemptOutcome::Connect | AttemptOutcome::Transport | AttemptOutcome::PerTryTimeout => {
                AttemptClass::Failure
            }
            AttemptOutcome::ClientGone => AttemptClass::Neutral,
        }
    }

    /// The per-request part of C-RETRY-1. When several conditions fail, the reason reported is
    /// the first of: client gone, outcome not retryable, method not allowed, body not
    /// replayable, attempts exhausted. A [`RetryVerdict::Retry`] still needs another backend
    /// and a budget token, in that order ([`reserve_then_spend`], C-RETRY-3).
    #[must_use]
    pub fn decide(&self, facts: &RetryFacts<'_>) -> RetryVerdict {
        let reason = if !facts.client_present || facts.outcome == AttemptOutcome::ClientGone {
            NoRetryReason::ClientGone
        } else if self.classify(facts.outcome) != AttemptClass::Failure {
            NoRetryReason::OutcomeNotRetryable
        } else if !self.allows_method(facts.method) {
            NoRetryReason::MethodNotAllowed
        } else if !self.body_replayable(facts.body) {
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
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn policy() -> RetryPolicy {
        RetryPolicy::default()
    }

    /// Facts for which every per-request condition of C-RETRY-1 holds.
    fn retryable() -> RetryFacts<'static> {
        RetryFacts {
            method: "GET",
            outcome: AttemptOutcome::Status(503),
            body: BodyKind::None,
            attempts: 1,
            client_present: true,
        }
    }

    #[test]
    fn defaults_are_the_contracts() {
        let p = policy();
        assert_eq!(p.max_attempts(), 2);
        assert_eq!(p.per_try_timeout(), Duration::from_secs(5));
        assert_eq!(p.body_limit(), 1_048_576);
        assert_eq!(p.methods(), ["GET", "HEAD", "OPTIONS"]);
        assert_eq!(p.statuses(), [502, 503, 504]);
        assert_eq!(p.budget_capacity(), 100);
        assert_eq!(p.budget_refill_per_second(), 10.0);
        assert_eq!(p.to_params(), RetryParams::default());
    }

    #[test]
    fn c_retry_1_all_conditions_hold_retries() {
        assert_eq!(policy().decide(&retryable()), RetryVerdict::Retry);
    }

    /// C-RETRY-1 truth table: each condition, broken alone, blocks the retry with its reason.
    #[test]
    fn c_retry_1_each_condition_alone_blocks_a_retry() {
        let p = policy();
        let cases: [(RetryFacts<'static>, NoRetryReason); 8] = [
            (
                RetryFacts {
                    method: "POST",
                    ..retryable()
                },
                NoRetryReason::MethodNotAllowed,
            ),
            (
                RetryFacts {
                    outcome: AttemptOutcome::Status(500),
                    ..retryable()
                },
                NoRetryReason::OutcomeNotRetryable,
            ),
            (
                RetryFacts {
                    outcome: AttemptOutcome::Status(200),
                    ..retryable()
                },
                NoRetryReason::OutcomeNotRetryable,
            ),
            (
                RetryFacts {
                    body: BodyKind::Streaming,
                    ..retryable()
                },
                NoRetryReason::BodyNotReplayable,
            ),
            (
                RetryFacts {
                    body: BodyKind::Sized(1_048_577),
                    ..retryable()
                },
                NoRetryReason::BodyNotReplayable,
            ),
            (
                RetryFacts {
                    attempts: 2,
                    ..retryable()
                },
                NoRetryReason::AttemptsExhausted,
            ),
            (
                RetryFacts {
                    client_present: false,
                    ..retryable()
                },
                NoRetryReason::ClientGone,
            ),
            (
                RetryFacts {
                    outcome: AttemptOutcome::ClientGone,
                    ..retryable()
                },
                NoRetryReason::ClientGone,
            ),
        ];
        for (facts, reason) in cases {
            assert_eq!(p.decide(&facts), RetryVerdict::NoRetry(reason), "{facts:?}");
        }
    }

    #[test]
    fn c_retry_1_retryable_outcomes_and_bodies() {
        let p = policy();
        for outcome in [
            AttemptOutcome::Status(502),
            AttemptOutcome::Status(503),
            AttemptOutcome::Status(504),
            AttemptOutcome::Connect,
            AttemptOutcome::Transport,
            AttemptOutcome::PerTryTimeout,
        ] {
            let f = RetryFacts {
                outcome,
                ..retryable()
            };
            assert_eq!(p.decide(&f), RetryVerdict::Retry, "{outcome:?}");
        }
        for body in [
            BodyKind::None,
            BodyKind::Sized(0),
            BodyKind::Sized(1_048_576),
        ] {
            let f = RetryFacts {
                body,
                ..retryable()
            };
            assert_eq!(p.decide(&f), RetryVerdict::Retry, "{body:?}");
        }
    }

    #[test]
    fn c_retry_1_methods_compare_case_insensitively() {
        let p = RetryPolicy::new(RetryParams {
            methods: vec!["get".into(), "Put".into(), "GET".into()],
            ..RetryParams::default()
        })
        .unwrap();
        assert_eq!(p.methods(), ["GET", "PUT"], "normalised and deduplicated");
        for m in ["GET", "get", "gEt", "PUT", "put"] {
            assert!(p.allows_method(m), "{m}");
            let f = RetryFacts {
                method: m,
                ..retryable()
            };
            assert_eq!(p.decide(&f), RetryVerdict::Retry);
        }
        for m in ["HEAD", "POST", "", "GETX", "GE"] {
            assert!(!p.allows_method(m), "{m}");
        }
        assert!(policy().allows_method("options"));
    }

    #[test]
    fn c_retry_1_max_attempts_bounds_retries() {
        let p = RetryPolicy::new(RetryParams {
            max_attempts: 3,
            ..RetryParams::default()
        })
        .unwrap();
        for (attempts, ok) in [(1, true), (2, true), (3, false), (4, false)] {
            let v = p.decide(&RetryFacts {
                attempts,
                ..retryable()
            });
            assert_eq!(v == RetryVerdict::Retry, ok, "attempts {attempts}");
        }
        let once = RetryPolicy::new(RetryParams {
            max_attempts: 1,
            ..RetryParams::default()
        })
        .unwrap();
        assert_eq!(
            once.decide(&retryable()),
            RetryVerdict::NoRetry(NoRetryReason::AttemptsExhausted)
        );
    }

    #[test]
    fn c_retry_1_500_is_a_success_and_statuses_are_configurable() {
        let p = policy();
        assert_eq!(
            p.classify(AttemptOutcome::Status(500)),
            AttemptClass::Success
        );
        assert_eq!(
            p.classify(AttemptOutcome::Status(404)),
            AttemptClass::Success
        );
        assert_eq!(
            p.classify(AttemptOutcome::Status(200)),
            AttemptClass::Success
        );
        assert_eq!(
            p.classify(AttemptOutcome::Status(503)),
            AttemptClass::Failure
        );
        let q = RetryPolicy::new(RetryParams {
            statuses: vec![500, 429],
            ..RetryParams::default()
        })
        .unwrap();
        assert_eq!(q.statuses(), [429, 500]);
        assert_eq!(
            q.classify(AttemptOutcome::Status(500)),
            AttemptClass::Failure
        );
        assert_eq!(
            q.classify(AttemptOutcome::Status(503)),
            AttemptClass::Success
        );
        let f = RetryFacts {
            outcome: AttemptOutcome::Status(429),
            ..retryable()
        };
        assert_eq!(q.decide(&f), RetryVerdict::Retry);
    }

    #[test]
    fn c_retry_8_timeouts_are_failures_client_gone_is_neutral() {
        let p = policy();
        assert_eq!(
            p.classify(AttemptOutcome::PerTryTimeout),
            AttemptClass::Failure
        );
        assert_eq!(p.classify(AttemptOutcome::Connect), AttemptClass::Failure);
        assert_eq!(p.classify(AttemptOutcome::Transport), AttemptClass::Failure);
        assert_eq!(
            p.classify(AttemptOutcome::ClientGone),
            AttemptClass::Neutral
        );
    }

    #[test]
    fn c_retry_4_what_the_client_gets_without_a_retry() {
        assert_eq!(
            no_retry_response(AttemptOutcome::Status(503)),
            NoRetryResponse::Deliver
        );
        assert_eq!(
            no_retry_response(AttemptOutcome::Status(500)),
            NoRetryResponse::Deliver
        );
        assert_eq!(
            no_retry_response(AttemptOutcome::Connect),
            NoRetryResponse::Synthetic(502)
        );
        assert_eq!(
            no_retry_response(AttemptOutcome::Transport),
            NoRetryResponse::Synthetic(502)
        );
        assert_eq!(
            no_retry_response(AttemptOutcome::PerTryTimeout),
            NoRetryResponse::Synthetic(504)
        );
        assert_eq!(
            no_retry_response(AttemptOutcome::ClientGone),
            NoRetryResponse::Abandon
        );
    }

    #[test]
    fn c_retry_5_header_deadline_is_per_try_timeout_after_send() {
        let p = RetryPolicy::new(RetryParams {
            per_try_timeout: Duration::from_millis(250),
            ..RetryParams::default()
        })
        .unwrap();
        assert_eq!(
            p.header_deadline(Instant::from_secs(1)),
            Instant::from_millis(1250)
        );
        assert_eq!(p.header_deadline(Instant::MAX), Instant::MAX);
    }

    #[test]
    fn c_retry_3_budget_is_spent_only_after_a_backend_is_reserved() {
        let budget = RetryBudget::new(BucketParams::new(1, 1.0).unwrap());
        let now = Instant::from_secs(1);
        // No backend: no token spent.
        let r = reserve_then_spend(&budget, now, || None::<u32>, |_| panic!("nothing reserved"));
        assert_eq!(r, Err(NoRetryReason::NoOtherBackend));
        assert_eq!(budget.tokens(now), 1);
        // Backend reserved: the token is spent.
        let r = reserve_then_spend(&budget, now, || Some(7u32), |_| panic!("kept"));
        assert_eq!(r, Ok(7));
        assert_eq!(budget.tokens(now), 0);
        // Budget empty: the reservation is released, not kept.
        let mut released = None;
        let r = reserve_then_spend(&budget, now, || Some(8u32), |b| released = Some(b));
        assert_eq!(r, Err(NoRetryReason::BudgetExhausted));
        assert_eq!(released, Some(8));
        assert_eq!(NoRetryReason::BudgetExhausted.as_str(), "budget_exhausted");
    }

    #[test]
    fn validation_names_the_field() {
        let bad = |f: fn(&mut RetryParams)| {
            let mut p = RetryParams::default();
            f(&mut p);
            RetryPolicy::new(p).unwrap_err()
        };
        let cases: [(RetryError, &str); 11] = [
            (bad(|p| p.max_attempts = 0), "max_attempts"),
            (bad(|p| p.max_attempts = 6), "max_attempts"),
            (
                bad(|p| p.per_try_timeout = Duration::ZERO),
                "per_try_timeout",
            ),
            (bad(|p| p.methods = vec![String::new()]), "methods"),
            (bad(|p| p.methods = vec!["GE T".into()]), "methods"),
            (bad(|p| p.methods = vec!["GET/".into()]), "methods"),
            (bad(|p| p.statuses = vec![399]), "statuses"),
            (bad(|p| p.statuses = vec![503, 600]), "statuses"),
            (bad(|p| p.budget_capacity = 0), "budget_capacity"),
            (
                bad(|p| p.budget_refill_per_second = 0.0),
                "budget_refill_per_second",
            ),
            (
                bad(|p| p.budget_refill_per_second = f64::INFINITY),
                "budget_refill_per_second",
            ),
        ];
        for (err, field) in cases {
            assert_eq!(err.field(), field, "{err}");
            assert!(err.to_string().starts_with(field), "{err}");
        }
        assert_eq!(
            bad(|p| p.budget_capacity = u64::MAX).field(),
            "budget_capacity"
        );
        // Edges that are valid.
        for p in [
            RetryParams {
                max_attempts: 1,
                ..RetryParams::default()
            },
            RetryParams {
                max_attempts: 5,
                ..RetryParams::default()
            },
            RetryParams {
                statuses: vec![400, 599],
                ..RetryParams::default()
            },
            RetryParams {
                statuses: vec![],
                methods: vec![],
                ..RetryParams::default()
            },
            RetryParams {
                per_try_timeout: Duration::from_nanos(1),
                ..RetryParams::default()
            },
        ] {
            assert!(RetryPolicy::new(p.clone()).is_ok(), "{p:?}");
        }
    }

    proptest! {
        /// C-RETRY-1: `decide` says Retry exactly when every per-request condition holds, and the
        /// reason otherwise names a condition that fails.
        #[test]
        fn c_retry_1_decide_is_the_conjunction(
            method in prop::sample::select(vec!["GET", "get", "HEAD", "options", "POST", "PUT", "DELETE"]),
            outcome in prop_oneof![
                (100u16..600).prop_map(AttemptOutcome::Status),
                Just(AttemptOutcome::Connect),
                Just(AttemptOutcome::Transport),
                Just(AttemptOutcome::PerTryTimeout),
                Just(AttemptOutcome::ClientGone),
            ],
            body in prop_oneof![
                Just(BodyKind::None),
                Just(BodyKind::Streaming),
                (0u64..3_000_000).prop_map(BodyKind::Sized),
            ],
            attempts in 0u32..7,
            client_present in any::<bool>(),
            max_attempts in 1u32..=5,
        ) {
            let p = RetryPolicy::new(RetryParams { max_attempts, ..RetryParams::default() }).unwrap();
            let method_ok = ["GET", "HEAD", "OPTIONS"].iter().any(|m| m.eq_ignore_ascii_case(method));
            let outcome_ok = match outcome {
                AttemptOutcome::Status(s) => [502, 503, 504].contains(&s),
                AttemptOutcome::ClientGone => false,
                _ => true,
            };
            let body_ok = match body {
                BodyKind::None => true,
                BodyKind::Sized(n) => n <= 1_048_576,
                BodyKind::Streaming => false,
            };
            let gone = !client_present || outcome == AttemptOutcome::ClientGone;
            let all = method_ok && outcome_ok && body_ok && attempts < max_attempts && !gone;
            let facts = RetryFacts { method, outcome, body, attempts, client_present };
            match p.decide(&facts) {
                RetryVerdict::Retry => prop_assert!(all),
                RetryVerdict::NoRetry(r) => {
                    prop_assert!(!all);
                    let failing = match r {
                        NoRetryReason::ClientGone => gone,
                        NoRetryReason::OutcomeNotRetryable => !outcome_ok,
                        NoRetryReason::MethodNotAllowed => !method_ok,
                        NoRetryReason::BodyNotReplayable => !body_ok,
                        NoRetryReason::AttemptsExhausted => attempts >= max_attempts,
                        NoRetryReason::NoOtherBackend | NoRetryReason::BudgetExhausted => false,
                    };
                    prop_assert!(failing, "reason {:?} names a condition that holds", r);
                }
            }
        }
    }
}
