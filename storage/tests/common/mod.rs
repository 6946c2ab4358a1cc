//! Helpers for the integration tests against the real Redis (127.0.0.1:6379) and PostgreSQL
//! (127.0.0.1:5432, trust auth, database `test`) on this machine, plus private `redis-server`s
//! and a switchable TCP proxy for outages.
#![allow(dead_code)]

pub mod cases;
pub mod redis_server;

pub use redis_server::{RedisServer, free_port, unique};

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant as StdInstant};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use weir_core::rate::{
    ClientKey, FailureMode, KeyParams, RateConfig, RateOutcome, RateParams, StorageKind,
};
use weir_core::time::Instant;
use weir_storage::{PostgresOptions, RedisOptions, Verdict};

/// The PostgreSQL user: `WEIR_TEST_PG_USER`, else `postgres`.
pub fn pg_user() -> String {
    std::env::var("WEIR_TEST_PG_USER").unwrap_or_else(|_| "postgres".to_owned())
}

pub fn redis_opts(port: u16) -> RedisOptions {
    let mut o = RedisOptions::new("127.0.0.1", port);
    o.key_prefix = format!("{}:", unique("weirtest"));
    o.dial_timeout = Duration::from_millis(500);
    o
}

pub fn pg_opts(port: u16, db: &str) -> PostgresOptions {
    let mut o = PostgresOptions::new("127.0.0.1", port, pg_user(), db);
    o.key_prefix = format!("{}:", unique("t"));
    o.application_name = unique("weirtest");
    o.connect_timeout = Duration::from_millis(500);
    o
}

/// A plain client on the real database (for assertions and `pg_terminate_backend`).
pub async fn pg_client(db: &str) -> tokio_postgres::Client {
    let (client, conn) = PostgresOptions::new("127.0.0.1", 5432, pg_user(), db)
        .pg_config()
        .connect(tokio_postgres::NoTls)
        .await
        .expect("connect to the test PostgreSQL");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// A fresh empty database; dropped by [`drop_database`].
pub async fn create_database() -> String {
    let name = unique("weir_mig");
    pg_client("test")
        .await
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create database");
    name
}

pub async fn drop_database(name: &str) {
    let _ = pg_client("test")
        .await
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await;
}

pub fn rate(
    capacity: u64,
    refill: f64,
    storage: StorageKind,
    mode: FailureMode,
    timeout: Duration,
) -> RateParams {
    RateParams::new(&RateConfig {
        enabled: true,
        storage,
        failure_mode: mode,
        capacity,
        refill_per_second: refill,
        operation_timeout: timeout,
        local_shards: 4,
        local_max_buckets: 10_000,
        ..RateConfig::default()
    })
    .expect("valid rate params")
}

/// Client key number `i` (distinct IPv4 /32s).
pub fn key(i: u32) -> ClientKey {
    KeyParams::default().key(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)))
}

/// A monotonic test clock in core's terms.
#[derive(Debug, Clone, Copy)]
pub struct Clock(StdInstant);

impl Clock {
    pub fn new() -> Clock {
        Clock(StdInstant::now())
    }
    pub fn now(&self) -> Instant {
        Instant::from_nanos(self.0.elapsed().as_nanos() as u64)
    }
    pub fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
}

impl RedisServer {
    pub fn client(&self) -> redis::Client {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port)).expect("client")
    }
}

/// A TCP proxy from a local port to a target that can be switched off (closing every proxied
/// connection and the listener) and on again: an outage of the server behind it.
pub struct Proxy {
    pub port: u16,
    target: u16,
    accept: Option<JoinHandle<()>>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    pub fn new(target: u16) -> Proxy {
        Proxy {
            port: free_port(),
            target,
            accept: None,
            conns: Arc::new(Mutex::new(Vec::new())),
        }
    }

    pub async fn start(&mut self) {
        assert!(self.accept.is_none());
        let listener = TcpListener::bind(("127.0.0.1", self.port))
            .await
            .expect("bind proxy port");
        let target = self.target;
        let conns = Arc::clone(&self.conns);
        self.accept = Some(tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                let conn = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", target)).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                conns.lock().expect("lock").push(conn);
            }
        }));
    }

    pub async fn stop(&mut self) {
        if let Some(a) = self.accept.take() {
            a.abort();
            let _ = a.await;
        }
        let conns: Vec<_> = std::mem::take(&mut *self.conns.lock().expect("lock"));
        for c in conns {
            c.abort();
            let _ = c.await;
        }
    }
}

/// What kind of answer a verdict is, relative to a store and a failure mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The shared store decided.
    Store,
    /// The failure policy decided, as `mode` defines.
    Policy,
}

/// Classify `v`: the store's answer or the policy's answer for `mode`; anything else panics.
pub fn classify(v: &Verdict, storage: StorageKind, mode: FailureMode) -> Answer {
    match (v, mode) {
        (Verdict::Decided(o), _) if o.storage == storage && !o.degraded => Answer::Store,
        (Verdict::Decided(o), FailureMode::FailOpen)
            if o.storage == storage && o.degraded && o.is_allowed() =>
        {
            Answer::Policy
        }
        (Verdict::Unavailable, FailureMode::FailClosed) => Answer::Policy,
        (
            Verdict::Decided(RateOutcome {
                storage, degraded, ..
            }),
            FailureMode::LocalFallback,
        ) if *storage == StorageKind::Local && *degraded => Answer::Policy,
        _ => panic!("{v:?} is neither the {storage} store's answer nor the {mode} answer"),
    }
}

/// One request of the load, as the test saw it.
#[derive(Debug, Clone, Copy)]
pub struct Record {
    /// When it started, since the test clock's origin.
    pub start: Duration,
    /// How long `check` took.
    pub elapsed: Duration,
    pub answer: Answer,
}

/// Scheduling slack on top of the operation timeout (a loaded 2-core machine).
pub const SLACK: Duration = Duration::from_millis(150);

/// `tasks` request loops against `limiter` until `stop`; every verdict is classified (a verdict
/// that is neither the store's nor the policy's panics the task).
pub fn load(
    limiter: Arc<weir_storage::RateLimiter>,
    rate: RateParams,
    clock: Clock,
    tasks: u32,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> JoinHandle<Vec<Record>> {
    tokio::spawn(async move {
        let storage = limiter.storage();
        let mode = rate.failure_mode();
        let mut handles = Vec::new();
        for t in 0..tasks {
            let limiter = Arc::clone(&limiter);
            let stop = Arc::clone(&stop);
            let rate = rate.clone();
            handles.push(tokio::spawn(async move {
                let mut out = Vec::new();
                let mut i = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let start = clock.elapsed();
                    let v = limiter
                        .check(key(t * 1000 + i % 50), &rate, clock.now())
                        .await;
                    let elapsed = clock.elapsed() - start;
                    out.push(Record {
                        start,
                        elapsed,
                        answer: classify(&v, storage, mode),
                    });
                    i += 1;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                out
            }));
        }
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.await.expect("load task"));
        }
        all.sort_by_key(|r| r.start);
        all
    })
}

/// Nothing waited past the operation timeout (C-RATE-5).
pub fn assert_bounded(records: &[Record], timeout: Duration) {
    let worst = records.iter().map(|r| r.elapsed).max().unwrap_or_default();
    assert!(
        worst <= timeout + SLACK,
        "a check took {worst:?}, past the operation timeout {timeout:?}"
    );
}

/// Every request started in `[from, to)` got the policy's answer.
pub fn assert_policy_between(records: &[Record], from: Duration, to: Duration) {
    let window: Vec<_> = records
        .iter()
        .filter(|r| r.start >= from && r.start < to)
        .collect();
    assert!(!window.is_empty(), "no request in {from:?}..{to:?}");
    for r in window {
        assert_eq!(r.answer, Answer::Policy, "store answered while down: {r:?}");
    }
}

/// After `back` (the store answers again), a request started within 1 s got the store's
/// answer, and every request started from then until shortly before `until` (the next
/// disruption, which a request started just before it may still see) did too. Returns the
/// delay.
pub fn assert_recovered(records: &[Record], back: Duration, until: Duration) -> Duration {
    let first = records
        .iter()
        .find(|r| r.start >= back && r.answer == Answer::Store)
        .unwrap_or_else(|| panic!("the store was never used again after {back:?}"));
    let delay = first.start - back;
    assert!(
        delay <= Duration::from_secs(1),
        "store used again only {delay:?} after it returned"
    );
    for r in records.iter().filter(|r| {
        r.start >= back + Duration::from_secs(1) && r.start + Duration::from_millis(250) < until
    }) {
        assert_eq!(r.answer, Answer::Store, "not back on the store: {r:?}");
    }
    delay
}

/// Shared by the Redis and PostgreSQL tests: capacity 5, 20 tokens/s, takes every 5 ms for
/// 1.5 s. Allowed takes ≈ 5 + 20 × elapsed (server clock, from the first to the last take).
pub async fn refill_follows_clock(store: &impl weir_storage::Store) {
    let params = weir_core::bucket::BucketParams::new(5, 20.0).expect("valid");
    let k = key(9);
    // Connect every connection first (takes go round-robin over `pool_size` of them, each
    // connecting on first use): a slow first connect while the bucket is full would waste its
    // refill and count against the store.
    for _ in 0..16 {
        let _ = store.take(key(10), &params).await;
    }
    let clock = Clock::new();
    let mut allowed = 0u64;
    let mut first = None;
    let mut last = Duration::ZERO;
    while clock.elapsed() < Duration::from_millis(1500) {
        let t = clock.elapsed();
        if let weir_core::bucket::Take::Allowed { .. } = store.take(k, &params).await.expect("take")
        {
            allowed += 1;
        }
        first.get_or_insert(t);
        last = clock.elapsed();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = (last - first.unwrap_or_default()).as_secs_f64();
    let expected = 5.0 + 20.0 * elapsed;
    assert!(
        (allowed as f64 - expected).abs() <= 1.0 + 20.0 * 0.01,
        "allowed {allowed}, expected {expected:.2} over {elapsed:.3} s"
    );
}

/// A shared store the outage scenario can take down and bring back.
pub trait Outage {
    /// Make the store reachable (the first time, or again after [`Outage::stop`]).
    async fn start(&mut self);
    /// Break every connection the limiter holds while the store stays up; how many broke.
    async fn kill_connections(&mut self) -> usize;
    /// Make the store unreachable.
    async fn stop(&mut self);
}

/// A private `redis-server`: started and stopped for real.
impl Outage for RedisServer {
    async fn start(&mut self) {
        tokio::task::block_in_place(|| self.restart());
    }

    async fn kill_connections(&mut self) -> usize {
        let mut c = self
            .client()
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let killed: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .query_async(&mut c)
            .await
            .expect("CLIENT KILL");
        usize::try_from(killed).unwrap_or(0)
    }

    async fn stop(&mut self) {
        tokio::task::block_in_place(|| RedisServer::stop(self));
    }
}

/// The machine's PostgreSQL behind a switchable TCP proxy; the limiter's connections carry
/// `application_name` so they alone are terminated.
pub struct PgOutage {
    pub proxy: Proxy,
    pub application_name: String,
}

impl Outage for PgOutage {
    async fn start(&mut self) {
        self.proxy.start().await;
    }

    async fn kill_connections(&mut self) -> usize {
        pg_client("test")
            .await
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
                &[&self.application_name],
            )
            .await
            .expect("terminate")
            .len()
    }

    async fn stop(&mut self) {
        self.proxy.stop().await;
    }
}

/// C-RATE-5 under load (6 tasks taking tokens all along) against a store that `outage` takes
/// down and brings back: down at start, back, every connection killed, down and back again. In
/// every phase no call waits past `timeout`, answers while the store is down are the policy's
/// for `mode`, and after each return the limiter is back on the store (the delays are printed).
pub async fn outage_scenario(
    limiter: Arc<weir_storage::RateLimiter>,
    rate: RateParams,
    mode: FailureMode,
    timeout: Duration,
    outage: &mut impl Outage,
) {
    let clock = Clock::new();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let records = load(
        Arc::clone(&limiter),
        rate.clone(),
        clock,
        6,
        Arc::clone(&stop),
    );

    // Down at start.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!limiter.store_up());
    assert_eq!(limiter.ready(mode), mode != FailureMode::FailClosed);
    assert_eq!(limiter.degraded(mode), mode != FailureMode::FailClosed);
    let t_start = clock.elapsed();
    outage.start().await;
    let t_back = clock.elapsed();
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert!(limiter.store_up() && limiter.ready(mode) && !limiter.degraded(mode));

    // Connection loss under load.
    let t_kill = clock.elapsed();
    assert!(outage.kill_connections().await >= 1, "no connection killed");
    tokio::time::sleep(Duration::from_millis(1300)).await;

    // Outage and return under load.
    let t_stop_begin = clock.elapsed();
    outage.stop().await;
    let t_down = clock.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t_restart = clock.elapsed();
    outage.start().await;
    let t_back2 = clock.elapsed();
    tokio::time::sleep(Duration::from_millis(1300)).await;
    stop.store(true, Ordering::Relaxed);
    let records = records.await.expect("load");
    outage.stop().await;

    assert_bounded(&records, timeout);
    assert_policy_between(&records, Duration::ZERO, t_start);
    let d1 = assert_recovered(&records, t_back, t_kill);
    let d2 = assert_recovered(&records, t_kill, t_stop_begin);
    assert_policy_between(&records, t_down, t_restart);
    let d3 = assert_recovered(&records, t_back2, Duration::MAX);
    let h = limiter.health();
    assert!(h.failures_total >= 2 && h.recoveries_total >= 2, "{h:?}");
    eprintln!(
        "{mode}: {} requests; back on the store after {d1:?}, {d2:?}, {d3:?}",
        records.len()
    );
}
