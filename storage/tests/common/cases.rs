//! The cases every shared store runs, written once over [`Store`]: Redis standalone,
//! Redis Cluster and PostgreSQL call the same functions; what is specific to one store (its key
//! or row, its TTL) stays in that store's file.

use std::sync::Arc;

use weir_core::Instant;
use weir_core::bucket::{BucketParams, Take};
use weir_core::rate::ClientKey;
use weir_storage::Store;

use super::key;

/// C-RATE-3: two stores (two replicas) × 50 concurrent takers on one key, capacity 20: exactly
/// 20 allowed.
pub async fn atomic_across_two_replicas<S: Store + 'static>(a: Arc<S>, b: Arc<S>) {
    let params = BucketParams::new(20, 0.001).expect("valid");
    let k = key(7);
    let mut tasks = Vec::new();
    for i in 0..100 {
        let s = if i % 2 == 0 {
            Arc::clone(&a)
        } else {
            Arc::clone(&b)
        };
        tasks.push(tokio::spawn(async move { s.take(k, &params).await }));
    }
    let mut allowed = 0;
    for t in tasks {
        if matches!(t.await.expect("task").expect("take"), Take::Allowed { .. }) {
            allowed += 1;
        }
    }
    assert_eq!(allowed, 20);
}

/// C-MGMT-4: `set_tokens` n → peek n and exactly n takes allowed; 0 → denied; above the
/// capacity → clamped (full). Returns the key and shape used, with the bucket left at 9 of 10
/// tokens (one per 100 s), for the store's own TTL check.
pub async fn set_tokens<S: Store>(store: &S) -> (weir_core::rate::ClientKey, BucketParams) {
    let params = BucketParams::new(10, 0.01).expect("valid"); // one token per 100 s
    let k = key(2);
    store.set_tokens(k, &params, 3).await.expect("set");
    let milli = store.peek(k, &params).await.expect("peek");
    assert!((3000..3010).contains(&milli), "peek {milli}");
    let mut allowed = 0;
    for _ in 0..5 {
        if let Take::Allowed { .. } = store.take(k, &params).await.expect("take") {
            allowed += 1;
        }
    }
    assert_eq!(allowed, 3, "exactly the 3 tokens set");
    store.set_tokens(k, &params, 0).await.expect("set 0");
    assert!(matches!(
        store.take(k, &params).await.expect("take"),
        Take::Denied { .. }
    ));
    store.set_tokens(k, &params, 99).await.expect("set clamped");
    assert_eq!(store.peek(k, &params).await.expect("peek"), 10_000);
    store.set_tokens(k, &params, 9).await.expect("set 9");
    (k, params)
}

/// C-RATE-3: peek without taking; reset refills.
pub async fn peek_and_reset<S: Store>(store: &S) {
    let params = BucketParams::new(4, 0.001).expect("valid");
    let k = key(3);
    assert_eq!(store.peek(k, &params).await.expect("peek"), 4000);
    store.take(k, &params).await.expect("take");
    store.take(k, &params).await.expect("take");
    assert_eq!(store.peek(k, &params).await.expect("peek") / 1000, 2);
    store.reset(k).await.expect("reset");
    assert_eq!(store.peek(k, &params).await.expect("peek"), 4000);
    store.health().await.expect("health");
}

/// C-RATE-3: the store's take is weir-core's GCRA step on the store's clock: replaying
/// `BucketParams::take` on the stored state with the store's now gives the same `Take` and the
/// same new state, for several bucket shapes, through allowed and denied takes. `take` is the
/// store's traced take (its answer and the now it used); `stored` reads the tat it kept (0: none).
pub async fn matches_core_arithmetic(
    take: impl AsyncFn(ClientKey, &BucketParams) -> (Take, Instant),
    stored: impl AsyncFn(ClientKey) -> u64,
) {
    for (i, (capacity, refill)) in [
        (5u64, 10.0f64),
        (3, 3.0),
        (1, 0.4),
        (100, 1000.0),
        (7, 123.456),
    ]
    .into_iter()
    .enumerate()
    {
        let params = BucketParams::new(capacity, refill).expect("valid");
        let k = key(i as u32);
        let mut tat = 0u64;
        for _ in 0..(capacity + 5) {
            let (got, now) = take(k, &params).await;
            let (expected, new_tat) = params.take(tat, now);
            assert_eq!(got, expected, "capacity {capacity} refill {refill}");
            assert_eq!(stored(k).await, new_tat, "stored tat");
            tat = new_tat;
        }
    }
}
