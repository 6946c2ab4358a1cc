//! The PostgreSQL store against the real PostgreSQL on 127.0.0.1:5432 (database `test`, trust
//! auth), with fresh databases for the migration tests and a switchable proxy for outages
//! (C-RATE-1, C-RATE-3, C-RATE-5, C-RATE-7).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use weir_core::bucket::{BucketParams, Take};
use weir_core::config::{DatabaseSettings, Secret};
use weir_core::rate::{FailureMode, StorageKind};
use weir_storage::{
    MIGRATIONS, PostgresOptions, PostgresStore, RateLimiter, Store, StoreError, StoreKind,
};

const PG: u16 = 5432;

async fn ready_store(opts: PostgresOptions) -> PostgresStore {
    let store = PostgresStore::new(opts).expect("store");
    store.migrate().await.expect("migrate");
    store
}

async fn stored_tat(store: &PostgresStore, k: weir_core::rate::ClientKey) -> u64 {
    pg_client("test")
        .await
        .query_opt(
            "SELECT tat_ns FROM weir_rate_buckets WHERE key = $1",
            &[&store.row_key(k)],
        )
        .await
        .expect("select")
        .map_or(0, |r| r.get::<_, i64>(0) as u64)
}

/// C-RATE-3: the SQL function is weir-core's GCRA step on the database clock (the shared
/// case).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_3_function_matches_core_arithmetic() {
    let store = ready_store(pg_opts(PG, "test")).await;
    cases::matches_core_arithmetic(
        async |k, params| store.take_traced(k, params).await.expect("take"),
        async |k| stored_tat(&store, k).await,
    )
    .await;
}

/// C-RATE-3: rows expire after the full refill plus the margin; peek reads without taking;
/// reset refills; the sweep removes expired rows only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_3_expiry_peek_reset_sweep() {
    let store = ready_store(pg_opts(PG, "test")).await;
    let params = BucketParams::new(4, 2.0).expect("valid");
    let k = key(1);
    let client = pg_client("test").await;
    let (clock, second_take) = common::two_takes_then_peek(&store, k, &params).await;
    let row = client
        .query_one(
            "SELECT extract(epoch FROM expires_at - clock_timestamp())::float8 \
             FROM weir_rate_buckets WHERE key = $1",
            &[&store.row_key(k)],
        )
        .await
        .expect("row");
    let ttl: f64 = row.get(0);
    // Set to 3 s by the second take (called at `second_take`), then counting down.
    let since = (clock.elapsed() - second_take).as_secs_f64();
    assert!(
        (3.0 - since - 0.001..=3.0).contains(&ttl),
        "ttl {ttl} s = 2 s refill + 1 s margin, less the {since:.3} s since the last take"
    );
    store.reset(k).await.expect("reset");
    assert_eq!(store.peek(k, &params).await.expect("peek"), 4000);
    assert_eq!(stored_tat(&store, k).await, 0);
    // An expired row is a full bucket, and the sweep takes it away.
    store.take(k, &params).await.expect("take");
    pg_client("test")
        .await
        .execute(
            "UPDATE weir_rate_buckets SET expires_at = clock_timestamp() - interval '1 s' \
             WHERE key = $1",
            &[&store.row_key(k)],
        )
        .await
        .expect("expire");
    assert_eq!(store.peek(k, &params).await.expect("peek"), 4000);
    // Other tests share the table: sweep until nothing expired is left.
    let mut swept = 0;
    loop {
        let n = store
            .sweep_expired(10_000, Duration::ZERO)
            .await
            .expect("sweep");
        if n == 0 {
            break;
        }
        swept += n;
    }
    assert!(swept >= 1);
    assert_eq!(stored_tat(&store, k).await, 0);
    store.health().await.expect("health");
}

/// C-MGMT-4: the shared `set_tokens` case, then PostgreSQL's own: the row's expiry is the
/// refill plus the margin, and a full bucket is no row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_mgmt_4_set_tokens() {
    let store = ready_store(pg_opts(PG, "test")).await;
    let (k, params) = cases::set_tokens(&store).await;
    let row = pg_client("test")
        .await
        .query_one(
            "SELECT extract(epoch FROM expires_at - clock_timestamp())::float8 \
             FROM weir_rate_buckets WHERE key = $1",
            &[&store.row_key(k)],
        )
        .await
        .expect("row");
    let ttl: f64 = row.get(0);
    assert!(
        (1000.0..=1001.0).contains(&ttl),
        "ttl {ttl} s = 1000 s refill + 1 s margin"
    );
    store.set_tokens(k, &params, 10).await.expect("set full");
    assert_eq!(stored_tat(&store, k).await, 0, "a full bucket is no row");
}

/// Acceptance: two stores (two replicas) × 50 concurrent takers on one key, capacity 20:
/// exactly 20 allowed (C-RATE-3; the shared case).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_3_atomic_across_two_replicas() {
    let opts = pg_opts(PG, "test");
    let a = Arc::new(ready_store(opts.clone()).await);
    let b = Arc::new(ready_store(opts).await);
    cases::atomic_across_two_replicas(a, b).await;
}

/// Acceptance: after a burst, the takes allowed follow capacity + refill × elapsed on the
/// database clock, within one token (C-RATE-1, C-RATE-3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_1_refill_follows_database_clock() {
    let store = ready_store(pg_opts(PG, "test")).await;
    refill_follows_clock(&store).await;
}

/// Acceptance (C-RATE-7): six OS processes migrating one empty database at once all succeed,
/// and each migration is applied exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_7_six_processes_migrate_one_database() {
    let db = create_database().await;
    let exe = env!("CARGO_BIN_EXE_weir-storage-migrate");
    let children: Vec<_> = (0..6)
        .map(|_| {
            std::process::Command::new(exe)
                .env("WEIR_PG_DB", &db)
                .env("WEIR_PG_USER", pg_user())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn migrator")
        })
        .collect();
    let mut applied = Vec::new();
    for c in children {
        let out = c.wait_with_output().expect("migrator");
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "migrator failed: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let list = stdout
            .trim()
            .strip_prefix("applied")
            .expect("report")
            .trim();
        applied.extend(
            list.split(',')
                .filter(|s| !s.is_empty())
                .map(|v| v.parse::<i32>().expect("version")),
        );
    }
    applied.sort_unstable();
    let all: Vec<i32> = MIGRATIONS.iter().map(|m| m.version).collect();
    assert_eq!(
        applied, all,
        "each migration applied by exactly one process"
    );
    let rows = pg_client(&db)
        .await
        .query(
            "SELECT version, name FROM schema_migrations ORDER BY version",
            &[],
        )
        .await
        .expect("schema_migrations");
    let recorded: Vec<(i32, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let expected: Vec<(i32, String)> = MIGRATIONS
        .iter()
        .map(|m| (m.version, m.name.to_owned()))
        .collect();
    assert_eq!(recorded, expected);
    // The schema works.
    let store = ready_store(pg_opts(PG, &db)).await;
    let params = BucketParams::new(2, 1.0).expect("valid");
    assert_eq!(
        store.take(key(1), &params).await,
        Ok(Take::Allowed { remaining: 1 })
    );
    drop(store);
    drop_database(&db).await;
}

/// C-RATE-7: the `MIGRATE_ONLY=true` entry migrates from the validated `database` settings;
/// a second run applies nothing; TLS sslmodes are refused rather than silently downgraded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_7_migrate_only_entry() {
    let db = create_database().await;
    let mut settings = DatabaseSettings {
        host: "127.0.0.1".into(),
        port: PG,
        user: pg_user(),
        name: db.clone(),
        sslmode: "disable".into(),
        password: Secret::new(""),
        connect_timeout: Duration::from_secs(2),
        max_open_connections: 2,
    };
    let first = weir_storage::migrate_only(&settings)
        .await
        .expect("migrate");
    assert_eq!(first.applied.len(), MIGRATIONS.len());
    let second = weir_storage::migrate_only(&settings)
        .await
        .expect("migrate");
    assert!(second.applied.is_empty() && second.unknown.is_empty());
    settings.sslmode = "verify-full".into();
    assert!(matches!(
        weir_storage::migrate_only(&settings).await,
        Err(StoreError::Config(_))
    ));
    drop_database(&db).await;
}

/// Acceptance (C-RATE-5), for one policy: PostgreSQL unreachable at start (the proxy is not
/// listening), then reachable; `pg_terminate_backend` of the pool under load; an outage (proxy
/// off, every connection cut) and return under load. Every request gets the store's or the
/// policy's answer and none hangs, the policy answers while the store is down, and after each
/// return the requests use the store again and stay on it. The operation timeout is generous
/// (see the Redis scenario; c_rate_5_silent_store_is_cut_at_the_operation_timeout checks it).
async fn outage_scenario(mode: FailureMode) {
    let timeout = Duration::from_secs(2);
    let proxy = Proxy::new(PG);
    let mut opts = pg_opts(proxy.port, "test");
    opts.max_connections = 4;
    let mut outage = PgOutage {
        proxy,
        application_name: opts.application_name.clone(),
    };
    let rate = rate(1_000_000, 1_000_000.0, StorageKind::Postgres, mode, timeout);
    let limiter = Arc::new(
        RateLimiter::new(
            StoreKind::Postgres(Box::new(PostgresStore::new(opts).expect("store"))),
            &rate,
            7,
        )
        .expect("limiter"),
    );
    assert!(
        limiter
            .prepare(timeout, common::Clock::new().now())
            .await
            .is_err()
    );
    common::outage_scenario(limiter, rate, mode, &mut outage).await;
}

/// C-RATE-5: a server that accepts connections and never answers (not even the startup
/// handshake). The stores are migrated through a proxy to the real server first (an
/// unmigrated store fails at once, without a call), then a silent listener takes the proxy's
/// port. The connect timeout is a minute, so only the operation timeout can end a call: it
/// does, and the policy decides, for every policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_5_silent_store_is_cut_at_the_operation_timeout() {
    let mut proxy = Proxy::new(PG);
    proxy.start().await;
    let modes = [
        FailureMode::FailOpen,
        FailureMode::FailClosed,
        FailureMode::LocalFallback,
    ];
    let mut limiters = Vec::new();
    for mode in modes {
        let timeout = Duration::from_millis(300);
        let rate = rate(10, 10.0, StorageKind::Postgres, mode, timeout);
        let mut opts = pg_opts(proxy.port, "test");
        opts.connect_timeout = Duration::from_secs(60);
        let store = PostgresStore::new(opts).expect("store");
        store.migrate().await.expect("migrate through the proxy");
        let limiter =
            RateLimiter::new(StoreKind::Postgres(Box::new(store)), &rate, 7).expect("limiter");
        limiters.push((limiter, rate));
    }
    proxy.stop().await;
    let _silent = Silent::on(proxy.port).await;
    for (limiter, rate) in &limiters {
        silent_store_is_cut(limiter, rate).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_5_outages_fail_open() {
    outage_scenario(FailureMode::FailOpen).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_5_outages_fail_closed() {
    outage_scenario(FailureMode::FailClosed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_5_outages_local_fallback() {
    outage_scenario(FailureMode::LocalFallback).await;
}

/// C-RATE-3: the shared peek/reset case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_3_peek_and_reset_shared_case() {
    let store = ready_store(pg_opts(PG, "test")).await;
    cases::peek_and_reset(&store).await;
}
