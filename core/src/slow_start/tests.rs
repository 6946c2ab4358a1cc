use super::*;
use proptest::prelude::*;

#[test]
fn c_health_4_linear_ramp_from_minimum_to_full() {
    let s = SlowStart::new(Duration::from_secs(30), 10).unwrap();
    let t0 = Instant::from_secs(100);
    assert_eq!(s.share_permille(t0, t0), 100);
    assert_eq!(s.share_permille(t0, t0 + Duration::from_secs(15)), 550);
    assert_eq!(s.share_permille(t0, t0 + Duration::from_secs(30)), 1000);
    assert_eq!(s.share_permille(t0, t0 + Duration::from_secs(300)), 1000);
    // Time before `since` (clock skew between machines' stamps) reads as the start.
    assert_eq!(s.share_permille(t0, Instant::from_secs(1)), 100);
    assert_eq!(SlowStart::off().share_permille(t0, t0), 1000);
    assert_eq!(
        SlowStart::new(Duration::ZERO, 10)
            .unwrap()
            .share_permille(t0, t0),
        1000,
        "slow_start: 0s means off (C-CONF-0)"
    );
}

#[test]
fn minimum_percent_is_validated() {
    assert!(SlowStart::new(Duration::from_secs(1), 0).is_err());
    assert!(SlowStart::new(Duration::from_secs(1), 101).is_err());
    assert!(SlowStart::new(Duration::from_secs(1), 100).is_ok());
}

proptest! {
    /// C-HEALTH-4: the share is monotone in time and within [minimum, 100%].
    #[test]
    fn c_health_4_share_is_monotone(
        window_ms in 0u64..100_000, min in 1u8..=100,
        a in 0u64..200_000_000_000, b in 0u64..200_000_000_000,
    ) {
        let s = SlowStart::new(Duration::from_millis(window_ms), min).unwrap();
        let since = Instant::from_secs(1);
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let p_lo = s.share_permille(since, since + Duration::from_nanos(lo));
        let p_hi = s.share_permille(since, since + Duration::from_nanos(hi));
        prop_assert!(p_lo <= p_hi);
        prop_assert!(p_lo >= u32::from(min) * 10 || window_ms == 0);
        prop_assert!(p_hi <= 1000);
    }
}
