use super::*;
use crate::bucket::Take;
use crate::time::Instant;
use std::net::IpAddr;

#[test]
fn defaults_are_valid() {
    let p = RateParams::new(&RateConfig::default()).expect("defaults are valid");
    assert!(!p.enabled());
    assert_eq!(p.storage(), StorageKind::Disabled);
    assert_eq!(p.failure_mode(), FailureMode::LocalFallback);
    assert_eq!(p.capacity(), 100);
    assert_eq!(p.refill_per_second(), 100.0);
    assert_eq!(p.bucket().full_refill(), Duration::from_secs(1));
    assert_eq!(p.operation_timeout(), Duration::from_millis(50));
    assert_eq!(p.local_store(), LocalStoreParams::default());
    assert_eq!(p.key(), KeyParams::default());
}

#[test]
fn invalid_fields_are_reported() {
    let bad = |f: fn(&mut RateConfig)| {
        let mut c = RateConfig::default();
        f(&mut c);
        RateParams::new(&c).expect_err("invalid")
    };
    assert_eq!(
        bad(|c| c.capacity = 0),
        RateError::Bucket(BucketError::ZeroCapacity)
    );
    assert!(matches!(
        bad(|c| c.refill_per_second = 0.0),
        RateError::Bucket(BucketError::BadRefill(_))
    ));
    assert_eq!(
        bad(|c| c.ipv4_prefix_bits = 33),
        RateError::Key(KeyError::Ipv4PrefixBits(33))
    );
    assert_eq!(
        bad(|c| c.ipv6_prefix_bits = 0),
        RateError::Key(KeyError::Ipv6PrefixBits(0))
    );
    assert_eq!(
        bad(|c| c.local_shards = 0),
        RateError::LocalStore(LocalStoreError::Shards(0))
    );
    assert_eq!(
        bad(|c| c.local_max_buckets = 0),
        RateError::LocalStore(LocalStoreError::MaxBuckets(0))
    );
    assert_eq!(
        bad(|c| c.operation_timeout = Duration::ZERO),
        RateError::ZeroOperationTimeout
    );
    assert_eq!(
        bad(|c| c.capacity = 0).to_string(),
        "rate_limit: capacity must be at least 1"
    );
}

/// C-RATE-1, C-RATE-2, C-RATE-4: the pieces wired together as an adapter would.
#[test]
fn c_rate_1_end_to_end_local() {
    let p = RateParams::new(&RateConfig {
        enabled: true,
        capacity: 2,
        refill_per_second: 1.0,
        ipv6_prefix_bits: 48,
        ..RateConfig::default()
    })
    .expect("valid");
    let store = LocalStore::new(p.local_store(), 42).expect("store");
    let now = Instant::from_secs(3);
    let a: IpAddr = "2001:db8:1:aaaa::1".parse().unwrap();
    let b: IpAddr = "2001:db8:1:bbbb::2".parse().unwrap(); // same /48
    let key_a = p.key().key(a);
    assert_eq!(key_a, p.key().key(b));
    let outcome =
        |t: Take| RateOutcome::from_take(t, &p.bucket(), p.refill_per_second(), p.storage(), false);
    let o1 = outcome(store.take(key_a, &p.bucket(), now));
    let o2 = outcome(store.take(p.key().key(b), &p.bucket(), now));
    let o3 = outcome(store.take(key_a, &p.bucket(), now));
    assert_eq!((o1.remaining, o2.remaining), (1, 0));
    assert!(o1.is_allowed() && o2.is_allowed());
    assert_eq!(o3.status(), Some(429));
    assert_eq!(o3.retry_after_secs(), Some(1));
    assert_eq!(store.len(), 1);
    assert!(
        o3.header_strings()
            .contains(&("x-ratelimit-storage", "local".to_string()))
    );
}
