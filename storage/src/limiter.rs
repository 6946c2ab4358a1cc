//! The rate limiter the adapters call: the configured store, bounded by
//! `rate_limit.operation_timeout`, the failure policy of C-RATE-5 around it, the local store for
//! `storage: local` and for `local-fallback`, and the store's health.
//!
//! Recovery (C-RATE-5, "returns to the shared store by itself"): the store's health is core's
//! [`StoreCircuit`], the one machine the request engine (`weir_core::exchange`), this limiter and
//! the simulator share: down after a failed call; while down, requests go straight to the
//! policy except one trial per [`RateLimiter::retry_interval`] (200 ms by default); the first
//! trial that succeeds brings the store back. Without traffic no request would be a trial, so
//! [`RateLimiter::probe`] runs the same trial as a health check on the adapter's timer.
//!
//! The request path of weir-proxy does not call [`RateLimiter::check`]: its request engine asks
//! the circuit and the local store itself and calls [`RateLimiter::take`] (no timeout of its
//! own: the engine's `poll_timeout` bounds it). `check` is the same sequence for callers
//! without an engine (the storage tests, tools).
//!
//! No task is spawned here and nothing reads a clock: the caller passes `now` (the same clock
//! it gives the local store), so the policy logic is runtime-neutral. The only runtime need is
//! `tokio::time::timeout` for the operation bound, and the stores' own tokio clients.

use core::fmt;
use core::time::Duration;

use std::sync::{Arc, Mutex};

use weir_core::bucket::BucketParams;
use weir_core::bucket::Take;
use weir_core::rate::{
    Call, ClientKey, FailureDecision, FailureMode, LocalStore, RateOutcome, RateParams,
    StorageKind, StoreCircuit, on_store_failure,
};
use weir_core::time::Instant;

use crate::error::StoreError;
use crate::kind::StoreKind;
use crate::store::Store;

/// The answer for one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    /// Rate limiting is off (`rate_limit.enabled: false`): proxy, no rate-limit headers.
    Unlimited,
    /// Allowed or denied, with the C-RATE-1 headers ([`RateOutcome::headers`]); `degraded` is
    /// set when a fallback decided (fail-open or local-fallback, C-RATE-5).
    Decided(RateOutcome),
    /// `fail-closed` and the shared store failed: answer `503` (C-RATE-5).
    Unavailable,
}

impl Verdict {
    /// The status to answer with instead of proxying: `429`, `503` or none.
    #[must_use]
    pub fn status(&self) -> Option<u16> {
        match self {
            Verdict::Unlimited => None,
            Verdict::Decided(o) => o.status(),
            Verdict::Unavailable => Some(503),
        }
    }
}

/// A snapshot of the store's health, for metrics and `/api/dashboard/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreHealth {
    /// The configured store.
    pub storage: StorageKind,
    /// The last call to the store succeeded (always true for the local store).
    pub up: bool,
    /// Failed calls since the last success.
    pub consecutive_failures: u64,
    /// Failed calls (errors and timeouts) since start.
    pub failures_total: u64,
    /// Requests decided by the failure policy since start.
    pub policy_decisions_total: u64,
    /// Times the store came back after being down.
    pub recoveries_total: u64,
    /// The last failure, if any since start.
    pub last_error: Option<StoreError>,
}

/// The rate limiter: store, timeout, failure policy, health (C-RATE-1, C-RATE-3, C-RATE-5).
///
/// Kinds: `check` is the per-request command; `probe` is the recovery timer's command; `peek`
/// and `reset` are operator commands; `health`, `store_up`, `ready`, `degraded` are getters.
/// Rate parameters are an argument of every call, not part of the limiter, so a reload that
/// changes capacity, refill, timeout or failure mode applies at the next call; a reload that
/// changes `rate_limit.storage`, `redis` or `database` builds a new limiter.
pub struct RateLimiter {
    store: StoreKind,
    local: Arc<LocalStore>,
    circuit: Arc<StoreCircuit>,
    last_error: Mutex<Option<StoreError>>,
}

impl fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiter")
            .field("store", &self.store)
            .field("up", &self.store_up())
            .field("retry_interval", &self.retry_interval())
            .finish_non_exhaustive()
    }
}

/// Settles a circuit [`Call`] exactly once: by the call's result, or as abandoned when its
/// future is dropped first.
struct CallGuard<'a> {
    limiter: &'a RateLimiter,
    call: Option<Call>,
}

impl CallGuard<'_> {
    fn settle<T>(mut self, result: Result<T, StoreError>, now: Instant) -> Result<T, StoreError> {
        if let Some(call) = self.call.take() {
            match &result {
                Ok(_) => self.limiter.circuit.on_success(call),
                // One node of several failed: nothing learnt about the store as a whole.
                Err(e) if e.is_partial() => {
                    self.limiter.circuit.abandon(call);
                    self.limiter.note_error(e.clone());
                }
                Err(e) => {
                    self.limiter.circuit.on_failure(call, now);
                    self.limiter.note_error(e.clone());
                }
            }
        }
        result
    }
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            self.limiter.circuit.abandon(call);
        }
    }
}

impl RateLimiter {
    /// Rows one sweep statement deletes at most: each statement's locks and WAL stay small.
    pub const SWEEP_BATCH: i64 = 10_000;
    /// Statements one sweep runs at most: a table that grew faster than the sweeps keep up with
    /// is cleaned over several sweeps rather than in one long burst.
    pub const SWEEP_MAX_BATCHES: u32 = 20;

    /// The default spacing of recovery trials.
    pub const DEFAULT_RETRY_INTERVAL: Duration = weir_core::rate::circuit::DEFAULT_RETRY_INTERVAL;

    /// A limiter over `store`, with a local store sized by `rate.local_store()` (the primary
    /// store for `storage: local`, the fallback for `local-fallback`). `hash_seed` seeds the
    /// local store's hashes (pass one from the process's RNG). The store starts *up*: the first
    /// request tries it.
    pub fn new(
        store: StoreKind,
        rate: &RateParams,
        hash_seed: u64,
    ) -> Result<RateLimiter, StoreError> {
        let local = LocalStore::new(rate.local_store(), hash_seed)
            .map_err(|e| StoreError::Config(e.to_string()))?;
        Ok(RateLimiter {
            store,
            local: Arc::new(local),
            circuit: Arc::new(StoreCircuit::new(Self::DEFAULT_RETRY_INTERVAL)),
            last_error: Mutex::new(None),
        })
    }

    /// Build the store `rate.storage()` selects from the validated settings and a limiter
    /// around it (what the adapter calls at start). Must be called inside a tokio runtime.
    pub fn from_config(
        redis: &weir_core::config::RedisSettings,
        database: Option<&weir_core::config::DatabaseSettings>,
        rate: &RateParams,
        hash_seed: u64,
    ) -> Result<RateLimiter, StoreError> {
        RateLimiter::new(
            StoreKind::from_config(redis, database, rate)?,
            rate,
            hash_seed,
        )
    }

    /// Space recovery trials by `interval` instead of the default 200 ms (a fresh circuit: call
    /// it before the limiter is used).
    #[must_use]
    pub fn with_retry_interval(mut self, interval: Duration) -> RateLimiter {
        self.circuit = Arc::new(StoreCircuit::new(interval));
        self
    }

    /// Spacing of recovery trials while the store is down.
    #[must_use]
    pub fn retry_interval(&self) -> Duration {
        self.circuit.retry_interval()
    }

    /// The store's circuit (C-RATE-5), shared with the request engine.
    #[must_use]
    pub fn circuit(&self) -> &Arc<StoreCircuit> {
        &self.circuit
    }

    /// The configured store.
    #[must_use]
    pub fn storage(&self) -> StorageKind {
        self.store.storage()
    }

    /// The store itself.
    #[must_use]
    pub fn store(&self) -> &StoreKind {
        &self.store
    }

    /// The local store (primary for `storage: local`, fallback for `local-fallback`).
    #[must_use]
    pub fn local(&self) -> &Arc<LocalStore> {
        &self.local
    }

    /// Whether the store answered its last call (the local store is always up).
    #[must_use]
    pub fn store_up(&self) -> bool {
        self.circuit.is_up()
    }

    /// `/readyz` for the rate limiter: false only while the shared store is down under
    /// `fail-closed` (C-RATE-5, C-OBS-4).
    #[must_use]
    pub fn ready(&self, mode: FailureMode) -> bool {
        self.circuit.ready(mode)
    }

    /// Whether responses are being decided by a fallback (`X-RateLimit-Degraded`, the degraded
    /// gauge): the shared store is down and the mode is fail-open or local-fallback.
    #[must_use]
    pub fn degraded(&self, mode: FailureMode) -> bool {
        self.circuit.degraded(mode)
    }

    /// Keep `e` as the store's last error (for `/api/dashboard/status` and the recovery log);
    /// the adapter calls it for a call its request engine timed out.
    pub fn note_error(&self, e: StoreError) {
        *self
            .last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(e);
    }

    /// A snapshot of the counters and the last error.
    #[must_use]
    pub fn health(&self) -> StoreHealth {
        let c = self.circuit.counters();
        StoreHealth {
            storage: self.storage(),
            up: self.store_up(),
            consecutive_failures: c.consecutive_failures,
            failures_total: c.failures_total,
            policy_decisions_total: c.policy_decisions_total,
            recoveries_total: c.recoveries_total,
            last_error: self
                .last_error
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        }
    }

    /// Decide one request of client `key` at `now` (C-RATE-1, C-RATE-5). Never waits longer
    /// than `rate.operation_timeout()` (plus scheduling), and not at all while the store is down
    /// and no trial is due.
    pub async fn check(&self, key: ClientKey, rate: &RateParams, now: Instant) -> Verdict {
        if !rate.enabled() {
            return Verdict::Unlimited;
        }
        let bucket = rate.bucket();
        let storage = self.storage();
        if !storage.is_shared() {
            let take = self.local.take(key, &bucket, now);
            return Verdict::Decided(RateOutcome::from_take(
                take,
                &bucket,
                rate.refill_per_second(),
                StorageKind::Local,
                false,
            ));
        }
        if let Some(guard) = self.may_call(now) {
            // Boxed: the store clients' futures are kilobytes, and without the box every
            // request's future (local store or none) would carry room for them and copy it.
            let taken = bounded(rate.operation_timeout(), self.take(key, &bucket, now));
            if let Ok(take) = guard.settle(Box::pin(taken).await, now) {
                return Verdict::Decided(RateOutcome::from_take(
                    take,
                    &bucket,
                    rate.refill_per_second(),
                    storage,
                    false,
                ));
            }
        }
        self.circuit.on_policy_decision();
        match on_store_failure(rate.failure_mode()) {
            FailureDecision::AllowDegraded => Verdict::Decided(RateOutcome::fail_open(
                &bucket,
                rate.refill_per_second(),
                storage,
            )),
            FailureDecision::Reject => Verdict::Unavailable,
            FailureDecision::DecideLocally => {
                let take = self.local.take(key, &bucket, now);
                Verdict::Decided(RateOutcome::from_take(
                    take,
                    &bucket,
                    rate.refill_per_second(),
                    StorageKind::Local,
                    true,
                ))
            }
        }
    }

    /// The recovery timer's command: check the store's health (bounded by the operation
    /// timeout) when it is up or a trial is due, and update the state. Returns whether the store
    /// is up afterwards. The adapter calls this every [`Self::retry_interval`]; for the local
    /// store it does nothing.
    pub async fn probe(&self, rate: &RateParams, now: Instant) -> bool {
        if !self.storage().is_shared() {
            return true;
        }
        let Some(guard) = self.may_call(now) else {
            return self.store_up();
        };
        let result = match &self.store {
            StoreKind::Local => Ok(()),
            StoreKind::Redis(s) => bounded(rate.operation_timeout(), s.health()).await,
            StoreKind::Postgres(s) => bounded(rate.operation_timeout(), s.health()).await,
        };
        let _ = guard.settle(result, now);
        self.store_up()
    }

    /// Work the store needs before serving: PostgreSQL migrations (C-RATE-7), a first Redis
    /// connection. Bounded by `limit`. A failure marks the store down and is returned for the
    /// log; the process serves anyway (C-RATE-5) and the migration is retried in the background.
    pub async fn prepare(&self, limit: Duration, now: Instant) -> Result<(), StoreError> {
        let result = match &self.store {
            StoreKind::Local => Ok(()),
            StoreKind::Redis(s) => bounded(limit, s.health()).await,
            StoreKind::Postgres(s) => bounded(limit, async { s.migrate().await.map(|_| ()) }).await,
        };
        // Not a circuit trial: start-up work runs before any request, outside the spacing.
        let guard = CallGuard {
            limiter: self,
            call: Some(Call { trial: false }),
        };
        guard.settle(result, now)
    }

    /// Tokens in `key`'s bucket in thousandths (the status endpoint's read; C-MGMT-4), from the
    /// configured store, bounded by the operation timeout. No policy applies: a failure is
    /// returned.
    pub async fn peek(
        &self,
        key: ClientKey,
        rate: &RateParams,
        now: Instant,
    ) -> Result<u64, StoreError> {
        let bucket = rate.bucket();
        let t = rate.operation_timeout();
        match &self.store {
            StoreKind::Local => Ok(self.local.peek(key, &bucket, now)),
            StoreKind::Redis(s) => bounded(t, s.peek(key, &bucket)).await,
            StoreKind::Postgres(s) => bounded(t, s.peek(key, &bucket)).await,
        }
    }

    /// Refill `key`'s bucket in the configured store and in the local one (the management
    /// `limit` command; C-MGMT-4), bounded by the operation timeout.
    pub async fn reset(&self, key: ClientKey, rate: &RateParams) -> Result<(), StoreError> {
        self.local.reset(key);
        let t = rate.operation_timeout();
        match &self.store {
            StoreKind::Local => Ok(()),
            StoreKind::Redis(s) => bounded(t, s.reset(key)).await,
            StoreKind::Postgres(s) => bounded(t, s.reset(key)).await,
        }
    }

    /// Make `key`'s bucket hold `tokens` whole tokens (clamped to the capacity) in the
    /// configured store and in the local one: the management `limit` command's
    /// `Decision::RefillBucket` (C-MGMT-4), bounded by the operation timeout. No policy
    /// applies: a shared-store failure is returned (the local bucket is set regardless, so a
    /// `local-fallback` replica answers from the value the operator asked for).
    pub async fn set_tokens(
        &self,
        key: ClientKey,
        rate: &RateParams,
        tokens: u64,
        now: Instant,
    ) -> Result<(), StoreError> {
        let bucket = rate.bucket();
        set_local_tokens(&self.local, key, &bucket, tokens, now);
        let t = rate.operation_timeout();
        match &self.store {
            StoreKind::Local => Ok(()),
            StoreKind::Redis(s) => bounded(t, s.set_tokens(key, &bucket, tokens)).await,
            StoreKind::Postgres(s) => bounded(t, s.set_tokens(key, &bucket, tokens)).await,
        }
    }

    /// Take one token for `key` from the configured store, with no timeout of its own (the
    /// caller bounds it: weir-proxy by its request engine's `poll_timeout`, `check` by the
    /// operation timeout) and no circuit bookkeeping (the engine settles its own
    /// [`Call`]). A failure is kept as the last error. The local store takes at `now`.
    pub async fn take(
        &self,
        key: ClientKey,
        bucket: &BucketParams,
        now: Instant,
    ) -> Result<Take, StoreError> {
        let result = match &self.store {
            StoreKind::Local => Ok(self.local.take(key, bucket, now)),
            StoreKind::Redis(s) => s.take(key, bucket).await,
            StoreKind::Postgres(s) => s.take(key, bucket).await,
        };
        if let Err(e) = &result {
            self.note_error(e.clone());
        }
        result
    }

    /// Whether a call may go to the store now (the circuit's answer), as a guard that settles
    /// the call once.
    fn may_call(&self, now: Instant) -> Option<CallGuard<'_>> {
        self.circuit.may_call(now).map(|call| CallGuard {
            limiter: self,
            call: Some(call),
        })
    }
}

/// Set a local bucket to `tokens` whole tokens at `now` with the operations core's
/// [`LocalStore`] has: refill it, then take `capacity - tokens` tokens at the same instant
/// (each take at one instant costs exactly one token of a full bucket). Linear in the tokens
/// removed; an operator command, not a request-path one. A `LocalStore::set_tokens` in core
/// (state `now + (capacity - tokens) × interval`) would make it constant time.
fn set_local_tokens(
    local: &LocalStore,
    key: ClientKey,
    bucket: &weir_core::bucket::BucketParams,
    tokens: u64,
    now: Instant,
) {
    local.reset(key);
    for _ in 0..bucket.capacity().saturating_sub(tokens) {
        if let Take::Denied { .. } = local.take(key, bucket, now) {
            break;
        }
    }
}

impl RateLimiter {
    /// Delete the buckets that expired more than `retention` ago from a store that does not
    /// expire them by itself (PostgreSQL; Redis keys carry a TTL and the local store evicts):
    /// at most [`Self::SWEEP_MAX_BATCHES`] statements of [`Self::SWEEP_BATCH`] rows, each
    /// bounded by `rate`'s operation timeout. Returns the rows deleted. Correctness never depends on it (an expired row reads as a
    /// full bucket); without it the table keeps one row per client key ever seen. Nothing is
    /// tried while the store is down; a failure is returned for the log and does not mark the
    /// store down (the decisions and the recovery trials judge its health).
    pub async fn sweep_expired(
        &self,
        rate: &RateParams,
        retention: Duration,
    ) -> Result<u64, StoreError> {
        let StoreKind::Postgres(store) = &self.store else {
            return Ok(0);
        };
        if !self.store_up() {
            return Ok(0);
        }
        let mut total = 0;
        for _ in 0..Self::SWEEP_MAX_BATCHES {
            let n = bounded(
                rate.operation_timeout(),
                store.sweep_expired(Self::SWEEP_BATCH, retention),
            )
            .await?;
            total += n;
            if n < Self::SWEEP_BATCH.unsigned_abs() {
                break;
            }
        }
        Ok(total)
    }
}

/// Run `fut` for at most `limit` (C-RATE-5).
async fn bounded<T>(
    limit: Duration,
    fut: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match crate::rt::timeout(limit, fut).await {
        Some(r) => r,
        None => Err(StoreError::Timeout(limit)),
    }
}

#[cfg(test)]
mod tests;
