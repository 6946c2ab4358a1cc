//! The PostgreSQL store behind a restarted and a replaced server (C-RATE-5, C-RATE-7),
//! on private PostgreSQL clusters the test makes (`initdb` into a temp dir as the `postgres`
//! user, ports 5600-5699). The shared server on 5432 is never stopped.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use weir_core::bucket::{BucketParams, Take};
use weir_core::rate::{FailureMode, StorageKind};
use weir_storage::{PostgresOptions, PostgresStore, RateLimiter, Store, StoreKind};

/// The newest PostgreSQL's binaries.
fn bin(name: &str) -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL installed under /usr/lib/postgresql")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    versions.sort();
    versions
        .last()
        .expect("a PostgreSQL version")
        .join("bin")
        .join(name)
}

/// Run `program args` as the `postgres` user (initdb refuses root).
fn as_postgres(program: &Path, args: &[&str]) {
    let status = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("runuser");
    assert!(status.success(), "{} {args:?} failed", program.display());
}

/// A private PostgreSQL cluster on `port`, stopped (immediately) on drop.
struct PgCluster {
    dir: PathBuf,
    port: u16,
    running: bool,
}

impl PgCluster {
    /// `initdb` only: nothing listens until [`PgCluster::start`].
    fn init(port: u16) -> PgCluster {
        let dir = std::env::temp_dir().join(unique("weirpg"));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let d = dir.to_str().expect("utf-8").to_owned();
        let status = Command::new("chown")
            .args(["postgres:postgres", &d])
            .status()
            .expect("chown");
        assert!(status.success());
        let data = format!("{d}/data");
        as_postgres(
            &bin("initdb"),
            &["-D", &data, "-A", "trust", "-U", "postgres", "--no-sync"],
        );
        PgCluster {
            dir,
            port,
            running: false,
        }
    }

    fn data(&self) -> String {
        format!("{}/data", self.dir.display())
    }

    fn start_blocking(&mut self) {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.display()
        );
        let log = format!("{}/log", self.dir.display());
        as_postgres(
            &bin("pg_ctl"),
            &["-D", &self.data(), "-o", &opts, "-l", &log, "-w", "start"],
        );
        self.running = true;
    }

    /// `-m immediate`: the server dies as in a crash, without closing sessions politely.
    fn stop_blocking(&mut self) {
        if self.running {
            as_postgres(
                &bin("pg_ctl"),
                &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
            );
            self.running = false;
        }
    }

    fn opts(&self) -> PostgresOptions {
        let mut o = PostgresOptions::new("127.0.0.1", self.port, "postgres", "postgres");
        o.key_prefix = format!("{}:", unique("t"));
        o.application_name = unique("weirtest");
        o.connect_timeout = Duration::from_millis(500);
        o.max_connections = 4;
        o
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        self.stop_blocking();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The outage scenario's store: this cluster, really stopped and started.
struct Restarts {
    cluster: PgCluster,
    application_name: String,
}

impl Outage for Restarts {
    async fn start(&mut self) {
        tokio::task::block_in_place(|| self.cluster.start_blocking());
    }

    async fn kill_connections(&mut self) -> usize {
        let (client, conn) =
            PostgresOptions::new("127.0.0.1", self.cluster.port, "postgres", "postgres")
                .pg_config()
                .connect(tokio_postgres::NoTls)
                .await
                .expect("connect");
        let driver = tokio::spawn(conn);
        let n = client
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
                &[&self.application_name],
            )
            .await
            .expect("terminate")
            .len();
        drop(client);
        let _ = driver.await;
        n
    }

    async fn stop(&mut self) {
        tokio::task::block_in_place(|| self.cluster.stop_blocking());
    }
}

/// C-RATE-5: PostgreSQL down at start (initdb'ed, not started), started, its
/// sessions terminated, crashed (`pg_ctl stop -m immediate`) and restarted, all under load:
/// the pool reconnects by itself and the answers follow the same recovery machine as Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_5_postgres_restart_reconnects() {
    let cluster = tokio::task::block_in_place(|| PgCluster::init(5601));
    let opts = cluster.opts();
    let application_name = opts.application_name.clone();
    let mode = FailureMode::FailClosed;
    // Generous: a slow answer of a healthy server on a loaded machine would otherwise be cut
    // and decided by the policy (the timeout itself: postgres.rs, silent store).
    let timeout = Duration::from_secs(2);
    let rate = rate(1_000_000, 1_000_000.0, StorageKind::Postgres, mode, timeout);
    let store = PostgresStore::new(opts).expect("store");
    let limiter = Arc::new(
        RateLimiter::new(StoreKind::Postgres(Box::new(store)), &rate, 7).expect("limiter"),
    );
    let mut outage = Restarts {
        cluster,
        application_name,
    };
    common::outage_scenario(limiter, rate, mode, &mut outage).await;
}

/// C-RATE-7: the server replaced by a fresh one on the same address (its schema
/// gone): the store notices the missing function, migrates the new server and serves again,
/// without being rebuilt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_7_replaced_server_is_migrated_again() {
    let mut first = tokio::task::block_in_place(|| PgCluster::init(5602));
    tokio::task::block_in_place(|| first.start_blocking());
    let store = PostgresStore::new(first.opts()).expect("store");
    store.migrate().await.expect("migrate");
    let p = BucketParams::new(2, 0.001).expect("valid");
    assert!(matches!(
        store.take(key(1), &p).await,
        Ok(Take::Allowed { .. })
    ));

    tokio::task::block_in_place(|| first.stop_blocking());
    let mut second = tokio::task::block_in_place(|| PgCluster::init(5602));
    tokio::task::block_in_place(|| second.start_blocking());
    let clock = Clock::new();
    let mut errors = Vec::new();
    loop {
        match store.take(key(1), &p).await {
            Ok(take) => {
                // A new server: the bucket starts full again.
                assert!(matches!(take, Take::Allowed { remaining: 1 }), "{take:?}");
                break;
            }
            Err(e) => errors.push(e.label()),
        }
        assert!(clock.elapsed() < WAIT, "never served: {errors:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(store.schema_ready());
    eprintln!(
        "served again after {:?}; errors meanwhile: {errors:?}",
        clock.elapsed()
    );
}
