//! The rate-limit seam on tokio (moved out of weir-proxy, which has no runtime of its own): the
//! limiter's status, readiness and operator commands, and `RateLimiter::check` (the request
//! engine's sequence for callers without an engine) under each failure mode.

use std::net::IpAddr;
use std::sync::Arc;

use weir_core::Instant;
use weir_core::rate::{FailureMode, RateConfig, RateParams, StorageKind};
use weir_storage::{RedisOptions, RedisStore, StoreKind, Verdict};
use weir_tokio::services::ratelimit::{Limiter, RateLimiter};

fn params(cfg: RateConfig) -> RateParams {
    RateParams::new(&cfg).expect("valid rate config")
}

fn local(p: &RateParams) -> Limiter {
    Limiter::new(Arc::new(
        RateLimiter::new(StoreKind::Local, p, 1).expect("limiter"),
    ))
}

#[tokio::test]
async fn disabled_is_off() {
    let p = params(RateConfig::default());
    let l = local(&p);
    let ip: IpAddr = "10.0.0.1".parse().expect("ip");
    assert_eq!(
        l.inner().check(p.key().key(ip), &p, Instant::ZERO).await,
        Verdict::Unlimited
    );
    assert!(l.ready(&p));
    let s = l.status(&p);
    assert!(!s.enabled && s.ready && !s.degraded && s.storage_healthy());
}

/// C-RATE-1, C-RATE-2: local buckets per client network, denial after capacity.
#[tokio::test]
async fn c_rate_1_local_allows_capacity_then_denies() {
    let p = params(RateConfig {
        enabled: true,
        capacity: 2,
        refill_per_second: 1.0,
        ..RateConfig::default()
    });
    let l = local(&p);
    let ip: IpAddr = "10.0.0.1".parse().expect("ip");
    let now = Instant::from_secs(1);
    let outcomes = [
        l.inner().check(p.key().key(ip), &p, now).await,
        l.inner().check(p.key().key(ip), &p, now).await,
        l.inner().check(p.key().key(ip), &p, now).await,
    ];
    let Verdict::Decided(last) = outcomes[2] else {
        panic!("an outcome")
    };
    assert_eq!(last.status(), Some(429));
    assert_eq!(last.storage, StorageKind::Local);
    assert!(matches!(outcomes[0], Verdict::Decided(o) if o.remaining == 1 && o.is_allowed()));
    let other: IpAddr = "10.0.0.2".parse().expect("ip");
    assert!(
        matches!(l.inner().check(p.key().key(other), &p, now).await, Verdict::Decided(o) if o.is_allowed())
    );
    assert_eq!(l.status(&p).local_buckets, 2);
    // C-MGMT-4: the limit command sets the caller's bucket.
    let key = p.key().key(ip);
    l.set_tokens(key, &p, 1, now).await.expect("set");
    assert_eq!(l.peek(key, &p, now).await, Ok(1000));
}

/// C-RATE-5: a Redis store that refuses connections (nothing listens on its port), under
/// each failure mode: the policy's answer, readiness and degradation.
#[tokio::test]
async fn c_rate_5_failure_modes_with_redis_down() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let ip: IpAddr = "10.0.0.1".parse().expect("ip");
    for mode in [
        FailureMode::FailOpen,
        FailureMode::FailClosed,
        FailureMode::LocalFallback,
    ] {
        let p = params(RateConfig {
            enabled: true,
            storage: StorageKind::Redis,
            failure_mode: mode,
            capacity: 5,
            ..RateConfig::default()
        });
        let store = RedisStore::new(RedisOptions::new("127.0.0.1", port)).expect("store");
        let l = Limiter::new(Arc::new(
            RateLimiter::new(StoreKind::Redis(store), &p, 1).expect("limiter"),
        ));
        let got = l
            .inner()
            .check(p.key().key(ip), &p, Instant::from_secs(1))
            .await;
        let s = l.status(&p);
        assert!(
            !s.storage_healthy() && s.health.failures_total == 1,
            "{s:?}"
        );
        match (mode, got) {
            (FailureMode::FailOpen, Verdict::Decided(o)) => {
                assert!(o.is_allowed() && o.degraded && o.storage == StorageKind::Redis);
                assert!(s.ready && s.degraded);
            }
            (FailureMode::FailClosed, Verdict::Unavailable) => {
                assert!(!s.ready && !s.degraded && !l.ready(&p));
            }
            (FailureMode::LocalFallback, Verdict::Decided(o)) => {
                assert!(o.is_allowed() && o.degraded && o.storage == StorageKind::Local);
                assert!(s.ready && s.degraded);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
