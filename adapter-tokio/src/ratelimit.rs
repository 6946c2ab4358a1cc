//! Rate limiting on the request path (C-RATE-1, C-RATE-2, C-RATE-4, C-RATE-5), over a store
//! seam so the shared stores of `weir-storage` plug in without touching the proxy.
//!
//! weir-core decides everything: the client key ([`KeyParams::key`], C-RATE-2), the bucket step
//! (GCRA in [`LocalStore`], C-RATE-1, C-RATE-4), what a shared-store failure means
//! ([`on_store_failure`], C-RATE-5) and the headers ([`RateOutcome::headers`]). This module only
//! calls the store, bounds a shared store's call by `operation_timeout`, and returns the outcome.
//!
//! The local store is called synchronously (a short per-shard lock, no await); a shared store is
//! a [`RateStore`] trait object whose `take` is a boxed future.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

use weir_core::Instant;
use weir_core::bucket::{BucketParams, Take};
use weir_core::rate::{
    ClientKey, FailureDecision, LocalStore, LocalStoreError, RateOutcome, RateParams, StorageKind,
    on_store_failure,
};

/// Why a shared store could not answer (the failure policy decides what it means, C-RATE-5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError(pub String);

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StoreError {}

/// The answer of a shared store's `take`.
pub type TakeFuture<'a> = Pin<Box<dyn Future<Output = Result<Take, StoreError>> + Send + 'a>>;

/// A shared rate-limit store (Redis, PostgreSQL; C-RATE-3): one atomic GCRA step per call.
pub trait RateStore: Send + Sync + std::fmt::Debug {
    /// Which store this is (`X-RateLimit-Storage`).
    fn kind(&self) -> StorageKind;
    /// Take one token from `key`'s bucket with shape `params`.
    fn take<'a>(&'a self, key: ClientKey, params: &'a BucketParams) -> TakeFuture<'a>;
}

/// The limiter's answer for one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RateCheck {
    /// Rate limiting is off: no decision, no headers.
    Off,
    /// Allowed or denied, with the C-RATE-1 headers.
    Outcome(RateOutcome),
    /// The shared store failed and the policy is `fail-closed`: `503` (C-RATE-5).
    StoreUnavailable,
}

/// The process's rate limiter: the local store, and the shared store when one is configured.
#[derive(Debug)]
pub struct Limiter {
    local: LocalStore,
    shared: Option<Arc<dyn RateStore>>,
}

impl Limiter {
    /// A limiter with a local store sized by `params` (C-RATE-4), seeded with `hash_seed` (from
    /// OS entropy, so clients cannot aim at one shard), and an optional shared store.
    pub fn new(
        params: &RateParams,
        hash_seed: u64,
        shared: Option<Arc<dyn RateStore>>,
    ) -> Result<Limiter, LocalStoreError> {
        Ok(Limiter {
            local: LocalStore::new(params.local_store(), hash_seed)?,
            shared,
        })
    }

    /// The local store (status: buckets, evictions).
    #[must_use]
    pub fn local(&self) -> &LocalStore {
        &self.local
    }

    /// Take a token for `client` under `params` at `now` (C-RATE-1, C-RATE-2).
    pub async fn check(&self, params: &RateParams, client: IpAddr, now: Instant) -> RateCheck {
        if !params.enabled() {
            return RateCheck::Off;
        }
        let key = params.key().key(client);
        let bucket = params.bucket();
        let storage = params.storage();
        match (&self.shared, storage.is_shared()) {
            (Some(store), true) => {
                let result =
                    tokio::time::timeout(params.operation_timeout(), store.take(key, &bucket))
                        .await;
                match result {
                    Ok(Ok(take)) => RateCheck::Outcome(RateOutcome::from_take(
                        take,
                        &bucket,
                        params.refill_per_second(),
                        storage,
                        false,
                    )),
                    Ok(Err(_)) | Err(_) => self.on_failure(params, key, now),
                }
            }
            // A shared store configured but not plugged in (or the local store): local.
            _ => RateCheck::Outcome(self.local_take(params, key, now, storage.is_shared())),
        }
    }

    fn local_take(
        &self,
        params: &RateParams,
        key: ClientKey,
        now: Instant,
        degraded: bool,
    ) -> RateOutcome {
        let bucket = params.bucket();
        let storage = if degraded {
            StorageKind::Local
        } else {
            params.storage()
        };
        RateOutcome::from_take(
            self.local.take(key, &bucket, now),
            &bucket,
            params.refill_per_second(),
            storage,
            degraded,
        )
    }

    fn on_failure(&self, params: &RateParams, key: ClientKey, now: Instant) -> RateCheck {
        match on_store_failure(params.failure_mode()) {
            FailureDecision::AllowDegraded => RateCheck::Outcome(RateOutcome::fail_open(
                &params.bucket(),
                params.refill_per_second(),
                params.storage(),
            )),
            FailureDecision::Reject => RateCheck::StoreUnavailable,
            FailureDecision::DecideLocally => {
                RateCheck::Outcome(self.local_take(params, key, now, true))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::rate::{FailureMode, RateConfig};

    fn params(cfg: RateConfig) -> RateParams {
        RateParams::new(&cfg).expect("valid rate config")
    }

    #[derive(Debug)]
    struct Down;

    impl RateStore for Down {
        fn kind(&self) -> StorageKind {
            StorageKind::Redis
        }
        fn take<'a>(&'a self, _: ClientKey, _: &'a BucketParams) -> TakeFuture<'a> {
            Box::pin(async { Err(StoreError("down".into())) })
        }
    }

    #[tokio::test]
    async fn disabled_is_off() {
        let p = params(RateConfig::default());
        let l = Limiter::new(&p, 1, None).expect("limiter");
        let ip: IpAddr = "10.0.0.1".parse().expect("ip");
        assert_eq!(l.check(&p, ip, Instant::ZERO).await, RateCheck::Off);
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
        let l = Limiter::new(&p, 1, None).expect("limiter");
        let ip: IpAddr = "10.0.0.1".parse().expect("ip");
        let now = Instant::from_secs(1);
        let outcomes = [
            l.check(&p, ip, now).await,
            l.check(&p, ip, now).await,
            l.check(&p, ip, now).await,
        ];
        let RateCheck::Outcome(last) = outcomes[2] else {
            panic!("an outcome")
        };
        assert_eq!(last.status(), Some(429));
        assert!(matches!(outcomes[0], RateCheck::Outcome(o) if o.remaining == 1 && o.is_allowed()));
        let other: IpAddr = "10.0.0.2".parse().expect("ip");
        assert!(matches!(l.check(&p, other, now).await, RateCheck::Outcome(o) if o.is_allowed()));
    }

    /// C-RATE-5: each failure mode of a shared store that is down.
    #[tokio::test]
    async fn c_rate_5_failure_modes() {
        let ip: IpAddr = "10.0.0.1".parse().expect("ip");
        for (mode, expect) in [
            (FailureMode::FailOpen, "open"),
            (FailureMode::FailClosed, "closed"),
            (FailureMode::LocalFallback, "local"),
        ] {
            let p = params(RateConfig {
                enabled: true,
                storage: StorageKind::Redis,
                failure_mode: mode,
                ..RateConfig::default()
            });
            let l = Limiter::new(&p, 1, Some(Arc::new(Down))).expect("limiter");
            let got = l.check(&p, ip, Instant::ZERO).await;
            match (expect, got) {
                ("open", RateCheck::Outcome(o)) => {
                    assert!(o.is_allowed() && o.degraded && o.storage == StorageKind::Redis);
                }
                ("closed", RateCheck::StoreUnavailable) => {}
                ("local", RateCheck::Outcome(o)) => {
                    assert!(o.is_allowed() && o.degraded && o.storage == StorageKind::Local);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}
