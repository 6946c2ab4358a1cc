//! The process-wide retry budget (C-RETRY-7): a time-refilled token bucket, full at start, from
//! which every attempt beyond a request's first takes one token.
//!
//! Why a token bucket and not what tower or Envoy do:
//! - tower's `TpsBudget` (after Finagle's `RetryBudget`) lets retries be a *percentage of recent
//!   requests*: deposits expire from a ring of time slots, a `min_per_sec` reserve tops it up, and
//!   integer scaling turns the percentage into deposit/withdraw amounts. The bound it gives is
//!   approximate (slot granularity, a mutex-guarded generation roll-over), and "how many retries
//!   can this send upstream" has no closed form an operator can check.
//! - Envoy's `retry_budget` limits *concurrent* retries to `budget_percent` of active requests,
//!   with a `min_retry_concurrency` floor. It bounds concurrency, not volume: users report that
//!   the floor is hard to choose (too low rejects transient retries when traffic dips, too high
//!   never engages), and that active-request counts are hard to reason about.
//!
//! weir's budget answers one question exactly: over any run, granted retries are at most
//! `capacity + refill_per_second × elapsed`, with `elapsed` the span between the earliest and the
//! latest `now` the budget was shown. It is GCRA ([`crate::bucket`]): the whole state is
//! one `u64`, the bucket's theoretical arrival time, kept in an [`AtomicU64`](crate::sync) and
//! updated by a compare-and-swap loop, so a withdrawal is lock-free and allocates nothing. The
//! interval per token is rounded *up* to whole nanoseconds, so the budget never refills faster
//! than configured.
//!
//! Ordering with backend reservation (C-RETRY-3) is the caller's: the flow machine reserves
//! another backend first and only then calls [`RetryBudget::try_withdraw`] (see
//! [`crate::retry::reserve_then_spend`]); a retry that finds no backend costs nothing.
//!
//! Time going backwards is clamped by the arithmetic itself: an earlier `now` only makes the
//! bucket look emptier (the debt `tat - now` is larger), so a stale clock can deny, never
//! over-grant.
//!
//! # Reload (C-CONF-7)
//!
//! Parameters are fixed per instance; [`RetryBudget::reload`] hands the state over to a new
//! instance with new parameters and *retires* the old one. The hand-over atomically swaps the
//! old state for a "retired" marker, so no token is counted twice; requests that still hold the
//! old instance (an old configuration snapshot) are forwarded to its successor, so they are
//! neither denied nor able to spend outside the budget. The tokens held at the reload are
//! carried over (rounded down, capped at the new capacity): a reload never mints tokens.

use core::fmt;

use crate::bucket::{BucketParams, Take};
use crate::sync::{Arc, AtomicU64, Mutex, Ordering, lock};
use crate::time::{Instant, duration_nanos};

/// State value of a budget that has handed over to its successor. A live state never takes this
/// value: a take whose new state would saturate to it is denied (an instant beyond 584 years).
const RETIRED: u64 = u64::MAX;

/// A process-wide retry budget (C-RETRY-7): `capacity` tokens, full at start, refilled
/// continuously at `refill_per_second`; each extra attempt withdraws one token.
///
/// Kinds: getters (`capacity`, `refill_per_second`, `params`, `tokens`, `tokens_milli`,
/// `is_retired`); a shared command `try_withdraw(&self, now)` (lock-free CAS, zero allocation);
/// and `reload`, which retires this instance in favour of a successor. It has no deadline.
pub struct RetryBudget {
    params: BucketParams,
    /// GCRA theoretical arrival time in nanoseconds (0 = full), or [`RETIRED`].
    state: AtomicU64,
    /// The instance this one handed over to; set (under this lock) in the same critical section
    /// that writes [`RETIRED`], so whoever sees `RETIRED` and then locks finds it.
    successor: Mutex<Option<Arc<RetryBudget>>>,
}

impl RetryBudget {
    /// A budget shaped by `params`, full at start (C-RETRY-7).
    #[must_use]
    pub fn new(params: BucketParams) -> RetryBudget {
        RetryBudget::with_state(params, 0)
    }

    fn with_state(params: BucketParams, tat: u64) -> RetryBudget {
        RetryBudget {
            params,
            state: AtomicU64::new(tat),
            successor: Mutex::new(None),
        }
    }

    /// Take one token at `now` if a whole token is there; `false` leaves the budget unchanged.
    /// Call it only after another backend has been reserved (C-RETRY-3).
    #[must_use]
    pub fn try_withdraw(&self, now: Instant) -> bool {
        if mutated!(BUDGET_DISABLED) {
            return true;
        }
        self.on_live(|b| b.withdraw_here(now)).unwrap_or(false)
    }

    /// Tokens held at `now`, in thousandths (floor), without taking any; in `[0, capacity × 1000]`.
    #[must_use]
    pub fn tokens_milli(&self, now: Instant) -> u64 {
        self.on_live(|b| {
            let tat = b.state.load(Ordering::Acquire);
            (tat != RETIRED).then(|| b.params.tokens_milli(tat, now))
        })
        .unwrap_or(0)
    }

    /// Whole tokens held at `now` (floor), for status and the `load_balancer_retry_budget_tokens`
    /// gauge (C-OBS-1).
    #[must_use]
    pub fn tokens(&self, now: Instant) -> u64 {
        self.tokens_milli(now) / 1000
    }

    /// The parameters in force (the successor's, if this instance was retired by a reload).
    #[must_use]
    pub fn params(&self) -> BucketParams {
        self.on_live(|b| (!b.is_retired_here()).then_some(b.params))
            .unwrap_or(self.params)
    }

    /// Capacity in tokens of the budget in force.
    #[must_use]
    pub fn capacity(&self) -> u64 {
        self.params().capacity()
    }

    /// Effective refill rate of the budget in force: `1 s / interval`, where the interval was
    /// rounded up to whole nanoseconds, so this can be a hair below the configured rate (for
    /// `10` it is exactly `10`). Status pages show the configured value from the policy.
    #[must_use]
    pub fn refill_per_second(&self) -> f64 {
        1e9 / duration_nanos(self.params().interval()) as f64
    }

    /// Whether this instance has handed over to a successor (it then forwards everything to it).
    #[must_use]
    pub fn is_retired(&self) -> bool {
        self.is_retired_here()
    }

    /// Retire this budget in favour of one shaped by `params`, carrying over the tokens held at
    /// `now` (floor, capped at the new capacity; never more than were held), and return the
    /// successor. Withdrawals racing the hand-over either land before it (and are carried over)
    /// or are forwarded to the successor: none is counted twice or lost. Reloading a retired
    /// budget reloads the one in force. Not a hot path: it locks and allocates once.
    pub fn reload(&self, params: BucketParams, now: Instant) -> Arc<RetryBudget> {
        let mut guard = lock(&self.successor);
        if let Some(next) = guard.as_ref() {
            let next = Arc::clone(next);
            drop(guard);
            return next.reload(params, now);
        }
        let tat = self.state.swap(RETIRED, Ordering::AcqRel);
        let carried = carry_over(self.params, tat, params, now);
        let next = Arc::new(RetryBudget::with_state(params, carried));
        *guard = Some(Arc::clone(&next));
        next
    }

    fn is_retired_here(&self) -> bool {
        self.state.load(Ordering::Acquire) == RETIRED
    }

    /// One withdrawal on this instance: `None` if it is retired.
    fn withdraw_here(&self, now: Instant) -> Option<bool> {
        let mut tat = self.state.load(Ordering::Acquire);
        loop {
            if tat == RETIRED {
                return None;
            }
            let (Take::Allowed { .. }, next) = self.params.take(tat, now) else {
                return Some(false);
            };
            if next == RETIRED {
                // Saturated: `now` is within one window of the end of time. Deny rather than
                // store a state that under-counts the debt.
                return Some(false);
            }
            match self
                .state
                .compare_exchange_weak(tat, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(true),
                Err(actual) => tat = actual,
            }
        }
    }

    fn successor(&self) -> Option<Arc<RetryBudget>> {
        lock(&self.successor).clone()
    }

    /// Run `f` on this instance, then on successors while `f` reports "retired" (`None`).
    /// On the live instance this takes no lock and clones nothing.
    fn on_live<T>(&self, f: impl Fn(&RetryBudget) -> Option<T>) -> Option<T> {
        if let Some(v) = f(self) {
            return Some(v);
        }
        let mut next = self.successor();
        while let Some(b) = next {
            if let Some(v) = f(&b) {
                return Some(v);
            }
            next = b.successor();
        }
        None
    }
}

/// The state of a budget shaped by `to` holding the tokens that a budget shaped by `from` in state
/// `tat` holds at `now`: floor, capped at `to`'s capacity, so a reload never mints tokens.
fn carry_over(from: BucketParams, tat: u64, to: BucketParams, now: Instant) -> u64 {
    let now_ns = now.as_nanos();
    let from_window = u128::from(duration_nanos(from.full_refill()));
    let from_interval = u128::from(duration_nanos(from.interval()));
    let to_window = u128::from(duration_nanos(to.full_refill()));
    let to_interval = u128::from(duration_nanos(to.interval()));
    let debt = u128::from(tat.saturating_sub(now_ns)).min(from_window);
    // Held time in the old shape, converted to held time in the new shape (floor).
    let held = ((from_window - debt) * to_interval / from_interval).min(to_window);
    // to_window - held <= to_window, which came from a u64.
    let new_debt = u64::try_from(to_window - held).unwrap_or(u64::MAX);
    now_ns.saturating_add(new_debt).min(RETIRED - 1)
}

impl fmt::Debug for RetryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tat = self.state.load(Ordering::Relaxed);
        f.debug_struct("RetryBudget")
            .field("params", &self.params)
            .field("tat", &tat)
            .field("retired", &(tat == RETIRED))
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;
