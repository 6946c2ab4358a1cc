//! Tests of the selection driver and of every policy through it.

use core::ops::ControlFlow;
use core::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::breaker::Outcome;
use crate::pool::{Availability, Backend, BackendSpec, Pool, PoolParams, Slot};
use crate::rng::WyRand;
use crate::slow_start::SlowStart;
use crate::time::Instant;

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
        let ctx = PickContext { hash: Some(seed.rotate_left(7)) };
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

// ---------------------------------------------------------------------------------------------
// Policies other than round robin (C-POOL-4).

/// A pool of healthy backends built from `specs`, slow start off.
fn healthy_pool_of(specs: &[BackendSpec], kind: PolicyKind, seed: u64) -> Pool {
    let params = PoolParams {
        slow_start: SlowStart::off(),
        ..PoolParams::default()
    };
    let pool = Pool::new(
        specs,
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

fn weighted_specs(weights: &[u32]) -> Vec<BackendSpec> {
    let mut specs = specs(weights.len());
    for (s, &w) in specs.iter_mut().zip(weights) {
        s.weight = w;
    }
    specs
}

/// Every index the policy offers, in order, to a visitor that never breaks.
fn offers(pool: &Pool, ctx: &PickContext, now: Instant, rng: &mut WyRand) -> Vec<usize> {
    let mut seen = Vec::new();
    pool.policy.policy().visit(
        pool.backends(),
        ctx,
        pool.params(),
        now,
        rng,
        &mut |i, _| {
            seen.push(i);
            ControlFlow::Continue(())
        },
    );
    seen
}

/// Hold `count` slots on backend `i`.
fn hold(pool: &Pool, i: usize, count: usize) -> Vec<Slot> {
    (0..count)
        .map(|_| Backend::try_reserve(&pool.backends()[i], pool.params(), Instant::ZERO, false))
        .collect::<Result<_, _>>()
        .expect("slots available")
}

fn weighted(pool: &Pool) -> &WeightedRoundRobin {
    match &pool.policy {
        AnyPolicy::WeightedRoundRobin(p) => p,
        other => panic!("not weighted: {other:?}"),
    }
}

fn max_cyclic_run(seq: &[usize], x: usize) -> usize {
    let doubled: Vec<usize> = seq.iter().chain(seq).copied().collect();
    let mut best = 0;
    let mut run = 0;
    for &i in &doubled {
        run = if i == x { run + 1 } else { 0 };
        best = best.max(run);
    }
    best.min(seq.len())
}

#[test]
fn c_pool_4_policy_names_round_trip() {
    for &k in PolicyKind::ALL {
        assert_eq!(PolicyKind::from_name(k.as_str()), Some(k));
        let pool = healthy_pool(3, k, 1);
        assert_eq!(pool.policy_kind(), k);
    }
    assert_eq!(PolicyKind::from_name("least_requests"), None);
    assert_eq!(PolicyKind::ALL.len(), 5);
}

#[test]
fn c_pool_4_weighted_5_1_1_is_interleaved_not_a_burst() {
    let pool = healthy_pool_of(
        &weighted_specs(&[5, 1, 1]),
        PolicyKind::WeightedRoundRobin,
        7,
    );
    let p = weighted(&pool);
    assert_eq!(p.period(), 7);
    let seq: Vec<usize> = (0..7).map(|i| p.entry(i).unwrap()).collect();
    assert_eq!(seq, vec![0, 0, 1, 0, 2, 0, 0], "nginx's a a b a c a a");
    assert!(max_cyclic_run(&seq, 0) < 5, "never 5 a's in a row: {seq:?}");
    // Through the driver, one worker walks the same sequence from its random offset.
    let mut rng = WyRand::new(3);
    let ctx = PickContext { hash: None };
    let picks: Vec<usize> = (0..70)
        .map(|_| pick(&pool, &ctx, Instant::ZERO, &mut rng).unwrap())
        .collect();
    let offset = (0..7)
        .find(|&o| (0..7).all(|i| seq[(o + i) % 7] == picks[i]))
        .expect("picks are a rotation of the smooth sequence");
    for (i, &b) in picks.iter().enumerate() {
        assert_eq!(b, seq[(offset + i) % 7]);
    }
    let mut run = 0;
    for &b in &picks {
        run = if b == 0 { run + 1 } else { 0 };
        assert!(run < 5, "{picks:?}");
    }
}

#[test]
fn c_pool_4_weighted_cursors_start_at_random_offsets() {
    let firsts: Vec<usize> = (0..16)
        .map(|seed| {
            let pool = healthy_pool_of(
                &weighted_specs(&[3, 2, 1, 1]),
                PolicyKind::WeightedRoundRobin,
                seed,
            );
            pick(
                &pool,
                &PickContext::default(),
                Instant::ZERO,
                &mut WyRand::new(1),
            )
            .unwrap()
        })
        .collect();
    assert!(firsts.iter().any(|&f| f != firsts[0]), "{firsts:?}");
}

#[test]
fn c_pool_4_weighted_down_backend_share_is_spread_by_weight() {
    let pool = healthy_pool_of(
        &weighted_specs(&[4, 2, 1, 1]),
        PolicyKind::WeightedRoundRobin,
        9,
    );
    pool.backends()[0].set_healthy(false, Instant::ZERO);
    let mut rng = WyRand::new(4);
    let mut counts = [0usize; 4];
    let total = 40_000;
    let ctx = PickContext { hash: None };
    for _ in 0..total {
        counts[pick(&pool, &ctx, Instant::ZERO, &mut rng).unwrap()] += 1;
    }
    assert_eq!(counts[0], 0);
    let share = |i: usize| counts[i] as f64 / total as f64;
    // Weights 2:1:1 among the rest: about 1/2, 1/4, 1/4 (not all of it to the successor).
    assert!((0.47..0.53).contains(&share(1)), "{counts:?}");
    assert!((0.22..0.28).contains(&share(2)), "{counts:?}");
    assert!((0.22..0.28).contains(&share(3)), "{counts:?}");
}

#[test]
fn c_pool_4_weighted_sequence_is_compact_and_scales() {
    let weights: Vec<u32> = (0..1024).map(|i| 1 + (i % 100)).collect();
    let pool = healthy_pool_of(&weighted_specs(&weights), PolicyKind::WeightedRoundRobin, 1);
    let p = weighted(&pool);
    let sum: usize = weights.iter().map(|&w| w as usize).sum();
    assert_eq!(p.period(), sum);
    let mut counts = vec![0u32; 1024];
    for pos in 0..p.period() {
        counts[p.entry(pos).unwrap()] += 1;
    }
    assert_eq!(counts, weights);
    // Equal weights reduce by their gcd: the period is n, a plain rotation.
    let pool = healthy_pool_of(
        &weighted_specs(&[40, 40, 40]),
        PolicyKind::WeightedRoundRobin,
        1,
    );
    assert_eq!(weighted(&pool).period(), 3);
}

#[test]
fn c_pool_4_least_request_prefers_the_less_loaded_of_two() {
    let pool = healthy_pool(2, PolicyKind::LeastRequest, 1);
    let _held = hold(&pool, 0, 3);
    let mut rng = WyRand::new(2);
    for _ in 0..50 {
        assert_eq!(
            pick(&pool, &PickContext::default(), Instant::ZERO, &mut rng),
            Some(1)
        );
    }
}

#[test]
fn c_pool_4_least_request_starves_a_heavily_loaded_backend() {
    let pool = healthy_pool(4, PolicyKind::LeastRequest, 1);
    let _held = hold(&pool, 0, 50);
    let mut rng = WyRand::new(8);
    let mut counts = [0usize; 4];
    let total = 12_000;
    for _ in 0..total {
        counts[pick(&pool, &PickContext::default(), Instant::ZERO, &mut rng).unwrap()] += 1;
    }
    assert!(counts[0] * 100 < total, "loaded backend got {counts:?}");
    for &c in &counts[1..] {
        let share = c as f64 / total as f64;
        assert!((0.30..0.37).contains(&share), "{counts:?}");
    }
    // Unloaded, it spreads evenly.
    let pool = healthy_pool(4, PolicyKind::LeastRequest, 1);
    let mut counts = [0usize; 4];
    for _ in 0..total {
        counts[pick(&pool, &PickContext::default(), Instant::ZERO, &mut rng).unwrap()] += 1;
    }
    for &c in &counts {
        let share = c as f64 / total as f64;
        assert!((0.22..0.28).contains(&share), "{counts:?}");
    }
}

#[test]
fn c_pool_4_pick_first_uses_the_first_available_and_returns_to_it() {
    let pool = healthy_pool(3, PolicyKind::PickFirst, 1);
    let mut rng = WyRand::new(2);
    let ctx = PickContext::default();
    let t = Instant::from_secs(1);
    let bs = pool.backends();
    assert!((0..10).all(|_| pick(&pool, &ctx, t, &mut rng) == Some(0)));
    bs[0].set_healthy(false, t);
    assert!((0..10).all(|_| pick(&pool, &ctx, t, &mut rng) == Some(1)));
    bs[1].start_drain(t);
    assert!((0..10).all(|_| pick(&pool, &ctx, t, &mut rng) == Some(2)));
    bs[1].set_enabled(true, t);
    assert!((0..10).all(|_| pick(&pool, &ctx, t, &mut rng) == Some(1)));
    bs[0].set_healthy(true, t);
    assert!((0..10).all(|_| pick(&pool, &ctx, t, &mut rng) == Some(0)));
    // A retry falls over in order too (C-RETRY-2).
    let mut tried = Tried::new();
    tried.insert(0);
    assert!(matches!(
        pool.select(&ctx, &tried, t, &mut rng),
        Selection::Selected { index: 1, .. }
    ));
}

/// The id of the backend a key goes to.
fn owner_id(pool: &Pool, hash: u64, rng: &mut WyRand) -> Option<String> {
    let ctx = PickContext { hash: Some(hash) };
    pick(pool, &ctx, Instant::ZERO, rng).map(|i| pool.backends()[i].id().to_owned())
}

fn hash_pool(ids: &[usize], seed: u64) -> Pool {
    let specs: Vec<BackendSpec> = ids
        .iter()
        .map(|i| BackendSpec::new(format!("b{i}"), format!("http://10.0.0.{i}:80")))
        .collect();
    healthy_pool_of(&specs, PolicyKind::ConsistentHash, seed)
}

#[test]
fn c_pool_4_hash_key_is_pinned() {
    // FNV-1a test vectors (before the finaliser) and pinned outputs: a change here remaps every
    // affinity key of every deployment.
    assert_eq!(hash_key(b""), fmix64(0xcbf2_9ce4_8422_2325));
    assert_eq!(hash_key(b"a"), fmix64(0xaf63_dc4c_8601_ec8c));
    assert_eq!(hash_key(b"foobar"), fmix64(0x8594_4171_f739_67e8));
    assert_eq!(fmix64(0), 0);
    assert_ne!(hash_key(b"10.0.0.1"), hash_key(b"10.0.0.2"));
    // Computed independently (Python) from the FNV-1a and fmix64 definitions.
    assert_eq!(hash_key(b"session=42"), 0x9652_6fd0_cb6f_f2ac);
}

#[test]
fn c_pool_4_consistent_hash_same_key_same_backend_across_replicas() {
    let ids: Vec<usize> = (0..9).collect();
    let a = hash_pool(&ids, 1);
    let reversed: Vec<usize> = ids.iter().rev().copied().collect();
    let b = hash_pool(&reversed, 99); // another replica: other rng, other config order
    let mut rng = WyRand::new(5);
    let mut seen = std::collections::BTreeSet::new();
    for k in 0..3000u64 {
        let h = hash_key(&k.to_le_bytes());
        let x = owner_id(&a, h, &mut rng).unwrap();
        assert_eq!(Some(&x), owner_id(&b, h, &mut rng).as_ref());
        assert_eq!(Some(&x), owner_id(&a, h, &mut rng).as_ref(), "stable");
        seen.insert(x);
    }
    assert_eq!(seen.len(), 9, "every backend owns keys");
}

#[test]
fn c_pool_4_consistent_hash_removal_moves_only_the_removed_backends_keys() {
    let n = 10;
    let all: Vec<usize> = (0..n).collect();
    let before = hash_pool(&all, 1);
    let without: Vec<usize> = all.iter().copied().filter(|&i| i != 3).collect();
    let after = hash_pool(&without, 2);
    let mut rng = WyRand::new(5);
    let keys = 20_000u64;
    let mut moved = 0;
    for k in 0..keys {
        let h = hash_key(format!("client-{k}").as_bytes());
        let x = owner_id(&before, h, &mut rng).unwrap();
        let y = owner_id(&after, h, &mut rng).unwrap();
        if x != y {
            assert_eq!(x, "b3", "key {k} moved from {x} to {y}");
            moved += 1;
        } else {
            assert_ne!(x, "b3");
        }
    }
    let frac = f64::from(moved) / keys as f64;
    assert!(
        (0.085..0.115).contains(&frac),
        "moved {frac}, expected ≈ 1/{n}"
    );
}

#[test]
fn c_pool_4_consistent_hash_unhealthy_backend_moves_only_its_keys() {
    let pool = hash_pool(&(0..8).collect::<Vec<_>>(), 1);
    let mut rng = WyRand::new(5);
    let keys: Vec<u64> = (0..8000u64).map(|k| hash_key(&k.to_be_bytes())).collect();
    let before: Vec<String> = keys
        .iter()
        .map(|&h| owner_id(&pool, h, &mut rng).unwrap())
        .collect();
    let (down, _) = pool.find("b2").unwrap();
    pool.backends()[down].set_healthy(false, Instant::ZERO);
    let mut spread = std::collections::BTreeMap::new();
    for (&h, x) in keys.iter().zip(&before) {
        let y = owner_id(&pool, h, &mut rng).unwrap();
        if x == "b2" {
            assert_ne!(y, "b2");
            *spread.entry(y).or_insert(0) += 1;
        } else {
            assert_eq!(&y, x, "a key of an available backend moved");
        }
    }
    assert_eq!(
        spread.len(),
        7,
        "b2's keys spread over the others: {spread:?}"
    );
    let total: i32 = spread.values().sum();
    for c in spread.values() {
        assert!(*c * 20 > total, "{spread:?}");
    }
    // It comes back: its keys return.
    pool.backends()[down].set_healthy(true, Instant::ZERO);
    for (&h, x) in keys.iter().zip(&before) {
        assert_eq!(&owner_id(&pool, h, &mut rng).unwrap(), x);
    }
}

#[test]
fn c_pool_4_consistent_hash_table_is_prime_and_balanced() {
    for n in [1usize, 2, 10, 300, 1000] {
        let m = consistent_hash::table_size(n);
        assert!(m >= 65_537 && m >= 256 * n.min(1 << 16));
        assert!(
            (2..m)
                .take_while(|d| d * d <= m)
                .all(|d| !m.is_multiple_of(d)),
            "{m}"
        );
    }
    let pool = hash_pool(&(0..10).collect::<Vec<_>>(), 1);
    let AnyPolicy::ConsistentHash(p) = &pool.policy else {
        panic!("consistent hash expected");
    };
    let m = p.table_len();
    let mut counts = [0usize; 10];
    // The owner of the k-th slot-sized step of the hash space: every slot once.
    for k in 0..m as u64 {
        counts[p.owner(hash_key(&k.to_le_bytes())).unwrap()] += 1;
    }
    for &c in &counts {
        let share = c as f64 * 10.0 / m as f64;
        assert!((0.93..1.07).contains(&share), "{counts:?}");
    }
}

#[test]
fn c_pool_4_consistent_hash_bounded_load_caps_a_hot_key() {
    let n = 8u64;
    let pool = hash_pool(&(0..n as usize).collect::<Vec<_>>(), 1);
    let mut rng = WyRand::new(5);
    let hot = hash_key(b"the-hot-key");
    let owner = pick(
        &pool,
        &PickContext { hash: Some(hot) },
        Instant::ZERO,
        &mut rng,
    )
    .unwrap();
    let mut held = Vec::new();
    for round in 0..1500u64 {
        // Mostly the hot key, some others: every pick holds its slot.
        let hash = if round % 4 == 3 {
            hash_key(&round.to_le_bytes())
        } else {
            hot
        };
        let ctx = PickContext { hash: Some(hash) };
        let Selection::Selected { slot, .. } =
            pool.select(&ctx, &Tried::new(), Instant::ZERO, &mut rng)
        else {
            panic!("a backend is available");
        };
        held.push(slot);
        let loads: Vec<u64> = pool
            .backends()
            .iter()
            .map(|b| u64::from(b.in_flight()))
            .collect();
        let total: u64 = loads.iter().sum();
        let cap = (125 * (total + 1)).div_ceil(100 * n);
        assert!(loads.iter().all(|&l| l <= cap), "{loads:?} cap {cap}");
    }
    // The hot key's owner is full, not overfull, and everyone shares the rest.
    let loads: Vec<u32> = pool.backends().iter().map(|b| b.in_flight()).collect();
    let owner_load = u64::from(loads[owner]);
    assert!(owner_load * n * 100 >= 1500 * 115, "{loads:?}");
    // Released, the hot key is back on its owner.
    drop(held);
    assert_eq!(
        pick(
            &pool,
            &PickContext { hash: Some(hot) },
            Instant::ZERO,
            &mut rng
        ),
        Some(owner)
    );
}

#[test]
fn c_pool_4_consistent_hash_without_a_key_spreads_randomly() {
    let pool = hash_pool(&(0..4).collect::<Vec<_>>(), 1);
    let mut rng = WyRand::new(5);
    let mut counts = [0usize; 4];
    for _ in 0..8000 {
        counts[pick(&pool, &PickContext::default(), Instant::ZERO, &mut rng).unwrap()] += 1;
    }
    for &c in &counts {
        assert!((1700..2300).contains(&c), "{counts:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// C-POOL-4: the precomputed sequence is exactly nginx's smooth weighted round robin, and
    /// smooth: at every prefix, every backend is less than two picks away from its exact share
    /// (nginx's rule stays within about one pick; a burst of `weight` would be `weight` off).
    #[test]
    fn c_pool_4_weighted_sequence_is_nginx_smooth_wrr(
        weights in proptest::collection::vec(1u32..=100, 1..10),
    ) {
        let seq = weighted::smooth_sequence(&weights);
        let g = weights.iter().copied().fold(0, |a, b| {
            let (mut a, mut b) = (a, b);
            while b != 0 { (a, b) = (b, a % b); }
            a
        });
        let reduced: Vec<i64> = weights.iter().map(|&w| i64::from(w / g)).collect();
        let total: i64 = reduced.iter().sum();
        prop_assert_eq!(seq.len() as i64, total);
        let oracle = weighted::reference::nginx(&weights, seq.len());
        let seq: Vec<usize> = seq.iter().map(|&i| i as usize).collect();
        prop_assert_eq!(&seq, &oracle);
        let mut counts = vec![0i64; weights.len()];
        for (t, &i) in seq.iter().enumerate() {
            counts[i] += 1;
            let t = t as i64 + 1;
            for (c, r) in counts.iter().zip(&reduced) {
                prop_assert!((t * r - total * c).abs() < 2 * total, "prefix {} off by two picks", t);
            }
        }
    }

    /// C-POOL-4: over sum(weights) × k picks, with every backend available, each
    /// backend is chosen exactly weight × k times.
    #[test]
    fn c_pool_4_weighted_shares_converge_exactly_to_weights(
        weights in proptest::collection::vec(1u32..=100, 1..8),
        k in 1usize..4,
        seed in any::<u64>(),
    ) {
        let pool = healthy_pool_of(&weighted_specs(&weights), PolicyKind::WeightedRoundRobin, seed);
        let mut rng = WyRand::new(seed);
        let ctx = PickContext { hash: None };
        let sum: usize = weights.iter().map(|&w| w as usize).sum();
        let mut counts = vec![0usize; weights.len()];
        for _ in 0..sum * k {
            counts[pick(&pool, &ctx, Instant::ZERO, &mut rng).unwrap()] += 1;
        }
        let expected: Vec<usize> = weights.iter().map(|&w| w as usize * k).collect();
        prop_assert_eq!(counts, expected);
    }

    /// C-POOL-4: least_request draws two distinct candidates and offers the less loaded first.
    #[test]
    fn c_pool_4_least_request_pair_is_distinct_and_less_loaded_first(
        loads in proptest::collection::vec(0usize..4, 2..16),
        seed in any::<u64>(),
    ) {
        let n = loads.len();
        let pool = healthy_pool(n, PolicyKind::LeastRequest, seed);
        let _held: Vec<Vec<Slot>> = loads.iter().enumerate().map(|(i, &l)| hold(&pool, i, l)).collect();
        let mut rng = WyRand::new(seed);
        for _ in 0..8 {
            let seen = offers(&pool, &PickContext::default(), Instant::ZERO, &mut rng);
            prop_assert_ne!(seen[0], seen[1], "the two choices are distinct");
            prop_assert!(loads[seen[0]] <= loads[seen[1]], "{:?} {:?}", seen, loads);
            prop_assert_eq!(seen.len(), n, "every index once");
        }
    }

    /// C-POOL-4, C-POOL-5, C-RETRY-2: every policy offers every backend index if the driver
    /// keeps asking (so a pick succeeds whenever any backend is available), whatever the loads,
    /// or key.
    #[test]
    fn c_pool_4_every_policy_offers_every_index(
        kind_ix in 0usize..5,
        loads in proptest::collection::vec(0usize..6, 1..20),
        hash in proptest::option::of(any::<u64>()),
        seed in any::<u64>(),
    ) {
        let kind = PolicyKind::ALL[kind_ix % PolicyKind::ALL.len()];
        let n = loads.len();
        let pool = healthy_pool(n, kind, seed);
        let _held: Vec<Vec<Slot>> = loads.iter().enumerate().map(|(i, &l)| hold(&pool, i, l)).collect();
        let mut rng = WyRand::new(seed);
        let seen = offers(&pool, &PickContext { hash }, Instant::ZERO, &mut rng);
        let mut set: Vec<usize> = seen.clone();
        set.sort_unstable();
        set.dedup();
        prop_assert_eq!(set, (0..n).collect::<Vec<_>>(), "{:?} offered {:?}", kind, seen);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// C-POOL-4: removing any one backend from a consistent-hash pool moves only the keys it
    /// owned, and all of them.
    #[test]
    fn c_pool_4_consistent_hash_removal_is_minimally_disruptive(
        n in 2usize..12,
        removed_ix in 0usize..12,
        seed in any::<u64>(),
    ) {
        let removed = removed_ix % n;
        let all: Vec<usize> = (0..n).collect();
        let without: Vec<usize> = all.iter().copied().filter(|&i| i != removed).collect();
        let before = hash_pool(&all, seed);
        let after = hash_pool(&without, seed.wrapping_add(1));
        let gone = format!("b{removed}");
        let mut rng = WyRand::new(seed);
        for k in 0..400u64 {
            let h = hash_key(&(k ^ seed).to_le_bytes());
            let x = owner_id(&before, h, &mut rng).unwrap();
            let y = owner_id(&after, h, &mut rng).unwrap();
            prop_assert!(x == y || x == gone, "key moved from {} to {}", x, y);
            prop_assert_ne!(y, gone.clone());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Smooth among the available backends (C-POOL-4): while some backends are down, round robin and
// weighted round robin interleave the others by their weights, as nginx's rule over the
// available peers does, with no double turn and no random replacement.

/// `count` consecutive picks at `now`, each expected to find a backend.
fn picks(pool: &Pool, count: usize, now: Instant, rng: &mut WyRand) -> Vec<usize> {
    let ctx = PickContext::default();
    (0..count)
        .map(|_| pick(pool, &ctx, now, rng).expect("a backend is available"))
        .collect()
}

/// The longest run of `x` in `seq` (not cyclic).
fn max_run(seq: &[usize], x: usize) -> usize {
    let (mut best, mut run) = (0, 0);
    for &i in seq {
        run = if i == x { run + 1 } else { 0 };
        best = best.max(run);
    }
    best
}

/// One period of nginx's smooth sequence over the backends that `up` keeps, as pool indices.
fn nginx_among(weights: &[u32], up: &[bool]) -> Vec<usize> {
    let members: Vec<usize> = (0..weights.len()).filter(|&i| up[i]).collect();
    let w: Vec<u32> = members.iter().map(|&i| weights[i]).collect();
    let g = w.iter().fold(0, |a, &b| {
        let (mut a, mut b) = (a, b);
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    });
    let period = w.iter().map(|&x| (x / g.max(1)) as usize).sum();
    weighted::reference::nginx(&w, period)
        .into_iter()
        .map(|j| members[j])
        .collect()
}

/// Whether `window` is `period` repeated from some offset.
fn is_rotation_of(window: &[usize], period: &[usize]) -> bool {
    let len = period.len();
    (0..len).any(|o| {
        window
            .iter()
            .enumerate()
            .all(|(k, &b)| b == period[(o + k) % len])
    })
}

/// A pool of healthy backends with these weights, `down` marked unhealthy.
fn pool_with_down(weights: &[u32], kind: PolicyKind, down: &[usize], seed: u64) -> Pool {
    let pool = healthy_pool_of(&weighted_specs(weights), kind, seed);
    for &i in down {
        pool.backends()[i].set_healthy(false, Instant::ZERO);
    }
    pool
}

#[test]
fn c_pool_4_round_robin_with_a_down_alternates_b_and_c() {
    for seed in 0..16 {
        let pool = pool_with_down(&[1, 1, 1], PolicyKind::RoundRobin, &[0], seed);
        let seq = picks(&pool, 24, Instant::ZERO, &mut WyRand::new(seed));
        assert!(!seq.contains(&0), "{seq:?}");
        for w in seq.windows(2) {
            assert_ne!(w[0], w[1], "seed {seed}: a double turn in {seq:?}");
        }
    }
}

#[test]
fn c_pool_4_weighted_equal_weights_with_a_down_alternate_b_and_c() {
    for weights in [[1, 1, 1], [7, 7, 7]] {
        for seed in 0..16 {
            let pool = pool_with_down(&weights, PolicyKind::WeightedRoundRobin, &[0], seed);
            let seq = picks(&pool, 24, Instant::ZERO, &mut WyRand::new(seed));
            assert!(!seq.contains(&0), "{seq:?}");
            for w in seq.windows(2) {
                assert_ne!(w[0], w[1], "{weights:?} seed {seed}: a run in {seq:?}");
            }
        }
    }
}

#[test]
fn c_pool_4_weighted_5_1_1_with_the_5_down_alternates_the_1s() {
    for seed in 0..16 {
        let pool = pool_with_down(&[5, 1, 1], PolicyKind::WeightedRoundRobin, &[0], seed);
        let seq = picks(&pool, 24, Instant::ZERO, &mut WyRand::new(seed));
        assert!(!seq.contains(&0), "{seq:?}");
        for w in seq.windows(2) {
            assert_ne!(w[0], w[1], "seed {seed}: not 1:1 in {seq:?}");
        }
    }
}

#[test]
fn c_pool_4_weighted_5_1_1_with_a_1_down_is_nginx_5_1() {
    for down in [1, 2] {
        let other = 3 - down;
        let mut up = [true; 3];
        up[down] = false;
        let smooth = nginx_among(&[5, 1, 1], &up);
        assert_eq!(smooth.len(), 6);
        let bound = max_cyclic_run(&smooth, 0);
        assert_eq!(bound, 5, "nginx's 5:1 sequence a a a b a a");
        for seed in 0..16 {
            let pool = pool_with_down(&[5, 1, 1], PolicyKind::WeightedRoundRobin, &[down], seed);
            let seq = picks(&pool, 7 + 60, Instant::ZERO, &mut WyRand::new(seed));
            assert!(!seq.contains(&down), "{seq:?}");
            // From the first pick, the 5 never runs longer than in nginx's 5:1 sequence...
            assert!(max_run(&seq, 0) <= bound, "seed {seed}: {seq:?}");
            // ...and once the down backend's turn has come (within the 7 of one period),
            // the picks are exactly that sequence: 5 a's per b.
            assert!(is_rotation_of(&seq[7..], &smooth), "seed {seed}: {seq:?}");
            assert_eq!(seq[7..].iter().filter(|&&b| b == other).count(), 10);
        }
    }
}

/// The example of `rotation.rs`: skipping the down backend's entries of nginx's sequence for
/// 1, 1, 1, 3 (`d a b d c d`) would give `d a b d d`; nginx's rule over the three others gives
/// `d a d b d`, never three d's in a row.
#[test]
fn c_pool_4_weighted_1_1_1_3_with_the_third_down_is_nginx_over_the_others() {
    let weights = [1, 1, 1, 3];
    assert_eq!(
        weighted::reference::nginx(&weights, 6),
        vec![3, 0, 1, 3, 2, 3]
    );
    let smooth = nginx_among(&weights, &[true, true, false, true]);
    assert_eq!(smooth, vec![3, 0, 3, 1, 3]);
    for seed in 0..16 {
        let pool = pool_with_down(&weights, PolicyKind::WeightedRoundRobin, &[2], seed);
        let seq = picks(&pool, 6 + 50, Instant::ZERO, &mut WyRand::new(seed));
        assert!(max_run(&seq, 3) <= 2, "seed {seed}: {seq:?}");
        assert!(is_rotation_of(&seq[6..], &smooth), "seed {seed}: {seq:?}");
    }
}

/// Round robin over a, b, c while a goes down and comes back, several times: never a double
/// turn, before, across or after a change, and never a pick of a while it is down.
#[test]
fn c_pool_4_round_robin_no_double_turn_across_changes() {
    for seed in 0..16 {
        let pool = healthy_pool(3, PolicyKind::RoundRobin, seed);
        let mut rng = WyRand::new(seed);
        let mut seq = Vec::new();
        let mut now = Instant::ZERO;
        for round in 0..6 {
            let down = round % 2 == 1;
            now = now + Duration::from_secs(1);
            pool.backends()[0].set_healthy(!down, now);
            let part = picks(&pool, 5 + (seed as usize % 4), now, &mut rng);
            if down {
                assert!(!part.contains(&0), "seed {seed}: {part:?}");
            }
            seq.extend(part);
        }
        for w in seq.windows(2) {
            assert_ne!(w[0], w[1], "seed {seed}: a double turn in {seq:?}");
        }
    }
}

/// `reason` makes backend `i` unavailable (1..=4) or available again (0) at `now`.
fn set_state(pool: &Pool, i: usize, reason: u8, now: Instant) {
    let b = &pool.backends()[i];
    match reason {
        1 => {
            b.set_healthy(false, now);
        }
        2 => {
            b.set_enabled(false, now);
        }
        3 => {
            b.start_drain(now);
        }
        4 => {
            let params = *pool.params();
            for _ in 0..2 {
                if let Ok(mut s) = Backend::try_reserve(b, &params, now, false) {
                    s.record(Outcome::Failure, &params, now);
                }
            }
        }
        _ => {
            b.set_healthy(true, now);
            b.set_enabled(true, now);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// C-POOL-4: for any set of available backends held fixed, once every backend's turn has
    /// come (one period of the sequence over all of them), round robin and weighted round
    /// robin walk exactly nginx's smooth sequence over the available ones: over N × the sum of
    /// their weights each gets exactly N × its weight, and, from the very first pick, no backend
    /// runs longer than it does in that sequence.
    #[test]
    fn c_pool_4_smooth_among_the_available_for_any_fixed_set(
        weights in proptest::collection::vec(1u32..=12, 2..7),
        mask in proptest::collection::vec(any::<bool>(), 7),
        reasons in proptest::collection::vec(1u8..=4, 7),
        weighted_kind in any::<bool>(),
        rounds in 1usize..3,
        seed in any::<u64>(),
    ) {
        let n = weights.len();
        let up = &mask[..n];
        prop_assume!(up.iter().any(|&u| u));
        let (kind, weights) = if weighted_kind {
            (PolicyKind::WeightedRoundRobin, weights)
        } else {
            (PolicyKind::RoundRobin, vec![1; n])
        };
        let pool = healthy_pool_of(&weighted_specs(&weights), kind, seed);
        let now = Instant::from_secs(1);
        for i in (0..n).filter(|&i| !up[i]) {
            set_state(&pool, i, reasons[i], now);
        }
        let smooth = nginx_among(&weights, up);
        let full = nginx_among(&weights, &vec![true; n]).len();
        let sum: usize = (0..n).filter(|&i| up[i]).map(|i| weights[i] as usize).sum();
        let seq = picks(&pool, full + rounds * sum, now, &mut WyRand::new(seed));
        let window = &seq[full..];
        for i in 0..n {
            let count = window.iter().filter(|&&b| b == i).count();
            let expected = if up[i] { rounds * weights[i] as usize } else { 0 };
            prop_assert_eq!(count, expected, "backend {} in {:?}", i, seq);
            if up[i] && smooth.len() > 1 && up.iter().filter(|&&u| u).count() > 1 {
                prop_assert!(
                    max_run(&seq, i) <= max_cyclic_run(&smooth, i),
                    "backend {} runs longer than in {:?}: {:?}", i, smooth, seq
                );
            }
        }
        prop_assert!(is_rotation_of(window, &smooth), "{:?} is not {:?}", window, smooth);
    }

    /// C-POOL-3, C-POOL-4: while backends go down and come back between picks (health, admin
    /// disable and drain, circuits), no pick ever returns a backend that is unavailable at that
    /// moment (panic routing aside), and once the changes stop the sequence settles on nginx's
    /// over the available backends.
    #[test]
    fn c_pool_4_changes_mid_sequence_never_pick_an_unavailable_backend(
        weights in proptest::collection::vec(1u32..=8, 2..7),
        steps in proptest::collection::vec((0usize..7, 0u8..=4, 0u64..3, 0usize..4), 1..40),
        weighted_kind in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let n = weights.len();
        let (kind, weights) = if weighted_kind {
            (PolicyKind::WeightedRoundRobin, weights)
        } else {
            (PolicyKind::RoundRobin, vec![1; n])
        };
        let pool = healthy_pool_of(&weighted_specs(&weights), kind, seed);
        let params = *pool.params();
        let ctx = PickContext::default();
        let mut rng = WyRand::new(seed);
        let mut now = Instant::from_secs(1);
        for (i, reason, ms, count) in steps {
            now = now + Duration::from_millis(ms);
            set_state(&pool, i % n, reason, now);
            for _ in 0..count {
                let available: Vec<usize> = (0..n)
                    .filter(|&b| pool.backends()[b].availability(&params, now) == Availability::Available)
                    .collect();
                match pool.select(&ctx, &Tried::new(), now, &mut rng) {
                    Selection::Selected { index, slot } => {
                        if slot.is_panic() {
                            prop_assert!(available.is_empty(), "panic while {:?} available", available);
                        } else {
                            prop_assert!(available.contains(&index), "{} not in {:?}", index, available);
                        }
                    }
                    Selection::Unavailable(why) => {
                        prop_assert!(available.is_empty(), "{:?} while {:?} available", why, available);
                    }
                }
            }
        }
        now = now + Duration::from_secs(1);
        let up: Vec<bool> = (0..n)
            .map(|b| pool.backends()[b].availability(&params, now) == Availability::Available)
            .collect();
        if !up.iter().any(|&u| u) {
            // Circuits stay open for their cooldown: nothing to settle on.
            return Ok(());
        }
        let smooth = nginx_among(&weights, &up);
        let full = nginx_among(&weights, &vec![true; n]).len();
        let seq = picks(&pool, full + n + 2 * smooth.len(), now, &mut rng);
        let window = &seq[full + n..];
        prop_assert!(is_rotation_of(window, &smooth), "{:?} is not {:?}", window, smooth);
    }
}

/// C-LOAD-4: with adaptive concurrency on, a backend at its adaptive limit is skipped like a
/// saturated one, and with every backend there the pick fails as `AdaptiveLimit`, not as
/// saturation; probes hold no slot, and an attempt's end feeds the backend's machine.
#[test]
fn c_load_4_backends_at_their_adaptive_limit_are_skipped_then_refused() {
    let t = Instant::from_secs(1);
    let mut rng = WyRand::new(7);
    let ctx = PickContext::default();
    let params = PoolParams {
        max_concurrent_requests: 10,
        slow_start: SlowStart::off(),
        adaptive: crate::adaptive::AdaptiveParams {
            enabled: true,
            min_limit: 2,
            max_limit: 10,
            ..crate::adaptive::AdaptiveParams::default()
        },
        ..PoolParams::default()
    };
    let pool = Pool::new(&specs(2), PolicyKind::RoundRobin, params, None, t, &mut rng).unwrap();
    for b in pool.backends() {
        b.set_healthy(true, t);
        assert_eq!(b.concurrency_limit(&params), Some(2));
        assert_eq!(b.slot_limit(&params), 2);
    }
    let mut held: Vec<Slot> = (0..4)
        .map(|_| match pool.select(&ctx, &Tried::new(), t, &mut rng) {
            Selection::Selected { slot, .. } => slot,
            other => panic!("{other:?}"),
        })
        .collect();
    assert!(
        pool.backends()
            .iter()
            .all(|b| b.in_flight() == 2 && b.at_adaptive_limit(&params))
    );
    assert_eq!(
        pool.backends()[0].availability(&params, t),
        Availability::Saturated
    );
    assert!(matches!(
        pool.select(&ctx, &Tried::new(), t, &mut rng),
        Selection::Unavailable(NoBackend::AdaptiveLimit)
    ));
    // An attempt's end feeds the machine; the limit stays within its bounds.
    let done = t + Duration::from_millis(20);
    held[0].record_load(crate::adaptive::Signal::Answer, &params, done);
    assert_eq!(pool.backends()[0].concurrency_limit(&params), Some(2));
    drop(held.remove(0));
    assert!(matches!(
        pool.select(&ctx, &Tried::new(), done, &mut rng),
        Selection::Selected { .. }
    ));
    // Off, the static slots are all there is.
    let off = PoolParams {
        adaptive: crate::adaptive::AdaptiveParams::default(),
        ..params
    };
    assert_eq!(pool.backends()[0].concurrency_limit(&off), None);
    assert_eq!(pool.backends()[0].slot_limit(&off), 10);
}
