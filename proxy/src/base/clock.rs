//! The adapter's clock: the runtime's monotonic clock ↔ [`weir_core::Instant`].

use std::time::{Duration, Instant};

use crate::base::rt::Rt;

/// Maps the runtime's monotonic clock ([`Rt::now`]) to weir-core's
/// [`Instant`](weir_core::Instant): nanoseconds since the clock was created. Under tokio a test
/// that pauses tokio's time (`tokio::time::pause`) moves weir-core's time too. `Copy`: share one
/// per process so the data plane and the health driver speak the same time.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    rt: Rt,
    origin: Instant,
}

/// About 30 years: the furthest a deadline is ever placed (tokio's own "far future").
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

impl Clock {
    /// A clock of `rt` whose origin ([`weir_core::Instant::ZERO`]) is now.
    #[must_use]
    pub fn new(rt: Rt) -> Clock {
        Clock {
            rt,
            origin: rt.now(),
        }
    }

    /// A clock of `rt` whose origin is `origin`.
    #[must_use]
    pub const fn with_origin(rt: Rt, origin: Instant) -> Clock {
        Clock { rt, origin }
    }

    /// The runtime.
    #[must_use]
    pub fn rt(&self) -> Rt {
        self.rt
    }

    /// The current time.
    #[must_use]
    pub fn now(&self) -> weir_core::Instant {
        self.at(self.rt.now())
    }

    /// `t` as weir-core time; instants before the origin are [`weir_core::Instant::ZERO`],
    /// beyond ~584 years [`weir_core::Instant::MAX`].
    #[must_use]
    pub fn at(&self, t: Instant) -> weir_core::Instant {
        let nanos = t.saturating_duration_since(self.origin).as_nanos();
        weir_core::Instant::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// The runtime instant of weir-core time `t`, for sleeps and timeouts; an instant too far to
    /// represent becomes ~30 years from now.
    #[must_use]
    pub fn deadline(&self, t: weir_core::Instant) -> Instant {
        self.origin
            .checked_add(Duration::from_nanos(t.as_nanos()))
            .unwrap_or_else(|| self.far_future())
    }

    /// The wall-clock time, since the Unix epoch (zero for a clock set before it): what a
    /// backend's `Retry-After` date is read against (C-RETRY-11). The only wall-clock read on a
    /// request's path, and only for a `503`.
    #[must_use]
    pub fn wall() -> Duration {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
    }

    /// ~30 years from now (never overflows in practice; falls back to now if it would).
    #[must_use]
    pub fn far_future(&self) -> Instant {
        let now = self.rt.now();
        now.checked_add(FAR_FUTURE).unwrap_or(now)
    }
}
