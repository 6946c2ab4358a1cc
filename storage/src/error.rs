//! What can go wrong in a shared store. Every variant is a *store failure* for the policy of
//! C-RATE-5: the limiter never turns one into an allow or a deny by itself.

use core::fmt;
use core::time::Duration;

/// A shared-store call that did not produce a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// the call did not finish within `rate_limit.operation_timeout` (C-RATE-5)
    Timeout(Duration),
    /// only the node holding this key failed (one Redis Cluster master of several): the policy
    /// decides the call, the store stays up (C-RATE-5)
    Partial(String),
    /// no connection could be had, or the connection broke during the call
    Connection(String),
    /// redis refused the write: `maxmemory` reached under `noeviction` (C-RATE-6)
    OutOfMemory(String),
    /// the server answered the call with an error
    Server(String),
    /// the server answered with something the store does not understand
    Protocol(String),
    /// the postgres schema is not migrated yet; a migration has been started (C-RATE-7)
    SchemaNotReady,
    /// the bucket cannot be represented exactly by this store (full refill too long)
    Unsupported(String),
    /// the store settings are invalid
    Config(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Timeout(d) => write!(f, "store call timed out after {d:?}"),
            StoreError::Partial(s) => write!(f, "store node for this key failed: {s}"),
            StoreError::Connection(s) => write!(f, "store connection failed: {s}"),
            StoreError::OutOfMemory(s) => write!(f, "store out of memory: {s}"),
            StoreError::Server(s) => write!(f, "store error: {s}"),
            StoreError::Protocol(s) => write!(f, "unexpected store answer: {s}"),
            StoreError::SchemaNotReady => write!(f, "store schema is not migrated yet"),
            StoreError::Unsupported(s) => write!(f, "unsupported by the store: {s}"),
            StoreError::Config(s) => write!(f, "store settings: {s}"),
        }
    }
}

impl std::error::Error for StoreError {}

impl StoreError {
    /// A short stable label for logs and metrics (`timeout`, `connection`, `oom`, ...).
    #[must_use]
    pub const fn label(&self) -> &'static str {
        match self {
            StoreError::Timeout(_) => "timeout",
            StoreError::Partial(_) => "partial",
            StoreError::Connection(_) => "connection",
            StoreError::OutOfMemory(_) => "oom",
            StoreError::Server(_) => "server",
            StoreError::Protocol(_) => "protocol",
            StoreError::SchemaNotReady => "schema",
            StoreError::Unsupported(_) => "unsupported",
            StoreError::Config(_) => "config",
        }
    }
}

impl StoreError {
    /// Whether only the part of the store holding the key failed ([`StoreError::Partial`]):
    /// the request is decided by the policy, but the store is not down (C-RATE-5).
    #[must_use]
    pub const fn is_partial(&self) -> bool {
        matches!(self, StoreError::Partial(_))
    }
}

impl From<redis::RedisError> for StoreError {
    fn from(e: redis::RedisError) -> StoreError {
        // C-RATE-6: `OOM command not allowed when used memory > 'maxmemory'`, either directly or
        // raised from inside the script (then the code is ERR and the text names OOM).
        let text = e.to_string();
        if e.code() == Some("OOM") || text.contains("OOM command not allowed") {
            StoreError::OutOfMemory(text)
        } else if e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_timeout()
            || e.is_unrecoverable_error()
        {
            StoreError::Connection(text)
        } else {
            StoreError::Server(text)
        }
    }
}

#[cfg(feature = "postgres")]
impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> StoreError {
        if e.is_closed() || e.as_db_error().is_none() {
            StoreError::Connection(e.to_string())
        } else {
            // A database error: show its own message and SQLSTATE, not the generic wrapper text.
            let db = e.as_db_error().map_or_else(String::new, |d| {
                format!("{} ({})", d.message(), d.code().code())
            });
            StoreError::Server(db)
        }
    }
}

#[cfg(feature = "postgres")]
impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(e: deadpool_postgres::PoolError) -> StoreError {
        match e {
            deadpool_postgres::PoolError::Backend(e) => StoreError::from(e),
            other => StoreError::Connection(other.to_string()),
        }
    }
}
