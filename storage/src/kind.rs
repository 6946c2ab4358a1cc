//! The store `rate_limit.storage` selects (C-RATE-3), built from the validated settings. The one
//! module that knows every store; the stores know only [`crate::store`].

use weir_core::config::{DatabaseSettings, RedisSettings};
use weir_core::rate::{RateParams, StorageKind};

use crate::error::StoreError;
use crate::postgres_store::{PostgresOptions, PostgresStore};
use crate::redis_store::{RedisOptions, RedisStore};
use crate::store::{DynStore, check_params};

/// The store `rate_limit.storage` selects (C-RATE-3): what the adapter builds at start (and
/// again when a reload changes `rate_limit.storage`, `redis` or `database`) and hands to
/// [`RateLimiter::new`](crate::RateLimiter::new).
#[derive(Debug)]
pub enum StoreKind {
    /// The per-process store only (`storage: local`), or rate limiting off.
    Local,
    /// The shared Redis store.
    Redis(RedisStore),
    /// The shared PostgreSQL store (boxed: it is the large variant).
    Postgres(Box<PostgresStore>),
}

impl StoreKind {
    /// Build the store of `rate.storage()` from the validated settings (`ValidConfig::redis`,
    /// `ValidConfig::database`, `ValidConfig::rate`). Nothing connects here: Redis connects on
    /// first use and reconnects by itself, PostgreSQL's pool connects on demand and migrates in
    /// the background on first use (C-RATE-5: the process starts with the store down). Must be
    /// called inside a tokio runtime.
    pub fn from_config(
        redis: &RedisSettings,
        database: Option<&DatabaseSettings>,
        rate: &RateParams,
    ) -> Result<StoreKind, StoreError> {
        match rate.storage() {
            StorageKind::Local | StorageKind::Disabled => Ok(StoreKind::Local),
            StorageKind::Redis => {
                check_params(&rate.bucket())?;
                Ok(StoreKind::Redis(RedisStore::new(
                    RedisOptions::from_settings(redis),
                )?))
            }
            StorageKind::Postgres => {
                check_params(&rate.bucket())?;
                let db = database.ok_or_else(|| {
                    StoreError::Config(
                        "rate_limit.storage is postgres but database is absent".into(),
                    )
                })?;
                Ok(StoreKind::Postgres(Box::new(PostgresStore::new(
                    PostgresOptions::from_settings(db)?,
                )?)))
            }
        }
    }

    /// Which store this is.
    #[must_use]
    pub fn storage(&self) -> StorageKind {
        match self {
            StoreKind::Local => StorageKind::Local,
            StoreKind::Redis(_) => StorageKind::Redis,
            StoreKind::Postgres(_) => StorageKind::Postgres,
        }
    }

    /// The shared store, if this is one.
    #[must_use]
    pub fn shared(&self) -> Option<&dyn DynStore> {
        match self {
            StoreKind::Local => None,
            StoreKind::Redis(s) => Some(s),
            StoreKind::Postgres(s) => Some(&**s),
        }
    }
}
