//! Token-bucket arithmetic, shared by the rate limiter (C-RATE-1) and the retry budget (C-RETRY-7).
//!
//! The bucket is kept as GCRA, the "generic cell rate algorithm" of ATM traffic policing
//! (ITU-T I.371; the form Redis-Cell and Stripe's limiter use): instead of a token count and a
//! last-update time, the whole state is one number, the *theoretical arrival time* `tat`, the
//! instant at which the bucket would be full again. With `T` the time one token takes to refill
//! and `C` the capacity, the tokens held at `now` are `C - max(tat - now, 0) / T`: fractional
//! tokens and continuous refill fall out for free, with integer arithmetic only.
//!
//! Why this and not `(tokens: f64, updated)`:
//! - one `u64` of state: a bucket is 8 bytes, the retry budget is one `AtomicU64` updated by CAS,
//!   and a store (Redis, PostgreSQL) keeps one number per key;
//! - exact: `T` is rounded *up* to whole nanoseconds, so the refill is never faster than
//!   configured and "grants ≤ capacity + refill × elapsed" holds exactly, not within a float error;
//! - a new bucket (`tat = 0`) is full, and a full bucket needs no entry at all, which is what makes
//!   evicting idle buckets safe.

use core::time::Duration;

use crate::time::Instant;

/// Errors in bucket parameters.
#[derive(Debug, Clone, PartialEq)]
pub enum BucketError {
    /// capacity must be at least 1 token
    ZeroCapacity,
    /// refill must be a finite number of tokens per second above zero
    BadRefill(f64),
    /// capacity × refill interval does not fit in 584 years of nanoseconds
    TooLarge,
}

impl core::fmt::Display for BucketError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            BucketError::ZeroCapacity => write!(f, "capacity must be at least 1"),
            BucketError::BadRefill(r) => {
                write!(
                    f,
                    "refill_per_second must be a finite number above 0, got {r}"
                )
            }
            BucketError::TooLarge => write!(f, "capacity is too large for the refill rate"),
        }
    }
}

impl std::error::Error for BucketError {}

/// The shape of a bucket: how many tokens it holds and how fast it refills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketParams {
    capacity: u64,
    /// Nanoseconds per token (rounded up: never refills faster than configured).
    interval_ns: u64,
    /// `capacity * interval_ns`: the time an empty bucket takes to fill.
    window_ns: u64,
}

/// The answer to a take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// One token was taken; `remaining` whole tokens are left (floor).
    Allowed {
        /// Whole tokens left after this request's own token.
        remaining: u64,
    },
    /// No whole token was there; one will be after `retry_after`.
    Denied {
        /// Time until the bucket holds one whole token.
        retry_after: Duration,
    },
}

impl BucketParams {
    /// A bucket of `capacity` tokens refilled at `refill_per_second` tokens per second.
    pub fn new(capacity: u64, refill_per_second: f64) -> Result<BucketParams, BucketError> {
        if capacity == 0 {
            return Err(BucketError::ZeroCapacity);
        }
        if !refill_per_second.is_finite() || refill_per_second <= 0.0 {
            return Err(BucketError::BadRefill(refill_per_second));
        }
        let interval = (1e9 / refill_per_second).ceil();
        if interval >= u64::MAX as f64 {
            return Err(BucketError::TooLarge);
        }
        let interval_ns = (interval as u64).max(1);
        let window_ns = capacity
            .checked_mul(interval_ns)
            .ok_or(BucketError::TooLarge)?;
        Ok(BucketParams {
            capacity,
            interval_ns,
            window_ns,
        })
    }

    /// Capacity in tokens.
    #[must_use]
    pub const fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Time one token takes to refill.
    #[must_use]
    pub const fn interval(&self) -> Duration {
        Duration::from_nanos(self.interval_ns)
    }

    /// Time an empty bucket takes to become full (the TTL a store can give an idle key).
    #[must_use]
    pub const fn full_refill(&self) -> Duration {
        Duration::from_nanos(self.window_ns)
    }

    /// Take one token from the bucket whose state is `tat`; returns the decision and the new state.
    /// A denied take leaves the state unchanged.
    #[must_use]
    pub fn take(&self, tat: u64, now: Instant) -> (Take, u64) {
        let now = now.as_nanos();
        let debt = tat.saturating_sub(now) >> u32::from(mutated!(BUCKET_FAST_REFILL));
        // Allowed iff at least one whole token: C*T - debt >= T.
        if debt.saturating_add(self.interval_ns) <= self.window_ns {
            let new_debt = debt + self.interval_ns;
            let remaining = (self.window_ns - new_debt) / self.interval_ns;
            (Take::Allowed { remaining }, now.saturating_add(new_debt))
        } else {
            let wait = debt + self.interval_ns - self.window_ns;
            (
                Take::Denied {
                    retry_after: Duration::from_nanos(wait),
                },
                tat,
            )
        }
    }

    /// Tokens held at `now`, in thousandths (floor), without taking any.
    #[must_use]
    pub fn tokens_milli(&self, tat: u64, now: Instant) -> u64 {
        let debt = tat.saturating_sub(now.as_nanos()).min(self.window_ns);
        let held_ns = u128::from(self.window_ns - debt);
        (held_ns * 1000 / u128::from(self.interval_ns)) as u64
    }

    /// Whole tokens held at `now` (floor), without taking any.
    #[must_use]
    pub fn tokens(&self, tat: u64, now: Instant) -> u64 {
        self.tokens_milli(tat, now) / 1000
    }

    /// Whether the bucket is full at `now` (its state carries no information and may be dropped).
    #[must_use]
    pub fn is_full(&self, tat: u64, now: Instant) -> bool {
        tat <= now.as_nanos()
    }
}

/// Seconds for a `Retry-After` header: `d` rounded up, at least 1 (C-RATE-1).
#[must_use]
pub fn retry_after_secs(d: Duration) -> u64 {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    secs.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(c: u64, r: f64) -> BucketParams {
        BucketParams::new(c, r).expect("valid params")
    }

    #[test]
    fn c_rate_1_new_bucket_is_full_and_drains_one_per_take() {
        let b = p(3, 1.0);
        let now = Instant::from_secs(100);
        let (t1, s) = b.take(0, now);
        assert_eq!(t1, Take::Allowed { remaining: 2 });
        let (t2, s) = b.take(s, now);
        assert_eq!(t2, Take::Allowed { remaining: 1 });
        let (t3, s) = b.take(s, now);
        assert_eq!(t3, Take::Allowed { remaining: 0 });
        let (t4, s2) = b.take(s, now);
        assert_eq!(
            t4,
            Take::Denied {
                retry_after: Duration::from_secs(1)
            }
        );
        assert_eq!(s2, s, "a denied take changes nothing");
        // Half a second later: half a token, still denied, 0.5 s to wait.
        let later = now + Duration::from_millis(500);
        assert_eq!(b.tokens_milli(s, later), 500);
        assert_eq!(
            b.take(s, later).0,
            Take::Denied {
                retry_after: Duration::from_millis(500)
            }
        );
        assert_eq!(retry_after_secs(Duration::from_millis(500)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1500)), 2);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
    }

    #[test]
    fn c_rate_1_refill_is_continuous_and_capped() {
        let b = p(10, 100.0);
        let mut s = 0;
        let t0 = Instant::from_secs(1);
        for _ in 0..10 {
            s = b.take(s, t0).1;
        }
        assert_eq!(b.tokens(s, t0), 0);
        assert_eq!(b.tokens(s, t0 + Duration::from_millis(35)), 3);
        assert_eq!(b.tokens_milli(s, t0 + Duration::from_millis(35)), 3500);
        assert_eq!(b.tokens(s, t0 + Duration::from_secs(60)), 10);
        assert!(b.is_full(s, t0 + Duration::from_millis(100)));
        assert_eq!(b.full_refill(), Duration::from_millis(100));
    }

    #[test]
    fn params_are_validated() {
        assert_eq!(BucketParams::new(0, 1.0), Err(BucketError::ZeroCapacity));
        assert!(matches!(
            BucketParams::new(1, 0.0),
            Err(BucketError::BadRefill(_))
        ));
        assert!(matches!(
            BucketParams::new(1, f64::NAN),
            Err(BucketError::BadRefill(_))
        ));
        assert!(matches!(
            BucketParams::new(1, -1.0),
            Err(BucketError::BadRefill(_))
        ));
        assert_eq!(BucketParams::new(u64::MAX, 1.0), Err(BucketError::TooLarge));
        // A fractional refill rounds the interval up: never faster than configured.
        assert_eq!(p(1, 3.0).interval(), Duration::from_nanos(333_333_334));
    }

    proptest! {
        /// C-RATE-1: tokens stay in [0, capacity] and grants never exceed
        /// capacity + refill × elapsed, for any sequence of takes and time steps.
        #[test]
        fn c_rate_1_grants_bounded_by_capacity_plus_refill(
            capacity in 1u64..500,
            refill_milli in 1u64..1_000_000,
            steps in proptest::collection::vec((0u64..50_000_000, 1u8..4), 1..300),
        ) {
            let refill = refill_milli as f64 / 1000.0;
            let b = BucketParams::new(capacity, refill).unwrap();
            let t0 = Instant::from_secs(10);
            let mut now = t0;
            let mut state = 0u64;
            let mut grants = 0u64;
            for (dt, takes) in steps {
                now = now + Duration::from_nanos(dt);
                for _ in 0..takes {
                    let (d, s) = b.take(state, now);
                    state = s;
                    let held = b.tokens_milli(state, now);
                    prop_assert!(held <= capacity * 1000);
                    if let Take::Allowed { remaining } = d {
                        grants += 1;
                        prop_assert!(remaining < capacity);
                        prop_assert_eq!(remaining, held / 1000);
                    }
                }
                let elapsed = (now - t0).as_secs_f64();
                let bound = capacity as f64 + refill * elapsed;
                prop_assert!(grants as f64 <= bound + 1e-9,
                    "grants {} > bound {}", grants, bound);
            }
        }

        /// C-RATE-1: a denied take's retry_after is exactly when the next take succeeds.
        #[test]
        fn c_rate_1_retry_after_is_exact(capacity in 1u64..50, refill_milli in 1u64..100_000) {
            let b = BucketParams::new(capacity, refill_milli as f64 / 1000.0).unwrap();
            let now = Instant::from_secs(1);
            let mut s = 0;
            for _ in 0..capacity { s = b.take(s, now).1; }
            let Take::Denied { retry_after } = b.take(s, now).0 else {
                return Err(TestCaseError::fail("empty bucket allowed a take"));
            };
            let just_before = now + retry_after - Duration::from_nanos(1);
            let before = matches!(b.take(s, just_before).0, Take::Denied { .. });
            prop_assert!(before, "allowed before retry_after");
            let at = b.take(s, now + retry_after).0;
            prop_assert_eq!(at, Take::Allowed { remaining: 0 });
        }
    }
}
