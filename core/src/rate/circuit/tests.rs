//! The store circuit (C-RATE-5): down after a failure, one trial per interval, back up after a
//! successful trial.

use super::*;

const T0: Instant = Instant::from_secs(10);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn c_rate_5_up_calls_always_go_through() {
    let c = StoreCircuit::new(ms(200));
    for _ in 0..3 {
        let call = c.may_call(T0).expect("up: call");
        assert!(!call.trial);
        c.on_success(call);
    }
    assert!(c.is_up());
    assert_eq!(c.counters(), CircuitCounters::default());
}

#[test]
fn c_rate_5_down_spaces_one_trial_per_interval_and_recovers() {
    let c = StoreCircuit::new(ms(200));
    let call = c.may_call(T0).expect("up");
    c.on_failure(call, T0);
    assert!(!c.is_up());
    assert_eq!(
        c.may_call(T0 + ms(199)),
        None,
        "no trial before the interval"
    );
    let trial = c.may_call(T0 + ms(200)).expect("a trial is due");
    assert!(trial.trial);
    assert_eq!(c.may_call(T0 + ms(300)), None, "one trial at a time");
    c.on_failure(trial, T0 + ms(300));
    assert_eq!(c.may_call(T0 + ms(499)), None);
    let trial = c.may_call(T0 + ms(500)).expect("next trial");
    c.on_success(trial);
    assert!(c.is_up() && !c.trial_in_flight());
    let n = c.counters();
    assert_eq!(
        (n.failures_total, n.consecutive_failures, n.recoveries_total),
        (2, 0, 1)
    );
}

#[test]
fn c_rate_5_an_abandoned_trial_frees_its_place_and_learns_nothing() {
    let c = StoreCircuit::new(ms(100));
    c.on_failure(Call { trial: false }, T0);
    let trial = c.may_call(T0 + ms(100)).expect("trial");
    c.abandon(trial);
    assert!(!c.is_up());
    assert!(c.may_call(T0 + ms(100)).is_some_and(|c| c.trial));
}

#[test]
fn c_rate_5_readiness_and_degradation_follow_the_failure_mode() {
    let c = StoreCircuit::default();
    for mode in [
        FailureMode::FailOpen,
        FailureMode::FailClosed,
        FailureMode::LocalFallback,
    ] {
        assert!(c.ready(mode) && !c.degraded(mode));
    }
    c.on_failure(Call { trial: false }, T0);
    assert!(!c.ready(FailureMode::FailClosed) && !c.degraded(FailureMode::FailClosed));
    assert!(c.ready(FailureMode::FailOpen) && c.degraded(FailureMode::FailOpen));
    assert!(c.ready(FailureMode::LocalFallback) && c.degraded(FailureMode::LocalFallback));
}
