//! The process clock: `tokio::time::Instant` ↔ [`weir_core::Instant`] (nanoseconds since the
//! clock's origin). Temporary twin of `probe::Clock`, replaced by it when the probe executor lands.

use std::time::Duration;

/// Maps tokio's monotonic clock to weir-core's time: nanoseconds since the clock was created.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: tokio::time::Instant,
}

/// About 30 years: the furthest a deadline is ever placed.
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

impl Clock {
    /// A clock whose origin is now.
    #[must_use]
    pub fn new() -> Clock {
        Clock {
            origin: tokio::time::Instant::now(),
        }
    }

    /// The current time.
    #[must_use]
    pub fn now(&self) -> weir_core::Instant {
        self.at(tokio::time::Instant::now())
    }

    /// `t` as weir-core time.
    #[must_use]
    pub fn at(&self, t: tokio::time::Instant) -> weir_core::Instant {
        let nanos = t.saturating_duration_since(self.origin).as_nanos();
        weir_core::Instant::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// The tokio instant of weir-core time `t`.
    #[must_use]
    pub fn deadline(&self, t: weir_core::Instant) -> tokio::time::Instant {
        self.origin
            .checked_add(Duration::from_nanos(t.as_nanos()))
            .unwrap_or_else(|| {
                let now = tokio::time::Instant::now();
                now.checked_add(FAR_FUTURE).unwrap_or(now)
            })
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::new()
    }
}
