//! Rate limiting on the request path (C-RATE-1..5) over the store `rate_limit.storage` selects:
//! `local` (weir-core's [`LocalStore`]), `redis` or `postgres` (the shared stores of
//! `weir-storage`, C-RATE-3).
//!
//! On the request path the request engine (`weir_core::exchange`) decides everything: the
//! client key (C-RATE-2), the bucket step (GCRA), whether the shared store may be called (its
//! `StoreCircuit`), its timeout and what a failure means (C-RATE-5), and the headers; the handler
//! only executes the engine's `StoreTake` with [`RateLimiter::take`]. `weir-storage`'s
//! [`RateLimiter`] owns the stores, the local store and the circuit the engine uses (through
//! [`Services`](weir_core::exchange::Services)). This module builds that limiter from the
//! configuration, prepares the
//! store at start (PostgreSQL migrations, a first Redis connection; a failure is logged, never
//! fatal: the process starts with the store down), runs the recovery task that calls
//! [`RateLimiter::probe`] every [`RateLimiter::retry_interval`] (so a replica without traffic,
//! such as a fail-closed one taken out of rotation by its readiness, returns to the store by
//! itself), and reports the state for readiness, metrics and the status endpoint
//! ([`RateLimitStatus`], read through [`DataPlane::rate_limit_status`](crate::services::state::DataPlane::rate_limit_status)).
//!
//! Runtimes: the store clients are tokio's and are runtime-agnostic once built. The limiter is
//! built on the control runtime; each Redis or PostgreSQL connection is driven by the runtime
//! that opened it (the control runtime for the start-up and probe calls, a worker's for a
//! request that found no connection). Calls from any runtime go through channels. The stores'
//! own background tasks and operation timeouts run on weir's runtime seam: [`install_store_runtime`]
//! hands [`Rt`](crate::base::rt::Rt) to weir-storage (`weir_storage::StoreRuntime`) at start, so
//! there is one seam.

use std::sync::Arc;
use std::time::Duration;

use crate::base::rt;
use weir_core::Instant;
use weir_core::config::ValidConfig;
use weir_core::rate::{ClientKey, FailureMode, LocalStore, RateParams, StorageKind};
use weir_storage::{PostgresOptions, PostgresStore, RedisOptions, RedisStore, StoreKind};

pub use weir_storage::{RateLimiter, StoreError, StoreHealth};

impl weir_storage::StoreRuntime for rt::Rt {
    fn spawn(&self, fut: weir_storage::BoxFuture) {
        self.0.spawn(fut);
    }

    fn sleep(&self, d: Duration) -> weir_storage::BoxFuture {
        let sleep = self.0.timer().sleep(d);
        Box::pin(sleep)
    }
}

/// Make weir-storage spawn and time out on `rt` (once per process; a later call keeps the
/// runtime installed first: a process runs one).
pub fn install_store_runtime(rt: rt::Rt) {
    if !weir_storage::runtime_installed() {
        // One `Rt` (a pointer) for the process's life.
        weir_storage::install_runtime(Box::leak(Box::new(rt)));
    }
}

/// The rate limiter's state for readiness (C-OBS-4), metrics (C-OBS-1:
/// `load_balancer_rate_limit_storage_healthy`, `load_balancer_rate_limit_degraded`) and
/// `/api/dashboard/status` (C-MGMT-4), under the rate settings in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitStatus {
    /// `rate_limit.enabled` in force.
    pub enabled: bool,
    /// The store built at start (`local`, `redis`, `postgres`; restart-only).
    pub storage: StorageKind,
    /// `rate_limit.failure_mode` in force.
    pub failure_mode: FailureMode,
    /// False only while limiting is on, the shared store is down and the mode is
    /// `fail-closed` (`/readyz` is then `503`, C-RATE-5, C-OBS-4).
    pub ready: bool,
    /// Responses are being decided by a fallback: limiting is on, the shared store is down and
    /// the mode is `fail-open` or `local-fallback`.
    pub degraded: bool,
    /// The store's health: up, failure and recovery counters, the last error. `up` is always
    /// true for the local store.
    pub health: StoreHealth,
    /// Buckets in the local store (`load_balancer_rate_limit_local_buckets`).
    pub local_buckets: usize,
    /// Keys the local store evicted (`load_balancer_rate_limit_local_evictions_total`).
    pub local_evictions: u64,
}

impl RateLimitStatus {
    /// `load_balancer_rate_limit_storage_healthy`: 1 while the store answers.
    #[must_use]
    pub fn storage_healthy(&self) -> bool {
        self.health.up
    }
}

/// The process's rate limiter: `weir-storage`'s [`RateLimiter`] over the configured store.
#[derive(Debug)]
pub struct Limiter {
    inner: Arc<RateLimiter>,
}

impl Limiter {
    /// Wrap a limiter built elsewhere (tests inject one through
    /// [`Options::rate_limiter`](crate::control::start::Options::rate_limiter)).
    #[must_use]
    pub fn new(inner: Arc<RateLimiter>) -> Limiter {
        Limiter { inner }
    }

    /// Build the store `rate_limit.storage` selects and the limiter around it (C-RATE-3).
    /// Nothing connects here. `hash_seed` seeds the local store (C-RATE-4). Must run inside a
    /// tokio runtime.
    ///
    /// With `rate_limit.enabled: false` the configured store is built all the same (it stays
    /// idle): `enabled` is reloadable while `storage` is restart-only, so a reload that turns
    /// limiting on must find the store the file names.
    pub fn from_config(cfg: &ValidConfig, hash_seed: u64) -> Result<Limiter, StoreError> {
        let store = if cfg.rate.enabled() {
            StoreKind::from_config(&cfg.redis, cfg.database.as_ref(), &cfg.rate)?
        } else {
            match cfg.config.rate_limit.storage.parse::<StorageKind>() {
                Ok(StorageKind::Redis) => {
                    StoreKind::Redis(RedisStore::new(RedisOptions::from_settings(&cfg.redis))?)
                }
                Ok(StorageKind::Postgres) => match cfg.database.as_ref() {
                    Some(db) => StoreKind::Postgres(Box::new(PostgresStore::new(
                        PostgresOptions::from_settings(db)?,
                    )?)),
                    None => StoreKind::Local,
                },
                _ => StoreKind::Local,
            }
        };
        Ok(Limiter::new(Arc::new(RateLimiter::new(
            store, &cfg.rate, hash_seed,
        )?)))
    }

    /// The limiter itself (health, peek, reset, probe).
    #[must_use]
    pub fn inner(&self) -> &Arc<RateLimiter> {
        &self.inner
    }

    /// The local store (primary for `storage: local`, fallback for `local-fallback`).
    #[must_use]
    pub fn local(&self) -> &LocalStore {
        self.inner.local().as_ref()
    }

    /// The store built at start.
    #[must_use]
    pub fn storage(&self) -> StorageKind {
        self.inner.storage()
    }

    /// `/readyz` for the rate limiter under `params` (C-RATE-5, C-OBS-4).
    #[must_use]
    pub fn ready(&self, params: &RateParams) -> bool {
        !params.enabled() || self.inner.ready(params.failure_mode())
    }

    /// The state under the rate settings in force (see [`RateLimitStatus`]).
    #[must_use]
    pub fn status(&self, params: &RateParams) -> RateLimitStatus {
        let enabled = params.enabled();
        let mode = params.failure_mode();
        let local = self.inner.local();
        RateLimitStatus {
            enabled,
            storage: self.inner.storage(),
            failure_mode: mode,
            ready: !enabled || self.inner.ready(mode),
            degraded: enabled && self.inner.degraded(mode),
            health: self.inner.health(),
            local_buckets: local.len(),
            local_evictions: local.evictions(),
        }
    }

    /// Tokens in `key`'s bucket in thousandths, from the store in force, without taking one
    /// (the status endpoint's `bucket`, C-MGMT-4). A store failure is returned, not decided.
    pub async fn peek(
        &self,
        key: ClientKey,
        params: &RateParams,
        now: Instant,
    ) -> Result<u64, StoreError> {
        self.inner.peek(key, params, now).await
    }

    /// Make `key`'s bucket hold `tokens` whole tokens (clamped to the capacity) in the store in
    /// force and the local one: `weir_core::mgmt::Decision::RefillBucket` (`POST
    /// /api/dashboard/limit`, C-MGMT-4). Bounded by the operation timeout; a shared-store
    /// failure is returned (answer `503` with it), not decided by the policy.
    pub async fn set_tokens(
        &self,
        key: ClientKey,
        params: &RateParams,
        tokens: u64,
        now: Instant,
    ) -> Result<(), StoreError> {
        self.inner.set_tokens(key, params, tokens, now).await
    }

    /// The start-up work of a shared store, bounded: PostgreSQL migrations (C-RATE-7), a first
    /// Redis connection. A failure marks the store down and is logged; the process starts
    /// anyway (C-RATE-5) and the recovery task brings the store back (PostgreSQL then migrates
    /// in the background on first use). Nothing to do for the local store or when limiting is
    /// off.
    pub async fn prepare(&self, cfg: &ValidConfig, now: Instant) {
        if !cfg.rate.enabled() || !self.storage().is_shared() {
            return;
        }
        let limit = prepare_limit(cfg);
        match self.inner.prepare(limit, now).await {
            Ok(()) => tracing::info!(storage = self.storage().label(), "rate-limit store ready"),
            Err(e) => tracing::warn!(
                storage = self.storage().label(),
                error = %e,
                failure_mode = cfg.rate.failure_mode().as_str(),
                "rate-limit store unavailable at start; the failure policy applies until it returns"
            ),
        }
    }
}

/// How long start-up waits for a shared store: one connection attempt and one answer for
/// Redis; for PostgreSQL one connection plus time for the migrations, which may queue behind
/// another replica's on the advisory lock (C-RATE-7).
fn prepare_limit(cfg: &ValidConfig) -> Duration {
    match cfg.rate.storage() {
        StorageKind::Postgres => cfg
            .database
            .as_ref()
            .map_or(Duration::from_secs(5), |d| d.connect_timeout)
            .saturating_add(Duration::from_secs(10)),
        _ => cfg
            .redis
            .dial_timeout
            .saturating_add(cfg.redis.read_timeout.max(cfg.redis.write_timeout))
            .max(cfg.rate.operation_timeout()),
    }
}
