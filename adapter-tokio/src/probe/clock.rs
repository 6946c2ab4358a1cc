//! The adapter's clock: `tokio::time::Instant` ↔ [`weir_core::Instant`].

use std::time::Duration;

/// Maps tokio's monotonic clock to weir-core's [`Instant`](weir_core::Instant): nanoseconds since
/// the clock was created. Built on `tokio::time::Instant`, so a test that pauses tokio's time
/// (`tokio::time::pause`) moves weir-core's time too. `Copy`: share one per process so the data
/// plane and the health driver speak the same time.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: tokio::time::Instant,
}

/// About 30 years: the furthest a deadline is ever placed (tokio's own "far future").
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

impl Clock {
    /// A clock whose origin ([`weir_core::Instant::ZERO`]) is now.
    #[must_use]
    pub fn new() -> Clock {
        Clock {
            origin: tokio::time::Instant::now(),
        }
    }

    /// A clock whose origin is `origin`.
    #[must_use]
    pub const fn with_origin(origin: tokio::time::Instant) -> Clock {
        Clock { origin }
    }

    /// The current time.
    #[must_use]
    pub fn now(&self) -> weir_core::Instant {
        self.at(tokio::time::Instant::now())
    }

    /// `t` as weir-core time; instants before the origin are [`weir_core::Instant::ZERO`],
    /// beyond ~584 years [`weir_core::Instant::MAX`].
    #[must_use]
    pub fn at(&self, t: tokio::time::Instant) -> weir_core::Instant {
        let nanos = t.saturating_duration_since(self.origin).as_nanos();
        weir_core::Instant::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// The tokio instant of weir-core time `t`, for `sleep_until` / `timeout_at`; an instant too
    /// far to represent becomes ~30 years from now.
    #[must_use]
    pub fn deadline(&self, t: weir_core::Instant) -> tokio::time::Instant {
        self.origin
            .checked_add(Duration::from_nanos(t.as_nanos()))
            .unwrap_or_else(far_future)
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::new()
    }
}

/// ~30 years from now (never overflows in practice; falls back to now if it would).
pub(crate) fn far_future() -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_add(FAR_FUTURE).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn clock_maps_both_ways_and_follows_paused_time() {
        let clock = Clock::new();
        assert_eq!(clock.now(), weir_core::Instant::ZERO);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(clock.now(), weir_core::Instant::from_millis(1500));
        let t = weir_core::Instant::from_secs(7);
        assert_eq!(clock.at(clock.deadline(t)), t);
        // Before the origin clamps to zero; beyond the representable goes to the far future.
        let earlier = Clock::with_origin(tokio::time::Instant::now() + Duration::from_secs(1));
        assert_eq!(earlier.now(), weir_core::Instant::ZERO);
        let far = clock.deadline(weir_core::Instant::MAX);
        assert!(far > tokio::time::Instant::now() + Duration::from_secs(86_400 * 365));
    }
}
