//! Tests of the selection driver and of every policy through it.

use core::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::breaker::Outcome;
use crate::pool::{Backend, BackendSpec, PoolParams};
use crate::rng::WyRand;
use crate::slow_start::SlowStart;

pub(crate) fn specs(n: usize) -> Vec<BackendSpec> {
    (0..n)
        .map(|i| BackendSpec::new(format!("b{i}"), format!("http://10.0.0.{i}:80")))
        .collect()
}

/// A pool of `n` healthy backends, slow start off.
pub(crate) fn healthy_pool(n: usize, kind: PolicyKind, seed: u64) -> Pool {
    let params = PoolParams {
        slow_start: SlowStart::off(),
        ..PoolParams::default()
    };
    let pool = Pool::new(
        &specs(n),
        kind,
        params,
        None,
        Instant::ZERO,
        &mut WyRand::new(seed),
    )
    .expect("valid pool");
    for b in pool.backends() {
        b.set_healthy(true, Instant::ZERO);
    }
    pool
}

/// Pick once and release the slot; the chosen index.
pub(crate) fn pick(
    pool: &Pool,
    ctx: &PickContext,
    now: Instant,
    rng: &mut WyRand,
) -> Option<usize> {
    match pool.select(ctx, &Tried::new(), now, rng) {
        Selection::Selected { index, .. } => Some(index),
        Selection::Unavailable(_) => None,
    }
}

#[test]
fn c_pool_4_round_robin_rotates_evenly_from_a_random_start() {
    let starts: Vec<usize> = (0..20)
        .map(|seed| {
            let pool = healthy_pool(5, PolicyKind::RoundRobin, seed);
            pick(
                &pool,
                &PickContext::default(),
                Instant::ZERO,
                &mut WyRand::new(1),
            )
            .unwrap()
        })
        .collect();
    assert!(
        starts.iter().any(|&s| s != starts[0]),
        "start index is random: {starts:?}"
    );
    let pool = healthy_pool(5, PolicyKind::RoundRobin, 3);
    let mut rng = WyRand::new(2);
    let seq: Vec<usize> = (0..10)
        .map(|_| pick(&pool, &PickContext::default(), Instant::ZERO, &mut rng).unwrap())
        .collect();
    for w in seq.windows(2) {
        assert_eq!(w[1], (w[0] + 1) % 5, "{seq:?}");
    }
}

#[test]
fn c_pool_3_selection_skips_unavailable_backends() {
    let pool = healthy_pool(3, PolicyKind::RoundRobin, 1);
    let t = Instant::from_secs(1);
    pool.backends()[0].set_enabled(false, t);
    pool.backends()[1].start_drain(t);
    let mut rng = WyRand::new(5);
    for _ in 0..10 {
        assert_eq!(pick(&pool, &PickContext::default(), t, &mut rng), Some(2));
    }
}

#[test]
fn c_pool_5_typed_outcomes_when_nothing_is_available() {
    let t = Instant::from_secs(1);
    let mut rng = WyRand::new(5);
    let ctx = PickContext::default();
    let empty = Pool::new(
        &[],
        PolicyKind::RoundRobin,
        PoolParams::default(),
        None,
        t,
        &mut rng,
    )
    .unwrap();
    assert!(matches!(
        empty.select(&ctx, &Tried::new(), t, &mut rng),
        Selection::Unavailable(NoBackend::EmptyPool)
    ));

    let pool = healthy_pool(2, PolicyKind::RoundRobin, 1);
    for b in pool.backends() {
        b.set_healthy(false, t);
    }
    assert!(matches!(
        pool.select(&ctx, &Tried::new(), t, &mut rng),
        Selection::Unavailable(NoBackend::NoHealthy)
    ));

    let params = PoolParams {
        max_concurrent_requests: 1,
        slow_start: SlowStart::off(),
        ..PoolParams::default()
    };
    let pool = Pool::new(&specs(2), PolicyKind::RoundRobin, params, None, t, &mut rng).unwrap();
    for b in pool.backends() {
        b.set_healthy(true, t);
    }
    let held: Vec<_> = (0..2)
        .map(|_| pool.select(&ctx, &Tried::new(), t, &mut rng))
        .collect();
    assert!(held.iter().all(|s| matches!(s, Selection::Selected { .. })));
    assert!(matches!(
        pool.select(&ctx, &Tried::new(), t, &mut rng),
        Selection::Unavailable(NoBackend::AllSaturated)
    ));
    drop(held);

    let mut tried = Tried::new();
    tried.insert(0);
    tried.insert(1);
    assert!(matches!(
        pool.select(&ctx, &tried, t, &mut rng),
        Selection::Unavailable(NoBackend::AllTried)
    ));
}

#[test]
fn c_health_3_panic_routing_when_every_circuit_is_open() {
    let pool = healthy_pool(2, PolicyKind::RoundRobin, 1);
    let t = Instant::from_secs(1);
    let mut rng = WyRand::new(5);
    let ctx = PickContext::default();
    let params = *pool.params();
    for b in pool.backends() {
        for _ in 0..2 {
            let mut s = Backend::try_reserve(b, &params, t, false).unwrap();
            s.record(Outcome::Failure, &params, t);
        }
    }
    match pool.select(&ctx, &Tried::new(), t, &mut rng) {
        Selection::Selected { slot, .. } => assert!(slot.is_panic(), "panic slot is marked"),
        other => panic!("panic routing expected, got {other:?}"),
    }
    // With one circuit closed again, only that backend is used, never a panic slot.
    let mut tried = Tried::new();
    tried.insert(0);
    let later = t + Duration::from_secs(10);
    let Selection::Selected { index, mut slot } = pool.select(&ctx, &tried, later, &mut rng) else {
        panic!("half-open trial expected");
    };
    assert!(!slot.is_panic());
    slot.record(Outcome::Success, &params, later);
    drop(slot);
    // The other backend's half-open trial fails: it re-opens for a doubled cooldown.
    let mut tried = Tried::new();
    tried.insert(index);
    let Selection::Selected {
        index: other,
        mut slot,
    } = pool.select(&ctx, &tried, later, &mut rng)
    else {
        panic!("half-open trial on the other backend expected");
    };
    assert_ne!(other, index);
    assert!(slot.record(Outcome::Failure, &params, later).is_some());
    drop(slot);
    for _ in 0..10 {
        let Selection::Selected { index: i, slot } =
            pool.select(&ctx, &Tried::new(), later, &mut rng)
        else {
            panic!("backend {index} is closed and available");
        };
        assert_eq!(i, index);
        assert!(!slot.is_panic());
    }
    // Unhealthy backends are never used, open circuit or not: all down is a 503.
    pool.backends()[index].set_healthy(false, later);
    let b0 = 1 - index;
    pool.backends()[b0].set_healthy(false, later);
    assert!(matches!(
        pool.select(&ctx, &Tried::new(), later, &mut rng),
        Selection::Unavailable(NoBackend::NoHealthy)
    ));
}

#[test]
fn c_health_4_slow_start_applies_through_the_driver() {
    let t0 = Instant::from_secs(100);
    let params = PoolParams {
        slow_start: SlowStart::new(Duration::from_secs(30), 10).unwrap(),
        ..PoolParams::default()
    };
    let mut rng = WyRand::new(11);
    let pool = Pool::new(
        &specs(2),
        PolicyKind::RoundRobin,
        params,
        None,
        Instant::ZERO,
        &mut rng,
    )
    .unwrap();
    pool.backends()[0].set_healthy(true, Instant::ZERO);
    pool.backends()[1].set_healthy(true, t0); // recovered at t0
    let share_at = |now: Instant, rng: &mut WyRand| {
        let n = 20_000;
        let hits = (0..n)
            .filter(|_| pick(&pool, &PickContext::default(), now, rng) == Some(1))
            .count();
        hits as f64 / n as f64
    };
    // Backend 1 gets share × its round-robin half: ~5% at the start, ~27.5% halfway, 50% after.
    let s0 = share_at(t0, &mut rng);
    let s_half = share_at(t0 + Duration::from_secs(15), &mut rng);
    let s_full = share_at(t0 + Duration::from_secs(30), &mut rng);
    assert!((0.03..0.08).contains(&s0), "{s0}");
    assert!((0.24..0.31).contains(&s_half), "{s_half}");
    assert!((0.49..0.51).contains(&s_full), "{s_full}");
    // Every backend warming (startup): traffic still flows, nobody is turned away.
    for b in pool.backends() {
        b.set_healthy(false, t0);
        b.set_healthy(true, t0);
    }
    assert!((0..100).all(|_| pick(&pool, &PickContext::default(), t0, &mut rng).is_some()));
}

proptest! {
    /// C-RETRY-2 / C-POOL-3: for any policy, pool state and tried set, the driver never returns a
    /// tried backend, never an unavailable one (panic slots aside), and returns NoBackend only
    /// when no untried backend is available.
    #[test]
    fn c_retry_2_selection_never_returns_tried_or_unavailable(
        n in 1usize..12,
        kind_ix in 0usize..16,
        states in proptest::collection::vec(0u8..6, 12),
        tried_ix in proptest::collection::vec(0usize..12, 0..4),
        seed in any::<u64>(),
    ) {
        let kind = PolicyKind::ALL[kind_ix % PolicyKind::ALL.len()];
        let pool = healthy_pool(n, kind, seed);
        let t = Instant::from_secs(1);
        let params = *pool.params();
        for (b, s) in pool.backends().iter().zip(&states) {
            match s {
                1 => { b.set_enabled(false, t); }
                2 => { b.start_drain(t); }
                3 => { b.set_healthy(false, t); }
                4 => for _ in 0..2 {
                    let mut s = Backend::try_reserve(b, &params, t, false).unwrap();
                    s.record(Outcome::Failure, &params, t);
                },
                _ => {}
            }
        }
        let mut tried = Tried::new();
        for i in tried_ix { tried.insert(i % n); }
        let mut rng = WyRand::new(seed);
        let ctx = PickContext { worker: seed as usize, hash: Some(seed.rotate_left(7)) };
        let available: Vec<usize> = (0..n)
            .filter(|&i| !tried.contains(i) && pool.backends()[i].availability(&params, t) == Availability::Available)
            .collect();
        match pool.select(&ctx, &tried, t, &mut rng) {
            Selection::Selected { index, slot } => {
                prop_assert!(!tried.contains(index));
                if slot.is_panic() {
                    prop_assert!(available.is_empty(), "panic while {available:?} available");
                } else {
                    prop_assert!(available.contains(&index), "{index} not in {available:?}");
                }
            }
            Selection::Unavailable(why) => {
                prop_assert!(available.is_empty(), "{why:?} while {available:?} available");
            }
        }
    }
}
