//! The three-replica drill, part (a) (issue 19, C-RATE-3): HAProxy from Debian (installed by
//! `load/ensure-haproxy`) health-checking `/readyz` in front of three `weir` processes on
//! 127.0.0.1, one private Redis behind all three. A client limited to N per second gets at most
//! N plus the refill in total across the replicas, and at least N.
//!
//! Ports: the private Redis on 7390, HAProxy on a free port; the weir processes pick their own.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use weir_conformance::backend::Backend;
use weir_conformance::client::{Req, try_send};
use weir_conformance::config::Config;
use weir_conformance::harness::{Binary, Proxy, StartOptions};

const REDIS_PORT: u16 = 7390;

fn bin() -> Binary {
    let path = option_env!("CARGO_BIN_EXE_weir-smol").or(option_env!("CARGO_BIN_EXE_weir"));
    Binary::new(path.expect("cargo names the proxy binary under test"))
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

fn redis() -> Killed {
    let child = Command::new("redis-server")
        .args(["--port", &REDIS_PORT.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn redis-server");
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(("127.0.0.1", REDIS_PORT)).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    Killed(child)
}

/// HAProxy on `port`, round-robin over `replicas`, each checked with `GET /readyz` every 200 ms.
fn haproxy(port: u16, replicas: &[SocketAddr], dir: &std::path::Path) -> Killed {
    let mut cfg = format!(
        "global\n  maxconn 2000\n\
         defaults\n  mode http\n  timeout connect 1s\n  timeout client 10s\n  timeout server 10s\n\
         frontend fe\n  bind 127.0.0.1:{port}\n  default_backend weirs\n\
         backend weirs\n  balance roundrobin\n  option httpchk GET /readyz\n\
         \x20 http-check expect status 200\n  default-server inter 200ms fall 2 rise 1\n"
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

async fn start(config: &Config) -> Proxy {
    let opts = StartOptions {
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

/// Issue 19 (a), C-RATE-3: through HAProxy, a client limited to N=20 with a refill of 5/s sends
/// 8 concurrent request loops for 1.5 s spread over three replicas: the 200s across all three
/// are at least N and at most N + refill × elapsed (+1 for the token being refilled), and the
/// rest are 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drill_a_grants_across_three_replicas_stay_within_the_limit() {
    let _redis = tokio::task::block_in_place(redis);
    let b = Backend::start("drill").await;
    let (capacity, refill) = (20u64, 5.0f64);
    let config = Config::new(&[&b])
        .set("rate_limit.enabled", true)
        .set("rate_limit.storage", "redis")
        .set("rate_limit.failure_mode", "fail-closed")
        .set("rate_limit.capacity", capacity)
        .set("rate_limit.refill_per_second", refill)
        .set("rate_limit.operation_timeout", "1s")
        .set("redis.address", format!("127.0.0.1:{REDIS_PORT}"))
        .set("redis.pool_size", 2)
        .set("redis.read_timeout", "1s")
        .set("redis.write_timeout", "1s");
    let (p1, p2, p3) = tokio::join!(start(&config), start(&config), start(&config));
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let _haproxy = haproxy(port, &[p1.public, p2.public, p3.public], dir.path());
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
    // The readiness probes above took no tokens: /readyz is not rate limited.
    let start = Instant::now();
    let mut loops = Vec::new();
    for _ in 0..8 {
        loops.push(tokio::spawn(async move {
            let mut statuses = Vec::new();
            while start.elapsed() < Duration::from_millis(1500) {
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
