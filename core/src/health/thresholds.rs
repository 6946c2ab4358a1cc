//! One backend's active-check state with hysteresis (C-HEALTH-2).

use super::HealthParams;

/// A backend's health as the active checks see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Health {
    /// Not eligible for traffic; the state every backend starts in (C-HEALTH-1).
    Unhealthy,
    /// Eligible for traffic.
    Healthy,
}

impl Health {
    /// `true` for [`Health::Healthy`].
    #[must_use]
    pub const fn is_healthy(self) -> bool {
        matches!(self, Health::Healthy)
    }
}

/// A backend's health with hysteresis: it starts [`Health::Unhealthy`]; a healthy backend
/// becomes unhealthy after `failure_threshold` consecutive failed probes, an unhealthy one
/// becomes healthy after `success_threshold` consecutive successful probes (C-HEALTH-2).
///
/// The whole state is the current health and one counter: the number of consecutive results
/// that disagree with it (failures while healthy, successes while unhealthy). A result that
/// agrees resets the counter; a flip resets it too.
///
/// Kinds: getters [`health`](Self::health), [`is_healthy`](Self::is_healthy),
/// [`streak`](Self::streak); fact in [`handle_result`](Self::handle_result); command
/// [`set_params`](Self::set_params). No time: thresholds count results, not seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    health: Health,
    streak: u32,
    failure_threshold: u32,
    success_threshold: u32,
}

impl Thresholds {
    /// A backend not yet checked: unhealthy, no results counted (C-HEALTH-1).
    #[must_use]
    pub const fn new(params: &HealthParams) -> Thresholds {
        Thresholds {
            health: Health::Unhealthy,
            streak: 0,
            failure_threshold: params.failure_threshold(),
            success_threshold: params.success_threshold(),
        }
    }

    /// Current health.
    #[must_use]
    pub const fn health(&self) -> Health {
        self.health
    }

    /// Whether the backend is currently healthy.
    #[must_use]
    pub const fn is_healthy(&self) -> bool {
        self.health.is_healthy()
    }

    /// Consecutive results, counted since the last flip, that disagree with the current health.
    #[must_use]
    pub const fn streak(&self) -> u32 {
        self.streak
    }

    /// Records one probe result (`ok` = success). Returns the new health when, and only when,
    /// this result flips it (C-HEALTH-2).
    pub fn handle_result(&mut self, ok: bool) -> Option<Health> {
        let (disagrees, threshold, flipped) = match self.health {
            Health::Healthy => (!ok, self.failure_threshold, Health::Unhealthy),
            Health::Unhealthy => (ok, self.success_threshold, Health::Healthy),
        };
        if !disagrees {
            self.streak = 0;
            return None;
        }
        self.streak = self.streak.saturating_add(1);
        if self.streak >= threshold {
            self.health = flipped;
            self.streak = 0;
            return Some(flipped);
        }
        None
    }

    /// Takes new thresholds (a reload); the health and the counter are kept. A counter that
    /// already reaches a lowered threshold flips on the next disagreeing result, not at once:
    /// health changes only on evidence.
    pub fn set_params(&mut self, params: &HealthParams) {
        self.failure_threshold = params.failure_threshold();
        self.success_threshold = params.success_threshold();
    }
}

#[cfg(test)]
mod tests;
