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
mod tests;
