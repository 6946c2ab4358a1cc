use super::*;
use proptest::prelude::*;

fn p(c: u64, r: f64) -> BucketParams {
    BucketParams::new(c, r).expect("valid params")
}

#[test]
fn c_rate_1_new_bucket_is_full_and_drains_one_per_take() {
    let b = p(3, 1.0);
    let now = Instant::from_secs(100);
    let (t1, s) = b.take(0, now);
    assert_eq!(t1, Take::Allowed { remaining: 2 });
    let (t2, s) = b.take(s, now);
    assert_eq!(t2, Take::Allowed { remaining: 1 });
    let (t3, s) = b.take(s, now);
    assert_eq!(t3, Take::Allowed { remaining: 0 });
    let (t4, s2) = b.take(s, now);
    assert_eq!(
        t4,
        Take::Denied {
            retry_after: Duration::from_secs(1)
        }
    );
    assert_eq!(s2, s, "a denied take changes nothing");
    // Half a second later: half a token, still denied, 0.5 s to wait.
    let later = now + Duration::from_millis(500);
    assert_eq!(b.tokens_milli(s, later), 500);
    assert_eq!(
        b.take(s, later).0,
        Take::Denied {
            retry_after: Duration::from_millis(500)
        }
    );
    assert_eq!(retry_after_secs(Duration::from_millis(500)), 1);
    assert_eq!(retry_after_secs(Duration::from_millis(1500)), 2);
    assert_eq!(retry_after_secs(Duration::ZERO), 1);
}

#[test]
fn c_rate_1_refill_is_continuous_and_capped() {
    let b = p(10, 100.0);
    let mut s = 0;
    let t0 = Instant::from_secs(1);
    for _ in 0..10 {
        s = b.take(s, t0).1;
    }
    assert_eq!(b.tokens(s, t0), 0);
    assert_eq!(b.tokens(s, t0 + Duration::from_millis(35)), 3);
    assert_eq!(b.tokens_milli(s, t0 + Duration::from_millis(35)), 3500);
    assert_eq!(b.tokens(s, t0 + Duration::from_secs(60)), 10);
    assert!(b.is_full(s, t0 + Duration::from_millis(100)));
    assert_eq!(b.full_refill(), Duration::from_millis(100));
}

#[test]
fn params_are_validated() {
    assert_eq!(BucketParams::new(0, 1.0), Err(BucketError::ZeroCapacity));
    assert!(matches!(
        BucketParams::new(1, 0.0),
        Err(BucketError::BadRefill(_))
    ));
    assert!(matches!(
        BucketParams::new(1, f64::NAN),
        Err(BucketError::BadRefill(_))
    ));
    assert!(matches!(
        BucketParams::new(1, -1.0),
        Err(BucketError::BadRefill(_))
    ));
    assert_eq!(BucketParams::new(u64::MAX, 1.0), Err(BucketError::TooLarge));
    // A fractional refill rounds the interval up: never faster than configured.
    assert_eq!(p(1, 3.0).interval(), Duration::from_nanos(333_333_334));
}

proptest! {
    /// C-RATE-1: tokens stay in [0, capacity] and grants never exceed
    /// capacity + refill × elapsed, for any sequence of takes and time steps.
    #[test]
    fn c_rate_1_grants_bounded_by_capacity_plus_refill(
        capacity in 1u64..500,
        refill_milli in 1u64..1_000_000,
        steps in proptest::collection::vec((0u64..50_000_000, 1u8..4), 1..300),
    ) {
        let refill = refill_milli as f64 / 1000.0;
        let b = BucketParams::new(capacity, refill).unwrap();
        let t0 = Instant::from_secs(10);
        let mut now = t0;
        let mut state = 0u64;
        let mut grants = 0u64;
        for (dt, takes) in steps {
            now = now + Duration::from_nanos(dt);
            for _ in 0..takes {
                let (d, s) = b.take(state, now);
                state = s;
                let held = b.tokens_milli(state, now);
                prop_assert!(held <= capacity * 1000);
                if let Take::Allowed { remaining } = d {
                    grants += 1;
                    prop_assert!(remaining < capacity);
                    prop_assert_eq!(remaining, held / 1000);
                }
            }
            let elapsed = (now - t0).as_secs_f64();
            let bound = capacity as f64 + refill * elapsed;
            prop_assert!(grants as f64 <= bound + 1e-9,
                "grants {} > bound {}", grants, bound);
        }
    }

    /// C-RATE-1: a denied take's retry_after is exactly when the next take succeeds.
    #[test]
    fn c_rate_1_retry_after_is_exact(capacity in 1u64..50, refill_milli in 1u64..100_000) {
        let b = BucketParams::new(capacity, refill_milli as f64 / 1000.0).unwrap();
        let now = Instant::from_secs(1);
        let mut s = 0;
        for _ in 0..capacity { s = b.take(s, now).1; }
        let Take::Denied { retry_after } = b.take(s, now).0 else {
            return Err(TestCaseError::fail("empty bucket allowed a take"));
        };
        let just_before = now + retry_after - Duration::from_nanos(1);
        let before = matches!(b.take(s, just_before).0, Take::Denied { .. });
        prop_assert!(before, "allowed before retry_after");
        let at = b.take(s, now + retry_after).0;
        prop_assert_eq!(at, Take::Allowed { remaining: 0 });
    }
}
