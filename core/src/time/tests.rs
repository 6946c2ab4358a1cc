use super::*;

#[test]
fn arithmetic_saturates_instead_of_panicking() {
    let t = Instant::from_secs(5);
    assert_eq!(Instant::ZERO - t, Duration::ZERO);
    assert_eq!(t - Instant::from_secs(2), Duration::from_secs(3));
    assert_eq!(Instant::MAX + Duration::from_secs(1), Instant::MAX);
    assert_eq!(
        Instant::ZERO.saturating_sub(Duration::from_secs(1)),
        Instant::ZERO
    );
    assert_eq!(duration_nanos(Duration::MAX), u64::MAX);
}
