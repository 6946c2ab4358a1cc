//! The one interface every shared store offers, its object-safe twin, and the bucket bounds
//! both stores apply (C-RATE-3). The stores depend on this module, never the other way: the
//! store `rate_limit.storage` selects is [`crate::kind`].

use core::future::Future;
use core::pin::Pin;
use core::time::Duration;

use weir_core::bucket::{BucketParams, Take};
use weir_core::rate::{ClientKey, StorageKind};

use crate::error::StoreError;

/// A boxed, `Send` future borrowing the store (the object-safe form of the [`Store`] methods).
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// A bucket store shared by replicas: one GCRA bucket per [`ClientKey`], kept on a server
/// and stepped there on the server's clock (C-RATE-3).
///
/// Kinds: `take` is the per-request command; `peek` is a getter (the status endpoint's read);
/// `reset` is an operator command; `health` is a probe. None of them bounds its own time: the
/// [`RateLimiter`](crate::RateLimiter) wraps every call in `rate_limit.operation_timeout`
/// (C-RATE-5). The futures are `Send` and need a tokio runtime context (the Redis connection
/// manager and the PostgreSQL pool are tokio's; a smol adapter runs them through a tokio
/// context such as async-compat).
pub trait Store: Send + Sync {
    /// Which store this is (`X-RateLimit-Storage`).
    fn storage(&self) -> StorageKind;

    /// Take one token from `key`'s bucket of shape `params`: the same [`Take`] that
    /// `weir_core::bucket::BucketParams::take` gives for the stored state and the server's now.
    fn take(
        &self,
        key: ClientKey,
        params: &BucketParams,
    ) -> impl Future<Output = Result<Take, StoreError>> + Send;

    /// Tokens in `key`'s bucket in thousandths (floor), without taking one; unknown keys are full.
    fn peek(
        &self,
        key: ClientKey,
        params: &BucketParams,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Refill `key`'s bucket: it becomes full (the stored state is removed).
    fn reset(&self, key: ClientKey) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Make `key`'s bucket of shape `params` hold exactly `tokens` whole tokens now (clamped to
    /// the capacity; a full bucket's state is removed): the management `limit` command
    /// (C-MGMT-4), on the server's clock like a take.
    fn set_tokens(
        &self,
        key: ClientKey,
        params: &BucketParams,
        tokens: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Whether the store answers (and, for PostgreSQL, its schema is migrated).
    fn health(&self) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// The object-safe form of [`Store`], implemented for every store: for `dyn DynStore` users.
pub trait DynStore: Send + Sync {
    /// See [`Store::storage`].
    fn storage_dyn(&self) -> StorageKind;
    /// See [`Store::take`].
    fn take_dyn<'a>(&'a self, key: ClientKey, params: &'a BucketParams) -> StoreFuture<'a, Take>;
    /// See [`Store::peek`].
    fn peek_dyn<'a>(&'a self, key: ClientKey, params: &'a BucketParams) -> StoreFuture<'a, u64>;
    /// See [`Store::reset`].
    fn reset_dyn(&self, key: ClientKey) -> StoreFuture<'_, ()>;
    /// See [`Store::set_tokens`].
    fn set_tokens_dyn<'a>(
        &'a self,
        key: ClientKey,
        params: &'a BucketParams,
        tokens: u64,
    ) -> StoreFuture<'a, ()>;
    /// See [`Store::health`].
    fn health_dyn(&self) -> StoreFuture<'_, ()>;
}

impl<S: Store> DynStore for S {
    fn storage_dyn(&self) -> StorageKind {
        self.storage()
    }
    fn take_dyn<'a>(&'a self, key: ClientKey, params: &'a BucketParams) -> StoreFuture<'a, Take> {
        Box::pin(self.take(key, params))
    }
    fn peek_dyn<'a>(&'a self, key: ClientKey, params: &'a BucketParams) -> StoreFuture<'a, u64> {
        Box::pin(self.peek(key, params))
    }
    fn reset_dyn(&self, key: ClientKey) -> StoreFuture<'_, ()> {
        Box::pin(self.reset(key))
    }
    fn set_tokens_dyn<'a>(
        &'a self,
        key: ClientKey,
        params: &'a BucketParams,
        tokens: u64,
    ) -> StoreFuture<'a, ()> {
        Box::pin(self.set_tokens(key, params, tokens))
    }
    fn health_dyn(&self) -> StoreFuture<'_, ()> {
        Box::pin(self.health())
    }
}

/// Margin added to a bucket's full-refill time for the key TTL (C-RATE-3): a key outlives the
/// moment its bucket is full again by this much, so clock skew between the server's expiry and
/// its `TIME` can never drop a bucket that still holds debt.
pub const TTL_MARGIN: Duration = Duration::from_secs(1);

/// The longest full-refill time (capacity × refill interval) a shared store accepts: 2^51 ns,
/// about 26 days. Redis scripts compute in doubles, exact to 2^53; the bound leaves room for
/// the sums the script forms. PostgreSQL applies the same bound so both stores accept the
/// same configurations.
pub const MAX_FULL_REFILL: Duration = Duration::from_nanos(1 << 51);

/// Reject bucket shapes the shared stores cannot step exactly.
pub(crate) fn check_params(params: &BucketParams) -> Result<(), StoreError> {
    if params.full_refill() > MAX_FULL_REFILL {
        return Err(StoreError::Unsupported(format!(
            "a full refill of {:?} is longer than the {:?} a shared store supports",
            params.full_refill(),
            MAX_FULL_REFILL
        )));
    }
    Ok(())
}

/// Key TTL in milliseconds: full refill rounded up plus [`TTL_MARGIN`] (C-RATE-3).
pub(crate) fn ttl_ms(params: &BucketParams) -> u64 {
    let refill = params.full_refill();
    let ms = refill.as_millis() + u128::from(!refill.as_nanos().is_multiple_of(1_000_000));
    u64::try_from(ms)
        .unwrap_or(u64::MAX)
        .saturating_add(TTL_MARGIN.as_millis() as u64)
}

#[cfg(test)]
mod tests;
