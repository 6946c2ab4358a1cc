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
mod tests {
    use super::*;
    use core::time::Duration;
    use proptest::prelude::*;

    fn budget(c: u64, r: f64) -> RetryBudget {
        RetryBudget::new(BucketParams::new(c, r).expect("valid params"))
    }

    #[test]
    fn c_retry_7_full_at_start_then_refills_at_rate() {
        let b = budget(100, 10.0);
        let t0 = Instant::ZERO;
        assert_eq!(b.tokens(t0), 100);
        assert_eq!(b.capacity(), 100);
        assert_eq!(b.refill_per_second(), 10.0);
        for _ in 0..100 {
            assert!(b.try_withdraw(t0));
        }
        assert!(!b.try_withdraw(t0), "empty budget grants nothing");
        assert_eq!(b.tokens_milli(t0), 0);
        // 10 tokens per second: 250 ms later, 2.5 tokens.
        let t1 = t0 + Duration::from_millis(250);
        assert_eq!(b.tokens_milli(t1), 2500);
        assert!(b.try_withdraw(t1));
        assert!(b.try_withdraw(t1));
        assert!(!b.try_withdraw(t1));
        // Never above capacity however long it rests.
        assert_eq!(b.tokens(t1 + Duration::from_secs(3600)), 100);
    }

    #[test]
    fn c_retry_7_time_going_backwards_never_over_grants() {
        let b = budget(2, 1.0);
        let t = Instant::from_secs(100);
        assert!(b.try_withdraw(t));
        assert!(b.try_withdraw(t));
        // A stale clock sees an emptier bucket, not a fuller one.
        assert!(!b.try_withdraw(Instant::from_secs(50)));
        assert_eq!(b.tokens(Instant::from_secs(50)), 0);
        assert!(!b.try_withdraw(t));
        assert!(b.try_withdraw(t + Duration::from_secs(1)));
    }

    #[test]
    fn end_of_time_is_denied_not_a_panic() {
        let b = budget(3, 1.0);
        assert!(!b.try_withdraw(Instant::MAX));
        assert_eq!(b.tokens(Instant::MAX), 3);
        assert!(b.try_withdraw(Instant::from_secs(1)));
    }

    #[test]
    fn c_conf_7_reload_carries_tokens_and_retires_the_old_instance() {
        let old = budget(10, 1.0);
        let t = Instant::from_secs(5);
        for _ in 0..6 {
            assert!(old.try_withdraw(t));
        }
        assert_eq!(old.tokens(t), 4);
        // Larger capacity: the level is carried, not topped up (a reload mints nothing).
        let new = old.reload(BucketParams::new(20, 2.0).unwrap(), t);
        assert!(old.is_retired());
        assert!(!new.is_retired());
        assert_eq!(new.tokens(t), 4);
        assert_eq!(new.capacity(), 20);
        // The old handle forwards to the successor: status and withdrawals see one budget.
        assert_eq!(old.capacity(), 20);
        assert_eq!(old.refill_per_second(), 2.0);
        assert!(old.try_withdraw(t));
        assert_eq!(new.tokens(t), 3);
        // New refill rate applies from the reload on: 0.5 s at 2/s is one token.
        assert_eq!(new.tokens(t + Duration::from_millis(500)), 4);
        // Smaller capacity caps the carried level.
        let newer = old.reload(BucketParams::new(2, 2.0).unwrap(), t);
        assert!(
            new.is_retired(),
            "reloading a retired budget reloads the one in force"
        );
        assert_eq!(newer.tokens(t), 2);
        assert!(old.try_withdraw(t));
        assert!(new.try_withdraw(t));
        assert!(!newer.try_withdraw(t));
    }

    #[test]
    fn c_conf_7_reload_of_a_full_budget_with_fractions() {
        let b = budget(3, 3.0);
        let t = Instant::from_secs(1);
        assert!(b.try_withdraw(t));
        let half = t + Duration::from_millis(166);
        let held = b.tokens_milli(half);
        let n = b.reload(BucketParams::new(3, 7.0).unwrap(), half);
        let carried = n.tokens_milli(half);
        assert!(carried <= held, "carried {carried} > held {held}");
        assert!(held - carried <= 1, "carried {carried}, held {held}");
    }

    #[derive(Debug, Clone)]
    enum Op {
        Withdraw,
        Advance(u64),
        Reload(u64, u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => Just(Op::Withdraw),
            3 => (0u64..400_000_000).prop_map(Op::Advance),
            1 => (1u64..50, 1u32..100_000).prop_map(|(c, r)| Op::Reload(c, r)),
        ]
    }

    proptest! {
        /// C-RETRY-7: for any sequence of withdrawals and time steps (forward or backward),
        /// granted withdrawals <= capacity + refill × elapsed, where elapsed is the span from the
        /// earliest to the latest instant seen; tokens stay in [0, capacity]; a denial means < 1 token.
        #[test]
        fn c_retry_7_grants_bounded_by_capacity_plus_refill(
            capacity in 1u64..200,
            refill_milli in 1u64..2_000_000,
            steps in proptest::collection::vec((0u64..200_000_000, any::<bool>(), 0u8..4), 1..300),
        ) {
            let refill = refill_milli as f64 / 1000.0;
            let b = RetryBudget::new(BucketParams::new(capacity, refill).unwrap());
            let t0 = Instant::from_secs(1);
            let mut now = t0;
            let mut latest = t0;
            let mut earliest = t0;
            let mut grants = 0u64;
            for (dt, backwards, takes) in steps {
                now = if backwards { now - Duration::from_nanos(dt / 4) } else { now + Duration::from_nanos(dt) };
                latest = latest.max(now);
                earliest = earliest.min(now);
                for _ in 0..takes {
                    let before = b.tokens_milli(now);
                    let granted = b.try_withdraw(now);
                    prop_assert_eq!(granted, before >= 1000, "granted iff a whole token");
                    grants += u64::from(granted);
                    prop_assert!(b.tokens_milli(now) <= capacity * 1000);
                    prop_assert!(b.tokens_milli(latest) <= capacity * 1000);
                }
                let bound = capacity as f64 + refill * (latest - earliest).as_secs_f64();
                prop_assert!(grants as f64 <= bound + 1e-9, "grants {} > bound {}", grants, bound);
            }
        }

        /// C-RETRY-7: at a single instant a full budget grants exactly its capacity.
        #[test]
        fn c_retry_7_zero_elapsed_grants_exactly_capacity(
            capacity in 1u64..2_000,
            refill_milli in 1u64..10_000_000,
            at_secs in 0u64..1_000_000,
        ) {
            let b = RetryBudget::new(BucketParams::new(capacity, refill_milli as f64 / 1000.0).unwrap());
            let now = Instant::from_secs(at_secs);
            let granted = (0..capacity + 10).filter(|_| b.try_withdraw(now)).count() as u64;
            prop_assert_eq!(granted, capacity);
            prop_assert_eq!(b.tokens_milli(now), 0);
        }

        /// C-RETRY-7 across reloads (C-CONF-7): grants plus tokens held never exceed the initial
        /// capacity plus what each configuration refilled while in force; a reload never mints.
        /// Every op goes through the first handle, so forwarding is exercised too.
        #[test]
        fn c_retry_7_reload_never_mints_tokens(
            capacity in 1u64..50,
            refill_milli in 1u64..100_000,
            ops in proptest::collection::vec(op(), 1..200),
        ) {
            let first = RetryBudget::new(BucketParams::new(capacity, refill_milli as f64 / 1000.0).unwrap());
            let mut refill = refill_milli as f64 / 1000.0;
            let mut now = Instant::from_secs(1);
            let mut credit = capacity as f64;
            let mut grants = 0u64;
            let mut live: Option<Arc<RetryBudget>> = None;
            for op in ops {
                match op {
                    Op::Withdraw => grants += u64::from(first.try_withdraw(now)),
                    Op::Advance(dt) => {
                        now = now + Duration::from_nanos(dt);
                        credit += refill * Duration::from_nanos(dt).as_secs_f64();
                    }
                    Op::Reload(c, r) => {
                        let before = first.tokens_milli(now);
                        refill = f64::from(r) / 1000.0;
                        let next = first.reload(BucketParams::new(c, refill).unwrap(), now);
                        prop_assert!(next.tokens_milli(now) <= before);
                        prop_assert!(next.tokens_milli(now) <= c * 1000);
                        live = Some(next);
                    }
                }
                let held = first.tokens_milli(now);
                if let Some(l) = &live {
                    prop_assert_eq!(held, l.tokens_milli(now), "the old handle sees the live budget");
                }
                prop_assert!(held <= first.capacity() * 1000);
                let total = grants as f64 + held as f64 / 1000.0;
                prop_assert!(total <= credit + 1e-6, "grants {} + held {} > credit {}", grants, held, credit);
            }
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::sync::AtomicUsize;

    /// C-RETRY-7: three threads withdraw at one instant from a budget of 2: exactly two succeed,
    /// the budget ends empty, and no thread ever sees it below 0 or above capacity.
    #[test]
    fn loom_budget_never_overdrawn() {
        loom::model(|| {
            let budget = Arc::new(RetryBudget::new(BucketParams::new(2, 1.0).unwrap()));
            let granted = Arc::new(AtomicUsize::new(0));
            let now = Instant::from_secs(1);
            let handles: Vec<_> = (0..3)
                .map(|_| {
                    let budget = Arc::clone(&budget);
                    let granted = Arc::clone(&granted);
                    loom::thread::spawn(move || {
                        if budget.try_withdraw(now) {
                            granted.fetch_add(1, Ordering::Relaxed);
                        }
                        let held = budget.tokens_milli(now);
                        assert!(held <= 2000, "held {held}");
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            assert_eq!(granted.load(Ordering::Relaxed), 2);
            assert_eq!(budget.tokens_milli(now), 0);
        });
    }

    /// C-RETRY-7 with C-CONF-7: a reload racing withdrawals through the old handle counts every
    /// token once: with 2 tokens and 3 withdrawals (two via the old handle, one via the new),
    /// exactly 2 succeed in every interleaving.
    #[test]
    fn loom_budget_reload_hands_over_exactly() {
        loom::model(|| {
            let old = Arc::new(RetryBudget::new(BucketParams::new(2, 1.0).unwrap()));
            let now = Instant::from_secs(1);
            let stale = {
                let old = Arc::clone(&old);
                loom::thread::spawn(move || {
                    usize::from(old.try_withdraw(now)) + usize::from(old.try_withdraw(now))
                })
            };
            let next = old.reload(BucketParams::new(2, 1.0).unwrap(), now);
            let fresh = usize::from(next.try_withdraw(now));
            let total = stale.join().unwrap() + fresh;
            assert_eq!(total, 2);
            assert_eq!(next.tokens_milli(now), 0);
            assert_eq!(old.tokens_milli(now), 0);
        });
    }
}
