use core::time::Duration;

use super::*;

#[test]
fn c_health_1_defaults_are_the_contracts() {
    let p = HealthParams::default();
    assert_eq!(HealthParams::new(&HealthSpec::default()), Ok(p));
    assert_eq!(p.interval(), Duration::from_secs(5));
    assert_eq!(p.jitter(), Duration::from_millis(500));
    assert_eq!(p.timeout(), Duration::from_secs(2));
    assert_eq!(p.failure_threshold(), 2);
    assert_eq!(p.success_threshold(), 1);
    assert_eq!(p.max_concurrency(), 16);
    assert_eq!(p.expected_statuses().collect::<Vec<_>>(), vec![200, 204]);
}

#[test]
fn c_health_1_expected_statuses_decide_probe_success() {
    let p = HealthParams::default();
    assert!(p.probe_status_ok(200));
    assert!(p.probe_status_ok(204));
    for s in [0, 99, 100, 201, 301, 404, 500, 503, 599, 600, u16::MAX] {
        assert!(!p.probe_status_ok(s), "{s}");
    }
    let spec = HealthSpec {
        expected_statuses: vec![100, 599, 301, 301],
        ..HealthSpec::default()
    };
    let p = HealthParams::new(&spec).unwrap();
    assert_eq!(
        p.expected_statuses().collect::<Vec<_>>(),
        vec![100, 301, 599]
    );
    assert!(!p.probe_status_ok(200));
}

#[test]
fn invalid_settings_are_rejected_with_their_reason() {
    let bad = |f: fn(&mut HealthSpec)| {
        let mut s = HealthSpec::default();
        f(&mut s);
        HealthParams::new(&s).unwrap_err()
    };
    assert_eq!(
        bad(|s| s.interval = Duration::ZERO),
        HealthError::ZeroInterval
    );
    assert_eq!(
        bad(|s| s.timeout = Duration::ZERO),
        HealthError::ZeroTimeout
    );
    assert_eq!(
        bad(|s| s.failure_threshold = 0),
        HealthError::ZeroFailureThreshold
    );
    assert_eq!(
        bad(|s| s.success_threshold = 0),
        HealthError::ZeroSuccessThreshold
    );
    assert_eq!(
        bad(|s| s.max_concurrency = 0),
        HealthError::ZeroMaxConcurrency
    );
    assert_eq!(
        bad(|s| s.expected_statuses.clear()),
        HealthError::NoExpectedStatuses
    );
    assert_eq!(
        bad(|s| s.expected_statuses = vec![200, 600]),
        HealthError::BadStatus(600)
    );
    assert_eq!(
        bad(|s| s.expected_statuses = vec![99]),
        HealthError::BadStatus(99)
    );
    assert_eq!(
        HealthError::ZeroTimeout.to_string(),
        "health_check.timeout must be above zero"
    );
    // Jitter zero is allowed.
    let spec = HealthSpec {
        jitter: Duration::ZERO,
        ..HealthSpec::default()
    };
    assert_eq!(HealthParams::new(&spec).unwrap().jitter(), Duration::ZERO);
}
