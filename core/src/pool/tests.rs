use super::*;
use crate::backend::Backend;
use crate::select::{MAX_TRIED, Tried};

#[test]
fn c_conf_6_carry_over_keeps_state_when_id_and_url_are_unchanged() {
    let p = PoolParams::default();
    let t = Instant::from_secs(1);
    let a = BackendSpec::new("a", "http://a");
    let b = BackendSpec::new("b", "http://b");
    let first = carry_over(&[a.clone(), b.clone()], &[], &p, t).unwrap();
    first[0].set_healthy(true, t);
    let held = Backend::try_reserve(&first[0], &p, t, false).unwrap();
    first[1].start_drain(t);
    let moved = BackendSpec::new("b", "http://b2");
    let mut disabled_a = a.clone();
    disabled_a.disabled = true;
    let second = carry_over(&[disabled_a, moved], &first, &p, t).unwrap();
    assert!(Arc::ptr_eq(&first[0], &second[0]));
    assert_eq!(second[0].in_flight(), 1, "in-flight survives the swap");
    assert!(!second[0].is_enabled(), "declarative disabled wins");
    assert!(
        !Arc::ptr_eq(&first[1], &second[1]),
        "a new url is a new backend"
    );
    assert!(!second[1].is_healthy());
    drop(held);
    assert_eq!(second[0].in_flight(), 0);
    // A declarative enable cancels an administrative drain.
    let third = carry_over(&[a.clone(), b.clone()], &first, &p, t).unwrap();
    assert!(third[1].is_enabled() && !third[1].is_draining());
}

#[test]
fn c_pool_1_ids_are_unique_and_weights_bounded() {
    let p = PoolParams::default();
    let t = Instant::ZERO;
    let a = BackendSpec::new("a", "http://a");
    assert_eq!(
        carry_over(&[a.clone(), a.clone()], &[], &p, t).unwrap_err(),
        PoolError::DuplicateId("a".into())
    );
    let mut heavy = a.clone();
    heavy.weight = 101;
    assert!(matches!(
        carry_over(&[heavy], &[], &p, t),
        Err(PoolError::Weight(..))
    ));
    assert_eq!(
        carry_over(&[BackendSpec::new("", "http://x")], &[], &p, t).unwrap_err(),
        PoolError::EmptyId
    );
}

#[test]
fn tried_is_a_bounded_set() {
    let mut t = Tried::new();
    assert!(t.is_empty());
    for i in 0..MAX_TRIED {
        assert!(t.insert(i * 3));
    }
    assert!(t.insert(3), "already present");
    assert!(!t.insert(1000), "full");
    assert!(t.contains(21) && !t.contains(1));
    assert_eq!(t.len(), MAX_TRIED);
}

/// Drive `n` requests through `pool` at `now`: each selects, and its backend answers 500 when
/// `failing` says so (recorded as outlier detection sees it). Returns the picks per backend.
fn traffic(pool: &Pool, failing: &[bool], n: usize, now: Instant) -> Vec<usize> {
    use crate::breaker::Outcome;
    use crate::outlier::Verdict;
    let mut rng = crate::rng::WyRand::new(7);
    let mut picks = vec![0; failing.len()];
    for _ in 0..n {
        let _ = pool.judge_outliers(now);
        let ctx = crate::select::PickContext::default();
        let Selection::Selected { index, mut slot } =
            pool.select(&ctx, &Tried::new(), now, &mut rng)
        else {
            panic!("a pool with a serving backend always selects");
        };
        picks[index] += 1;
        let verdict = if failing[index] {
            Verdict::Failed
        } else {
            Verdict::Good
        };
        let _ = slot.record_attempt(Outcome::Success, verdict, pool.params(), now);
    }
    picks
}

fn outlier_pool(n: usize) -> Pool {
    let params = PoolParams {
        outlier: crate::outlier::OutlierParams {
            interval: core::time::Duration::from_secs(1),
            failure_percentage_request_volume: 5,
            ..crate::outlier::OutlierParams::default()
        },
        ..PoolParams::default()
    };
    let specs: Vec<BackendSpec> = (0..n)
        .map(|i| BackendSpec::new(format!("b{i}"), format!("http://b{i}")))
        .collect();
    let mut rng = crate::rng::WyRand::new(1);
    let pool = Pool::new(
        &specs,
        PolicyKind::RoundRobin,
        params,
        None,
        Instant::ZERO,
        &mut rng,
    )
    .unwrap();
    for b in pool.backends() {
        b.set_healthy(true, Instant::ZERO);
        b.skip_initial_ramp();
    }
    pool
}

#[test]
fn c_out_1_a_backend_answering_500_is_ejected_and_comes_back() {
    let pool = outlier_pool(3);
    let failing = [true, false, false];
    let s = Instant::from_secs;
    traffic(&pool, &failing, 60, s(0));
    // The boundary at 1 s ejects backend 0: it gets nothing of the next 60 requests.
    assert_eq!(traffic(&pool, &failing, 60, s(1))[0], 0);
    assert_eq!(
        pool.backends()[0].availability(pool.params(), s(2)),
        Availability::Ejected
    );
    // After base_ejection_time (30 s) it takes traffic again.
    assert!(traffic(&pool, &failing, 60, s(32))[0] > 0);
}

#[test]
fn c_out_2_a_pool_of_two_both_failing_keeps_serving() {
    let pool = outlier_pool(2);
    let failing = [true, true];
    for t in 0..10 {
        let picks = traffic(&pool, &failing, 30, Instant::from_secs(t));
        assert_eq!(picks.iter().sum::<usize>(), 30);
        let ejected = pool
            .backends()
            .iter()
            .filter(|b| b.is_ejected(pool.params(), Instant::from_secs(t)))
            .count();
        assert!(ejected <= 1, "at most one of two ejected at {t} s");
    }
}

fn pushback_pool(n: usize, params: PoolParams) -> Pool {
    let specs: Vec<BackendSpec> = (0..n)
        .map(|i| BackendSpec::new(format!("b{i}"), format!("http://b{i}")))
        .collect();
    let mut rng = crate::rng::WyRand::new(1);
    let pool = Pool::new(
        &specs,
        PolicyKind::RoundRobin,
        params,
        None,
        Instant::ZERO,
        &mut rng,
    )
    .unwrap();
    for b in pool.backends() {
        b.set_healthy(true, Instant::ZERO);
        b.skip_initial_ramp();
    }
    pool
}

#[test]
fn c_retry_11_a_pushed_back_backend_is_out_for_as_long_as_it_asked() {
    use crate::outlier::{EjectReason, OutlierChange, OutlierEvent};
    let pool = pushback_pool(3, PoolParams::default());
    let ms = Instant::from_millis;
    let event = pool.push_back(1, Duration::from_secs(2), ms(1000));
    assert_eq!(
        event,
        Some(OutlierEvent {
            backend: 1,
            change: OutlierChange::Ejected {
                reason: EjectReason::RetryAfter,
                duration: Duration::from_secs(2)
            }
        })
    );
    let b = &pool.backends()[1];
    assert_eq!(
        b.availability(pool.params(), ms(1000)),
        Availability::Ejected
    );
    assert_eq!(
        b.availability(pool.params(), ms(2999)),
        Availability::Ejected
    );
    assert_eq!(
        b.availability(pool.params(), ms(3000)),
        Availability::Available
    );
    assert_eq!(
        b.outlier().ejection(ms(1500)),
        Some(EjectReason::RetryAfter)
    );
    // A pushback is the backend's request, not a verdict: the multiplier of C-OUT-2 stays.
    assert_eq!(b.outlier().consecutive_ejections(), 0);
}

#[test]
fn c_retry_11_pushback_is_capped_at_retry_after_max() {
    let params = PoolParams {
        retry_after_max: Duration::from_secs(5),
        ..PoolParams::default()
    };
    let pool = pushback_pool(3, params);
    let event = pool
        .push_back(0, Duration::from_secs(3600), Instant::ZERO)
        .unwrap();
    assert_eq!(
        event.change,
        crate::outlier::OutlierChange::Ejected {
            reason: crate::outlier::EjectReason::RetryAfter,
            duration: Duration::from_secs(5)
        }
    );
    let b = &pool.backends()[0];
    assert!(b.is_ejected(pool.params(), Instant::from_millis(4999)));
    assert!(!b.is_ejected(pool.params(), Instant::from_secs(5)));
}

#[test]
fn c_retry_11_pushback_stays_within_the_outlier_cap() {
    let s = Instant::from_secs;
    // A pool of one is never emptied.
    let one = pushback_pool(1, PoolParams::default());
    assert_eq!(one.push_back(0, Duration::from_secs(2), s(0)), None);
    assert!(!one.backends()[0].is_ejected(one.params(), s(0)));
    // A pool of two: one may go, never the second.
    let two = pushback_pool(2, PoolParams::default());
    assert!(two.push_back(0, Duration::from_secs(2), s(0)).is_some());
    assert_eq!(two.push_back(1, Duration::from_secs(2), s(0)), None);
    // Not one already out, whatever for.
    assert_eq!(two.push_back(0, Duration::from_secs(9), s(1)), None);
    // Once the first is back, the second may go.
    assert!(two.push_back(1, Duration::from_secs(2), s(2)).is_some());
    // Of four, at most half (max_ejection_percent 50).
    let four = pushback_pool(4, PoolParams::default());
    let pushed = (0..4)
        .filter(|&i| four.push_back(i, Duration::from_secs(2), s(0)).is_some())
        .count();
    assert_eq!(pushed, 2);
    // max_ejection_percent 0: none.
    let mut none = PoolParams::default();
    none.outlier.max_ejection_percent = 0;
    let none = pushback_pool(3, none);
    assert_eq!(none.push_back(0, Duration::from_secs(2), s(0)), None);
}

#[test]
fn c_retry_11_the_last_serving_backend_is_never_pushed_back() {
    let pool = pushback_pool(3, PoolParams::default());
    let t = Instant::ZERO;
    pool.backends()[1].set_healthy(false, t);
    pool.backends()[2].set_healthy(false, t);
    assert_eq!(pool.push_back(0, Duration::from_secs(2), t), None);
    // An unhealthy one may be (it serves nothing anyway).
    assert!(pool.push_back(1, Duration::from_secs(2), t).is_some());
}

#[test]
fn c_retry_11_zero_retry_after_max_turns_pushback_off() {
    let params = PoolParams {
        retry_after_max: Duration::ZERO,
        ..PoolParams::default()
    };
    let pool = pushback_pool(3, params);
    assert_eq!(
        pool.push_back(0, Duration::from_secs(2), Instant::ZERO),
        None
    );
    // Turned off while one is pushed back: it is back at once.
    let on = pushback_pool(3, PoolParams::default());
    assert!(
        on.push_back(0, Duration::from_secs(2), Instant::ZERO)
            .is_some()
    );
    let mut rng = crate::rng::WyRand::new(1);
    let off = Pool::new(
        &(0..3)
            .map(|i| BackendSpec::new(format!("b{i}"), format!("http://b{i}")))
            .collect::<Vec<_>>(),
        PolicyKind::RoundRobin,
        params,
        Some(&on),
        Instant::ZERO,
        &mut rng,
    )
    .unwrap();
    assert!(!off.backends()[0].is_ejected(off.params(), Instant::ZERO));
    assert!(on.backends()[0].is_ejected(on.params(), Instant::ZERO));
}

#[test]
fn c_retry_11_pushback_works_with_outlier_detection_off_and_returns() {
    use crate::outlier::OutlierChange;
    let mut params = PoolParams::default();
    params.outlier.enabled = false;
    params.outlier.interval = Duration::from_secs(1);
    let pool = pushback_pool(3, params);
    let s = Instant::from_secs;
    assert_eq!(pool.judge_outliers(s(0)), None, "the first boundary starts");
    assert!(pool.push_back(2, Duration::from_secs(2), s(0)).is_some());
    assert!(pool.backends()[2].is_ejected(pool.params(), s(1)));
    assert_eq!(pool.judge_outliers(s(1)), None, "still out");
    let back = pool.judge_outliers(s(2)).unwrap();
    assert_eq!(back.len(), 1);
    assert_eq!(
        (back[0].backend, back[0].change),
        (2, OutlierChange::Returned)
    );
}
