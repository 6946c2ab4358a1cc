use super::*;
use core::time::Duration;

fn healthy(spec: &BackendSpec, now: Instant) -> Arc<Backend> {
    let b = Arc::new(Backend::new(spec, now));
    b.set_healthy(true, now);
    b
}

#[test]
fn c_health_4_no_ramp_for_backends_available_at_start_but_after_a_recovery() {
    let ss = SlowStart::new(Duration::from_secs(30), 10).unwrap();
    let t0 = Instant::from_secs(1);
    let up = healthy(&BackendSpec::new("a", "http://a"), t0);
    let down = Arc::new(Backend::new(&BackendSpec::new("b", "http://b"), t0));
    // The first cycle: `a` passed, `b` did not.
    assert!(up.skip_initial_ramp());
    assert!(
        !down.skip_initial_ramp(),
        "an unavailable backend keeps its ramp"
    );
    assert_eq!(up.slow_start_permille(&ss, t0), 1000, "no ramp at start-up");
    // `b` passes later: it ramps from the minimum.
    let t1 = t0 + Duration::from_secs(5);
    down.set_healthy(true, t1);
    assert_eq!(down.slow_start_permille(&ss, t1), 100);
    // `a` fails and recovers: the ramp runs again.
    up.set_healthy(false, t1);
    up.set_healthy(true, t1);
    assert_eq!(up.slow_start_permille(&ss, t1), 100);
    assert_eq!(
        up.slow_start_permille(&ss, t1 + Duration::from_secs(15)),
        550
    );
}

#[test]
fn c_pool_3_availability_checks_every_condition() {
    let p = PoolParams {
        max_concurrent_requests: 1,
        ..PoolParams::default()
    };
    let t = Instant::from_secs(1);
    let b = Arc::new(Backend::new(&BackendSpec::new("a", "http://a"), t));
    assert_eq!(
        b.availability(&p, t),
        Availability::Unhealthy,
        "starts unhealthy (C-HEALTH-1)"
    );
    b.set_healthy(true, t);
    assert_eq!(b.availability(&p, t), Availability::Available);
    let slot = Backend::try_reserve(&b, &p, t, false).unwrap();
    assert_eq!(b.availability(&p, t), Availability::Saturated);
    assert_eq!(
        Backend::try_reserve(&b, &p, t, false).unwrap_err(),
        Availability::Saturated
    );
    drop(slot);
    assert_eq!(b.in_flight(), 0);
    b.start_drain(t);
    assert_eq!(b.availability(&p, t), Availability::Draining);
    b.set_enabled(false, t);
    assert_eq!(b.availability(&p, t), Availability::Disabled);
    b.set_enabled(true, t);
    assert_eq!(
        b.availability(&p, t),
        Availability::Available,
        "enabling clears a drain"
    );
    for _ in 0..2 {
        let mut s = Backend::try_reserve(&b, &p, t, false).unwrap();
        s.record(Outcome::Failure, &p, t);
    }
    assert_eq!(b.availability(&p, t), Availability::CircuitOpen);
    assert_eq!(b.passive_failures(), 2);
    assert_eq!(b.requests(), 3);
}

#[test]
fn c_pool_6_a_cancelled_slot_is_released_and_not_counted() {
    let p = PoolParams::default();
    let t = Instant::from_secs(1);
    let b = healthy(&BackendSpec::new("a", "http://a"), t);
    Backend::try_reserve(&b, &p, t, false).unwrap().cancel();
    assert_eq!((b.in_flight(), b.requests()), (0, 0));
    drop(Backend::try_reserve(&b, &p, t, false).unwrap());
    assert_eq!((b.in_flight(), b.requests()), (0, 1));
}

#[test]
fn c_pool_7_draining_backend_keeps_in_flight_visible() {
    let p = PoolParams::default();
    let t = Instant::from_secs(1);
    let b = healthy(&BackendSpec::new("a", "http://a"), t);
    let slot = Backend::try_reserve(&b, &p, t, false).unwrap();
    b.start_drain(t);
    assert_eq!(b.in_flight(), 1);
    assert_eq!(b.availability(&p, t), Availability::Draining);
    drop(slot);
    assert_eq!(b.in_flight(), 0);
}

#[test]
fn c_pool_6_trial_slot_dropped_without_outcome_frees_the_trial() {
    let p = PoolParams::default();
    let t = Instant::from_secs(1);
    let b = healthy(&BackendSpec::new("a", "http://a"), t);
    for _ in 0..2 {
        Backend::try_reserve(&b, &p, t, false)
            .unwrap()
            .record(Outcome::Failure, &p, t);
    }
    let later = t + Duration::from_secs(10);
    let trial = Backend::try_reserve(&b, &p, later, false).unwrap();
    assert_eq!(
        Backend::try_reserve(&b, &p, later, false).unwrap_err(),
        Availability::CircuitOpen
    );
    drop(trial); // client went away
    let mut again = Backend::try_reserve(&b, &p, later, false).expect("trial released");
    assert_eq!(
        again.record(Outcome::Success, &p, later),
        Some(Transition::Closed)
    );
    assert_eq!(
        b.slow_start_permille(&p.slow_start, later),
        100,
        "a closed circuit restarts slow start (C-HEALTH-4)"
    );
}
