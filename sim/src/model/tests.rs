use super::*;

#[test]
fn bucket_model_starts_full_and_refills_per_interval() {
    let mut b = BucketModel::new(2, Duration::from_secs(1));
    let t = Instant::from_secs(10);
    assert_eq!(b.tokens_milli(t), 2000);
    assert!(b.take(t) && b.take(t) && !b.take(t));
    assert_eq!(b.tokens_milli(t + Duration::from_millis(500)), 500);
    assert!(b.take(t + Duration::from_secs(1)));
    assert_eq!(b.max_grants(t, t + Duration::from_millis(2500)), 4);
}

#[test]
fn slow_start_model_is_linear() {
    let w = Duration::from_secs(10);
    let t = Instant::from_secs(5);
    assert_eq!(slow_start_permille(w, 10, t, t), 100);
    assert_eq!(
        slow_start_permille(w, 10, t, t + Duration::from_secs(5)),
        550
    );
    assert_eq!(slow_start_permille(w, 10, t, t + w), 1000);
    assert_eq!(slow_start_permille(Duration::ZERO, 10, t, t), 1000);
}
