//! The rate limiter the adapters call: the configured store, bounded by
//! `rate_limit.operation_timeout`, the failure policy of C-RATE-5 around it, the local store for
//! `storage: local` and for `local-fallback`, and the store's health.
//!
//! Recovery (C-RATE-5, "returns to the shared store by itself"): after a failure the store is
//! *down*. While down, requests do not wait on it: they go straight to the policy, except that
//! one request per [`RateLimiter::retry_interval`] (default 200 ms) is let through to the store
//! as a trial; the first trial that succeeds marks the store up again. This is the half-open
//! state of a circuit breaker (Finagle's and Envoy's outlier ejection work the same way), with a
//! fixed interval rather than a growing one because a shared store is one dependency whose
//! return should be noticed quickly, not a pool member that can be avoided. Without traffic
//! (a `fail-closed` replica taken out of the load balancer by its readiness) no request would
//! ever be a trial, so [`RateLimiter::probe`] runs the same trial as a health check; the adapter
//! calls it on a timer every `retry_interval`. Either way the store is used again within
//! `retry_interval` plus one reconnect after it returns.
//!
//! No task is spawned here and nothing reads a clock: the caller passes `now` (the same clock
//! it gives the local store), so the policy logic is runtime-neutral. The only runtime need is
//! `tokio::time::timeout` for the operation bound, and the stores' own tokio clients.

use core::fmt;
use core::time::Duration;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use weir_core::bucket::Take;
use weir_core::rate::{
    ClientKey, FailureDecision, FailureMode, LocalStore, RateOutcome, RateParams, StorageKind,
    on_store_failure,
};
use weir_core::time::Instant;

use crate::error::StoreError;
use crate::store::{Store, StoreKind};

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
    local: LocalStore,
    retry_interval: Duration,
    up: AtomicBool,
    /// While down: the earliest `now` (ns) at which the next trial may run.
    next_trial_ns: AtomicU64,
    /// A trial call is in flight.
    trial: AtomicBool,
    consecutive_failures: AtomicU64,
    failures_total: AtomicU64,
    policy_decisions_total: AtomicU64,
    recoveries_total: AtomicU64,
    last_error: Mutex<Option<StoreError>>,
}

impl fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiter")
            .field("store", &self.store)
            .field("up", &self.store_up())
            .field("retry_interval", &self.retry_interval)
            .finish_non_exhaustive()
    }
}

/// Clears the trial flag however the trial ends (also when its future is dropped).
struct TrialGuard<'a>(Option<&'a AtomicBool>);

impl Drop for TrialGuard<'_> {
    fn drop(&mut self) {
        if let Some(flag) = self.0 {
            flag.store(false, Ordering::Release);
        }
    }
}

impl RateLimiter {
    /// The default spacing of recovery trials.
    pub const DEFAULT_RETRY_INTERVAL: Duration = Duration::from_millis(200);

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
            local,
            retry_interval: Self::DEFAULT_RETRY_INTERVAL,
            up: AtomicBool::new(true),
            next_trial_ns: AtomicU64::new(0),
            trial: AtomicBool::new(false),
            consecutive_failures: AtomicU64::new(0),
            failures_total: AtomicU64::new(0),
            policy_decisions_total: AtomicU64::new(0),
            recoveries_total: AtomicU64::new(0),
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

    /// Space recovery trials by `interval` instead of the default 200 ms.
    #[must_use]
    pub fn with_retry_interval(mut self, interval: Duration) -> RateLimiter {
        self.retry_interval = interval;
        self
    }

    /// Spacing of recovery trials while the store is down.
    #[must_use]
    pub fn retry_interval(&self) -> Duration {
        self.retry_interval
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
    pub fn local(&self) -> &LocalStore {
        &self.local
    }

    /// Whether the store answered its last call (the local store is always up).
    #[must_use]
    pub fn store_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    /// `/readyz` for the rate limiter: false only while the shared store is down under
    /// `fail-closed` (C-RATE-5, C-OBS-4).
    #[must_use]
    pub fn ready(&self, mode: FailureMode) -> bool {
        self.store_up() || on_store_failure(mode).ready()
    }

    /// Whether responses are being decided by a fallback (`X-RateLimit-Degraded`, the degraded
    /// gauge): the shared store is down and the mode is fail-open or local-fallback.
    #[must_use]
    pub fn degraded(&self, mode: FailureMode) -> bool {
        !self.store_up() && on_store_failure(mode).degraded()
    }

    /// A snapshot of the counters and the last error.
    #[must_use]
    pub fn health(&self) -> StoreHealth {
        StoreHealth {
            storage: self.storage(),
            up: self.store_up(),
            consecutive_failures: self.consecutive_failures.load(Ordering::Relaxed),
            failures_total: self.failures_total.load(Ordering::Relaxed),
            policy_decisions_total: self.policy_decisions_total.load(Ordering::Relaxed),
            recoveries_total: self.recoveries_total.load(Ordering::Relaxed),
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
        if let Some(_trial) = self.may_call(now) {
            // Boxed: the store clients' futures are kilobytes, and without the box every
            // request's future (local store or none) would carry room for them and copy it.
            match Box::pin(self.take_shared(key, rate)).await {
                Ok(take) => {
                    self.on_success();
                    return Verdict::Decided(RateOutcome::from_take(
                        take,
                        &bucket,
                        rate.refill_per_second(),
                        storage,
                        false,
                    ));
                }
                Err(e) => self.on_failure(now, e),
            }
        }
        self.policy_decisions_total.fetch_add(1, Ordering::Relaxed);
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
        let Some(_trial) = self.may_call(now) else {
            return self.store_up();
        };
        let result = match &self.store {
            StoreKind::Local => Ok(()),
            StoreKind::Redis(s) => bounded(rate.operation_timeout(), s.health()).await,
            StoreKind::Postgres(s) => bounded(rate.operation_timeout(), s.health()).await,
        };
        match result {
            Ok(()) => self.on_success(),
            Err(e) => self.on_failure(now, e),
        }
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
        match &result {
            Ok(()) => self.on_success(),
            Err(e) => self.on_failure(now, e.clone()),
        }
        result
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

    async fn take_shared(&self, key: ClientKey, rate: &RateParams) -> Result<Take, StoreError> {
        let bucket = rate.bucket();
        let t = rate.operation_timeout();
        match &self.store {
            StoreKind::Local => Ok(self.local.take(key, &bucket, Instant::ZERO)),
            StoreKind::Redis(s) => bounded(t, s.take(key, &bucket)).await,
            StoreKind::Postgres(s) => bounded(t, s.take(key, &bucket)).await,
        }
    }

    /// Whether a call may go to the store now: always while up; while down, one trial per
    /// `retry_interval`, one at a time (the guard ends the trial).
    fn may_call(&self, now: Instant) -> Option<TrialGuard<'_>> {
        if self.store_up() {
            return Some(TrialGuard(None));
        }
        if now.as_nanos() < self.next_trial_ns.load(Ordering::Acquire) {
            return None;
        }
        if self.trial.swap(true, Ordering::AcqRel) {
            return None;
        }
        Some(TrialGuard(Some(&self.trial)))
    }

    fn on_success(&self) {
        self.consecutive_failures.store(0, Ordering::Relaxed);
        if !self.up.swap(true, Ordering::AcqRel) {
            self.recoveries_total.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn on_failure(&self, now: Instant, e: StoreError) {
        self.failures_total.fetch_add(1, Ordering::Relaxed);
        self.consecutive_failures.fetch_add(1, Ordering::Relaxed);
        let next = (now + self.retry_interval).as_nanos();
        self.next_trial_ns.store(next, Ordering::Release);
        self.up.store(false, Ordering::Release);
        *self
            .last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(e);
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
mod tests {
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

    /// C-RATE-5: while down, one trial per retry interval, one at a time.
    #[test]
    fn c_rate_5_trials_are_spaced() {
        let rate = params(true);
        let limiter = RateLimiter::new(StoreKind::Local, &rate, 1)
            .expect("limiter")
            .with_retry_interval(Duration::from_millis(200));
        let t0 = Instant::from_secs(10);
        assert!(
            limiter.may_call(t0).is_some(),
            "up: every call goes to the store"
        );
        limiter.on_failure(t0, StoreError::Timeout(Duration::from_millis(50)));
        assert!(!limiter.store_up());
        assert!(limiter.may_call(t0 + Duration::from_millis(199)).is_none());
        let t1 = t0 + Duration::from_millis(200);
        let trial = limiter.may_call(t1);
        assert!(trial.is_some());
        assert!(limiter.may_call(t1).is_none(), "one trial at a time");
        drop(trial);
        assert!(
            limiter.may_call(t1).is_some(),
            "the trial ended without a verdict"
        );
        limiter.on_success();
        let h = limiter.health();
        assert!(h.up && h.recoveries_total == 1 && h.consecutive_failures == 0);
        assert_eq!(
            h.last_error,
            Some(StoreError::Timeout(Duration::from_millis(50)))
        );
    }
}
