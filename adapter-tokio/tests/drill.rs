//! The three-replica drill (C-RATE-3, C-PATH-10): HAProxy from Debian (installed by
//! `load/ensure-haproxy`) health-checking `/readyz` in front of three `weir` processes on
//! 127.0.0.1, one private Redis behind all three.
//! (a) a client limited to N per second gets at most N plus the refill in total across the
//!     replicas, and at least N;
//! (b) a rolling restart under steady load (SIGTERM with `server.shutdown_delay`, the new process
//!     started on the same port, ready, next) ends with 0 non-2xx;
//! (c) one replica killed with SIGKILL costs at most the requests in flight on it.
//!
//! Ports: the private Redis on 7390 (a), 7391 (b), 7392 (c); HAProxy and weir on free ports.
//! The binary is the test build's (debug), or `WEIR_DRILL_BIN`; `WEIR_DRILL_FULL=1` runs the
//! full form (a: 16 loops for 10 s; b, c: 16 loops, c 5 s after the kill) whose figures
//! docs/storage.md reports from a release build.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use weir_conformance::backend::Backend;
use weir_conformance::client::{Req, try_send};
use weir_conformance::config::Config;
use weir_conformance::harness::{Binary, Proxy, StartOptions};

#[path = "support/redis.rs"]
mod own_redis;

use own_redis::OwnRedis;

/// The proxy under test: `WEIR_DRILL_BIN` (e.g. a release build, for the figures in
/// docs/storage.md), else the test build's.
fn bin() -> Binary {
    if let Some(path) = std::env::var_os("WEIR_DRILL_BIN") {
        return Binary::new(path);
    }
    let path = option_env!("CARGO_BIN_EXE_weir-smol").or(option_env!("CARGO_BIN_EXE_weir"));
    Binary::new(path.expect("cargo names the proxy binary under test"))
}

/// `WEIR_DRILL_FULL=1`: the full form (longer runs, more loops) whose figures docs/storage.md
/// reports; CI runs the short form.
fn full() -> bool {
    std::env::var_os("WEIR_DRILL_FULL").is_some_and(|v| v == "1")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A child process killed on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// HAProxy on `port`, round-robin over `replicas`, each checked with `GET /readyz` every 200 ms;
/// with `retry`, a request that reached no server (refused, empty answer) is sent to another.
fn haproxy(port: u16, replicas: &[SocketAddr], dir: &std::path::Path, retry: bool) -> Killed {
    let retries = if retry {
        "  retries 2\n  option redispatch\n  retry-on conn-failure empty-response\n"
    } else {
        "  retries 0\n"
    };
    let mut cfg = format!(
        "global\n  maxconn 2000\n\
         defaults\n  mode http\n  timeout connect 1s\n  timeout client 10s\n  timeout server 10s\n\
         {retries}\
         frontend fe\n  bind 127.0.0.1:{port}\n  default_backend weirs\n\
         backend weirs\n  balance roundrobin\n  option httpchk GET /readyz\n\
         \x20 http-check expect status 200\n  default-server inter 200ms fall 2 rise 2\n"
    );
    for (i, r) in replicas.iter().enumerate() {
        cfg.push_str(&format!("  server w{i} {r} check\n"));
    }
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, cfg).expect("haproxy.cfg");
    let check = Command::new("haproxy")
        .arg("-c")
        .arg("-f")
        .arg(&path)
        .stdout(Stdio::null())
        .status()
        .expect("haproxy (run load/ensure-haproxy)");
    assert!(check.success(), "haproxy -c rejected the drill's config");
    let child = Command::new("haproxy")
        .arg("-db")
        .arg("-f")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn haproxy");
    Killed(child)
}

/// A weir process on `config`, its public listener on `port` (0: any).
async fn start(config: &Config, port: u16) -> Proxy {
    let opts = StartOptions {
        public_bind: format!("127.0.0.1:{port}"),
        env: config.env(),
        backends: config.backends_used(),
        ..StartOptions::default()
    };
    match Proxy::start_with(&bin(), &config.yaml(), opts).await {
        Ok(p) => p,
        Err(e) => panic!("{e}\nconfig:\n{}", config.yaml()),
    }
}

async fn get(addr: SocketAddr) -> u16 {
    let req = Req::get("/drill").timeout(Duration::from_secs(5));
    match try_send(addr, &req).await {
        Ok(r) => r.status,
        Err(e) => panic!("GET /drill via {addr}: {e}"),
    }
}

/// Three replicas' configuration: rate limited on the Redis at `redis_port`, fail-closed.
fn weir_config(b: &Backend, redis_port: u16, capacity: u64, refill: f64) -> Config {
    Config::new(&[b])
        .set("rate_limit.enabled", true)
        .set("rate_limit.storage", "redis")
        .set("rate_limit.failure_mode", "fail-closed")
        .set("rate_limit.capacity", capacity)
        .set("rate_limit.refill_per_second", refill)
        .set("rate_limit.operation_timeout", "1s")
        .set("redis.address", format!("127.0.0.1:{redis_port}"))
        .set("redis.pool_size", 2)
        .set("redis.read_timeout", "1s")
        .set("redis.write_timeout", "1s")
}

/// HAProxy in front of `replicas`, once it answers `/readyz` itself with 200.
async fn ingress(
    replicas: &[SocketAddr],
    dir: &std::path::Path,
    retry: bool,
) -> (SocketAddr, Killed) {
    let port = free_port();
    let h = haproxy(port, replicas, dir, retry);
    let ingress: SocketAddr = ([127, 0, 0, 1], port).into();
    let deadline = Instant::now() + Duration::from_secs(10);
    while try_send(
        ingress,
        &Req::get("/readyz").timeout(Duration::from_secs(1)),
    )
    .await
    .map_or(true, |r| r.status != 200)
    {
        assert!(Instant::now() < deadline, "HAProxy never answered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Every server checked up (rise 2 × 200 ms) before the drill starts.
    tokio::time::sleep(Duration::from_millis(600)).await;
    (ingress, h)
}

/// `loops` request loops through `ingress` until `stop`: every status, in order per loop.
fn steady_load(
    ingress: SocketAddr,
    loops: usize,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<u16>> {
    tokio::spawn(async move {
        let mut handles = Vec::new();
        for _ in 0..loops {
            let stop = std::sync::Arc::clone(&stop);
            handles.push(tokio::spawn(async move {
                let mut statuses = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    statuses.push(get_status(ingress).await);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                statuses
            }));
        }
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.await.expect("load loop"));
        }
        all
    })
}

/// A request's status; a transport failure (no answer at all) counts as 0.
async fn get_status(addr: SocketAddr) -> u16 {
    let req = Req::get("/drill").timeout(Duration::from_secs(5));
    try_send(addr, &req).await.map_or(0, |r| r.status)
}

/// C-RATE-3: through HAProxy, a client limited to N=20 with a refill of 5/s sends
/// 8 concurrent request loops for 1.5 s spread over three replicas: the 200s across all three
/// are at least N and at most N + refill × elapsed (+1 for the token being refilled), and the
/// rest are 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drill_a_grants_across_three_replicas_stay_within_the_limit() {
    let _redis = tokio::task::block_in_place(|| OwnRedis::start(7390));
    let b = Backend::start("drill").await;
    let (capacity, refill) = (20u64, 5.0f64);
    let config = weir_config(&b, 7390, capacity, refill);
    let (p1, p2, p3) = tokio::join!(start(&config, 0), start(&config, 0), start(&config, 0));
    let dir = tempfile::tempdir().expect("temp dir");
    let (ingress, _haproxy) = ingress(&[p1.public, p2.public, p3.public], dir.path(), true).await;
    // The readiness probes above took no tokens: /readyz is not rate limited.
    let start = Instant::now();
    let (n_loops, run) = if full() {
        (16, Duration::from_secs(10))
    } else {
        (8, Duration::from_millis(1500))
    };
    let mut loops = Vec::new();
    for _ in 0..n_loops {
        loops.push(tokio::spawn(async move {
            let mut statuses = Vec::new();
            while start.elapsed() < run {
                statuses.push(get(ingress).await);
            }
            statuses
        }));
    }
    let mut statuses = Vec::new();
    for l in loops {
        statuses.extend(l.await.expect("loop"));
    }
    let elapsed = start.elapsed().as_secs_f64();
    let ok = statuses.iter().filter(|s| **s == 200).count() as f64;
    let limited = statuses.iter().filter(|s| **s == 429).count();
    let others: Vec<u16> = statuses
        .iter()
        .copied()
        .filter(|s| *s != 200 && *s != 429)
        .collect();
    let bound = capacity as f64 + refill * elapsed + 1.0;
    eprintln!(
        "drill (a): {} requests in {elapsed:.2} s, {ok} × 200 (bound {bound:.1}), {limited} × 429",
        statuses.len()
    );
    assert!(others.is_empty(), "answers other than 200/429: {others:?}");
    assert!(
        ok >= capacity as f64,
        "fewer than the capacity allowed: {ok}"
    );
    assert!(
        ok <= bound,
        "{ok} allowed across three replicas, bound {bound:.1}"
    );
    assert!(limited > 0, "the limit never bit");
    assert_eq!(
        b.count() as f64,
        ok,
        "only allowed requests reach the backend"
    );
}

/// C-PATH-10: a rolling restart of the three replicas under steady load. Each
/// gets SIGTERM with `server.shutdown_delay: 1s` (its `/readyz` turns 503 at once, HAProxy's
/// check takes it out within 2 × 200 ms, its listener closes after the delay), exits, and a new
/// process is started on its port; once HAProxy sees it up, the next one. 0 non-2xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drill_b_rolling_restart_under_load_has_no_errors() {
    let _redis = tokio::task::block_in_place(|| OwnRedis::start(7391));
    let b = Backend::start("drill-b").await;
    let config = weir_config(&b, 7391, 1_000_000, 1_000_000.0)
        .set("server.shutdown_delay", "1s")
        .set("server.shutdown_timeout", "5s");
    let ports = [free_port(), free_port(), free_port()];
    let mut replicas = Vec::new();
    for p in ports {
        replicas.push(start(&config, p).await);
    }
    let addrs: Vec<SocketAddr> = replicas.iter().map(|p| p.public).collect();
    let dir = tempfile::tempdir().expect("temp dir");
    // No retries at the ingress: only the shutdown delay keeps requests off a closing replica.
    let (ingress, _haproxy) = ingress(&addrs, dir.path(), false).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = steady_load(
        ingress,
        if full() { 16 } else { 4 },
        std::sync::Arc::clone(&stop),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (i, port) in ports.into_iter().enumerate() {
        replicas[i].signal("TERM");
        let exit = replicas[i].wait_exit(Duration::from_secs(10)).await;
        assert!(
            exit.is_some_and(|e| e.success()),
            "replica {i} did not exit cleanly: {exit:?}"
        );
        replicas[i] = start(&config, port).await;
        // HAProxy marks it up after two passing checks (rise 2, inter 200 ms).
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let statuses = load.await.expect("load");
    let bad: Vec<u16> = statuses
        .iter()
        .copied()
        .filter(|s| !(200..300).contains(s))
        .collect();
    eprintln!(
        "drill (b): {} requests during the rolling restart, {} non-2xx",
        statuses.len(),
        bad.len()
    );
    assert!(statuses.len() > 100, "too little load: {}", statuses.len());
    assert!(
        bad.is_empty(),
        "non-2xx during the rolling restart: {bad:?}"
    );
}

/// One replica killed with SIGKILL under steady load from 4 loops costs at most
/// the requests in flight on it (one per loop, HAProxy retries what never reached a server),
/// and once HAProxy's check has taken it out every answer is 200 again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drill_c_sigkill_costs_only_in_flight_requests() {
    let _redis = tokio::task::block_in_place(|| OwnRedis::start(7392));
    let b = Backend::start("drill-c").await;
    let config = weir_config(&b, 7392, 1_000_000, 1_000_000.0);
    let (p1, p2, p3) = tokio::join!(start(&config, 0), start(&config, 0), start(&config, 0));
    let dir = tempfile::tempdir().expect("temp dir");
    let (ingress, _haproxy) = ingress(&[p1.public, p2.public, p3.public], dir.path(), true).await;
    let loops = if full() { 16 } else { 4 };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = steady_load(ingress, loops, std::sync::Arc::clone(&stop));
    tokio::time::sleep(Duration::from_millis(300)).await;
    p2.signal("KILL");
    let after = if full() { 5000 } else { 1500 };
    tokio::time::sleep(Duration::from_millis(after)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let statuses = load.await.expect("load");
    let bad = statuses.iter().filter(|s| !(200..300).contains(*s)).count();
    eprintln!(
        "drill (c): {} requests, {bad} non-2xx after SIGKILL of one replica",
        statuses.len()
    );
    assert!(statuses.len() > 100, "too little load");
    assert!(
        bad <= loops,
        "{bad} failed requests, more than the {loops} that can be in flight"
    );
    drop((p1, p2, p3));
}
