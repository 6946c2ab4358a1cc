//! The PostgreSQL store in a build without the `postgres` feature (weir-smol): the same names,
//! and every way in says why it is missing. tokio-postgres and deadpool-postgres need a tokio
//! runtime (docs/storage.md, "PostgreSQL on smol"), so a smol build leaves them out; a
//! configuration whose `rate_limit.storage` is `postgres` is refused at start with this text.

use weir_core::bucket::{BucketParams, Take};
use weir_core::config::DatabaseSettings;
use weir_core::rate::{ClientKey, StorageKind};

use crate::error::StoreError;
use crate::store::Store;

/// Why the PostgreSQL store is missing from this build.
pub const NOT_BUILT: &str = "the PostgreSQL store is not in this build: it needs a tokio runtime \
     (tokio-postgres, deadpool-postgres); use the tokio binary `weir`";

fn not_built() -> StoreError {
    StoreError::Config(NOT_BUILT.into())
}

/// What a migration run did (never, in this build).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MigrationReport {
    /// Versions this run applied.
    pub applied: Vec<i32>,
    /// Versions recorded in the database that this binary does not know.
    pub unknown: Vec<i32>,
}

/// How to reach PostgreSQL (never built in this build).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresOptions {
    _never: (),
}

impl PostgresOptions {
    /// Always [`StoreError::Config`] naming why (see [`NOT_BUILT`]).
    ///
    /// # Errors
    /// Always.
    pub fn from_settings(_d: &DatabaseSettings) -> Result<PostgresOptions, StoreError> {
        Err(not_built())
    }
}

/// The PostgreSQL store: no value of it exists in this build.
#[derive(Debug)]
pub enum PostgresStore {}

impl PostgresStore {
    /// Always [`StoreError::Config`] (see [`NOT_BUILT`]).
    ///
    /// # Errors
    /// Always.
    pub fn new(_opts: PostgresOptions) -> Result<PostgresStore, StoreError> {
        Err(not_built())
    }

    /// Unreachable: no store exists.
    ///
    /// # Errors
    /// Never returns.
    pub async fn migrate(&self) -> Result<MigrationReport, StoreError> {
        match *self {}
    }

    /// Unreachable: no store exists.
    ///
    /// # Errors
    /// Never returns.
    pub async fn sweep_expired(
        &self,
        _limit: i64,
        _retention: std::time::Duration,
    ) -> Result<u64, StoreError> {
        match *self {}
    }
}

impl Store for PostgresStore {
    fn storage(&self) -> StorageKind {
        StorageKind::Postgres
    }
    async fn take(&self, _key: ClientKey, _params: &BucketParams) -> Result<Take, StoreError> {
        match *self {}
    }
    async fn peek(&self, _key: ClientKey, _params: &BucketParams) -> Result<u64, StoreError> {
        match *self {}
    }
    async fn reset(&self, _key: ClientKey) -> Result<(), StoreError> {
        match *self {}
    }
    async fn set_tokens(
        &self,
        _key: ClientKey,
        _params: &BucketParams,
        _tokens: u64,
    ) -> Result<(), StoreError> {
        match *self {}
    }
    async fn health(&self) -> Result<(), StoreError> {
        match *self {}
    }
}

/// `MIGRATE_ONLY=true`: always [`StoreError::Config`] in this build.
///
/// # Errors
/// Always.
pub async fn migrate_only(_database: &DatabaseSettings) -> Result<MigrationReport, StoreError> {
    Err(not_built())
}
