use super::*;

#[test]
fn c_rate_3_ttl_is_full_refill_plus_margin() {
    let p = BucketParams::new(100, 100.0).expect("valid");
    assert_eq!(ttl_ms(&p), 1000 + 1000);
    let p = BucketParams::new(1, 3.0).expect("valid"); // 333_333_334 ns
    assert_eq!(ttl_ms(&p), 334 + 1000);
}

#[test]
fn too_long_refill_is_unsupported() {
    let ok = BucketParams::new(1000, 0.001).expect("valid"); // 1e6 s
    assert!(check_params(&ok).is_ok());
    let long = BucketParams::new(10_000_000, 0.001).expect("valid"); // 1e10 s
    assert!(matches!(
        check_params(&long),
        Err(StoreError::Unsupported(_))
    ));
}
