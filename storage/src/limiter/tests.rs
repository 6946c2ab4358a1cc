use super::*;
use std::net::{IpAddr, Ipv4Addr};
use weir_core::rate::{KeyParams, RateConfig};

fn params(enabled: bool) -> RateParams {
    RateParams::new(&RateConfig {
        enabled,
        capacity: 2,
        refill_per_second: 1.0,
        local_shards: 2,
        local_max_buckets: 16,
        ..RateConfig::default()
    })
    .expect("valid")
}

fn key() -> ClientKey {
    KeyParams::default().key(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)))
}

/// C-RATE-1, C-RATE-3: `storage: local` decides with the local store, never degraded.
#[tokio::test]
async fn c_rate_3_local_storage_decides_locally() {
    let rate = params(true);
    let limiter = RateLimiter::new(StoreKind::Local, &rate, 1).expect("limiter");
    let now = Instant::from_secs(1);
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let v = limiter.check(key(), &rate, now).await;
        if let Verdict::Decided(o) = v {
            assert_eq!((o.storage, o.degraded), (StorageKind::Local, false));
        }
        statuses.push(v.status());
    }
    assert_eq!(statuses, vec![None, None, Some(429)]);
    assert!(limiter.ready(FailureMode::FailClosed) && !limiter.degraded(FailureMode::FailOpen));
    assert!(limiter.probe(&rate, now).await);
    assert_eq!(limiter.peek(key(), &rate, now).await, Ok(0));
    limiter.reset(key(), &rate).await.expect("reset");
    assert_eq!(limiter.peek(key(), &rate, now).await, Ok(2000));
    assert_eq!(limiter.health().failures_total, 0);
}

/// C-MGMT-4: the `limit` command sets the local bucket to n tokens (clamped).
#[tokio::test]
async fn c_mgmt_4_set_tokens_local() {
    let rate = params(true);
    let limiter = RateLimiter::new(StoreKind::Local, &rate, 1).expect("limiter");
    let now = Instant::from_secs(5);
    limiter.set_tokens(key(), &rate, 1, now).await.expect("set");
    assert_eq!(limiter.peek(key(), &rate, now).await, Ok(1000));
    limiter.set_tokens(key(), &rate, 0, now).await.expect("set");
    assert_eq!(limiter.check(key(), &rate, now).await.status(), Some(429));
    limiter.set_tokens(key(), &rate, 9, now).await.expect("set");
    assert_eq!(limiter.peek(key(), &rate, now).await, Ok(2000));
    let statuses = [
        limiter.check(key(), &rate, now).await.status(),
        limiter.check(key(), &rate, now).await.status(),
        limiter.check(key(), &rate, now).await.status(),
    ];
    assert_eq!(statuses, [None, None, Some(429)]);
}

/// C-RATE-1: `enabled: false` limits nothing.
#[tokio::test]
async fn disabled_is_unlimited() {
    let rate = params(false);
    let limiter = RateLimiter::new(StoreKind::Local, &rate, 1).expect("limiter");
    let v = limiter.check(key(), &rate, Instant::ZERO).await;
    assert_eq!(v, Verdict::Unlimited);
    assert_eq!(v.status(), None);
    assert_eq!(Verdict::Unavailable.status(), Some(503));
}

/// C-RATE-5: while down, one trial per retry interval, one at a time; a trial whose
/// future is dropped frees its place (core's `StoreCircuit`, shared with the engine).
#[test]
fn c_rate_5_trials_are_spaced() {
    let rate = params(true);
    let limiter = RateLimiter::new(StoreKind::Local, &rate, 1)
        .expect("limiter")
        .with_retry_interval(Duration::from_millis(200));
    let t0 = Instant::from_secs(10);
    let up = limiter
        .may_call(t0)
        .expect("up: every call goes to the store");
    let _ = up.settle::<()>(Err(StoreError::Timeout(Duration::from_millis(50))), t0);
    assert!(!limiter.store_up());
    assert!(limiter.may_call(t0 + Duration::from_millis(199)).is_none());
    let t1 = t0 + Duration::from_millis(200);
    let trial = limiter.may_call(t1);
    assert!(trial.is_some());
    assert!(limiter.may_call(t1).is_none(), "one trial at a time");
    drop(trial);
    let trial = limiter
        .may_call(t1)
        .expect("the trial ended without a verdict");
    let _ = trial.settle(Ok(()), t1);
    let h = limiter.health();
    assert!(h.up && h.recoveries_total == 1 && h.consecutive_failures == 0);
    assert_eq!(h.failures_total, 1);
    assert_eq!(
        h.last_error,
        Some(StoreError::Timeout(Duration::from_millis(50)))
    );
}
