//! The PostgreSQL store: numbered migrations embedded in the binary, each applied in a
//! transaction, recorded in `schema_migrations` and serialised by a session advisory lock on a
//! dedicated connection (C-RATE-7); one SQL function steps a bucket under an advisory
//! transaction lock plus a row lock on the database clock (C-RATE-3); a small deadpool pool
//! carries the calls.
//!
//! Why a function and not client-side SQL: the whole step is one round trip and one statement
//! (so one implicit transaction, whose advisory lock is released at its end), and the clock is
//! read on the server after the locks, so every replica's takes of a key are ordered on one
//! clock. Consistency over speed, as C-RATE-3 asks of this store.

use core::fmt;
use core::time::Duration;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;
use tokio_postgres::config::SslMode;
use weir_core::bucket::{BucketParams, Take};
use weir_core::config::DatabaseSettings;
use weir_core::rate::{ClientKey, StorageKind};
use weir_core::time::Instant;

use crate::error::StoreError;
use crate::store::{Store, check_params, ttl_ms};

/// One numbered schema migration (C-RATE-7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// Its number: migrations apply in ascending order, each once.
    pub version: i32,
    /// A short name, recorded next to the version.
    pub name: &'static str,
    /// The SQL, run as one batch inside the migration's transaction.
    pub sql: &'static str,
}

/// Every migration, in order, embedded in the binary.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "rate_buckets",
        sql: include_str!("../migrations/0001_rate_buckets.sql"),
    },
    Migration {
        version: 2,
        name: "rate_take",
        sql: include_str!("../migrations/0002_rate_take.sql"),
    },
    Migration {
        version: 3,
        name: "rate_set",
        sql: include_str!("../migrations/0003_rate_set.sql"),
    },
];

/// The session advisory lock that serialises migrating processes ("weirmigr").
pub const MIGRATION_LOCK_ID: i64 = 0x7765_6972_6d69_6772;

/// What a migration run did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MigrationReport {
    /// Versions this run applied (the others were already there).
    pub applied: Vec<i32>,
    /// Versions recorded in the database that this binary does not know (a newer binary ran).
    pub unknown: Vec<i32>,
}

/// How to reach PostgreSQL.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresOptions {
    /// Server host.
    pub host: String,
    /// Server port.
    pub port: u16,
    /// User name.
    pub user: String,
    /// Password (empty for trust authentication).
    pub password: String,
    /// Database name.
    pub dbname: String,
    /// Connect deadline.
    pub connect_timeout: Duration,
    /// Pool size (at least 1).
    pub max_connections: u32,
    /// `application_name` of every connection (what `pg_stat_activity` shows).
    pub application_name: String,
    /// Prepended to every bucket key (tests use a unique one).
    pub key_prefix: String,
}

impl fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresOptions")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &"[redacted]")
            .field("dbname", &self.dbname)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_connections", &self.max_connections)
            .field("application_name", &self.application_name)
            .field("key_prefix", &self.key_prefix)
            .finish()
    }
}

impl PostgresOptions {
    /// Defaults: no password, 1 s connect deadline, 4 connections, application `weir`, no prefix.
    #[must_use]
    pub fn new(
        host: impl Into<String>,
        port: u16,
        user: impl Into<String>,
        dbname: impl Into<String>,
    ) -> PostgresOptions {
        PostgresOptions {
            host: host.into(),
            port,
            user: user.into(),
            password: String::new(),
            dbname: dbname.into(),
            connect_timeout: Duration::from_secs(1),
            max_connections: 4,
            application_name: "weir".to_owned(),
            key_prefix: String::new(),
        }
    }

    /// From the validated `database` settings. Only `sslmode` disable, allow and prefer are
    /// accepted: this build has no TLS connector, and require / verify-ca / verify-full must
    /// not silently fall back to plain text.
    pub fn from_settings(d: &DatabaseSettings) -> Result<PostgresOptions, StoreError> {
        match d.sslmode.as_str() {
            "disable" | "allow" | "prefer" => {}
            other => {
                return Err(StoreError::Config(format!(
                    "database.sslmode {other} needs TLS, which this build does not include"
                )));
            }
        }
        Ok(PostgresOptions {
            host: d.host.clone(),
            port: d.port,
            user: d.user.clone(),
            password: d.password.expose().to_owned(),
            dbname: d.name.clone(),
            connect_timeout: d.connect_timeout,
            max_connections: d.max_open_connections,
            application_name: "weir".to_owned(),
            key_prefix: String::new(),
        })
    }

    /// The driver configuration.
    #[must_use]
    pub fn pg_config(&self) -> tokio_postgres::Config {
        let mut c = tokio_postgres::Config::new();
        c.host(&self.host)
            .port(self.port)
            .user(&self.user)
            .dbname(&self.dbname)
            .connect_timeout(self.connect_timeout)
            .application_name(&self.application_name)
            // Bucket state is soft: losing the last few milliseconds of takes in a database
            // crash refills a few buckets a little early, which nobody can tell from a restart.
            // Not waiting for the WAL flush on every take is what makes the store usable
            // (about 4x the takes per second on the test machine); replicas still see every
            // committed take at once, so the shared limit stays exact (C-RATE-3).
            .options("-c synchronous_commit=off")
            .ssl_mode(SslMode::Disable);
        if !self.password.is_empty() {
            c.password(&self.password);
        }
        c
    }
}

/// Apply every migration not yet applied, on a dedicated connection, under the session
/// advisory lock [`MIGRATION_LOCK_ID`] (C-RATE-7). Safe to run from any number of processes at
/// once: they queue on the lock and each migration is applied exactly once.
pub async fn migrate(config: &tokio_postgres::Config) -> Result<MigrationReport, StoreError> {
    let (mut client, connection) = config.connect(NoTls).await?;
    let driver = tokio::spawn(async move {
        // The connection ends with an error when the server goes away; the client's calls
        // report it.
        let _ = connection.await;
    });
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK_ID])
        .await?;
    let result = migrate_locked(&mut client).await;
    // Unlock explicitly; if the connection is gone the server has released the lock already.
    let _ = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK_ID])
        .await;
    drop(client);
    let _ = driver.await;
    result
}

async fn migrate_locked(
    client: &mut tokio_postgres::Client,
) -> Result<MigrationReport, StoreError> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                 version    integer     PRIMARY KEY,
                 name       text        NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
             )",
        )
        .await?;
    let mut report = MigrationReport::default();
    for m in MIGRATIONS {
        let tx = client.transaction().await?;
        let done = tx
            .query_opt(
                "SELECT 1 FROM schema_migrations WHERE version = $1",
                &[&m.version],
            )
            .await?
            .is_some();
        if done {
            tx.rollback().await?;
            continue;
        }
        tx.batch_execute(m.sql).await?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
            &[&m.version, &m.name],
        )
        .await?;
        tx.commit().await?;
        report.applied.push(m.version);
    }
    let known = MIGRATIONS.last().map_or(0, |m| m.version);
    for row in client
        .query(
            "SELECT version FROM schema_migrations WHERE version > $1 ORDER BY version",
            &[&known],
        )
        .await?
    {
        report.unknown.push(row.try_get(0)?);
    }
    Ok(report)
}

/// The `MIGRATE_ONLY=true` entry: apply the migrations to the configured database and return
/// (the binary exits afterwards without opening listeners; C-RATE-7).
pub async fn migrate_only(database: &DatabaseSettings) -> Result<MigrationReport, StoreError> {
    migrate(&PostgresOptions::from_settings(database)?.pg_config()).await
}

const TAKE_SQL: &str = "SELECT allowed, value_ns, now_ns FROM weir_rate_take($1, $2, $3, $4)";
const PEEK_SQL: &str = "SELECT (extract(epoch FROM n.t) * 1000000)::bigint * 1000, \
     (SELECT b.tat_ns FROM weir_rate_buckets b WHERE b.key = $1 AND b.expires_at > n.t) \
     FROM (SELECT clock_timestamp() AS t) n";
const SET_SQL: &str = "SELECT now_ns FROM weir_rate_set($1, $2, $3, $4, $5)";
const RESET_SQL: &str = "DELETE FROM weir_rate_buckets WHERE key = $1";
const SWEEP_SQL: &str = "DELETE FROM weir_rate_buckets WHERE key IN (\
     SELECT key FROM weir_rate_buckets \
     WHERE expires_at < clock_timestamp() - $2::bigint * interval '1 millisecond' \
     LIMIT $1 FOR UPDATE SKIP LOCKED)";

/// The PostgreSQL bucket store (C-RATE-3, C-RATE-7). Every method takes `&self`.
pub struct PostgresStore {
    pool: Pool,
    pg_config: tokio_postgres::Config,
    /// Set once the migrations have run (by [`PostgresStore::migrate`] or in the background).
    schema_ready: Arc<AtomicBool>,
    /// A background migration is running.
    migrating: Arc<AtomicBool>,
    prefix: String,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("pool", &self.pool.status())
            .field("schema_ready", &self.schema_ready.load(Ordering::Relaxed))
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// A store whose pool connects on demand (nothing connects here). Must be called in a
    /// tokio runtime. Call [`PostgresStore::migrate`] at start; if the database is down then,
    /// the first call after it returns starts the migration in the background.
    pub fn new(opts: PostgresOptions) -> Result<PostgresStore, StoreError> {
        let pg_config = opts.pg_config();
        let manager = Manager::from_config(
            pg_config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(opts.max_connections.max(1) as usize)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(opts.connect_timeout))
            .recycle_timeout(Some(opts.connect_timeout))
            .build()
            .map_err(|e| StoreError::Config(e.to_string()))?;
        Ok(PostgresStore {
            pool,
            pg_config,
            schema_ready: Arc::new(AtomicBool::new(false)),
            migrating: Arc::new(AtomicBool::new(false)),
            prefix: opts.key_prefix,
        })
    }

    /// Apply the migrations now (C-RATE-7) and mark the schema ready.
    pub async fn migrate(&self) -> Result<MigrationReport, StoreError> {
        let report = migrate(&self.pg_config).await?;
        self.schema_ready.store(true, Ordering::Release);
        Ok(report)
    }

    /// Whether the migrations have run.
    #[must_use]
    pub fn schema_ready(&self) -> bool {
        self.schema_ready.load(Ordering::Acquire)
    }

    /// The `key` column of `key`'s bucket: `<prefix><network>/<bits>`.
    #[must_use]
    pub fn row_key(&self, key: ClientKey) -> String {
        format!("{}{key}", self.prefix)
    }

    /// Note a database error: `undefined_function` or `undefined_table` means the server was
    /// replaced by one without the schema (a restored or rebuilt server on the same address),
    /// so the schema is migrated again by the next call (C-RATE-7).
    fn seen(&self, e: tokio_postgres::Error) -> StoreError {
        let code = e.as_db_error().map(|d| d.code().code().to_owned());
        if matches!(code.as_deref(), Some("42883" | "42P01")) {
            self.schema_ready.store(false, Ordering::Release);
        }
        StoreError::from(e)
    }

    /// Fails with [`StoreError::SchemaNotReady`] until the migrations have run, starting one
    /// background migration at a time.
    fn ensure_schema(&self) -> Result<(), StoreError> {
        if self.schema_ready() {
            return Ok(());
        }
        if !self.migrating.swap(true, Ordering::AcqRel) {
            let config = self.pg_config.clone();
            let ready = Arc::clone(&self.schema_ready);
            let migrating = Arc::clone(&self.migrating);
            tokio::spawn(async move {
                if migrate(&config).await.is_ok() {
                    ready.store(true, Ordering::Release);
                }
                migrating.store(false, Ordering::Release);
            });
        }
        Err(StoreError::SchemaNotReady)
    }

    /// [`Store::take`], also returning the database's now (nanoseconds since the Unix epoch,
    /// as a core [`Instant`]) the function used.
    pub async fn take_traced(
        &self,
        key: ClientKey,
        params: &BucketParams,
    ) -> Result<(Take, Instant), StoreError> {
        check_params(params)?;
        self.ensure_schema()?;
        let client = self.pool.get().await?;
        let stmt = client
            .prepare_cached(TAKE_SQL)
            .await
            .map_err(|e| self.seen(e))?;
        let interval = params.interval().as_nanos() as i64;
        let window = params.full_refill().as_nanos() as i64;
        let ttl = i64::try_from(ttl_ms(params)).unwrap_or(i64::MAX);
        let row = client
            .query_one(&stmt, &[&self.row_key(key), &interval, &window, &ttl])
            .await?;
        let allowed: bool = row.try_get(0)?;
        let value: i64 = row.try_get(1)?;
        let now: i64 = row.try_get(2)?;
        let value = u64::try_from(value).map_err(|_| StoreError::Protocol(format!("{row:?}")))?;
        let now = u64::try_from(now).map_err(|_| StoreError::Protocol(format!("{row:?}")))?;
        let take = if allowed {
            Take::Allowed { remaining: value }
        } else {
            Take::Denied {
                retry_after: Duration::from_nanos(value),
            }
        };
        Ok((take, Instant::from_nanos(now)))
    }

    /// Delete up to `limit` rows that expired more than `retention` ago (full buckets; their
    /// TTL passed). [`RateLimiter::sweep_expired`](crate::RateLimiter::sweep_expired) runs it
    /// every `rate_limit.cleanup_interval`; correctness never depends on it, since an expired
    /// row reads as full.
    pub async fn sweep_expired(&self, limit: i64, retention: Duration) -> Result<u64, StoreError> {
        self.ensure_schema()?;
        let client = self.pool.get().await?;
        let stmt = client.prepare_cached(SWEEP_SQL).await?;
        let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
        Ok(client.execute(&stmt, &[&limit, &retention_ms]).await?)
    }
}

impl Store for PostgresStore {
    fn storage(&self) -> StorageKind {
        StorageKind::Postgres
    }

    async fn take(&self, key: ClientKey, params: &BucketParams) -> Result<Take, StoreError> {
        self.take_traced(key, params).await.map(|(t, _)| t)
    }

    async fn peek(&self, key: ClientKey, params: &BucketParams) -> Result<u64, StoreError> {
        self.ensure_schema()?;
        let client = self.pool.get().await?;
        let stmt = client
            .prepare_cached(PEEK_SQL)
            .await
            .map_err(|e| self.seen(e))?;
        let row = client.query_one(&stmt, &[&self.row_key(key)]).await?;
        let now: i64 = row.try_get(0)?;
        let tat: Option<i64> = row.try_get(1)?;
        let now = u64::try_from(now).map_err(|_| StoreError::Protocol(format!("{row:?}")))?;
        let tat = u64::try_from(tat.unwrap_or(0)).unwrap_or(0);
        Ok(params.tokens_milli(tat, Instant::from_nanos(now)))
    }

    async fn reset(&self, key: ClientKey) -> Result<(), StoreError> {
        self.ensure_schema()?;
        let client = self.pool.get().await?;
        let stmt = client
            .prepare_cached(RESET_SQL)
            .await
            .map_err(|e| self.seen(e))?;
        client.execute(&stmt, &[&self.row_key(key)]).await?;
        Ok(())
    }

    async fn set_tokens(
        &self,
        key: ClientKey,
        params: &BucketParams,
        tokens: u64,
    ) -> Result<(), StoreError> {
        check_params(params)?;
        self.ensure_schema()?;
        let client = self.pool.get().await?;
        let stmt = client
            .prepare_cached(SET_SQL)
            .await
            .map_err(|e| self.seen(e))?;
        let interval = params.interval().as_nanos() as i64;
        let window = params.full_refill().as_nanos() as i64;
        let ttl = i64::try_from(ttl_ms(params)).unwrap_or(i64::MAX);
        // tokens <= capacity and capacity * interval = window < 2^51: fits in i64.
        let tokens = i64::try_from(tokens.min(params.capacity())).unwrap_or(i64::MAX);
        client
            .query_one(
                &stmt,
                &[&self.row_key(key), &interval, &window, &ttl, &tokens],
            )
            .await?;
        Ok(())
    }

    async fn health(&self) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        client.simple_query("SELECT 1").await?;
        self.ensure_schema()
    }
}
