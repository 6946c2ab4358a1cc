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
