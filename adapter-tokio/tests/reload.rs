//! Hot reload over real sockets against the `weir` binary (C-CONF-3..8): 100 SIGHUP reloads
//! under continuous load (full backend replacement with warm-up, flipped `disabled`, changed
//! retry and rate policy) with zero non-2xx answers and every change visible in the status
//! document; an invalid file that changes nothing, logs a structured error and fails
//! `weir check-config`; and no secret in anything a run prints or answers.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use weir_conformance::backend::Backend;
use weir_conformance::client::{Conn, Req, get, send};
use weir_conformance::config::{ADMIN_TOKEN, Config, entry};
use weir_conformance::harness::{Binary, Proxy, StartOptions};

#[path = "support/prom.rs"]
mod prom;

/// The binary under test: `weir` here; `weir-smol` when adapter-smol's tests include this file
/// (one source for both runtimes).
fn bin() -> Binary {
    let path = option_env!("CARGO_BIN_EXE_weir-smol").or(option_env!("CARGO_BIN_EXE_weir"));
    Binary::new(path.expect("cargo names the proxy binary under test"))
}

fn authed(path: &str) -> Req {
    Req::get(path).header("authorization", &format!("Bearer {ADMIN_TOKEN}"))
}

async fn status(m: SocketAddr) -> Value {
    let r = send(m, &authed("/api/dashboard/status")).await;
    assert_eq!(r.status, 200, "{}", r.summary());
    r.json()
}

/// Replace the proxy's config file atomically (a reload never reads half a file).
fn write_config(dir: &Path, yaml: &str) {
    let tmp = dir.join("weir.yaml.tmp");
    std::fs::write(&tmp, yaml).expect("write config");
    std::fs::rename(&tmp, dir.join("weir.yaml")).expect("rename config");
}

/// Step `i` of the reload sequence: backend set A for `i/2` even, B for odd (so every second
/// step replaces every backend), the second backend disabled on odd steps, `max_attempts`
/// cycling 2..=4, the rate capacity `1_000_000 + i` (so each step is visible).
fn step(i: u64, a: &[Backend; 2], b: &[Backend; 2]) -> (Config, Value) {
    let set = if (i / 2).is_multiple_of(2) { a } else { b };
    let disabled = i % 2 == 1;
    let second = if disabled {
        entry(&set[1]).disabled()
    } else {
        entry(&set[1])
    };
    let max_attempts = 2 + i % 3;
    let capacity = 1_000_000 + i;
    let cfg = Config::with_entries(vec![entry(&set[0]), second])
        .management()
        .rate_limit(capacity, 1_000_000.0)
        .set("server.retry.max_attempts", max_attempts)
        .set("server.access_log_sample_rate", 0.0);
    let expect = json!({
        "backends": [[set[0].id(), true], [set[1].id(), !disabled]],
        "max_attempts": max_attempts,
        "capacity": capacity,
    });
    (cfg, expect)
}

fn seen(doc: &Value) -> Value {
    let backends: Vec<Value> = doc["backends"]
        .as_array()
        .expect("backends")
        .iter()
        .map(|b| json!([b["id"], b["enabled"]]))
        .collect();
    json!({
        "backends": backends,
        "max_attempts": doc["retry"]["max_attempts"],
        "capacity": doc["rate_limit"]["capacity"],
    })
}

/// C-CONF-4..7: 100 SIGHUP reloads while clients send continuously. Half of them replace every
/// backend (the candidates are warmed up first, C-CONF-5), the others flip `disabled`
/// (C-CONF-6), and all change the retry and rate policy (C-CONF-7): zero non-2xx answers, zero
/// transport errors, and each new setting visible in `/api/dashboard/status` after its reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_conf_4_5_100_reloads_under_load_without_errors() {
    let a = [Backend::start("ra-1").await, Backend::start("ra-2").await];
    let b = [Backend::start("rb-1").await, Backend::start("rb-2").await];
    let (cfg, expect) = step(0, &a, &b);
    let p = Proxy::start(&bin(), &cfg).await;
    let m = p.management.expect("management listener");
    assert_eq!(seen(&status(m).await), expect);

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for c in 0..4 {
        let (stop, ok, public) = (Arc::clone(&stop), Arc::clone(&ok), p.public);
        clients.push(tokio::spawn(async move {
            let mut failures = Vec::new();
            let mut conn = Conn::open(public, None).await.expect("connect");
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                match conn.send(&Req::get(&format!("/load/{c}/{n}"))).await {
                    Ok(r) if (200..300).contains(&r.status) => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(r) => failures.push(r.summary()),
                    Err(e) => {
                        failures.push(e);
                        conn = Conn::open(public, None).await.expect("reconnect");
                    }
                }
            }
            failures
        }));
    }

    let started = Instant::now();
    for i in 1..=100u64 {
        let (cfg, expect) = step(i, &a, &b);
        write_config(p.dir(), &cfg.yaml());
        let before = ok.load(Ordering::Relaxed);
        p.signal("HUP");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let now_seen = seen(&status(m).await);
            if now_seen == expect {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "reload {i} not visible: {now_seen} != {expect}\n{}",
                p.describe()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Traffic kept flowing through this step.
        let flowing = Instant::now() + Duration::from_secs(5);
        while ok.load(Ordering::Relaxed) == before && Instant::now() < flowing {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut failures = Vec::new();
    for c in clients {
        failures.extend(c.await.expect("client"));
    }
    assert!(
        failures.is_empty(),
        "{} non-2xx or failed requests during reloads, e.g. {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert!(ok.load(Ordering::Relaxed) > 200, "too little traffic");
    // Every backend set served (the replacements really happened).
    for be in a.iter().chain(&b) {
        assert!(be.count() > 0, "{} never served", be.id());
    }
    let r = send(m, &authed("/metrics")).await;
    let e = prom::parse(&r.text()).expect("metrics parse");
    assert_eq!(
        e.value(
            "load_balancer_config_reloads_total",
            &[("source", "signal"), ("result", "applied")]
        ),
        100.0
    );
    assert_eq!(
        e.value(
            "load_balancer_config_reloads_total",
            &[("source", "signal"), ("result", "rejected")]
        ),
        0.0
    );
    let warmups = p
        .logs()
        .stdout()
        .lines()
        .filter(|l| l.contains("warming up pools before publishing"))
        .count();
    assert!(warmups >= 49, "{warmups} warm-ups for 50 replacements");
    eprintln!(
        "100 reloads in {elapsed:?}, {} requests",
        ok.load(Ordering::Relaxed)
    );
}

/// The file of step `base` with errors in four places.
fn invalid(base: &Config) -> String {
    base.clone()
        .set("server.retry.max_attempts", 9)
        .set("health_check.interval", "5 parsecs")
        .set("bogus_section", 1)
        .set("backends", json!([{"id": "x", "url": "ftp://nope"}]))
        .yaml()
}

/// C-CONF-4: an invalid file on SIGHUP changes nothing (the old config keeps serving) and logs
/// one structured error with every error; `weir check-config` on that file exits non-zero
/// listing all of them (C-CONF-1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_conf_4_invalid_file_keeps_serving() {
    let a = Backend::start("iv-a").await;
    let cfg = Config::new(&[&a]).management();
    let p = Proxy::start(&bin(), &cfg).await;
    let m = p.management.expect("management listener");
    let before = status(m).await;
    write_config(p.dir(), &invalid(&cfg));
    p.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    let event = loop {
        let found = p
            .logs()
            .stdout()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["target"] == "weir::reload" && v["level"] == "ERROR");
        if let Some(v) = found {
            break v;
        }
        assert!(
            Instant::now() < deadline,
            "no reload error logged\n{}",
            p.describe()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let f = &event["fields"];
    assert_eq!(f["reason"], "invalid", "{event}");
    assert_eq!(f["source"], "signal");
    assert!(f["error_count"].as_u64().is_some_and(|n| n >= 4), "{event}");
    // A JSON array of strings, one per error.
    let errors: Vec<&str> = f["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("errors is not a JSON array: {event}"))
        .iter()
        .filter_map(|e| e.as_str())
        .collect();
    assert_eq!(
        errors.len() as u64,
        f["error_count"].as_u64().unwrap_or(0),
        "{event}"
    );
    let errors = errors.join("\n");
    for path in [
        "server.retry.max_attempts",
        "health_check.interval",
        "bogus_section",
        "backends[0].url",
    ] {
        assert!(errors.contains(path), "{path} not in {errors}");
    }
    // The old configuration keeps serving.
    for _ in 0..5 {
        let r = get(p.public, "/x").await;
        assert_eq!(r.status, 200);
        assert_eq!(r.backend().as_deref(), Some("iv-a"));
    }
    let after = status(m).await;
    assert_eq!(after["backends"][0]["id"], before["backends"][0]["id"]);
    assert_eq!(after["retry"], {
        let mut r = before["retry"].clone();
        r["budget"]["tokens"] = after["retry"]["budget"]["tokens"].clone();
        r
    });
    let r = send(m, &authed("/metrics")).await;
    let e = prom::parse(&r.text()).expect("metrics parse");
    assert_eq!(
        e.value(
            "load_balancer_config_reloads_total",
            &[("source", "signal"), ("result", "rejected")]
        ),
        1.0
    );
    // check-config on the same file: non-zero, every error listed.
    let out = bin()
        .command(&["check-config"])
        .arg(p.dir().join("weir.yaml"))
        .output()
        .expect("run check-config");
    assert!(
        !out.status.success(),
        "check-config accepted an invalid file"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    for path in [
        "server.retry.max_attempts",
        "health_check.interval",
        "bogus_section",
        "backends[0].url",
    ] {
        assert!(
            stderr.contains(path),
            "{path} not listed by check-config:\n{stderr}"
        );
    }
    // A valid file afterwards applies again.
    write_config(
        p.dir(),
        &cfg.clone().set("server.retry.max_attempts", 3).yaml(),
    );
    p.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while status(m).await["retry"]["max_attempts"] != 3 {
        assert!(Instant::now() < deadline, "valid reload not applied");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// C-CONF-5: a replacement whose candidates never become healthy is rejected, and the old
/// backends keep serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_conf_5_failed_warm_up_rejects_the_reload() {
    let a = Backend::start("wu-a").await;
    let dead = Backend::start("wu-dead").await;
    dead.set_health(503);
    let cfg = Config::new(&[&a])
        .management()
        .set("health_check.interval", "100ms")
        .set("health_check.timeout", "200ms");
    let p = Proxy::start(&bin(), &cfg).await;
    let m = p.management.expect("management listener");
    let next = Config::new(&[&dead])
        .management()
        .set("health_check.interval", "100ms")
        .set("health_check.timeout", "200ms");
    write_config(p.dir(), &next.yaml());
    p.signal("HUP");
    // Traffic keeps going to the old backend during and after the warm-up.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = get(p.public, "/x").await;
        assert_eq!(r.status, 200, "{}", r.summary());
        assert_eq!(r.backend().as_deref(), Some("wu-a"));
        let rejected = p.logs().stdout().lines().any(|l| {
            serde_json::from_str::<Value>(l).is_ok_and(|v| {
                v["target"] == "weir::reload"
                    && v["level"] == "ERROR"
                    && v["fields"]["reason"] == "warm_up"
            })
        });
        if rejected {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "warm-up never rejected\n{}",
            p.describe()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let doc = status(m).await;
    assert_eq!(doc["backends"][0]["id"], "wu-a");
    assert_eq!(doc["backends"][0]["healthy"], true);
    assert_eq!(dead.count(), 0);
    // The old backend is still health-checked after the rejected warm-up.
    let probes = a.probe_count();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(a.probe_count() > probes, "old backend no longer probed");
}

/// C-CONF-3: no secret (admin token, Redis password) appears in any log line, status document,
/// error body, metric or `check-config` output, whatever a run does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_conf_3_no_secret_in_any_output() {
    const TOKEN: &str = "S3cr3t-admin-token-must-not-leak";
    const REDIS: &str = "S3cr3t-redis-password-must-not-leak";
    let a = Backend::start("s-a").await;
    let cfg = Config::new(&[&a])
        .set("management.enabled", true)
        .set("management.address", "127.0.0.1:9090")
        .set("management.auth_token_env", "WEIR_TEST_ADMIN")
        .set("management.runtime_mutations", true)
        .set("rate_limit.enabled", true)
        .set("rate_limit.storage", "redis")
        .set("rate_limit.failure_mode", "local-fallback")
        .set("redis.address", "127.0.0.1:1")
        .set("redis.password_env", "WEIR_TEST_REDIS")
        .set("server.access_log_sample_rate", 1.0)
        .set("server.access_log_include_path", true);
    let env = vec![
        ("WEIR_TEST_ADMIN".to_string(), TOKEN.to_string()),
        ("WEIR_TEST_REDIS".to_string(), REDIS.to_string()),
    ];
    let opts = StartOptions {
        management_bind: Some("127.0.0.1:0".into()),
        env: env.clone(),
        ..StartOptions::default()
    };
    let p = Proxy::start_with(&bin(), &cfg.yaml(), opts)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let m = p.management.expect("management listener");
    let auth = format!("Bearer {TOKEN}");
    let mut seen = String::new();
    let mut record = |r: &weir_conformance::client::Resp| {
        seen.push_str(&format!("{:?}\n{}\n", r.headers, r.text()));
    };
    for path in [
        "/healthz",
        "/readyz",
        "/metrics",
        "/api/dashboard/status",
        "/api/dashboard/request",
    ] {
        let r = send(m, &Req::get(path).header("authorization", &auth)).await;
        assert_eq!(r.status, 200, "{path}");
        record(&r);
        record(&send(m, &Req::get(path).header("authorization", "Bearer wrong")).await);
    }
    for body in [
        r#"{"rate_limit": {"capacity": 0}}"#,
        r#"{"retry": {"max_attempts": 3}}"#,
        r#"{"nope": 1}"#,
    ] {
        let r = send(
            m,
            &Req::new("PATCH", "/api/dashboard/config")
                .header("authorization", &auth)
                .header("x-balancer-csrf", "1")
                .header("content-type", "application/json")
                .body(body),
        )
        .await;
        record(&r);
    }
    record(&get(p.public, &format!("/x?token={TOKEN}")).await);
    record(&get(p.public, "/readyz").await);
    // Reloads: an invalid file, then a valid one.
    write_config(p.dir(), &invalid(&cfg));
    p.signal("HUP");
    tokio::time::sleep(Duration::from_millis(300)).await;
    write_config(p.dir(), &cfg.yaml());
    p.signal("HUP");
    tokio::time::sleep(Duration::from_millis(300)).await;
    record(&send(m, &Req::get("/metrics").header("authorization", &auth)).await);
    // check-config with the secrets in its environment.
    for yaml in [invalid(&cfg), cfg.yaml()] {
        write_config(p.dir(), &yaml);
        let mut cmd = bin().command(&["check-config"]);
        cmd.arg(p.dir().join("weir.yaml"));
        for (k, v) in &env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("check-config");
        seen.push_str(&String::from_utf8_lossy(&out.stdout));
        seen.push_str(&String::from_utf8_lossy(&out.stderr));
    }
    let logs = format!("{}\n{}", p.logs().stdout(), p.logs().stderr());
    assert!(logs.contains("weir::access"), "the run logged requests");
    assert!(logs.contains("weir::reload"), "the run logged reloads");
    // The data plane's own request with the token in its query: logged without the query.
    for (what, text) in [("responses", &seen), ("logs", &logs)] {
        assert!(!text.contains(TOKEN), "admin token in {what}");
        assert!(!text.contains(REDIS), "redis password in {what}");
    }
}
