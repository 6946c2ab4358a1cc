//! The outcomes weir turns a request away with, before any attempt ([`Reject`]), and the
//! protection events they count ([`ProtectionReason`], C-LOAD-3): plain values the flow and the
//! request engine decide and `response` maps to a status, headers and a message (its
//! `impl Reject`). A module of their own so that the flow does not depend on `response`, which
//! depends on the flow's `Deliver` and `Failure` (one direction: response → flow → outcome).

use core::fmt;

use crate::admission::Overloaded;
use crate::bulkhead::BulkheadFull;
use crate::rate::RateOutcome;
use crate::select::NoBackend;

/// The label values of `load_balancer_protection_events_total{reason}` (C-LOAD-3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProtectionReason {
    /// The global gate turned a request away (C-LOAD-1).
    Overload,
    /// A route bulkhead was full (C-LOAD-2).
    BulkheadFull,
    /// Every usable backend was at `max_concurrent_requests` or its adaptive limit, so a request
    /// was turned away or a retry could not happen (C-POOL-6, C-LOAD-4).
    BackendSaturated,
    /// The retry budget stopped a retry (C-RETRY-7).
    RetryBudgetExhausted,
    /// The rate limiter denied a request (C-RATE-1).
    RateLimited,
}

impl ProtectionReason {
    /// Every reason, so the adapter can expose each series at zero from the start (C-OBS-1).
    pub const ALL: [ProtectionReason; 5] = [
        ProtectionReason::Overload,
        ProtectionReason::BulkheadFull,
        ProtectionReason::BackendSaturated,
        ProtectionReason::RetryBudgetExhausted,
        ProtectionReason::RateLimited,
    ];

    /// The metric label value.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            ProtectionReason::Overload => "overload",
            ProtectionReason::BulkheadFull => "bulkhead_full",
            ProtectionReason::BackendSaturated => "backend_saturated",
            ProtectionReason::RetryBudgetExhausted => "retry_budget_exhausted",
            ProtectionReason::RateLimited => "rate_limited",
        }
    }
}

impl fmt::Display for ProtectionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request turned away before any upstream attempt, in request-path order (C-PATH-2). The flow
/// makes the last two; the adapter makes the others from the gate and the rate limiter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reject {
    /// The global gate is full (C-LOAD-1): `503`, `Retry-After: 1`, `X-Balancer-Overloaded: true`.
    Overloaded(Overloaded),
    /// The rate limiter denied the request (C-RATE-1): `429`, `Retry-After` and the rate headers.
    RateLimited(RateOutcome),
    /// The shared rate-limit store failed and `failure_mode` is `fail-closed` (C-RATE-5): `503`.
    StoreUnavailable,
    /// The route's bulkhead is full (C-LOAD-2): `503`.
    BulkheadFull(BulkheadFull),
    /// No backend could be selected (C-POOL-5): `503`, the reason in the message.
    NoBackend(NoBackend),
}

impl Reject {
    /// The protection event this rejection counts (C-LOAD-3), if any.
    #[must_use]
    pub const fn protection_reason(&self) -> Option<ProtectionReason> {
        match self {
            Reject::Overloaded(_) => Some(ProtectionReason::Overload),
            Reject::RateLimited(_) => Some(ProtectionReason::RateLimited),
            Reject::BulkheadFull(_) => Some(ProtectionReason::BulkheadFull),
            Reject::NoBackend(NoBackend::AllSaturated | NoBackend::AdaptiveLimit) => {
                Some(ProtectionReason::BackendSaturated)
            }
            Reject::NoBackend(_) | Reject::StoreUnavailable => None,
        }
    }
}
