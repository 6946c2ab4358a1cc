//! The shared store's health as a machine: up or down, and the spacing of recovery trials while
//! it is down (C-RATE-5: "returns to the shared store by itself once it recovers").
//!
//! After a failed call the store is *down*. While down, requests do not wait on it: they go
//! straight to the failure policy, except that one call per `retry_interval` (200 ms by
//! default) is let through as a trial; the first trial that succeeds marks the store up again.
//! This is the half-open state of a circuit breaker (Finagle's and Envoy's outlier ejection work
//! the same way), with a fixed interval rather than a growing one because a shared store is one
//! dependency whose return should be noticed quickly, not a pool member that can be avoided.
//! Without traffic no request would ever be a trial, so the adapter's recovery timer asks the
//! same question ([`StoreCircuit::may_call`]) for a health check.
//!
//! The request engine (`exchange`), weir-storage's limiter and the simulator all use this one
//! machine. Kinds: the command `may_call` returns a [`Call`] that must be settled exactly once by
//! one of the facts `on_success`, `on_failure` or `abandon`; getters `is_up`, `ready`,
//! `degraded`, `counters`. Every method takes `&self`: the state is atomics shared by all
//! requests (no lock on the request path).

#[cfg(all(test, not(loom)))]
mod tests;

use core::time::Duration;

use super::policy::{FailureMode, on_store_failure};
use crate::sync::{AtomicBool, AtomicU64, Ordering};
use crate::time::Instant;

/// Default spacing of recovery trials while the store is down.
pub const DEFAULT_RETRY_INTERVAL: Duration = Duration::from_millis(200);

/// Permission to call the store once. Plain data: settle it with exactly one of
/// [`StoreCircuit::on_success`], [`StoreCircuit::on_failure`] or [`StoreCircuit::abandon`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a call must be settled with on_success, on_failure or abandon"]
pub struct Call {
    /// This call is the recovery trial of a down store (at most one at a time).
    pub trial: bool,
}

/// The circuit's counters, for metrics and the status endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CircuitCounters {
    /// Failed calls since the last success.
    pub consecutive_failures: u64,
    /// Failed calls (errors and timeouts) since start.
    pub failures_total: u64,
    /// Requests decided by the failure policy since start.
    pub policy_decisions_total: u64,
    /// Times the store came back after being down.
    pub recoveries_total: u64,
}

/// The shared store's health (see the module doc).
#[derive(Debug)]
pub struct StoreCircuit {
    retry_interval: Duration,
    up: AtomicBool,
    /// While down: the earliest `now` (ns) at which the next trial may run.
    next_trial_ns: AtomicU64,
    /// A trial call is in flight.
    trial: AtomicBool,
    consecutive_failures: AtomicU64,
    failures_total: AtomicU64,
    policy_decisions_total: AtomicU64,
    recoveries_total: AtomicU64,
}

impl Default for StoreCircuit {
    fn default() -> StoreCircuit {
        StoreCircuit::new(DEFAULT_RETRY_INTERVAL)
    }
}

impl StoreCircuit {
    /// A circuit that starts *up* (the first request tries the store) and spaces recovery
    /// trials by `retry_interval`.
    #[must_use]
    pub fn new(retry_interval: Duration) -> StoreCircuit {
        StoreCircuit {
            retry_interval,
            up: AtomicBool::new(true),
            next_trial_ns: AtomicU64::new(0),
            trial: AtomicBool::new(false),
            consecutive_failures: AtomicU64::new(0),
            failures_total: AtomicU64::new(0),
            policy_decisions_total: AtomicU64::new(0),
            recoveries_total: AtomicU64::new(0),
        }
    }

    /// Spacing of recovery trials while down.
    #[must_use]
    pub fn retry_interval(&self) -> Duration {
        self.retry_interval
    }

    /// Whether a call may go to the store at `now`: always while up; while down, one trial per
    /// `retry_interval`, one at a time. `None`: decide by the failure policy without calling.
    pub fn may_call(&self, now: Instant) -> Option<Call> {
        if self.is_up() {
            return Some(Call { trial: false });
        }
        if now.as_nanos() < self.next_trial_ns.load(Ordering::Acquire) {
            return None;
        }
        if self.trial.swap(true, Ordering::AcqRel) && !mutated!(STORE_TRIALS_UNBOUNDED) {
            return None;
        }
        Some(Call { trial: true })
    }

    /// The call answered: the store is up (a recovery if it was down).
    pub fn on_success(&self, call: Call) {
        self.end(call);
        self.consecutive_failures.store(0, Ordering::Relaxed);
        if mutated!(STORE_NEVER_RECOVERS) && call.trial {
            return;
        }
        if !self.up.swap(true, Ordering::AcqRel) {
            self.recoveries_total.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The call failed or timed out at `now`: the store is down; the next trial is due
    /// `retry_interval` later.
    pub fn on_failure(&self, call: Call, now: Instant) {
        self.end(call);
        self.failures_total.fetch_add(1, Ordering::Relaxed);
        self.consecutive_failures.fetch_add(1, Ordering::Relaxed);
        let next = now.saturating_add(self.retry_interval).as_nanos();
        self.next_trial_ns.store(next, Ordering::Release);
        self.up.store(false, Ordering::Release);
    }

    /// The call was dropped without an answer (its client went away): nothing is learnt, and a
    /// trial's place is freed for the next request.
    pub fn abandon(&self, call: Call) {
        self.end(call);
    }

    /// Count one request decided by the failure policy.
    pub fn on_policy_decision(&self) {
        self.policy_decisions_total.fetch_add(1, Ordering::Relaxed);
    }

    fn end(&self, call: Call) {
        if call.trial {
            self.trial.store(false, Ordering::Release);
        }
    }

    /// Whether the store answered its last call.
    #[must_use]
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    /// Whether a recovery trial is in flight.
    #[must_use]
    pub fn trial_in_flight(&self) -> bool {
        self.trial.load(Ordering::Acquire)
    }

    /// `/readyz` for the limiter: false only while the store is down under `fail-closed`
    /// (C-RATE-5, C-OBS-4).
    #[must_use]
    pub fn ready(&self, mode: FailureMode) -> bool {
        self.is_up() || on_store_failure(mode).ready()
    }

    /// Whether decisions are being made by a fallback (`X-RateLimit-Degraded`, the degraded
    /// gauge): the store is down and the mode is fail-open or local-fallback.
    #[must_use]
    pub fn degraded(&self, mode: FailureMode) -> bool {
        !self.is_up() && on_store_failure(mode).degraded()
    }

    /// The counters.
    #[must_use]
    pub fn counters(&self) -> CircuitCounters {
        CircuitCounters {
            consecutive_failures: self.consecutive_failures.load(Ordering::Relaxed),
            failures_total: self.failures_total.load(Ordering::Relaxed),
            policy_decisions_total: self.policy_decisions_total.load(Ordering::Relaxed),
            recoveries_total: self.recoveries_total.load(Ordering::Relaxed),
        }
    }
}
