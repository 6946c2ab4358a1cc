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
    /// How long `check` took (printed, never asserted: a loaded machine makes any call slow).
    pub elapsed: Duration,
    /// Which key it used (the index the load was given for it).
    pub key: usize,
    pub answer: Answer,
}

impl Record {
    /// When it ended, since the test clock's origin.
    pub fn end(&self) -> Duration {
        self.start + self.elapsed
    }
}

/// A check that has not returned after this long hangs: the limiter bounds every store call by
/// its operation timeout, far below this, so only a call that would never return reaches it.
pub const HANG: Duration = Duration::from_secs(10);

/// The bound on every wait of the scenarios: each phase ends on an event (answers of some
/// kind, a state), and this is only how long the test waits before it fails.
pub const WAIT: Duration = Duration::from_secs(30);

/// The answers of a running load, shared with the test while it runs.
#[derive(Debug, Clone, Default)]
pub struct Log {
    records: Arc<Mutex<Vec<Record>>>,
    hung: Arc<Mutex<Option<String>>>,
}

impl Log {
    /// Every answer so far, in start order.
    pub fn records(&self) -> Vec<Record> {
        let mut all = self.records.lock().expect("lock").clone();
        all.sort_by_key(|r| r.start);
        all
    }

    /// Polls `check` over the answers so far until it holds; panics naming `what` after
    /// [`WAIT`], or at once when a check hung.
    pub async fn wait_for(&self, what: &str, mut check: impl FnMut(&[Record]) -> bool) {
        let start = StdInstant::now();
        loop {
            if let Some(h) = self.hung.lock().expect("lock").clone() {
                panic!("{h} (while waiting for {what})");
            }
            if check(&self.records()) {
                return;
            }
            assert!(
                start.elapsed() < WAIT,
                "timed out after {WAIT:?} waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until `n` requests started at or after `from` got `answer`.
    pub async fn wait_answers(&self, from: Duration, answer: Answer, n: usize, what: &str) {
        self.wait_for(what, |rs| {
            rs.iter()
                .filter(|r| r.start >= from && r.answer == answer)
                .count()
                >= n
        })
        .await;
    }

    /// Waits until the store answered [`SETTLED`] requests in a row (in start order) among
    /// those started at or after `from`; returns when the first of them ended, from which on
    /// the limiter is back on the store.
    pub async fn wait_back(&self, from: Duration, what: &str) -> Duration {
        let mut back = Duration::ZERO;
        self.wait_for(what, |rs| {
            let mut run = 0;
            for r in rs.iter().filter(|r| r.start >= from) {
                if r.answer == Answer::Store {
                    if run == 0 {
                        back = r.end();
                    }
                    run += 1;
                    if run == SETTLED {
                        return true;
                    }
                } else {
                    run = 0;
                }
            }
            false
        })
        .await;
        back
    }
}

/// Store answers in a row that show the limiter is back on the store.
pub const SETTLED: usize = 30;

/// `tasks` request loops against `limiter` until `stop`, task `t`'s `i`-th request on the key
/// `keys(t, i)` gives (an index to record, and the key); every verdict is classified (a verdict
/// that is neither the store's nor the policy's panics the task) and logged as it comes.
pub fn load_keys(
    limiter: Arc<weir_storage::RateLimiter>,
    rate: RateParams,
    clock: Clock,
    tasks: u32,
    stop: Arc<std::sync::atomic::AtomicBool>,
    keys: impl Fn(u32, u32) -> (usize, ClientKey) + Send + Sync + 'static,
) -> (Log, JoinHandle<()>) {
    let log = Log::default();
    let keys = Arc::new(keys);
    let handle = {
        let log = log.clone();
        tokio::spawn(async move {
            let storage = limiter.storage();
            let mode = rate.failure_mode();
            let mut handles = Vec::new();
            for t in 0..tasks {
                let (limiter, stop, rate) = (Arc::clone(&limiter), Arc::clone(&stop), rate.clone());
                let (log, keys) = (log.clone(), Arc::clone(&keys));
                handles.push(tokio::spawn(async move {
                    let mut i = 0u32;
                    while !stop.load(Ordering::Relaxed) {
                        let (index, k) = keys(t, i);
                        let start = clock.elapsed();
                        let checked =
                            tokio::time::timeout(HANG, limiter.check(k, &rate, clock.now())).await;
                        let Ok(v) = checked else {
                            let what = format!("a check started at {start:?} hung for {HANG:?}");
                            *log.hung.lock().expect("lock") = Some(what.clone());
                            panic!("{what}");
                        };
                        let record = Record {
                            start,
                            elapsed: clock.elapsed() - start,
                            key: index,
                            answer: classify(&v, storage, mode),
                        };
                        log.records.lock().expect("lock").push(record);
                        i += 1;
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                }));
            }
            for h in handles {
                h.await.expect("load task");
            }
        })
    };
    (log, handle)
}

/// [`load_keys`] with 50 keys of its own per task.
pub fn load(
    limiter: Arc<weir_storage::RateLimiter>,
    rate: RateParams,
    clock: Clock,
    tasks: u32,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> (Log, JoinHandle<()>) {
    load_keys(limiter, rate, clock, tasks, stop, |t, i| {
        (0, key(t * 1000 + i % 50))
    })
}

/// The slowest check, for the report (no bound is asserted on it).
pub fn slowest(records: &[Record]) -> Duration {
    records.iter().map(|r| r.elapsed).max().unwrap_or_default()
}

/// Every request that started at or after `from` and ended before `to` (so it ran wholly
/// inside the window) got the policy's answer, and there was one.
pub fn assert_policy_between(records: &[Record], from: Duration, to: Duration) {
    let window: Vec<_> = records
        .iter()
        .filter(|r| r.start >= from && r.end() < to)
        .collect();
    assert!(!window.is_empty(), "no request in {from:?}..{to:?}");
    for r in window {
        assert_eq!(r.answer, Answer::Policy, "store answered while down: {r:?}");
    }
}

/// From `back` (see [`Log::wait_back`]) until `until` (the next disruption) the limiter ends
/// on the store: the last [`SETTLED`] requests of the window all got the store's answer. Policy
/// answers in between are allowed and counted: a pooled connection the disruption broke fails
/// when it is next used, and the store's circuit may take one more probe period to close
/// again on a loaded machine (C-RATE-5 decides those calls by the policy). A limiter that never
/// settles on the store fails here, one that never returns fails in [`Log::wait_back`].
/// Returns how many store and policy answers there were.
pub fn assert_stays(records: &[Record], back: Duration, until: Duration) -> (usize, usize) {
    let window: Vec<_> = records
        .iter()
        .filter(|r| r.start >= back && r.end() < until)
        .collect();
    assert!(
        window.len() >= SETTLED,
        "only {} answers after {back:?}",
        window.len()
    );
    let tail = &window[window.len() - SETTLED..];
    for r in tail {
        assert_eq!(r.answer, Answer::Store, "not back on the store: {r:?}");
    }
    let policy = window.iter().filter(|r| r.answer != Answer::Store).count();
    (window.len() - policy, policy)
}

/// Shared by the Redis and PostgreSQL expiry tests (C-RATE-3): `k` is new (a full bucket of
/// 4 tokens refilling 2 per second, `params`); two takes leave two tokens plus the refill the
/// test's own pace allowed between the first take and the peek. Returns the clock and when
/// the second take was called on it (the bucket's expiry counts from then).
pub async fn two_takes_then_peek(
    store: &impl weir_storage::Store,
    k: weir_core::rate::ClientKey,
    params: &weir_core::bucket::BucketParams,
) -> (Clock, Duration) {
    assert_eq!(store.peek(k, params).await.expect("peek"), 4000);
    let clock = Clock::new();
    store.take(k, params).await.expect("take");
    let second_take = clock.elapsed();
    store.take(k, params).await.expect("take");
    let milli = store.peek(k, params).await.expect("peek");
    let refilled = (2.0 * clock.elapsed().as_secs_f64() * 1000.0) as u64;
    assert!(
        (2000..=2000 + refilled + 1).contains(&milli),
        "peek {milli}, refill at most {refilled} milli-tokens"
    );
    (clock, second_take)
}

/// Shared by the Redis and PostgreSQL tests: capacity 5, 20 tokens/s, takes every 5 ms for
/// 1.5 s. Allowed takes = 5 + 20 × (server time from the first take to the last), within one
/// token. The server's times are not seen, only bounded by the test's: the first take ran
/// between its call and its return, and so did the last, so the server's interval lies between
/// (last call - first return) and (last return - first call). The allowance follows those two
/// bounds, as wide as the machine made them.
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
    let (mut last_call, mut last_return) = (Duration::ZERO, Duration::ZERO);
    while clock.elapsed() < Duration::from_millis(1500) {
        let call = clock.elapsed();
        if let weir_core::bucket::Take::Allowed { .. } = store.take(k, &params).await.expect("take")
        {
            allowed += 1;
        }
        let returned = clock.elapsed();
        first.get_or_insert((call, returned));
        (last_call, last_return) = (call, returned);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (first_call, first_return) = first.unwrap_or_default();
    let shortest = last_call.saturating_sub(first_return).as_secs_f64();
    let longest = (last_return - first_call).as_secs_f64();
    let (least, most) = (5.0 + 20.0 * shortest - 1.0, 5.0 + 20.0 * longest + 1.0);
    assert!(
        (least..=most).contains(&(allowed as f64)),
        "allowed {allowed}, expected 5 + 20 × the server's interval, between {:.2} and {:.2} \
         ({shortest:.3} s to {longest:.3} s)",
        least + 1.0,
        most - 1.0
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
/// down and brings back: down at start, back, every connection killed, down and back again.
/// Every answer is the store's or the policy's for `mode` and no call hangs; answers while the
/// store is down are the policy's; after each return the limiter goes back to the store by
/// itself and stays there. Each phase ends on an event, with a generous bound ([`WAIT`]), and
/// the answers are placed in the phases by the order of events (a request that ended before a
/// disruption began ran wholly before it), never by how fast anything ran: the delays are
/// printed, not asserted (the recovery's pace is `retry_interval`'s, checked with an explicit
/// clock in the limiter's unit tests).
pub async fn outage_scenario(
    limiter: Arc<weir_storage::RateLimiter>,
    rate: RateParams,
    mode: FailureMode,
    outage: &mut impl Outage,
) {
    let clock = Clock::new();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (log, load) = load(
        Arc::clone(&limiter),
        rate.clone(),
        clock,
        6,
        Arc::clone(&stop),
    );
    let more = |n: usize| {
        let log = log.clone();
        async move {
            let have = log.records().len();
            log.wait_for(&format!("{n} more answers"), |rs| rs.len() >= have + n)
                .await;
        }
    };

    // Down at start.
    log.wait_answers(
        Duration::ZERO,
        Answer::Policy,
        20,
        "the policy's answers while down",
    )
    .await;
    assert!(!limiter.store_up());
    assert_eq!(limiter.ready(mode), mode != FailureMode::FailClosed);
    assert_eq!(limiter.degraded(mode), mode != FailureMode::FailClosed);
    let t_start = clock.elapsed();
    outage.start().await;
    let t_back = clock.elapsed();
    let back1 = log
        .wait_back(t_back, "the store's answers once it is up")
        .await;
    wait_state(&limiter, "up, ready and not degraded", || {
        limiter.store_up() && limiter.ready(mode) && !limiter.degraded(mode)
    })
    .await;
    more(100).await;

    // Connection loss under load.
    let t_kill = clock.elapsed();
    assert!(outage.kill_connections().await >= 1, "no connection killed");
    let back2 = log
        .wait_back(t_kill, "the store's answers after the kill")
        .await;
    more(100).await;

    // Outage and return under load.
    let t_stop_begin = clock.elapsed();
    outage.stop().await;
    let t_down = clock.elapsed();
    log.wait_answers(
        t_down,
        Answer::Policy,
        20,
        "the policy's answers in the outage",
    )
    .await;
    let t_restart = clock.elapsed();
    outage.start().await;
    let t_back2 = clock.elapsed();
    let back3 = log
        .wait_back(t_back2, "the store's answers after the restart")
        .await;
    more(100).await;
    stop.store(true, Ordering::Relaxed);
    load.await.expect("load");
    let records = log.records();
    outage.stop().await;

    assert_policy_between(&records, Duration::ZERO, t_start);
    let n1 = assert_stays(&records, back1, t_kill);
    let n2 = assert_stays(&records, back2, t_stop_begin);
    assert_policy_between(&records, t_down, t_restart);
    let n3 = assert_stays(&records, back3, Duration::MAX);
    let h = limiter.health();
    assert!(h.failures_total >= 2 && h.recoveries_total >= 2, "{h:?}");
    eprintln!(
        "{mode}: {} requests, slowest {:?}; back on the store {:?}, {:?}, {:?} after each \
         return, then (store, policy) answers {n1:?}, {n2:?}, {n3:?}",
        records.len(),
        slowest(&records),
        back1.saturating_sub(t_back),
        back2.saturating_sub(t_kill),
        back3.saturating_sub(t_back2),
    );
}

/// Polls the limiter's state until `check` holds, at most [`WAIT`].
pub async fn wait_state(
    limiter: &weir_storage::RateLimiter,
    what: &str,
    mut check: impl FnMut() -> bool,
) {
    let start = StdInstant::now();
    while !check() {
        assert!(
            start.elapsed() < WAIT,
            "the limiter never became {what}: {:?}",
            limiter.health()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A store that accepts connections and never answers: a call to it can only end by the
/// operation timeout.
pub struct Silent {
    pub port: u16,
    accept: JoinHandle<()>,
}

impl Silent {
    /// On a free port.
    pub async fn start() -> Silent {
        Silent::on(0).await
    }

    /// On `port` (0: a free one).
    pub async fn on(port: u16) -> Silent {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .expect("bind the silent store");
        let port = listener.local_addr().expect("address").port();
        let accept = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                held.push(conn);
            }
        });
        Silent { port, accept }
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// C-RATE-5: the operation timeout cuts a call the store never answers (its connect and dial
/// timeouts are far longer, so nothing else could end it), and the policy decides. Shown by
/// order, not speed: the first call returns the policy's answer no earlier than the timeout,
/// and it returns at all (within [`HANG`]).
pub async fn silent_store_is_cut(limiter: &weir_storage::RateLimiter, rate: &RateParams) {
    let clock = Clock::new();
    let start = StdInstant::now();
    let v = tokio::time::timeout(HANG, limiter.check(key(1), rate, clock.now()))
        .await
        .unwrap_or_else(|_| panic!("a call to a silent store did not return in {HANG:?}"));
    let took = start.elapsed();
    let mode = rate.failure_mode();
    assert_eq!(
        classify(&v, limiter.storage(), mode),
        Answer::Policy,
        "{mode}"
    );
    assert!(
        took >= rate.operation_timeout(),
        "{mode}: the policy answered after {took:?}, before the operation timeout {:?}",
        rate.operation_timeout()
    );
    assert!(!limiter.store_up(), "{mode}: a cut call is a store failure");
    eprintln!("{mode}: cut after {took:?}");
}
