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
