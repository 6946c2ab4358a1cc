//! `redis.tls` on weir-smol (C-RATE-3, C-RATE-5): the smol binary's Redis store
//! (the redis crate's `smol-rustls-comp` connector) against a private `redis-server` that
//! speaks TLS only on the port weir is given, with certificates made by the test (rcgen):
//! two weir-smol processes share one limit through it, and a CA that did not sign the server's
//! certificate makes every call a store failure that the failure policy decides.
//!
//! The server and the PKI are the storage tests' own helpers (`storage/tests/common/
//! redis_server.rs`, `storage/tests/tls/setup.rs`). Ports: 7520-7523 (plain port for the
//! test's own check, TLS port for weir).

#[path = "../../storage/tests/common/redis_server.rs"]
mod common;
#[path = "../../storage/tests/tls/setup.rs"]
mod setup;

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use setup::{Pki, path};
use weir_conformance::backend::Backend;
use weir_conformance::client::{Req, Resp, send};
use weir_conformance::config::Config;
use weir_conformance::harness::{Binary, Proxy};

fn bin() -> Binary {
    Binary::new(env!("CARGO_BIN_EXE_weir-smol"))
}

/// A client address of this test's own (its own bucket key, C-RATE-2).
fn client_ip(n: u8) -> IpAddr {
    let pid = std::process::id();
    IpAddr::V4(Ipv4Addr::new(127, 3, (pid % 250) as u8, n))
}

/// Rate limiting on Redis over TLS at 127.0.0.1:`tls_port`, verified against `ca`: `capacity`
/// tokens, no refill during the test, policy `mode`.
fn config(b: &Backend, tls_port: u16, ca: &Path, mode: &str, capacity: u64) -> Config {
    Config::new(&[b])
        .set("rate_limit.enabled", true)
        .set("rate_limit.storage", "redis")
        .set("rate_limit.failure_mode", mode)
        .set("rate_limit.capacity", capacity)
        .set("rate_limit.refill_per_second", 0.01)
        .set("rate_limit.operation_timeout", "2s")
        .set("redis.address", format!("127.0.0.1:{tls_port}"))
        .set("redis.tls", true)
        .set("redis.tls_ca_file", path(ca))
        .set("redis.pool_size", 2)
        .set("redis.dial_timeout", "2s")
        .set("redis.read_timeout", "2s")
        .set("redis.write_timeout", "2s")
}

/// `GET /r` from `from` (10 s deadline; a transport failure panics).
async fn request(p: &Proxy, from: IpAddr) -> Resp {
    send(
        p.public,
        &Req::get("/r")
            .from_ip(from)
            .timeout(Duration::from_secs(10)),
    )
    .await
}

/// `EXISTS key` on the server's plain port, with `redis-cli`.
fn exists(plain_port: u16, key: &str) -> bool {
    let out = Command::new("redis-cli")
        .args(["-p", &plain_port.to_string(), "--raw", "EXISTS", key])
        .output()
        .expect("run redis-cli");
    String::from_utf8_lossy(&out.stdout).trim() == "1"
}

/// C-RATE-3: two weir-smol processes on one TLS-only Redis port enforce ONE limit
/// (capacity 4 across both, 12 requests from one client, alternating), every answer decided
/// by Redis, and the bucket is on that server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_3_smol_shares_one_limit_over_tls() {
    let pki = Pki::new();
    let _server = tokio::task::block_in_place(|| pki.server(7520, 7521, "no"));
    let b = Backend::start("smol-redis-tls").await;
    let config = config(&b, 7521, &pki.ca, "fail-closed", 4);
    let (p1, p2) = (
        Proxy::start(&bin(), &config).await,
        Proxy::start(&bin(), &config).await,
    );
    let ip = client_ip(1);
    let mut statuses = Vec::new();
    for i in 0..12 {
        let r = request(if i % 2 == 0 { &p1 } else { &p2 }, ip).await;
        assert_eq!(
            r.header("x-ratelimit-storage").as_deref(),
            Some("redis"),
            "request {i}: {}",
            r.summary()
        );
        assert_ne!(
            r.header("x-ratelimit-degraded").as_deref(),
            Some("true"),
            "request {i}: {}",
            r.summary()
        );
        statuses.push(r.status);
    }
    let mut want = vec![200; 4];
    want.extend([429; 8]);
    assert_eq!(statuses, want, "one limit of 4 across both processes");
    assert_eq!(b.count(), 4, "the backend saw the allowed ones");
    let key = format!("weir:rl:{ip}/32");
    assert!(
        tokio::task::block_in_place(|| exists(7520, &key)),
        "{key} on the TLS server"
    );
}

/// C-RATE-5: the server's certificate does not chain to `redis.tls_ca_file` (another
/// CA): the TLS handshake fails, and each policy decides the requests as for a store that is
/// down: fail-open lets them through marked degraded, fail-closed answers 503, local-fallback
/// limits them locally (capacity 2: two allowed, then 429).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_5_smol_untrusted_ca_follows_the_policy() {
    let pki = Pki::new();
    let _server = tokio::task::block_in_place(|| pki.server(7522, 7523, "no"));
    for (n, mode) in [
        (1u8, "fail-open"),
        (2, "fail-closed"),
        (3, "local-fallback"),
    ] {
        let b = Backend::start("smol-redis-bad-ca").await;
        let p = Proxy::start(&bin(), &config(&b, 7523, &pki.other_ca, mode, 2)).await;
        let ip = client_ip(10 + n);
        let mut statuses = Vec::new();
        for i in 0..4 {
            let r = request(&p, ip).await;
            let storage = r.header("x-ratelimit-storage");
            let degraded = r.header("x-ratelimit-degraded").as_deref() == Some("true");
            match mode {
                "fail-open" => {
                    assert_eq!(
                        storage.as_deref(),
                        Some("redis"),
                        "{mode} {i}: {}",
                        r.summary()
                    );
                    assert!(degraded, "{mode} {i}: degraded");
                }
                "fail-closed" => {
                    let message = r.json()["message"].as_str().unwrap_or_default().to_owned();
                    assert!(
                        message.contains("rate limit store"),
                        "{mode} {i}: {}",
                        r.summary()
                    );
                    assert!(
                        storage.is_none(),
                        "{mode} {i}: no decision, no rate headers"
                    );
                }
                _ => {
                    assert_eq!(
                        storage.as_deref(),
                        Some("local"),
                        "{mode} {i}: {}",
                        r.summary()
                    );
                    assert!(degraded, "{mode} {i}: degraded");
                }
            }
            statuses.push(r.status);
        }
        let want: &[u16] = match mode {
            "fail-open" => &[200; 4],
            "fail-closed" => &[503; 4],
            _ => &[200, 200, 429, 429],
        };
        assert_eq!(statuses, want, "{mode}");
        let passed = want.iter().filter(|s| **s == 200).count();
        assert_eq!(
            b.count(),
            passed,
            "{mode}: the backend saw the allowed ones"
        );
    }
    let key = format!("weir:rl:{}/32", client_ip(12));
    assert!(
        !tokio::task::block_in_place(|| exists(7522, &key)),
        "nothing reached the server: {key}"
    );
}
