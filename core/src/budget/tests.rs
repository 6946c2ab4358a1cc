use super::*;
use core::time::Duration;
use proptest::prelude::*;

fn budget(c: u64, r: f64) -> RetryBudget {
    RetryBudget::new(BucketParams::new(c, r).expect("valid params"))
}

#[test]
fn c_retry_7_full_at_start_then_refills_at_rate() {
    let b = budget(100, 10.0);
    let t0 = Instant::ZERO;
    assert_eq!(b.tokens(t0), 100);
    assert_eq!(b.capacity(), 100);
    assert_eq!(b.refill_per_second(), 10.0);
    for _ in 0..100 {
        assert!(b.try_withdraw(t0));
    }
    assert!(!b.try_withdraw(t0), "empty budget grants nothing");
    assert_eq!(b.tokens_milli(t0), 0);
    // 10 tokens per second: 250 ms later, 2.5 tokens.
    let t1 = t0 + Duration::from_millis(250);
    assert_eq!(b.tokens_milli(t1), 2500);
    assert!(b.try_withdraw(t1));
    assert!(b.try_withdraw(t1));
    assert!(!b.try_withdraw(t1));
    // Never above capacity however long it rests.
    assert_eq!(b.tokens(t1 + Duration::from_secs(3600)), 100);
}

#[test]
fn c_retry_7_time_going_backwards_never_over_grants() {
    let b = budget(2, 1.0);
    let t = Instant::from_secs(100);
    assert!(b.try_withdraw(t));
    assert!(b.try_withdraw(t));
    // A stale clock sees an emptier bucket, not a fuller one.
    assert!(!b.try_withdraw(Instant::from_secs(50)));
    assert_eq!(b.tokens(Instant::from_secs(50)), 0);
    assert!(!b.try_withdraw(t));
    assert!(b.try_withdraw(t + Duration::from_secs(1)));
}

#[test]
fn end_of_time_is_denied_not_a_panic() {
    let b = budget(3, 1.0);
    assert!(!b.try_withdraw(Instant::MAX));
    assert_eq!(b.tokens(Instant::MAX), 3);
    assert!(b.try_withdraw(Instant::from_secs(1)));
}

#[test]
fn c_conf_7_reload_carries_tokens_and_retires_the_old_instance() {
    let old = budget(10, 1.0);
    let t = Instant::from_secs(5);
    for _ in 0..6 {
        assert!(old.try_withdraw(t));
    }
    assert_eq!(old.tokens(t), 4);
    // Larger capacity: the level is carried, not topped up (a reload mints nothing).
    let new = old.reload(BucketParams::new(20, 2.0).unwrap(), t);
    assert!(old.is_retired());
    assert!(!new.is_retired());
    assert_eq!(new.tokens(t), 4);
    assert_eq!(new.capacity(), 20);
    // The old handle forwards to the successor: status and withdrawals see one budget.
    assert_eq!(old.capacity(), 20);
    assert_eq!(old.refill_per_second(), 2.0);
    assert!(old.try_withdraw(t));
    assert_eq!(new.tokens(t), 3);
    // New refill rate applies from the reload on: 0.5 s at 2/s is one token.
    assert_eq!(new.tokens(t + Duration::from_millis(500)), 4);
    // Smaller capacity caps the carried level.
    let newer = old.reload(BucketParams::new(2, 2.0).unwrap(), t);
    assert!(
        new.is_retired(),
        "reloading a retired budget reloads the one in force"
    );
    assert_eq!(newer.tokens(t), 2);
    assert!(old.try_withdraw(t));
    assert!(new.try_withdraw(t));
    assert!(!newer.try_withdraw(t));
}

#[test]
fn c_conf_7_reload_of_a_full_budget_with_fractions() {
    let b = budget(3, 3.0);
    let t = Instant::from_secs(1);
    assert!(b.try_withdraw(t));
    let half = t + Duration::from_millis(166);
    let held = b.tokens_milli(half);
    let n = b.reload(BucketParams::new(3, 7.0).unwrap(), half);
    let carried = n.tokens_milli(half);
    assert!(carried <= held, "carried {carried} > held {held}");
    assert!(held - carried <= 1, "carried {carried}, held {held}");
}

#[derive(Debug, Clone)]
enum Op {
    Withdraw,
    Advance(u64),
    Reload(u64, u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => Just(Op::Withdraw),
        3 => (0u64..400_000_000).prop_map(Op::Advance),
        1 => (1u64..50, 1u32..100_000).prop_map(|(c, r)| Op::Reload(c, r)),
    ]
}

proptest! {
    /// C-RETRY-7: for any sequence of withdrawals and time steps (forward or backward),
    /// granted withdrawals <= capacity + refill × elapsed, where elapsed is the span from the
    /// earliest to the latest instant seen; tokens stay in [0, capacity]; a denial means < 1 token.
    #[test]
    fn c_retry_7_grants_bounded_by_capacity_plus_refill(
        capacity in 1u64..200,
        refill_milli in 1u64..2_000_000,
        steps in proptest::collection::vec((0u64..200_000_000, any::<bool>(), 0u8..4), 1..300),
    ) {
        let refill = refill_milli as f64 / 1000.0;
        let b = RetryBudget::new(BucketParams::new(capacity, refill).unwrap());
        let t0 = Instant::from_secs(1);
        let mut now = t0;
        let mut latest = t0;
        let mut earliest = t0;
        let mut grants = 0u64;
        for (dt, backwards, takes) in steps {
            now = if backwards { now - Duration::from_nanos(dt / 4) } else { now + Duration::from_nanos(dt) };
            latest = latest.max(now);
            earliest = earliest.min(now);
            for _ in 0..takes {
                let before = b.tokens_milli(now);
                let granted = b.try_withdraw(now);
                prop_assert_eq!(granted, before >= 1000, "granted iff a whole token");
                grants += u64::from(granted);
                prop_assert!(b.tokens_milli(now) <= capacity * 1000);
                prop_assert!(b.tokens_milli(latest) <= capacity * 1000);
            }
            let bound = capacity as f64 + refill * (latest - earliest).as_secs_f64();
            prop_assert!(grants as f64 <= bound + 1e-9, "grants {} > bound {}", grants, bound);
        }
    }

    /// C-RETRY-7: at a single instant a full budget grants exactly its capacity.
    #[test]
    fn c_retry_7_zero_elapsed_grants_exactly_capacity(
        capacity in 1u64..2_000,
        refill_milli in 1u64..10_000_000,
        at_secs in 0u64..1_000_000,
    ) {
        let b = RetryBudget::new(BucketParams::new(capacity, refill_milli as f64 / 1000.0).unwrap());
        let now = Instant::from_secs(at_secs);
        let granted = (0..capacity + 10).filter(|_| b.try_withdraw(now)).count() as u64;
        prop_assert_eq!(granted, capacity);
        prop_assert_eq!(b.tokens_milli(now), 0);
    }

    /// C-RETRY-7 across reloads (C-CONF-7): grants plus tokens held never exceed the initial
    /// capacity plus what each configuration refilled while in force; a reload never mints.
    /// Every op goes through the first handle, so forwarding is exercised too.
    #[test]
    fn c_retry_7_reload_never_mints_tokens(
        capacity in 1u64..50,
        refill_milli in 1u64..100_000,
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let first = RetryBudget::new(BucketParams::new(capacity, refill_milli as f64 / 1000.0).unwrap());
        let mut refill = refill_milli as f64 / 1000.0;
        let mut now = Instant::from_secs(1);
        let mut credit = capacity as f64;
        let mut grants = 0u64;
        let mut live: Option<Arc<RetryBudget>> = None;
        for op in ops {
            match op {
                Op::Withdraw => grants += u64::from(first.try_withdraw(now)),
                Op::Advance(dt) => {
                    now = now + Duration::from_nanos(dt);
                    credit += refill * Duration::from_nanos(dt).as_secs_f64();
                }
                Op::Reload(c, r) => {
                    let before = first.tokens_milli(now);
                    refill = f64::from(r) / 1000.0;
                    let next = first.reload(BucketParams::new(c, refill).unwrap(), now);
                    prop_assert!(next.tokens_milli(now) <= before);
                    prop_assert!(next.tokens_milli(now) <= c * 1000);
                    live = Some(next);
                }
            }
            let held = first.tokens_milli(now);
            if let Some(l) = &live {
                prop_assert_eq!(held, l.tokens_milli(now), "the old handle sees the live budget");
            }
            prop_assert!(held <= first.capacity() * 1000);
            let total = grants as f64 + held as f64 / 1000.0;
            prop_assert!(total <= credit + 1e-6, "grants {} + held {} > credit {}", grants, held, credit);
        }
    }
}
