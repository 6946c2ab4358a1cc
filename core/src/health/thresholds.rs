//! One backend's active-check state with hysteresis (C-HEALTH-2).

use super::{Health, HealthParams};

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
mod tests {
    use super::*;
    use crate::health::HealthSpec;
    use proptest::prelude::*;

    fn params(failures: u32, successes: u32) -> HealthParams {
        HealthParams::new(&HealthSpec {
            failure_threshold: failures,
            success_threshold: successes,
            ..HealthSpec::default()
        })
        .unwrap()
    }

    #[test]
    fn c_health_1_starts_unhealthy() {
        let t = Thresholds::new(&HealthParams::default());
        assert_eq!(t.health(), Health::Unhealthy);
        assert!(!t.is_healthy());
        assert_eq!(t.streak(), 0);
    }

    #[test]
    fn c_health_2_defaults_one_success_up_two_failures_down() {
        let mut t = Thresholds::new(&HealthParams::default());
        assert_eq!(t.handle_result(false), None);
        assert_eq!(t.handle_result(true), Some(Health::Healthy));
        assert_eq!(
            t.handle_result(true),
            None,
            "agreeing result: no flip reported"
        );
        assert_eq!(t.handle_result(false), None);
        assert_eq!(t.streak(), 1);
        assert_eq!(
            t.handle_result(true),
            None,
            "a success resets the failure streak"
        );
        assert_eq!(t.streak(), 0);
        assert_eq!(t.handle_result(false), None);
        assert_eq!(t.handle_result(false), Some(Health::Unhealthy));
        assert_eq!(t.streak(), 0);
        assert_eq!(t.handle_result(false), None);
    }

    #[test]
    fn c_health_2_rise_needs_consecutive_successes() {
        let mut t = Thresholds::new(&params(1, 3));
        assert_eq!(t.handle_result(true), None);
        assert_eq!(t.handle_result(true), None);
        assert_eq!(
            t.handle_result(false),
            None,
            "a failure resets the success streak"
        );
        assert_eq!(t.handle_result(true), None);
        assert_eq!(t.handle_result(true), None);
        assert_eq!(t.handle_result(true), Some(Health::Healthy));
        assert_eq!(t.handle_result(false), Some(Health::Unhealthy));
    }

    #[test]
    fn set_params_keeps_health_and_counter() {
        let mut t = Thresholds::new(&params(2, 5));
        t.handle_result(true);
        t.handle_result(true);
        t.set_params(&params(2, 2));
        assert_eq!(t.streak(), 2);
        assert!(
            !t.is_healthy(),
            "a lowered threshold does not flip without a result"
        );
        assert_eq!(t.handle_result(true), Some(Health::Healthy));
    }

    proptest! {
        /// C-HEALTH-2: the health flips exactly when the last N results since the previous flip
        /// were all of the opposite kind (N = failure_threshold going down, success_threshold
        /// going up), and never otherwise. Checked against a history kept by the test.
        #[test]
        fn c_health_2_flip_only_after_exactly_n_opposite_results(
            failures in 1u32..6,
            successes in 1u32..6,
            results in proptest::collection::vec(any::<bool>(), 0..200),
        ) {
            let mut t = Thresholds::new(&params(failures, successes));
            let mut healthy = false;
            let mut since_flip: Vec<bool> = Vec::new();
            for ok in results {
                since_flip.push(ok);
                let opposite = |r: &bool| *r != healthy;
                let trailing = since_flip.iter().rev().take_while(|r| opposite(r)).count();
                let n = if healthy { failures } else { successes } as usize;
                let flip = t.handle_result(ok);
                if trailing == n {
                    let expected = if healthy { Health::Unhealthy } else { Health::Healthy };
                    prop_assert_eq!(flip, Some(expected));
                    healthy = !healthy;
                    since_flip.clear();
                } else {
                    prop_assert!(trailing < n, "a flip was missed: {} >= {}", trailing, n);
                    prop_assert_eq!(flip, None);
                }
                prop_assert_eq!(t.is_healthy(), healthy);
                prop_assert_eq!(t.streak() as usize, if flip.is_some() { 0 } else { trailing });
            }
        }
    }
}
