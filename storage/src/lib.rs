//! Shared rate-limit stores for weir: Redis and PostgreSQL keep one GCRA bucket per client key
//! so that every replica enforces one limit (C-RATE-3), and the failure policies of C-RATE-5
//! decide what a slow or failing store means.
//!
//! - [`Store`] (and its object-safe twin [`DynStore`]): take, peek, reset, health; async,
//!   `Send`, runtime-neutral in shape (the clients underneath are tokio's);
//! - [`RedisStore`]: one Lua script (EVALSHA, reloaded on NOSCRIPT) on the server's `TIME`,
//!   key TTL = full refill + margin, lazily connecting self-reconnecting connections, `OOM`
//!   refusals as store errors (C-RATE-3, C-RATE-5, C-RATE-6);
//! - [`PostgresStore`]: numbered embedded migrations under a session advisory lock, a SQL
//!   function under an advisory transaction lock plus a row lock on `clock_timestamp()`
//!   (C-RATE-3, C-RATE-7), a small deadpool pool;
//! - [`RateLimiter`]: the store selected by `rate_limit.storage` ([`StoreKind`]), every call
//!   bounded by `operation_timeout`, fail-open / fail-closed / local-fallback, health getters
//!   and automatic return to the shared store (C-RATE-5).
//!
//! The bucket arithmetic is weir-core's ([`weir_core::bucket`]) reproduced server-side: for the
//! same stored state and the same now, a shared store answers exactly the [`Take`] the local
//! store would. See docs/storage.md.
//!
//! [`Take`]: weir_core::bucket::Take

#[cfg(not(any(feature = "tokio", feature = "smol")))]
compile_error!(
    "weir-storage needs a runtime for its Redis client: the `tokio` or the `smol` feature"
);

pub mod error;
pub mod kind;
pub mod limiter;
#[cfg(not(feature = "postgres"))]
#[path = "postgres_off.rs"]
pub mod postgres_store;
#[cfg(feature = "postgres")]
pub mod postgres_store;
pub mod redis_store;
pub mod rt;
pub mod store;

pub use error::StoreError;
pub use kind::StoreKind;
pub use limiter::{RateLimiter, StoreHealth, Verdict};
#[cfg(feature = "postgres")]
pub use postgres_store::{MIGRATIONS, Migration, migrate};
pub use postgres_store::{MigrationReport, PostgresOptions, PostgresStore, migrate_only};
pub use redis_store::{RedisOptions, RedisStore};
pub use rt::{BoxFuture, StoreRuntime, install_runtime, prefer_smol, runtime_installed};
pub use store::{DynStore, MAX_FULL_REFILL, Store, StoreFuture, TTL_MARGIN};

/// Whether this build has the PostgreSQL store (the `postgres` feature; it needs a tokio
/// runtime: docs/storage.md).
#[must_use]
pub const fn postgres_supported() -> bool {
    cfg!(feature = "postgres")
}
