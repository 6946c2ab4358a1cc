//! Metrics and access logs over real sockets against the `weir` binary (C-OBS-1, C-OBS-2,
//! C-OBS-3, C-LOAD-3): every family exposed from start, values that match the traffic the test
//! sent (parsed with a strict OpenMetrics parser), a scrape held open while requests flow, and
//! the access log's fields, sampling and redaction.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use weir_conformance::backend::{Backend, Mode};
use weir_conformance::client::{Req, get, send};
use weir_conformance::config::{ADMIN_TOKEN, Config};
use weir_conformance::harness::{Binary, Proxy};

#[path = "support/prom.rs"]
mod prom;

use prom::Exposition;

/// The binary under test: `weir` here; `weir-smol` when adapter-smol's tests include this file
/// (one source for both runtimes).
fn bin() -> Binary {
    let path = option_env!("CARGO_BIN_EXE_weir-smol").or(option_env!("CARGO_BIN_EXE_weir"));
    Binary::new(path.expect("cargo names the proxy binary under test"))
}

async fn scrape(m: SocketAddr) -> Exposition {
    let r = send(
        m,
        &Req::get("/metrics").header("authorization", &format!("Bearer {ADMIN_TOKEN}")),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.summary());
    prom::parse(&r.text()).unwrap_or_else(|e| panic!("{e}\n{}", r.text()))
}

/// Every family C-OBS-1 names (docs/contract.md), as exposed (counters with `_total`).
const CONTRACT_FAMILIES: &[(&str, &str)] = &[
    ("load_balancer_http_requests", "counter"),
    ("load_balancer_http_request_duration_seconds", "histogram"),
    ("load_balancer_upstream_attempts", "counter"),
    ("load_balancer_upstream_duration_seconds", "histogram"),
    ("load_balancer_backend_available", "gauge"),
    ("load_balancer_rate_limit_storage_healthy", "gauge"),
    ("load_balancer_rate_limit_degraded", "gauge"),
    ("load_balancer_rate_limit_local_buckets", "gauge"),
    ("load_balancer_rate_limit_local_evictions", "counter"),
    ("load_balancer_inflight_requests", "gauge"),
    ("load_balancer_protection_events", "counter"),
    ("load_balancer_retry_budget_tokens", "gauge"),
    ("load_balancer_health_checks", "counter"),
    ("load_balancer_panic_selections", "counter"),
];

/// C-OBS-1: every family is exposed from the start, with zero values where nothing happened,
/// and no label carries a path or a client address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_obs_1_every_family_from_start() {
    let a = Backend::start("f-a").await;
    let p = Proxy::start(&bin(), &Config::new(&[&a]).management()).await;
    let m = p.management.expect("management listener");
    let e = scrape(m).await;
    for (name, kind) in CONTRACT_FAMILIES {
        let f = e
            .families
            .get(*name)
            .unwrap_or_else(|| panic!("family {name} missing"));
        assert_eq!(f.kind, *kind, "{name}");
        assert!(f.help.is_some(), "{name} has no HELP");
        let sample = match *kind {
            "counter" => format!("{name}_total"),
            "histogram" => format!("{name}_count"),
            _ => name.to_string(),
        };
        assert!(!e.series(&sample).is_empty(), "{sample} has no series");
    }
    for listener in ["public", "management"] {
        assert_eq!(
            e.value(
                "load_balancer_http_requests_total",
                &[("listener", listener), ("code", "200")]
            ),
            0.0
        );
    }
    for reason in [
        "overload",
        "bulkhead_full",
        "backend_saturated",
        "retry_budget_exhausted",
        "rate_limited",
    ] {
        assert_eq!(
            e.value(
                "load_balancer_protection_events_total",
                &[("reason", reason)]
            ),
            0.0,
            "{reason}"
        );
    }
    for outcome in [
        "success",
        "failure_status",
        "connect_error",
        "transport_error",
        "timeout",
        "cancelled",
    ] {
        assert_eq!(
            e.value(
                "load_balancer_upstream_attempts_total",
                &[("backend", "f-a"), ("outcome", outcome)]
            ),
            0.0
        );
    }
    assert_eq!(
        e.value(
            "load_balancer_backend_available",
            &[("backend", "f-a"), ("pool", "default")]
        ),
        1.0
    );
    assert!(
        e.value(
            "load_balancer_health_checks_total",
            &[("backend", "f-a"), ("result", "success")]
        ) >= 1.0,
        "the first cycle ran before the listeners opened"
    );
    assert_eq!(
        e.value(
            "load_balancer_rate_limit_storage_healthy",
            &[("storage", "disabled")]
        ),
        1.0,
        "rate limiting off: the storage label says so"
    );
    assert_eq!(e.value("load_balancer_retry_budget_tokens", &[]), 1000.0);
    // Bounded labels only.
    let allowed = [
        "listener",
        "code",
        "backend",
        "outcome",
        "pool",
        "reason",
        "result",
        "storage",
        "le",
        "source", // circuit state, transition direction, build facts
        "state",
        "to",
        "version",
        "runtime",
        "endpoint",
        "connection",
    ];
    for s in e.samples.keys() {
        for k in s.labels.keys() {
            assert!(allowed.contains(&k.as_str()), "label {k} on {}", s.name);
        }
        for v in s.labels.values() {
            assert!(
                !v.starts_with('/') && !v.starts_with("127."),
                "label value {v}"
            );
        }
    }
    // The management listener counts its own requests (the scrape above).
    let e = scrape(m).await;
    assert_eq!(
        e.value(
            "load_balancer_http_requests_total",
            &[("listener", "management"), ("code", "200")]
        ),
        1.0
    );
}

/// C-OBS-1, C-LOAD-3: the values match the traffic: requests by listener and code (health
/// endpoints included), attempts by backend and outcome (each equal to what the backends
/// recorded), histogram counts, protection events by reason, health checks not counted as
/// attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_obs_1_values_match_traffic() {
    let ok = Backend::start("v-ok").await;
    let bad = Backend::start("v-bad").await;
    bad.set_mode(Mode::Status(503));
    let slow = Backend::start("v-slow").await;
    slow.set_mode(Mode::Hold);
    // Passive ejection off, so v-bad keeps receiving first attempts; a budget large enough.
    let cfg = Config::new(&[&ok, &bad])
        .passive_off()
        .management()
        .rate_limit(30, 0.001)
        .pool("s", "round_robin", &[&slow])
        .route("/slow", "s", Some(1));
    let p = Proxy::start(&bin(), &cfg).await;
    let m = p.management.expect("management listener");

    // 20 requests to the default pool: v-bad answers 503, the retry goes to v-ok.
    for i in 0..20 {
        let r = get(p.public, &format!("/r/{i}?q=secret")).await;
        assert_eq!(r.status, 200, "{}", r.summary());
    }
    // 5 health endpoint requests (not rate limited, counted as public).
    for _ in 0..3 {
        assert_eq!(get(p.public, "/healthz").await.status, 200);
    }
    for _ in 0..2 {
        assert_eq!(get(p.public, "/readyz").await.status, 200);
    }
    // Bulkhead full: one held request on /slow, a second one is refused.
    let held = {
        let public = p.public;
        tokio::spawn(async move { send(public, &Req::get("/slow/1")).await })
    };
    slow.wait_in_flight(1, Duration::from_secs(5)).await;
    let r = get(p.public, "/slow/2").await;
    assert_eq!(r.status, 503, "{}", r.summary());
    slow.set_mode(Mode::Ok);
    slow.release_all();
    assert_eq!(held.await.expect("join").status, 200);
    // Rate limited: 30 tokens, 22 used (20 + slow/1 + slow/2 refused by the bulkhead after the
    // limiter took its token): 8 left, then 429s.
    let mut limited = 0;
    let mut allowed = 0;
    for _ in 0..12 {
        match get(p.public, "/x").await.status {
            200 => allowed += 1,
            429 => limited += 1,
            s => panic!("unexpected {s}"),
        }
    }
    assert_eq!((allowed, limited), (8, 4));

    let e = scrape(m).await;
    let requests = |code: &str| {
        e.get(
            "load_balancer_http_requests_total",
            &[("listener", "public"), ("code", code)],
        )
        .unwrap_or(0.0)
    };
    assert_eq!(requests("200"), 20.0 + 5.0 + 1.0 + 8.0);
    assert_eq!(requests("503"), 1.0);
    assert_eq!(requests("429"), 4.0);
    assert_eq!(
        e.sum(
            "load_balancer_http_requests_total",
            &[("listener", "public")]
        ),
        39.0
    );
    assert_eq!(
        e.value(
            "load_balancer_http_request_duration_seconds_count",
            &[("listener", "public")]
        ),
        39.0
    );
    let attempts = |backend: &str, outcome: &str| {
        e.value(
            "load_balancer_upstream_attempts_total",
            &[("backend", backend), ("outcome", outcome)],
        )
    };
    // What each backend received is what was counted (health probes are not attempts).
    assert_eq!(attempts("v-bad", "failure_status"), bad.count() as f64);
    assert_eq!(attempts("v-bad", "success"), 0.0);
    assert_eq!(attempts("v-ok", "success"), ok.count() as f64);
    assert_eq!(attempts("v-ok", "failure_status"), 0.0);
    assert_eq!(attempts("v-slow", "success"), slow.count() as f64);
    assert_eq!(
        ok.count(),
        28,
        "every allowed default-pool request ended on v-ok"
    );
    assert!(bad.count() >= 5, "round robin sent first attempts to v-bad");
    assert_eq!(
        e.value(
            "load_balancer_upstream_duration_seconds_count",
            &[("backend", "v-ok")]
        ),
        ok.count() as f64
    );
    let protection = |reason: &str| {
        e.value(
            "load_balancer_protection_events_total",
            &[("reason", reason)],
        )
    };
    assert_eq!(protection("bulkhead_full"), 1.0);
    assert_eq!(protection("rate_limited"), 4.0);
    assert_eq!(protection("overload"), 0.0);
    assert_eq!(protection("retry_budget_exhausted"), 0.0);
    assert_eq!(e.value("load_balancer_rate_limit_local_buckets", &[]), 1.0);
    let budget = e.value("load_balancer_retry_budget_tokens", &[]);
    assert!(budget > 900.0 && budget <= 1000.0, "{budget}");
    assert!(
        e.value(
            "load_balancer_health_checks_total",
            &[("backend", "v-bad"), ("result", "success")]
        ) >= 1.0
    );
    assert_eq!(e.value("load_balancer_inflight_requests", &[]), 0.0);
}

/// C-OBS-2: a scrape never blocks the request path. Scrapes that are held open (the client
/// sends the request and never reads the answer, with a tiny receive buffer) do not slow the
/// data plane, and other scrapes keep completing meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_obs_2_scrape_held_open_does_not_block_requests() {
    let a = Backend::start("h-a").await;
    // Many backends (one server, distinct ids and URLs) make the exposition large.
    let entries: Vec<Value> = (0..80)
        .map(|i| serde_json::json!({"id": format!("h-{i:02}"), "url": format!("{}/p{i}", a.url())}))
        .collect();
    let cfg = Config::new(&[&a])
        .management()
        .set("backends", Value::Array(entries));
    let p = Proxy::start(&bin(), &cfg).await;
    let m = p.management.expect("management listener");
    let first = send(
        m,
        &Req::get("/metrics").header("authorization", &format!("Bearer {ADMIN_TOKEN}")),
    )
    .await;
    assert!(
        first.body.len() > 64 * 1024,
        "exposition of {} bytes",
        first.body.len()
    );

    // Stalled scrapers: request sent, nothing read.
    let mut stalled = Vec::new();
    for _ in 0..8 {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.set_recv_buffer_size(1024).expect("rcvbuf");
        let mut s = socket.connect(m).await.expect("connect");
        s.write_all(
            format!(
                "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .expect("write");
        stalled.push(s);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Requests flow, and scrapes keep completing, while those are held open.
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..4 {
        let public = p.public;
        tasks.push(tokio::spawn(async move {
            let mut worst = Duration::ZERO;
            for i in 0..50 {
                let t = Instant::now();
                let r = get(public, &format!("/w{w}/{i}")).await;
                assert_eq!(r.status, 200, "{}", r.summary());
                worst = worst.max(t.elapsed());
            }
            worst
        }));
    }
    let scraper = tokio::spawn(async move {
        for _ in 0..10 {
            let r = send(
                m,
                &Req::get("/metrics").header("authorization", &format!("Bearer {ADMIN_TOKEN}")),
            )
            .await;
            assert_eq!(r.status, 200);
            prom::parse(&r.text()).expect("parses");
        }
    });
    let mut worst = Duration::ZERO;
    for t in tasks {
        worst = worst.max(t.await.expect("join"));
    }
    scraper
        .await
        .expect("scrapes completed while others were held open");
    let e = scrape(m).await;
    assert!(
        e.value(
            "load_balancer_http_requests_total",
            &[("listener", "public"), ("code", "200")]
        ) >= 200.0
    );
    // Not a benchmark: a generous bound that only a blocked request path would exceed.
    assert!(
        worst < Duration::from_secs(5),
        "a request took {worst:?} while scrapes were held open ({:?} in all)",
        start.elapsed()
    );
    drop(stalled);
}

fn access_lines(p: &Proxy) -> Vec<Value> {
    p.logs()
        .stdout()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "weir::access")
        .collect()
}

/// C-OBS-3: one JSON line per logged request with every field; errors always logged,
/// successes at the sample rate (0 here: none), the path `[redacted]`, the query never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_obs_3_access_log_errors_always_successes_sampled_path_redacted() {
    let a = Backend::start("l-a").await;
    let cfg = Config::new(&[&a])
        .management()
        .set("server.access_log_sample_rate", 0.0);
    let p = Proxy::start(&bin(), &cfg).await;
    for i in 0..10 {
        assert_eq!(
            get(p.public, &format!("/ok/{i}?token=querysecret"))
                .await
                .status,
            200
        );
    }
    a.set_mode(Mode::Status(500));
    let r = send(
        p.public,
        &Req::get("/fail/path-secret?token=querysecret").header("x-request-id", "log-req-1"),
    )
    .await;
    assert_eq!(r.status, 500);
    let lines = wait_lines(&p, 1).await;
    assert_eq!(lines.len(), 1, "only the error is logged: {lines:?}");
    let f = &lines[0]["fields"];
    assert_eq!(f["request_id"], "log-req-1");
    assert_eq!(f["listener"], "public");
    assert_eq!(f["method"], "GET");
    assert_eq!(f["path"], "[redacted]");
    assert_eq!(f["status"], 500);
    assert_eq!(f["backend"], "l-a");
    assert_eq!(f["attempts"], 1);
    assert_eq!(f["client"], "127.0.0.1");
    assert!(f["duration_ms"].as_f64().is_some_and(|d| d >= 0.0));
    let out = p.logs().stdout();
    assert!(!out.contains("querysecret") && !out.contains("path-secret"));
}

/// C-OBS-3: with `access_log_sample_rate: 1` and `access_log_include_path: true` every request
/// is logged with its path, and still never its query string.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_obs_3_access_log_every_success_with_path_never_query() {
    let a = Backend::start("l-b").await;
    let cfg = Config::new(&[&a])
        .set("server.access_log_sample_rate", 1.0)
        .set("server.access_log_include_path", true);
    let p = Proxy::start(&bin(), &cfg).await;
    for i in 0..5 {
        assert_eq!(
            get(p.public, &format!("/ok/{i}?token=querysecret"))
                .await
                .status,
            200
        );
    }
    let lines = wait_lines(&p, 5).await;
    // A line is written when its response has been sent, and each request here is a new
    // connection that may land on another worker: the lines' order is not the requests'.
    let mut paths: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["fields"]["path"].as_str())
        .collect();
    paths.sort_unstable();
    assert_eq!(paths, ["/ok/0", "/ok/1", "/ok/2", "/ok/3", "/ok/4"]);
    assert!(!p.logs().stdout().contains("querysecret"));
}

/// C-OBS-2, C-OBS-3, C-PATH-12: a head weir refuses without reading it (`400`, `414`, `431`)
/// is counted and access-logged like any other error, with its reason, the method of its
/// request line and no path; the backend sees none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_obs_3_a_refused_head_is_counted_and_logged_with_its_reason() {
    let a = Backend::start("r-a").await;
    let cfg = Config::new(&[&a])
        .management()
        .set("server.access_log_sample_rate", 0.0)
        .set("server.access_log_include_path", true);
    let p = Proxy::start(&bin(), &cfg).await;
    let long = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "x".repeat(9000));
    let cases: [(&[u8], u16, &str, &str, &str); 3] = [
        (
            b"POST /secret-path HTTP/1.0\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            400,
            "malformed_request",
            "POST",
            "HTTP/1.0",
        ),
        (long.as_bytes(), 414, "uri_too_long", "GET", "HTTP/1.1"),
        (b"\x01\x02 / HTTP/1.1\r\n\r\n", 400, "malformed_request", "-", "HTTP/1.1"),
    ];
    let mut ids = Vec::new();
    for (raw, status, ..) in &cases {
        let mut c = weir_conformance::client::Raw::connect(p.public).await;
        c.write(raw).await.expect("write");
        let head = c
            .read_head(Duration::from_secs(5))
            .await
            .expect("an answer");
        assert_eq!(head.status, *status);
        ids.push(head.header("x-request-id").expect("a request id"));
    }
    let lines = wait_lines(&p, cases.len()).await;
    assert_eq!(lines.len(), cases.len(), "{lines:?}");
    for (i, (_, status, reason, method, version)) in cases.iter().enumerate() {
        let f = &lines
            .iter()
            .find(|l| l["fields"]["request_id"] == ids[i].as_str())
            .unwrap_or_else(|| panic!("no line for case {i}: {lines:?}"))["fields"];
        assert_eq!(f["status"], *status, "{f}");
        assert_eq!(f["reason"], *reason, "{f}");
        assert_eq!(f["method"], *method, "{f}");
        assert_eq!(f["protocol"], *version, "{f}");
        assert_eq!(f["path"], "[redacted]", "{f}");
        assert_eq!(f["listener"], "public");
        assert_eq!(f["client"], "127.0.0.1");
        assert_eq!(f["attempts"], 0);
        assert!(f.get("backend").is_none_or(Value::is_null), "{f}");
    }
    assert!(!p.logs().stdout().contains("secret-path"));
    let e = scrape(p.management.expect("management listener")).await;
    let count = |code: &str| {
        e.value(
            "load_balancer_http_requests_total",
            &[("listener", "public"), ("code", code)],
        )
    };
    assert_eq!((count("400"), count("414")), (2.0, 1.0));
    assert_eq!(a.count(), 0, "nothing reached the backend");
}

async fn wait_lines(p: &Proxy, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let lines = access_lines(p);
        if lines.len() >= n || Instant::now() > deadline {
            // A little longer, to see lines that should not be there.
            tokio::time::sleep(Duration::from_millis(100)).await;
            return access_lines(p);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// C-OBS-1, C-OBS-3: a client that leaves before the response head is still counted and
/// logged, as `499`, with its request id and the backend it was waiting for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_obs_1_client_gone_is_counted_as_499() {
    let a = Backend::start("g-a").await;
    a.set_mode(Mode::Hold);
    let cfg = Config::new(&[&a])
        .management()
        .set("server.access_log_sample_rate", 0.0);
    let p = Proxy::start(&bin(), &cfg).await;
    let public = p.public;
    let client = tokio::spawn(async move {
        weir_conformance::client::try_send(
            public,
            &Req::get("/held").header("x-request-id", "gone-1"),
        )
        .await
    });
    // The request reached the backend; now the client goes away.
    a.wait_in_flight(1, Duration::from_secs(10)).await;
    client.abort();
    let _ = client.await;
    // Counted once the proxy sees the client gone (the backend still holds the answer).
    let lines = wait_lines(&p, 1).await;
    a.set_mode(Mode::Ok);
    a.release_all();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let f = &lines[0]["fields"];
    assert_eq!(f["status"], 499);
    assert_eq!(f["request_id"], "gone-1");
    assert_eq!(f["backend"], "g-a");
    let e = scrape(p.management.expect("management listener")).await;
    assert_eq!(
        e.value(
            "load_balancer_http_requests_total",
            &[("listener", "public"), ("code", "499")]
        ),
        1.0
    );
    assert_eq!(
        e.value(
            "load_balancer_upstream_attempts_total",
            &[("backend", "g-a"), ("outcome", "cancelled")]
        ),
        1.0,
        "the attempt was dropped with the request"
    );
}
