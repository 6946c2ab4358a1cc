//! Rate limiting: a token bucket per client network, kept in a bounded local store or a shared
//! one, with a declared policy for when the shared store fails (C-RATE-1..7).
//!
//! The pieces, each pure:
//! - [`key`]: the client address aggregated to its network (`/32`, `/64` by default), so an IPv6
//!   client rotating interface ids does not mint fresh buckets (C-RATE-2);
//! - [`crate::bucket`]: the bucket arithmetic, GCRA (generic cell rate algorithm, ITU-T I.371, as
//!   in Redis-Cell and Stripe's limiter): one `u64` per bucket, fractional tokens and continuous
//!   refill in integer nanoseconds, identical in every store (C-RATE-1, C-RATE-3);
//! - [`local_store`]: the per-process store, bounded and sharded (C-RATE-4);
//! - [`policy`]: what a store failure means (C-RATE-5) and the typed [`RateOutcome`] that the
//!   adapter turns into `429` and the `X-RateLimit-*` headers (C-RATE-1).
//!
//! The shared stores (Redis, PostgreSQL; C-RATE-3, C-RATE-6, C-RATE-7) live in `weir-storage`
//! and run the same GCRA step server-side; core gives them [`BucketParams`] (interval, full-refill
//! TTL) and decides what their failure means.
//!
//! # Why GCRA buckets
//! A token bucket allows bursts up to `capacity` and a sustained `refill_per_second`, which is
//! what the contract asks for; a sliding-window counter cannot express the burst, a fixed window
//! doubles it at window edges. GCRA keeps the bucket as one "theoretical arrival time", so a
//! bucket is 8 bytes, a shared store updates one number per key atomically, and a full bucket
//! carries no information, which is what makes dropping buckets safe.
//!
//! # Why a FIFO slot array and not an LRU
//! nginx `limit_req` keeps its states in a shared-memory rbtree plus an LRU queue: every hit
//! moves the node to the queue head; each new key first frees up to two tail nodes that have
//! been idle for a minute, and when the zone is out of memory frees the tail node by force,
//! refusing the request if allocation still fails (`ngx_http_limit_req_expire`). Envoy's local
//! rate limit filter keeps buckets only for the descriptors in its configuration, a fixed set,
//! and leaves per-client limits to the global rate limit service. Here the key space is open
//! (any client address), so the store must be bounded; an LRU costs a list update under the lock
//! on every hit and a TTL sweep costs a scan. A FIFO slot array costs neither: a hit touches only
//! its slot, an insert overwrites the slot under a cursor, and the table is allocated once. The
//! price is that a busy client can be evicted while an idle one stays; eviction refills the
//! evicted bucket, so it errs towards leniency, and only after `max_buckets / shards` newer
//! clients arrived in that shard (C-RATE-4).

use core::fmt;
use core::time::Duration;

use crate::bucket::{BucketError, BucketParams};

pub mod circuit;
pub mod key;
pub mod local_store;
pub mod policy;

pub use circuit::{Call, CircuitCounters, StoreCircuit};
pub use key::{ClientKey, KeyError, KeyParams};
pub use local_store::{LocalStore, LocalStoreError, LocalStoreParams};
pub use policy::{
    DecisionResult, Draft, FailureDecision, FailureMode, HeaderText, PolicyError, RateDecision,
    RateOutcome, StorageKind, on_store_failure,
};

/// Errors in `rate_limit` settings.
#[derive(Debug, Clone, PartialEq)]
pub enum RateError {
    /// capacity or refill_per_second is invalid
    Bucket(BucketError),
    /// a prefix length is out of range
    Key(KeyError),
    /// local_shards or local_max_buckets is out of range
    LocalStore(LocalStoreError),
    /// operation_timeout must be above zero
    ZeroOperationTimeout,
}

impl fmt::Display for RateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RateError::Bucket(e) => write!(f, "rate_limit: {e}"),
            RateError::Key(e) => write!(f, "rate_limit: {e}"),
            RateError::LocalStore(e) => write!(f, "rate_limit: {e}"),
            RateError::ZeroOperationTimeout => {
                write!(f, "rate_limit: operation_timeout must be above 0")
            }
        }
    }
}

impl std::error::Error for RateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RateError::Bucket(e) => Some(e),
            RateError::Key(e) => Some(e),
            RateError::LocalStore(e) => Some(e),
            RateError::ZeroOperationTimeout => None,
        }
    }
}

impl From<BucketError> for RateError {
    fn from(e: BucketError) -> RateError {
        RateError::Bucket(e)
    }
}

impl From<KeyError> for RateError {
    fn from(e: KeyError) -> RateError {
        RateError::Key(e)
    }
}

impl From<LocalStoreError> for RateError {
    fn from(e: LocalStoreError) -> RateError {
        RateError::LocalStore(e)
    }
}

/// The `rate_limit` settings as written (defaults from the contract), before validation.
#[derive(Debug, Clone, PartialEq)]
pub struct RateConfig {
    /// Rate limiting on (default false).
    pub enabled: bool,
    /// Which store decides (default local).
    pub storage: StorageKind,
    /// What a shared-store failure means (default local-fallback).
    pub failure_mode: FailureMode,
    /// Bucket capacity, ≥ 1 (default 100).
    pub capacity: u64,
    /// Tokens per second, finite and > 0 (default 100).
    pub refill_per_second: f64,
    /// Bound on each shared-store call, > 0 (default 50ms).
    pub operation_timeout: Duration,
    /// Local store shards, 1..=4096 (default 64).
    pub local_shards: usize,
    /// Local store bucket bound, ≥ 1 (default 100000).
    pub local_max_buckets: usize,
    /// IPv4 key prefix, 1..=32 (default 32).
    pub ipv4_prefix_bits: u8,
    /// IPv6 key prefix, 1..=128 (default 64).
    pub ipv6_prefix_bits: u8,
    /// Decide and store as when enforced, but let a request over the limit through (default
    /// false, C-RATE-8).
    pub dry_run: bool,
}

impl Default for RateConfig {
    fn default() -> RateConfig {
        RateConfig {
            enabled: false,
            storage: StorageKind::Local,
            failure_mode: FailureMode::LocalFallback,
            capacity: 100,
            refill_per_second: 100.0,
            operation_timeout: Duration::from_millis(50),
            local_shards: LocalStoreParams::DEFAULT_SHARDS,
            local_max_buckets: LocalStoreParams::DEFAULT_MAX_BUCKETS,
            ipv4_prefix_bits: KeyParams::DEFAULT_IPV4_PREFIX_BITS,
            ipv6_prefix_bits: KeyParams::DEFAULT_IPV6_PREFIX_BITS,
            dry_run: false,
        }
    }
}

/// Validated `rate_limit` settings, split into the parameters of each piece.
#[derive(Debug, Clone, PartialEq)]
pub struct RateParams {
    enabled: bool,
    storage: StorageKind,
    failure_mode: FailureMode,
    bucket: BucketParams,
    refill_per_second: f64,
    operation_timeout: Duration,
    local_store: LocalStoreParams,
    key: KeyParams,
    dry_run: bool,
}

impl RateParams {
    /// Validate `config`; the first invalid field is reported.
    pub fn new(config: &RateConfig) -> Result<RateParams, RateError> {
        let bucket = BucketParams::new(config.capacity, config.refill_per_second)?;
        let key = KeyParams::new(config.ipv4_prefix_bits, config.ipv6_prefix_bits)?;
        let local_store = LocalStoreParams {
            shards: config.local_shards,
            max_buckets: config.local_max_buckets,
        };
        local_store.validate()?;
        if config.operation_timeout.is_zero() {
            return Err(RateError::ZeroOperationTimeout);
        }
        Ok(RateParams {
            enabled: config.enabled,
            storage: config.storage,
            failure_mode: config.failure_mode,
            bucket,
            refill_per_second: config.refill_per_second,
            operation_timeout: config.operation_timeout,
            local_store,
            key,
            dry_run: config.dry_run,
        })
    }

    /// Dry run (C-RATE-8): decisions are made and stored as when enforced, but a request over
    /// the limit goes on to its backend (counted as `dry_run_limited`, marked in the access log).
    #[must_use]
    pub const fn dry_run(&self) -> bool {
        self.dry_run
    }

    /// Whether requests are rate limited at all.
    #[must_use]
    pub const fn enabled(&self) -> bool {
        self.enabled
    }

    /// The configured store; [`StorageKind::Disabled`] when limiting is off.
    #[must_use]
    pub const fn storage(&self) -> StorageKind {
        if self.enabled {
            self.storage
        } else {
            StorageKind::Disabled
        }
    }

    /// What a shared-store failure means.
    #[must_use]
    pub const fn failure_mode(&self) -> FailureMode {
        self.failure_mode
    }

    /// The bucket shape.
    #[must_use]
    pub const fn bucket(&self) -> BucketParams {
        self.bucket
    }

    /// Capacity in tokens.
    #[must_use]
    pub const fn capacity(&self) -> u64 {
        self.bucket.capacity()
    }

    /// The configured refill rate (for headers and status; the bucket keeps the rounded interval).
    #[must_use]
    pub const fn refill_per_second(&self) -> f64 {
        self.refill_per_second
    }

    /// Bound on each shared-store call (C-RATE-5).
    #[must_use]
    pub const fn operation_timeout(&self) -> Duration {
        self.operation_timeout
    }

    /// The local store's size.
    #[must_use]
    pub const fn local_store(&self) -> LocalStoreParams {
        self.local_store
    }

    /// How addresses aggregate into keys.
    #[must_use]
    pub const fn key(&self) -> KeyParams {
        self.key
    }
}

impl TryFrom<&RateConfig> for RateParams {
    type Error = RateError;
    fn try_from(c: &RateConfig) -> Result<RateParams, RateError> {
        RateParams::new(c)
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
