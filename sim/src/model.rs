//! Independent models the checks compare the core against.
//!
//! They are written here again, from the contract, on purpose: a check that called the core's
//! own arithmetic would agree with a broken core (a mutation of `bucket.rs` would break the model
//! too). Each model is the few lines of the statement it stands for.

use core::time::Duration;

use weir_core::Instant;

/// A token bucket as C-RATE-1 and C-RETRY-7 state it, kept as a theoretical arrival time (GCRA):
/// full at start, `capacity` tokens, one token every `interval`; a take needs one whole token.
#[derive(Debug, Clone, Copy)]
pub struct BucketModel {
    interval_ns: u64,
    window_ns: u64,
    /// The instant the bucket would be full again (0: full).
    tat_ns: u64,
}

impl BucketModel {
    /// A full bucket of `capacity` tokens, one refilled every `interval`.
    #[must_use]
    pub fn new(capacity: u64, interval: Duration) -> BucketModel {
        let interval_ns = u64::try_from(interval.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        BucketModel {
            interval_ns,
            window_ns: capacity.saturating_mul(interval_ns),
            tat_ns: 0,
        }
    }

    /// Take one token at `now` if a whole token is there.
    pub fn take(&mut self, now: Instant) -> bool {
        let now = now.as_nanos();
        let debt = self.tat_ns.saturating_sub(now);
        if debt + self.interval_ns > self.window_ns {
            return false;
        }
        self.tat_ns = now + debt + self.interval_ns;
        true
    }

    /// Tokens held at `now`, in thousandths (floor).
    #[must_use]
    pub fn tokens_milli(&self, now: Instant) -> u64 {
        let debt = self
            .tat_ns
            .saturating_sub(now.as_nanos())
            .min(self.window_ns);
        let held = u128::from(self.window_ns - debt) * 1000 / u128::from(self.interval_ns);
        u64::try_from(held).unwrap_or(u64::MAX)
    }

    /// The most grants a bucket that was full at `since` can make up to `now`:
    /// `capacity + elapsed / interval` (C-RATE-1, C-RETRY-7).
    #[must_use]
    pub fn max_grants(&self, since: Instant, now: Instant) -> u64 {
        let elapsed = now.as_nanos().saturating_sub(since.as_nanos());
        self.window_ns / self.interval_ns + elapsed / self.interval_ns
    }
}

/// The slow-start share of C-HEALTH-4, in permille: linear from `minimum_percent` to 100% over
/// `window` after the backend became available; full once the window is over or when off.
#[must_use]
pub fn slow_start_permille(
    window: Duration,
    minimum_percent: u8,
    since: Instant,
    now: Instant,
) -> u32 {
    let window = window.as_nanos();
    let elapsed = u128::from(now.as_nanos().saturating_sub(since.as_nanos()));
    if window == 0 || elapsed >= window {
        return 1000;
    }
    let minimum = u128::from(minimum_percent) * 10;
    let share = minimum + (1000 - minimum) * elapsed / window;
    u32::try_from(share).unwrap_or(1000)
}

/// 64-bit FNV-1a, for the event-log hash: fixed output for a given byte stream on every build.
#[derive(Debug, Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl core::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests;
