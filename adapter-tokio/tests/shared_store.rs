//! The shared rate-limit stores in the `weir` process, black-box over real
//! sockets with the process protocol, against the real Redis (127.0.0.1:6379) and PostgreSQL
//! (127.0.0.1:5432, trust auth, user `postgres` or `WEIR_TEST_PG_USER`) on this machine, and
//! private `redis-server`s started here on their own ports.
//!
//! Isolation: every test sends from its own client address (a random 127/8 address, so its own
//! bucket key, C-RATE-2) and deletes that key first; PostgreSQL tests use a fresh database each.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener as StdListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use weir_conformance::backend::Backend;
use weir_conformance::client::{Req, Resp, try_send};
use weir_conformance::config::{ADMIN_TOKEN, Config};
use weir_conformance::harness::{Binary, Proxy, StartOptions};

const REDIS: u16 = 6379;
const PG: u16 = 5432;
/// How long a test waits for an event before it fails: generous, and never asserted as a pace.
const WAIT: Duration = Duration::from_secs(30);
const PG_PASSWORD_ENV: &str = "WEIR_TEST_PG_PASSWORD";

/// The binary under test: `weir` here; `weir-smol` when adapter-smol's tests include this file
/// (one source for both runtimes).
fn bin() -> Binary {
    let path = option_env!("CARGO_BIN_EXE_weir-smol").or(option_env!("CARGO_BIN_EXE_weir"));
    Binary::new(path.expect("cargo names the proxy binary under test"))
}

fn pg_user() -> String {
    std::env::var("WEIR_TEST_PG_USER").unwrap_or_else(|_| "postgres".to_owned())
}

/// A number no other test (in this or a parallel run) uses.
fn unique() -> u64 {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 20) ^ N.fetch_add(1, Ordering::Relaxed)
}

/// A client address of its own: 127.a.b.c, never 127.0.0.x.
fn client_ip() -> IpAddr {
    let u = unique().wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let b = u.to_be_bytes();
    IpAddr::V4(Ipv4Addr::new(127, 1 + b[0] % 250, b[1], 1 + b[2] % 250))
}

/// The bucket key of `ip` in Redis (default prefix, /32 keys).
fn redis_key(ip: IpAddr) -> String {
    format!("weir:rl:{ip}/32")
}

fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

async fn redis_conn(port: u16) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to redis")
}

async fn redis_exists(port: u16, key: &str) -> bool {
    let n: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query_async(&mut redis_conn(port).await)
        .await
        .expect("EXISTS");
    n == 1
}

async fn redis_del(port: u16, key: &str) {
    let _: i64 = redis::cmd("DEL")
        .arg(key)
        .query_async(&mut redis_conn(port).await)
        .await
        .expect("DEL");
}

async fn pg_client(db: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::Config::new()
        .host("127.0.0.1")
        .port(PG)
        .user(pg_user())
        .dbname(db)
        .connect(tokio_postgres::NoTls)
        .await
        .expect("connect to the test PostgreSQL");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// A fresh empty database, dropped by [`drop_database`].
async fn create_database() -> String {
    let name = format!("weir_sw_{}", unique() % 1_000_000_000_000);
    pg_client("test")
        .await
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create database");
    name
}

async fn drop_database(name: &str) {
    let _ = pg_client("test")
        .await
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await;
}

/// Rate limiting on `storage` with `mode`, `capacity` tokens refilled every 100 s (no refill
/// during a test), and a generous operation timeout unless the test needs its own.
fn limited(b: &Backend, storage: &str, mode: &str, capacity: u64) -> Config {
    Config::new(&[b])
        .set("rate_limit.enabled", true)
        .set("rate_limit.storage", storage)
        .set("rate_limit.failure_mode", mode)
        .set("rate_limit.capacity", capacity)
        .set("rate_limit.refill_per_second", 0.01)
        .set("rate_limit.operation_timeout", "2s")
}

fn with_redis(c: Config, port: u16) -> Config {
    c.set("redis.address", format!("127.0.0.1:{port}"))
        .set("redis.pool_size", 4)
        .set("redis.dial_timeout", "500ms")
        .set("redis.read_timeout", "2s")
        .set("redis.write_timeout", "2s")
}

fn with_postgres(c: Config, port: u16, db: &str) -> Config {
    c.set("database.host", "127.0.0.1")
        .set("database.port", u64::from(port))
        .set("database.user", pg_user())
        .set("database.name", db)
        .set("database.sslmode", "disable")
        .set("database.password_env", PG_PASSWORD_ENV)
        .set("database.connect_timeout", "2s")
        .set("database.max_open_connections", 4)
}

/// Start a proxy on `config` with the PostgreSQL password variable set (trust auth ignores it),
/// and the management listener when the config enables it.
async fn start(config: &Config) -> Proxy {
    let mut env = config.env();
    env.push((PG_PASSWORD_ENV.into(), "unused-with-trust-auth".into()));
    let opts = StartOptions {
        management_bind: config
            .management_enabled()
            .then(|| "127.0.0.1:0".to_string()),
        env,
        backends: config.backends_used(),
        ..StartOptions::default()
    };
    match Proxy::start_with(&bin(), &config.yaml(), opts).await {
        Ok(p) => p,
        Err(e) => panic!("{e}\nconfig:\n{}", config.yaml()),
    }
}

async fn request(p: &Proxy, from: IpAddr) -> Resp {
    let req = Req::get("/r")
        .from_ip(from)
        .timeout(Duration::from_secs(10));
    match try_send(p.public, &req).await {
        Ok(r) => r,
        Err(e) => panic!("GET /r via {}: {e}\n{}", p.public, p.describe()),
    }
}

async fn readyz(addr: SocketAddr) -> u16 {
    let req = Req::get("/readyz")
        .header("authorization", &format!("Bearer {ADMIN_TOKEN}"))
        .timeout(Duration::from_secs(5));
    match try_send(addr, &req).await {
        Ok(r) => r.status,
        Err(e) => panic!("GET /readyz via {addr}: {e}"),
    }
}

fn storage(r: &Resp) -> Option<String> {
    r.header("x-ratelimit-storage")
}

fn degraded(r: &Resp) -> bool {
    r.header("x-ratelimit-degraded").as_deref() == Some("true")
}

/// One weir error (C-PATH-11) with `status` and a message containing `needle`.
#[track_caller]
fn expect_error(r: &Resp, status: u16, needle: &str, what: &str) {
    assert_eq!(r.status, status, "{what}: {}", r.summary());
    let v = r.json();
    let message = v["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(needle),
        "{what}: message {message:?} lacks {needle:?}"
    );
}

/// Send `2 × per_proxy` requests from `ip`, half to each proxy, all at once; returns the
/// responses.
async fn burst(a: &Proxy, b: &Proxy, ip: IpAddr, per_proxy: usize) -> Vec<Resp> {
    let mut tasks = Vec::new();
    for i in 0..2 * per_proxy {
        let addr = if i % 2 == 0 { a.public } else { b.public };
        let req = Req::get("/r").from_ip(ip).timeout(Duration::from_secs(10));
        tasks.push(tokio::spawn(async move { try_send(addr, &req).await }));
    }
    let mut out = Vec::new();
    for t in tasks {
        match t.await.expect("task") {
            Ok(r) => out.push(r),
            Err(e) => panic!(
                "burst request failed: {e}\n{}\n{}",
                a.describe(),
                b.describe()
            ),
        }
    }
    out
}

/// Two processes, one shared store: exactly `capacity` of the burst allowed across both, every
/// answer decided by `store` (not degraded).
#[track_caller]
fn expect_one_limit(resps: &[Resp], capacity: usize, store: &str) {
    let allowed = resps.iter().filter(|r| r.status == 200).count();
    let denied = resps.iter().filter(|r| r.status == 429).count();
    assert_eq!(
        (allowed, denied),
        (capacity, resps.len() - capacity),
        "one limit of {capacity} across both processes; statuses {:?}",
        resps.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    for r in resps {
        assert_eq!(storage(r).as_deref(), Some(store), "{}", r.summary());
        assert!(!degraded(r), "degraded: {}", r.summary());
        assert_eq!(r.header("x-ratelimit-limit"), Some(capacity.to_string()));
    }
}

/// C-RATE-3: two weir processes on one Redis key space enforce ONE limit: capacity 10 across
/// both, under a concurrent burst of 30 from one client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_3_two_processes_share_one_redis_limit() {
    let b = Backend::start("sw-redis").await;
    let config = with_redis(limited(&b, "redis", "fail-closed", 10), REDIS);
    let ip = client_ip();
    redis_del(REDIS, &redis_key(ip)).await;
    let (p1, p2) = tokio::join!(start(&config), start(&config));
    let resps = burst(&p1, &p2, ip, 15).await;
    expect_one_limit(&resps, 10, "redis");
    assert!(
        redis_exists(REDIS, &redis_key(ip)).await,
        "the bucket lives in Redis"
    );
    assert_eq!(b.count(), 10, "only allowed requests reach the backend");
    redis_del(REDIS, &redis_key(ip)).await;
}

/// C-RATE-3: the same with PostgreSQL (a fresh database, migrated by the processes at start,
/// C-RATE-7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_3_two_processes_share_one_postgres_limit() {
    let db = create_database().await;
    let b = Backend::start("sw-pg").await;
    let config = with_postgres(limited(&b, "postgres", "fail-closed", 10), PG, &db);
    let ip = client_ip();
    let (p1, p2) = tokio::join!(start(&config), start(&config));
    let resps = burst(&p1, &p2, ip, 15).await;
    expect_one_limit(&resps, 10, "postgres");
    let rows = pg_client(&db)
        .await
        .query(
            "SELECT key FROM weir_rate_buckets WHERE key = $1",
            &[&format!("{ip}/32")],
        )
        .await
        .expect("select");
    assert_eq!(rows.len(), 1, "the bucket lives in PostgreSQL");
    assert_eq!(b.count(), 10, "only allowed requests reach the backend");
    drop((p1, p2));
    drop_database(&db).await;
}

/// Rows of `ip`'s bucket in the PostgreSQL database `db`.
async fn pg_bucket_rows(db: &str, ip: IpAddr) -> usize {
    pg_client(db)
        .await
        .query(
            "SELECT key FROM weir_rate_buckets WHERE key = $1",
            &[&format!("{ip}/32")],
        )
        .await
        .expect("select")
        .len()
}

/// C-RATE-3: the PostgreSQL store is cleaned every `rate_limit.cleanup_interval`: a bucket row
/// that expired more than `rate_limit.retention` ago is deleted (without a cleanup the table
/// keeps a row per client key ever seen), one within its retention is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_3_postgres_expired_buckets_are_deleted_after_their_retention() {
    let db = create_database().await;
    let b = Backend::start("sw-pg-sweep").await;
    // A full refill takes 10 ms, so a row expires about a second after its last take.
    let base = limited(&b, "postgres", "fail-closed", 1)
        .set("rate_limit.refill_per_second", 100.0)
        .set("rate_limit.cleanup_interval", "1s");
    let kept = with_postgres(base.clone().set("rate_limit.retention", "1h"), PG, &db);
    let p = start(&kept).await;
    let ip = client_ip();
    assert_eq!(request(&p, ip).await.status, 200);
    assert_eq!(pg_bucket_rows(&db, ip).await, 1, "the take stored a row");
    // Expired for over two cleanups, but within its retention.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        pg_bucket_rows(&db, ip).await,
        1,
        "kept within its retention"
    );
    drop(p);

    let swept = with_postgres(base.set("rate_limit.retention", "0s"), PG, &db);
    let p = start(&swept).await;
    let deadline = Instant::now() + WAIT;
    while pg_bucket_rows(&db, ip).await == 1 {
        assert!(
            Instant::now() < deadline,
            "the expired row was never deleted\n{}",
            p.describe()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The process keeps deciding from the store after the cleanup.
    assert_eq!(request(&p, ip).await.status, 200);
    assert_eq!(pg_bucket_rows(&db, ip).await, 1);
    drop(p);
    drop_database(&db).await;
}

/// C-RATE-5: Redis down at start (nothing listens on its port), for one policy: the process
/// starts, and every request gets the policy's answer (a refused connection fails at once; the
/// client's 10 s bound is only there to fail rather than hang); `/readyz` per policy.
async fn redis_down_at_start(mode: &str) {
    let b = Backend::start("sw-down").await;
    let config = with_redis(limited(&b, "redis", mode, 3), free_port())
        .set("rate_limit.operation_timeout", "200ms")
        .management();
    let p = start(&config).await;
    let ip = client_ip();
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let r = request(&p, ip).await;
        match mode {
            "fail-open" => {
                assert_eq!(r.status, 200, "{mode}: {}", r.summary());
                assert_eq!(storage(&r).as_deref(), Some("redis"));
                assert!(degraded(&r), "{mode}: X-RateLimit-Degraded: true");
            }
            "fail-closed" => {
                expect_error(&r, 503, "rate limit store", mode);
                assert!(
                    storage(&r).is_none(),
                    "{mode}: no decision, no rate headers"
                );
            }
            "local-fallback" => {
                assert_eq!(storage(&r).as_deref(), Some("local"), "{}", r.summary());
                assert!(degraded(&r), "{mode}: X-RateLimit-Degraded: true");
            }
            _ => unreachable!("a policy"),
        }
        statuses.push(r.status);
    }
    let (want_statuses, want_ready): (&[u16], u16) = match mode {
        "fail-open" => (&[200; 5], 200),
        "fail-closed" => (&[503; 5], 503),
        // The local store decides: capacity 3, then 429.
        _ => (&[200, 200, 200, 429, 429], 200),
    };
    assert_eq!(statuses, want_statuses, "{mode}");
    assert_eq!(readyz(p.public).await, want_ready, "{mode}: /readyz");
    let management = p.management.expect("management listener");
    assert_eq!(
        readyz(management).await,
        want_ready,
        "{mode}: management /readyz"
    );
    let denied_upstream = statuses.iter().filter(|s| **s == 200).count();
    assert_eq!(
        b.count(),
        denied_upstream,
        "{mode}: backend saw the allowed ones"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_5_redis_down_at_start_fail_open() {
    redis_down_at_start("fail-open").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_5_redis_down_at_start_fail_closed() {
    redis_down_at_start("fail-closed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_5_redis_down_at_start_local_fallback() {
    redis_down_at_start("local-fallback").await;
}

/// A private `redis-server` on its own port, killed on drop.
struct RedisServer {
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    fn start(port: u16) -> RedisServer {
        let mut s = RedisServer { port, child: None };
        s.restart();
        s
    }

    fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !ping(self.port) {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn ping(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    let mut buf = [0u8; 7];
    s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

/// C-RATE-5: a private Redis killed mid-run and restarted, fail-closed. While it is down,
/// requests get `503` and `/readyz` is `503`; once it answers again the process returns to it
/// by itself, without any request traffic (the recovery task's probe; the delay is printed,
/// its pace is `retry_interval`'s), and the next request is decided by Redis again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_5_returns_to_a_restarted_redis_without_traffic() {
    let port = free_port();
    let mut redis = RedisServer::start(port);
    let b = Backend::start("sw-restart").await;
    let config = with_redis(limited(&b, "redis", "fail-closed", 1000), port)
        .set("rate_limit.operation_timeout", "200ms");
    let p = start(&config).await;
    let ip = client_ip();

    let r = request(&p, ip).await;
    assert_eq!(r.status, 200, "{}", r.summary());
    assert_eq!(storage(&r).as_deref(), Some("redis"));
    assert!(!degraded(&r));
    assert_eq!(readyz(p.public).await, 200);

    redis.kill();
    let r = request(&p, ip).await;
    expect_error(
        &r,
        503,
        "rate limit store",
        "fail-closed while Redis is down",
    );
    let t = Instant::now();
    while readyz(p.public).await != 503 {
        assert!(
            t.elapsed() < WAIT,
            "/readyz still 200 {WAIT:?} after the fail-closed store went down"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    redis.restart();
    let back = Instant::now();
    while readyz(p.public).await != 200 {
        assert!(
            back.elapsed() < WAIT,
            "not back on the restarted Redis {WAIT:?} after it returned\n{}",
            p.describe()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = back.elapsed();
    let r = request(&p, ip).await;
    assert_eq!(r.status, 200, "{}", r.summary());
    assert_eq!(storage(&r).as_deref(), Some("redis"));
    assert!(!degraded(&r), "decided by Redis again, not a fallback");
    assert!(
        redis_exists(port, &redis_key(ip)).await,
        "the restarted Redis holds the bucket"
    );
    eprintln!("returned to the restarted Redis after {took:?}");
    let logs = p.logs().stdout();
    assert!(
        logs.contains("rate-limit store is down") && logs.contains("rate-limit store is back"),
        "the state changes are logged"
    );
}

/// C-RATE-5 with local-fallback under traffic: Redis killed and restarted while one client
/// keeps sending; every answer is Redis's or the local store's (degraded), the local store
/// decides while Redis is down, and Redis decides again after its return and keeps deciding
/// (each phase ends on an answer, within a generous bound; the delay is printed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_5_local_fallback_under_traffic_returns_to_redis() {
    let port = free_port();
    let mut redis = RedisServer::start(port);
    let b = Backend::start("sw-fallback").await;
    let config = with_redis(limited(&b, "redis", "local-fallback", 1000), port)
        .set("rate_limit.refill_per_second", 1000)
        .set("rate_limit.operation_timeout", "200ms");
    let p = start(&config).await;
    let ip = client_ip();
    let check = |r: &Resp, phase: &str| {
        assert_eq!(r.status, 200, "{phase}: {}", r.summary());
        match storage(r).as_deref() {
            Some("redis") => assert!(!degraded(r), "{phase}: redis and degraded"),
            Some("local") => assert!(degraded(r), "{phase}: local but not degraded"),
            other => panic!("{phase}: storage {other:?}"),
        }
    };
    for _ in 0..5 {
        let r = request(&p, ip).await;
        check(&r, "up");
        assert_eq!(storage(&r).as_deref(), Some("redis"));
    }
    redis.kill();
    let down = Instant::now();
    let mut local = 0;
    while local < 5 {
        let r = request(&p, ip).await;
        check(&r, "down");
        local += usize::from(storage(&r).as_deref() == Some("local"));
        assert!(
            down.elapsed() < WAIT,
            "the local store did not decide while Redis was down"
        );
    }
    redis.restart();
    let back = Instant::now();
    loop {
        let r = request(&p, ip).await;
        check(&r, "returning");
        if storage(&r).as_deref() == Some("redis") {
            break;
        }
        assert!(
            back.elapsed() < WAIT,
            "Redis not used again {WAIT:?} after its return\n{}",
            p.describe()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!("Redis decided again {:?} after its return", back.elapsed());
    for _ in 0..5 {
        let r = request(&p, ip).await;
        assert_eq!(storage(&r).as_deref(), Some("redis"), "stays on Redis");
    }
}

/// Run `weir run` with `MIGRATE_ONLY=true` on `config`; returns its exit status, stderr and
/// whether the ready file appeared.
fn migrate_only_run(config: &Config) -> (std::process::ExitStatus, String, bool) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("weir.yaml");
    std::fs::write(&path, config.yaml()).expect("write config");
    let ready: PathBuf = dir.path().join("ready.json");
    let mut cmd = bin().command(&["run", "--config"]);
    cmd.arg(&path)
        .args(["--public-bind", "127.0.0.1:0", "--ready-file"])
        .arg(&ready)
        .env("MIGRATE_ONLY", "true")
        .env(PG_PASSWORD_ENV, "unused-with-trust-auth")
        .env_remove("CONFIG_PATH")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn weir");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("MIGRATE_ONLY=true did not exit within 30 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let out = child.wait_with_output().expect("output");
    (
        status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
        ready.exists(),
    )
}

/// C-RATE-7: `MIGRATE_ONLY=true` applies every migration to an empty database and exits 0
/// without opening a listener (the ready file never appears); a second run applies nothing and
/// exits 0; an unreachable database exits 1 with the error on stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_7_migrate_only_migrates_and_exits_without_listeners() {
    let db = create_database().await;
    let b = Backend::start("sw-migrate").await;
    let config = with_postgres(limited(&b, "postgres", "fail-closed", 5), PG, &db);
    let (status, stderr, ready) = tokio::task::block_in_place(|| migrate_only_run(&config));
    assert!(status.success(), "exit {status}: {stderr}");
    assert!(!ready, "MIGRATE_ONLY opened the listeners");
    let client = pg_client(&db).await;
    let versions: Vec<i32> = client
        .query(
            "SELECT version FROM schema_migrations ORDER BY version",
            &[],
        )
        .await
        .expect("schema_migrations")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let all: Vec<i32> = weir_storage::MIGRATIONS.iter().map(|m| m.version).collect();
    assert_eq!(versions, all, "every migration recorded once");
    let functions: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_proc WHERE proname IN ('weir_rate_take', 'weir_rate_set')",
            &[],
        )
        .await
        .expect("pg_proc")
        .get(0);
    assert_eq!(functions, 2);
    assert_eq!(b.count(), 0);
    assert_eq!(b.probe_count(), 0, "no health checks: nothing started");

    let (status, stderr, ready) = tokio::task::block_in_place(|| migrate_only_run(&config));
    assert!(
        status.success() && !ready,
        "second run: exit {status}: {stderr}"
    );

    let down = with_postgres(limited(&b, "postgres", "fail-closed", 5), free_port(), &db);
    let (status, stderr, ready) = tokio::task::block_in_place(|| migrate_only_run(&down));
    assert_eq!(status.code(), Some(1), "database down: {stderr}");
    assert!(stderr.contains("MIGRATE_ONLY"), "stderr: {stderr}");
    assert!(!ready);
    drop(client);
    drop_database(&db).await;
}

/// The shipped examples start as shipped (only the listeners and secrets supplied): the
/// stores' hosts do not resolve here, so the policies apply — local-fallback for
/// config/redis.yaml, fail-closed (`503`, `/readyz` `503`) for config/postgres.yaml.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shipped_store_examples_start() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_path_buf();
    let env = vec![
        ("REDIS_PASSWORD".to_owned(), "example".to_owned()),
        ("POSTGRES_PASSWORD".to_owned(), "example".to_owned()),
        (
            "BALANCER_ADMIN_TOKEN".to_owned(),
            "example-token".to_owned(),
        ),
    ];
    for (file, want) in [("redis.yaml", "local"), ("postgres.yaml", "closed")] {
        let yaml = std::fs::read_to_string(root.join("config").join(file)).expect("example");
        let opts = StartOptions {
            management_bind: Some("127.0.0.1:0".into()),
            env: env.clone(),
            ..StartOptions::default()
        };
        let p = match Proxy::start_with(&bin(), &yaml, opts).await {
            Ok(p) => p,
            Err(e) => panic!("config/{file} does not start: {e}"),
        };
        let r = request(&p, client_ip()).await;
        if want == "local" {
            assert_eq!(
                storage(&r).as_deref(),
                Some("local"),
                "{file}: {}",
                r.summary()
            );
            assert!(degraded(&r), "{file}");
        } else {
            expect_error(&r, 503, "rate limit store", file);
            assert_eq!(readyz(p.public).await, 503, "{file}: /readyz");
        }
    }
}
