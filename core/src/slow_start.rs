//! Slow start (C-HEALTH-4): a backend that becomes available again, or is added, receives a share
//! of its normal traffic that grows linearly from `minimum_percent` to 100% over `window`.
//!
//! This is HAProxy's `slowstart` and Envoy's `slow_start_config` with aggression 1.0 (linear). One
//! mechanism serves every policy: when a policy proposes a warming backend, the selection driver
//! (`select.rs`) admits it with probability `share` and otherwise moves on to the policy's next
//! candidate, so a backend at 30% receives 30% of what the policy would have sent it, whatever
//! the policy. HAProxy scales weights instead, which only works for weighted policies and, as its
//! users note, does nothing for `leastconn` on long connections; Envoy scales weights too and needs
//! a separate code path per balancer. If every candidate is warming (for example at startup, when
//! all backends became healthy in the same check cycle), the driver falls back to the first one
//! it passed over, so slow start never turns a request away.

use core::time::Duration;

use crate::time::Instant;

/// Errors in slow-start parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlowStartError {
    /// the minimum share must be within 1..=100 percent
    MinimumPercent(u8),
}

impl core::fmt::Display for SlowStartError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SlowStartError::MinimumPercent(p) => {
                write!(
                    f,
                    "slow_start_minimum_percent must be within 1..=100, got {p}"
                )
            }
        }
    }
}

impl std::error::Error for SlowStartError {}

/// The slow-start ramp: `window` (zero = off) and the share at its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlowStart {
    window: Duration,
    minimum_permille: u32,
}

impl Default for SlowStart {
    /// 30 s from 10% (the shipped defaults).
    fn default() -> SlowStart {
        SlowStart {
            window: Duration::from_secs(30),
            minimum_permille: 100,
        }
    }
}

impl SlowStart {
    /// A ramp over `window` starting at `minimum_percent`; `window == 0` turns slow start off.
    pub fn new(window: Duration, minimum_percent: u8) -> Result<SlowStart, SlowStartError> {
        if !(1..=100).contains(&minimum_percent) {
            return Err(SlowStartError::MinimumPercent(minimum_percent));
        }
        Ok(SlowStart {
            window,
            minimum_permille: u32::from(minimum_percent) * 10,
        })
    }

    /// Slow start switched off: every backend gets its full share at once.
    #[must_use]
    pub const fn off() -> SlowStart {
        SlowStart {
            window: Duration::ZERO,
            minimum_permille: 1000,
        }
    }

    /// The ramp's length.
    #[must_use]
    pub const fn window(&self) -> Duration {
        self.window
    }

    /// The share of its normal traffic, in permille (100..=1000), that a backend available since
    /// `since` receives at `now`. Monotone non-decreasing in `now`.
    #[must_use]
    pub fn share_permille(&self, since: Instant, now: Instant) -> u32 {
        let window = crate::time::duration_nanos(self.window);
        let elapsed = crate::time::duration_nanos(now.saturating_since(since));
        if window == 0 || elapsed >= window {
            return 1000;
        }
        let span = u128::from(1000 - self.minimum_permille);
        let grown = span * u128::from(elapsed) / u128::from(window);
        // grown < span <= 900, so the sum stays below 1000.
        self.minimum_permille + grown as u32
    }
}

#[cfg(test)]
mod tests;
