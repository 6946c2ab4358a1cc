//! What an on-call engineer sees, against the `weir` binary over real sockets: the log events
//! they read (backend down/up, circuit open, overload, store down, no healthy backend at start),
//! one line each under `weir::health` / `weir::protection`, the access log's new fields
//! (`reason`, `upstream_status`, `duration_us`, `protocol`, `host`), and the new `/metrics`
//! families. The lines the test finds are printed (run with `--nocapture` to see them).

use std::time::{Duration, Instant};

use serde_json::Value;
use weir_conformance::backend::{Backend, Mode};
use weir_conformance::client::{Req, get, send};
use weir_conformance::config::{ADMIN_TOKEN, Config};
use weir_conformance::harness::{Binary, Proxy, StartOptions};

#[path = "support/redis.rs"]
mod own_redis;
#[path = "support/prom.rs"]
mod prom;

use own_redis::OwnRedis;

fn bin() -> Binary {
    Binary::new(env!("CARGO_BIN_EXE_weir"))
}

fn lines(p: &Proxy) -> Vec<Value> {
    p.logs()
        .stdout()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The first log line matching `pred`, waiting up to 10 s; printed for the record.
async fn wait_line(p: &Proxy, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(v) = lines(p).into_iter().find(|v| pred(v)) {
            eprintln!("{what}: {v}");
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "no {what} line\n{}",
            p.describe()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn is_event(v: &Value, level: &str, event: &str) -> bool {
    v["level"] == level && v["target"] == "weir::health" && v["fields"]["event"] == event
}

fn access_with_reason(v: &Value, reason: &str) -> bool {
    v["target"] == "weir::access" && v["fields"]["reason"] == reason
}

async fn scrape(p: &Proxy) -> (String, prom::Exposition) {
    let m = p.management.expect("management");
    let r = send(
        m,
        &Req::get("/metrics").header("authorization", &format!("Bearer {ADMIN_TOKEN}")),
    )
    .await;
    assert_eq!(r.status, 200);
    let text = r.text();
    let e = prom::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    (text, e)
}

/// C-HEALTH-2, C-HEALTH-3: a circuit opens (`WARN`, cause and threshold), a backend
/// goes down (`WARN`, probe error) and up (`INFO`), each once under `weir::health`; the state
/// gauges, transition counter, retries, build and process families follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_health_3_circuit_and_health_events_and_state_metrics() {
    let a = Backend::start("ev-a").await;
    let b = Backend::start("ev-b").await;
    let cfg = Config::new(&[&a, &b])
        .management()
        .set("server.access_log_sample_rate", 1.0)
        .set("health_check.cooldown", "30s")
        .set("health_check.max_cooldown", "60s");
    let p = Proxy::start_config(&bin(), &cfg, StartOptions::for_config(&cfg)).await;
    let (_, e) = scrape(&p).await;
    for id in ["ev-a", "ev-b"] {
        let l = [("backend", id), ("pool", "default")];
        assert_eq!(e.value("load_balancer_backend_healthy", &l), 1.0, "{id}");
        assert_eq!(e.value("load_balancer_backend_enabled", &l), 1.0, "{id}");
        assert_eq!(e.value("load_balancer_backend_draining", &l), 0.0, "{id}");
        assert_eq!(
            e.value(
                "load_balancer_backend_circuit_state",
                &[("backend", id), ("pool", "default"), ("state", "closed")]
            ),
            1.0
        );
        assert_eq!(e.value("load_balancer_backend_slow_start_ratio", &l), 1.0);
        assert_eq!(
            e.value(
                "load_balancer_circuit_transitions_total",
                &[("backend", id), ("to", "open")]
            ),
            0.0
        );
    }

    // Circuit open: ev-b answers 503 (a retryable status) while its health checks pass.
    b.set_mode(Mode::Status(503));
    for _ in 0..6 {
        let r = get(p.public, "/x").await;
        assert_eq!(r.status, 200, "retried onto ev-a");
    }
    let open = wait_line(&p, "circuit open WARN", |v| {
        is_event(v, "WARN", "circuit_open") && v["fields"]["backend"] == "ev-b"
    })
    .await;
    assert_eq!(open["fields"]["cause"], "failure_status", "{open}");
    assert_eq!(open["fields"]["failure_threshold"], 1, "{open}");
    assert_eq!(open["fields"]["cooldown_ms"], 30_000, "{open}");
    let opens = lines(&p)
        .iter()
        .filter(|v| is_event(v, "WARN", "circuit_open"))
        .count();
    let (text, e) = scrape(&p).await;
    assert_eq!(
        e.value(
            "load_balancer_circuit_transitions_total",
            &[("backend", "ev-b"), ("to", "open")]
        ),
        opens as f64,
        "one counted transition per logged one"
    );
    assert_eq!(
        e.value(
            "load_balancer_backend_circuit_state",
            &[("backend", "ev-b"), ("pool", "default"), ("state", "open")]
        ),
        1.0
    );
    assert!(e.value("load_balancer_retries_total", &[]) >= 1.0);
    // Six requests over keep-alive upstream connections: some opened, some reused (summed over
    // the backends; per backend in the conformance case `c_obs_1_*`).
    let opened = e.sum(
        "load_balancer_upstream_connections_total",
        &[("connection", "opened")],
    );
    let reused = e.sum(
        "load_balancer_upstream_connections_total",
        &[("connection", "reused")],
    );
    assert!(
        opened >= 1.0 && reused >= 1.0,
        "opened {opened}, reused {reused}"
    );
    let retried = wait_line(&p, "retried access line", |v| {
        v["target"] == "weir::access"
            && v["fields"]["attempts"] == 2
            && v["fields"]["listener"] == "public"
    })
    .await;
    let f = &retried["fields"];
    assert_eq!(f["upstream_status"], 200, "{retried}");
    assert!(f["reason"].is_null(), "a backend's response: {retried}");
    assert!(f["duration_us"].is_u64(), "{retried}");
    assert_eq!(f["protocol"], "HTTP/1.1", "{retried}");
    assert_eq!(f["scheme"], "http", "{retried}");
    assert!(
        f["host"]
            .as_str()
            .is_some_and(|h| h.starts_with("127.0.0.1:")),
        "{retried}"
    );
    let ms = f["duration_ms"].as_f64().unwrap_or(-1.0);
    let us = f["duration_us"].as_u64().unwrap_or(0);
    assert_eq!(
        ms,
        us as f64 / 1000.0,
        "duration_ms is duration_us with 3 decimals"
    );
    eprintln!("/metrics of ev-b (after the circuit opened):");
    for l in text.lines().filter(|l| l.contains("backend=\"ev-b\"")) {
        eprintln!("{l}");
    }

    // Backend down, then up: one WARN with the probe's error, one INFO, under one target.
    b.down().await;
    let down = wait_line(&p, "backend down WARN", |v| {
        is_event(v, "WARN", "backend_down") && v["fields"]["backend"] == "ev-b"
    })
    .await;
    let error = down["fields"]["error"].as_str().unwrap_or_default();
    assert!(!error.is_empty() && error != "unknown", "{down}");
    let (_, e) = scrape(&p).await;
    assert_eq!(
        e.value(
            "load_balancer_backend_healthy",
            &[("backend", "ev-b"), ("pool", "default")]
        ),
        0.0
    );
    b.up().await;
    wait_line(&p, "backend up INFO", |v| {
        is_event(v, "INFO", "backend_up")
            && v["fields"]["backend"] == "ev-b"
            && lines(&p).iter().position(|x| x == v) > lines(&p).iter().position(|x| x == &down)
    })
    .await;
    let all = lines(&p);
    let downs = all
        .iter()
        .filter(|v| v["fields"]["backend"] == "ev-b" && v["fields"]["event"] == "backend_down")
        .count();
    assert_eq!(downs, 1, "one line per change");
    assert!(
        !all.iter().any(|v| v["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("health changed"))),
        "the old duplicate lines are gone"
    );
    let listening = all
        .iter()
        .find(|v| v["fields"]["message"] == "weir is listening")
        .expect("listening line");
    assert!(
        listening["fields"]["management"]
            .as_str()
            .is_some_and(|m| m.starts_with("127.0.0.1:")),
        "no Debug formatting: {listening}"
    );

    let (_, e) = scrape(&p).await;
    assert_eq!(
        e.value(
            "weir_build_info",
            &[("version", env!("CARGO_PKG_VERSION")), ("runtime", "tokio")]
        ),
        1.0
    );
    assert!(e.value("process_resident_memory_bytes", &[]) > 1e6);
    assert!(e.value("process_open_fds", &[]) >= 3.0);
    assert!(e.value("process_max_fds", &[]) >= e.value("process_open_fds", &[]));
    assert!(e.value("process_start_time_seconds", &[]) > 1.7e9);
    assert_eq!(
        e.value("load_balancer_overload_capacity_requests", &[]),
        2048.0
    );
    assert!(
        e.value(
            "load_balancer_config_last_reload_success_timestamp_seconds",
            &[]
        ) > 1.7e9
    );
    assert_eq!(e.value("load_balancer_config_restart_required", &[]), 0.0);
    for (name, f) in &e.families {
        let help = f.help.as_deref().unwrap_or("");
        assert!(
            !help.contains("C-"),
            "{name}: HELP cites a contract id: {help}"
        );
    }
}

/// C-LOAD-1: an overload `503` says `reason: overload` in the access log and one
/// throttled `WARN` under `weir::protection`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_load_1_overload_reason_and_warn() {
    let a = Backend::start("ov-a").await;
    a.set_mode(Mode::Hold);
    let cfg = Config::new(&[&a])
        .management()
        .set("server.overload.max_concurrent_requests", 1)
        .set("server.overload.max_queue", 0);
    let p = Proxy::start_config(&bin(), &cfg, StartOptions::for_config(&cfg)).await;
    let public = p.public;
    let held = tokio::spawn(async move { get(public, "/held").await });
    let deadline = Instant::now() + Duration::from_secs(10);
    while a.in_flight() == 0 {
        assert!(
            Instant::now() < deadline,
            "first request never reached ov-a"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for _ in 0..3 {
        let r = get(p.public, "/shed").await;
        assert_eq!(r.status, 503);
    }
    let line = wait_line(&p, "overload 503 access line", |v| {
        access_with_reason(v, "overload")
    })
    .await;
    assert_eq!(line["fields"]["status"], 503);
    assert!(line["fields"]["upstream_status"].is_null(), "{line}");
    wait_line(&p, "overload WARN", |v| {
        v["level"] == "WARN"
            && v["target"] == "weir::protection"
            && v["fields"]["reason"] == "overload"
    })
    .await;
    let warns = lines(&p)
        .iter()
        .filter(|v| v["target"] == "weir::protection")
        .count();
    assert_eq!(warns, 1, "throttled: one line for the burst");
    a.release_all();
    assert_eq!(held.await.expect("held").status, 200);
}

/// C-RATE-5: with the shared store down and `fail-closed`, the `503` says
/// `reason: store_unavailable`, and the store's state is a `WARN`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_5_store_down_reason_and_warn() {
    let a = Backend::start("st-a").await;
    let cfg = Config::new(&[&a])
        .management()
        .set("rate_limit.enabled", true)
        .set("rate_limit.storage", "redis")
        .set("rate_limit.failure_mode", "fail-closed")
        .set("redis.address", "127.0.0.1:1");
    let p = Proxy::start_config(&bin(), &cfg, StartOptions::for_config(&cfg)).await;
    let r = get(p.public, "/x").await;
    assert_eq!(r.status, 503, "{}", r.summary());
    wait_line(&p, "store-down 503 access line", |v| {
        access_with_reason(v, "store_unavailable")
    })
    .await;
    wait_line(&p, "store-down WARN", |v| {
        v["level"] == "WARN"
            && v["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("rate-limit store"))
    })
    .await;
}

/// C-HEALTH-1: a start where no backend passes its first check says so at `WARN`,
/// and the `503` it answers says `reason: no_healthy_backend`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_health_1_no_healthy_backend_at_start_warns() {
    let a = Backend::start("nh-a").await;
    a.set_health(503);
    let cfg = Config::new(&[&a]).set("server.access_log_sample_rate", 1.0);
    let p = Proxy::start_config(&bin(), &cfg, StartOptions::for_config(&cfg)).await;
    let w = wait_line(&p, "no healthy backend WARN", |v| {
        is_event(v, "WARN", "no_healthy_backend")
    })
    .await;
    assert_eq!(
        w["fields"]["unhealthy"],
        serde_json::json!(["nh-a"]),
        "a JSON array: {w}"
    );
    let r = get(p.public, "/x").await;
    assert_eq!(r.status, 503);
    wait_line(&p, "no-backend 503 access line", |v| {
        access_with_reason(v, "no_healthy_backend")
    })
    .await;
}

/// C-POOL-5: with every backend healthy but disabled, the `503` says
/// `no_enabled_backend`, not `no_healthy_backend`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_pool_5_disabled_backends_are_not_called_unhealthy() {
    let a = Backend::start("dis-a").await;
    let cfg = Config::new(&[&a])
        .management()
        .set("management.runtime_mutations", true);
    let p = Proxy::start_config(&bin(), &cfg, StartOptions::for_config(&cfg)).await;
    let m = p.management.expect("management");
    let r = send(
        m,
        &Req::new("POST", "/api/dashboard/backends/dis-a")
            .header("authorization", &format!("Bearer {ADMIN_TOKEN}"))
            .header("x-balancer-csrf", "1")
            .header("content-type", "application/json")
            .body(r#"{"enabled": false}"#),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.summary());
    let r = get(p.public, "/x").await;
    assert_eq!(r.status, 503);
    assert!(r.text().contains("no_enabled_backend"), "{}", r.text());
    wait_line(&p, "disabled 503 access line", |v| {
        access_with_reason(v, "no_enabled_backend")
    })
    .await;
}

/// C-RATE-3, C-RATE-5: every request-path call of the shared store is counted by
/// store and result and timed (`load_balancer_rate_limit_store_requests_total`,
/// `_store_duration_seconds`), against a real Redis of the test's own that is then killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_3_store_calls_are_counted_by_store_and_result() {
    const PORT: u16 = 18947;
    let redis = OwnRedis::start(PORT);
    let a = Backend::start("sc-a").await;
    let cfg = Config::new(&[&a])
        .management()
        .set("rate_limit.enabled", true)
        .set("rate_limit.storage", "redis")
        .set("rate_limit.failure_mode", "fail-open")
        .set("redis.address", format!("127.0.0.1:{PORT}"));
    let p = Proxy::start_config(&bin(), &cfg, StartOptions::for_config(&cfg)).await;
    for _ in 0..3 {
        assert_eq!(get(p.public, "/x").await.status, 200);
    }
    let (_, e) = scrape(&p).await;
    let calls = |e: &prom::Exposition, result: &str| {
        e.value(
            "load_balancer_rate_limit_store_requests_total",
            &[("storage", "redis"), ("result", result)],
        )
    };
    assert_eq!(calls(&e, "ok"), 3.0, "one take per request");
    assert_eq!(
        e.value(
            "load_balancer_rate_limit_store_duration_seconds_count",
            &[("storage", "redis")]
        ),
        3.0,
        "each timed"
    );
    assert!(
        e.get(
            "load_balancer_rate_limit_store_duration_seconds_count",
            &[("storage", "local")]
        )
        .is_none(),
        "the local store is not timed"
    );
    drop(redis);
    for _ in 0..3 {
        assert_eq!(get(p.public, "/x").await.status, 200, "fail-open");
    }
    let (_, e) = scrape(&p).await;
    let failed = calls(&e, "error") + calls(&e, "timeout");
    assert!(failed >= 1.0, "the failed call is counted: {failed}");
    assert_eq!(calls(&e, "ok"), 3.0);
}
