//! Core-owned monotonic time.
//!
//! weir-core never reads a clock. Every method that depends on time takes `now: Instant`, a count
//! of nanoseconds since an origin the caller picks (process start in an adapter, zero in the
//! simulator). A `u64` of nanoseconds covers 584 years and fits in one atomic, so shared state
//! such as a breaker's reopen deadline or a bucket's theoretical arrival time can live in an
//! `AtomicU64` without a lock.
//!
//! Time that goes backwards is clamped by the machines (they keep the latest `now` they saw or
//! use saturating arithmetic); it is never a panic. (str0m does the same.)

use core::fmt;
use core::ops::{Add, Sub};
use core::time::Duration;

/// A point on the caller's monotonic clock, in nanoseconds since the caller's origin.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    /// The origin of the clock.
    pub const ZERO: Instant = Instant(0);
    /// The farthest representable instant; used as "never".
    pub const MAX: Instant = Instant(u64::MAX);

    /// An instant `nanos` nanoseconds after the origin.
    #[must_use]
    pub const fn from_nanos(nanos: u64) -> Instant {
        Instant(nanos)
    }

    /// An instant `millis` milliseconds after the origin (saturating).
    #[must_use]
    pub const fn from_millis(millis: u64) -> Instant {
        Instant(millis.saturating_mul(1_000_000))
    }

    /// An instant `secs` seconds after the origin (saturating).
    #[must_use]
    pub const fn from_secs(secs: u64) -> Instant {
        Instant(secs.saturating_mul(1_000_000_000))
    }

    /// Nanoseconds since the origin.
    #[must_use]
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    #[must_use]
    pub const fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, saturating at [`Instant::MAX`].
    #[must_use]
    pub const fn saturating_add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(duration_nanos(d)))
    }

    /// `self - d`, saturating at [`Instant::ZERO`].
    #[must_use]
    pub const fn saturating_sub(self, d: Duration) -> Instant {
        Instant(self.0.saturating_sub(duration_nanos(d)))
    }
}

/// A duration in whole nanoseconds, saturating at `u64::MAX` (584 years).
#[must_use]
pub const fn duration_nanos(d: Duration) -> u64 {
    let n = d.as_nanos();
    if n > u64::MAX as u128 {
        u64::MAX
    } else {
        n as u64
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        self.saturating_add(d)
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_since(earlier)
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, d: Duration) -> Instant {
        self.saturating_sub(d)
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t+{:?}", Duration::from_nanos(self.0))
    }
}

#[cfg(test)]
mod tests;
