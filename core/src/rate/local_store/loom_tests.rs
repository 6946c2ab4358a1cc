use super::*;
use crate::rate::key::KeyParams;
use crate::sync::Arc;
use std::net::{IpAddr, Ipv4Addr};

/// C-RATE-1 / C-RATE-4: concurrent takes on one key of capacity 2 at one instant: exactly
/// two are allowed, whatever the interleaving (no lost update in the shard's critical
/// section).
#[test]
fn loom_local_store_shard_take() {
    loom::model(|| {
        let store = Arc::new(
            LocalStore::new(
                LocalStoreParams {
                    shards: 2,
                    max_buckets: 4,
                },
                1,
            )
            .expect("valid store params"),
        );
        let params = BucketParams::new(2, 1.0).expect("valid bucket params");
        let key = KeyParams::default().key(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)));
        let now = Instant::from_secs(1);
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let store = store.clone();
                loom::thread::spawn(move || {
                    matches!(store.take(key, &params, now), Take::Allowed { .. })
                })
            })
            .collect();
        let allowed = handles
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .filter(|&a| a)
            .count();
        assert_eq!(allowed, 2);
        assert_eq!(store.len(), 1);
        assert_eq!(store.peek(key, &params, now), 0);
    });
}
