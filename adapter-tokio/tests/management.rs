//! The management plane over real sockets against the `weir` binary (C-MGMT-1..5, C-OBS-3,
//! C-OBS-4): the authentication matrix, the guard matrix of every mutating endpoint with "no
//! state change" checked after each refusal, the mutations themselves, the synthetic dashboard
//! request's header whitelist, `runtime_mutations: false`, `allow_insecure`, and the access log
//! of mutations. Readiness with a fail-closed store runs in-process (a store that is down).

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use weir_conformance::backend::Backend;
use weir_conformance::client::{Req, get, send};
use weir_conformance::config::{ADMIN_TOKEN, Config};
use weir_conformance::harness::{Binary, Proxy, StartOptions};
use weir_conformance::util::wait_until;

#[path = "support/prom.rs"]
mod prom;

/// The binary under test: `weir` here; `weir-smol` when adapter-smol's tests include this file
/// (one source for both runtimes).
fn bin() -> Binary {
    let path = option_env!("CARGO_BIN_EXE_weir-smol").or(option_env!("CARGO_BIN_EXE_weir"));
    Binary::new(path.expect("cargo names the proxy binary under test"))
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// A management request with the right token.
fn authed(method: &str, path: &str) -> Req {
    Req::new(method, path).header("authorization", &bearer(ADMIN_TOKEN))
}

/// A mutating request that passes every C-MGMT-2 guard.
fn mutation(method: &str, path: &str, body: &str) -> Req {
    authed(method, path)
        .header("x-balancer-csrf", "1")
        .header("content-type", "application/json")
        .body(body)
}

/// Every endpoint: (method, path, a valid body for mutations).
const ENDPOINTS: &[(&str, &str, &str)] = &[
    ("GET", "/healthz", ""),
    ("GET", "/readyz", ""),
    ("GET", "/metrics", ""),
    ("GET", "/api/dashboard/status", ""),
    ("GET", "/api/dashboard/request", ""),
    ("POST", "/api/dashboard/backends", r#"{"count": 1}"#),
    (
        "POST",
        "/api/dashboard/backends/m-a",
        r#"{"enabled": false}"#,
    ),
    ("POST", "/api/dashboard/backends/m-a/drain", "{}"),
    ("POST", "/api/dashboard/limit", r#"{"capacity": 3}"#),
    (
        "PATCH",
        "/api/dashboard/config",
        r#"{"retry": {"max_attempts": 3}}"#,
    ),
];

/// The state a refused request must not change: every backend's flags, the dynamic settings,
/// and the caller's bucket (read without taking a token).
async fn state(m: SocketAddr) -> Value {
    let r = send(m, &authed("GET", "/api/dashboard/status")).await;
    assert_eq!(r.status, 200, "status: {}", r.summary());
    let doc = r.json();
    let backends: Vec<Value> = doc["backends"]
        .as_array()
        .expect("backends")
        .iter()
        .map(|b| json!([b["id"], b["enabled"], b["draining"]]))
        .collect();
    let mut retry = doc["retry"].clone();
    retry["budget"]["tokens"] = Value::Null;
    json!({
        "backends": backends,
        "retry": retry,
        "rate_limit": doc["rate_limit"],
        "health_check": doc["health_check"],
        "bucket_tokens": doc["bucket"]["tokens"],
    })
}

fn proxy_config(a: &Backend, b: &Backend) -> Config {
    Config::new(&[a, b])
        .management()
        .set("management.runtime_mutations", true)
        .set("server.access_log_sample_rate", 0.0)
        .rate_limit(100, 0.001)
}

/// C-MGMT-1: every endpoint × {no token, wrong token, right token}. Without a valid token:
/// `401` with `WWW-Authenticate: Bearer` and `Cache-Control: no-store`, nothing changes, and
/// the synthetic request never reaches the data plane (C-MGMT-5). With it: the endpoint's own
/// answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_mgmt_1_auth_matrix() {
    let (a, b) = (Backend::start("m-a").await, Backend::start("m-b").await);
    let p = Proxy::start(&bin(), &proxy_config(&a, &b)).await;
    let m = p.management.expect("management listener");
    let before = state(m).await;
    let served = a.count() + b.count();
    for (method, path, body) in ENDPOINTS {
        for auth in [None, Some("wrong-token"), Some("Bearer"), Some("")] {
            let mut req = Req::new(method, path)
                .header("x-balancer-csrf", "1")
                .header("content-type", "application/json");
            if !body.is_empty() {
                req = req.body(body);
            }
            if let Some(t) = auth {
                req = req.header("authorization", &bearer(t));
            }
            let r = send(m, &req).await;
            assert_eq!(
                r.status,
                401,
                "{method} {path} with {auth:?}: {}",
                r.summary()
            );
            assert_eq!(r.header("www-authenticate").as_deref(), Some("Bearer"));
            assert_eq!(r.header("cache-control").as_deref(), Some("no-store"));
            assert!(r.header("x-request-id").is_some());
            assert_eq!(r.json()["code"], 401);
        }
    }
    // A lower-case scheme is still the right token (RFC 7235); two headers are not.
    let r = send(
        m,
        &Req::get("/healthz").header("authorization", &format!("bearer {ADMIN_TOKEN}")),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.summary());
    let r = send(
        m,
        &authed("GET", "/healthz").header("authorization", &bearer("other")),
    )
    .await;
    assert_eq!(r.status, 401);
    assert_eq!(state(m).await, before, "a refused request changed state");
    assert_eq!(
        a.count() + b.count(),
        served,
        "a refused request reached a backend"
    );

    // The right token: reads answer.
    for (path, status) in [
        ("/healthz", 200),
        ("/readyz", 200),
        ("/metrics", 200),
        ("/api/dashboard/status", 200),
        ("/api/dashboard/request", 200),
    ] {
        let r = send(m, &authed("GET", path)).await;
        assert_eq!(r.status, status, "{path}: {}", r.summary());
        assert_eq!(r.header("cache-control").as_deref(), Some("no-store"));
        let h = send(m, &authed("HEAD", path)).await;
        assert_eq!(h.status, status, "HEAD {path}");
        assert!(h.body.is_empty());
    }
    let metrics = send(m, &authed("GET", "/metrics")).await;
    assert!(
        metrics
            .header("content-type")
            .is_some_and(|c| c.starts_with("application/openmetrics-text")),
        "{:?}",
        metrics.header("content-type")
    );
    prom::parse(&metrics.text()).expect("exposition parses");
    // Unknown path 404, wrong method 405 with Allow (after authentication).
    let r = send(m, &authed("GET", "/api/dashboard/nope")).await;
    assert_eq!(r.status, 404);
    let r = send(m, &authed("POST", "/api/dashboard/status")).await;
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow").as_deref(), Some("GET, HEAD"));
    let r = send(m, &authed("GET", "/api/dashboard/config")).await;
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow").as_deref(), Some("PATCH"));
    // Nothing of the token reaches the output.
    assert!(!p.logs().stdout().contains(ADMIN_TOKEN));
    assert!(!p.logs().stderr().contains(ADMIN_TOKEN));
}

/// C-MGMT-2: every mutating endpoint × {no CSRF header, wrong value, cross-site, text/plain,
/// oversized body, two JSON objects, unknown field, array, empty}: the status weir-core names
/// and no state change; then the valid request applies (C-MGMT-4) and is access-logged
/// (C-MGMT-5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_mgmt_2_guard_matrix_and_mutations() {
    let (a, b) = (Backend::start("m-a").await, Backend::start("m-b").await);
    let p = Proxy::start(&bin(), &proxy_config(&a, &b)).await;
    let m = p.management.expect("management listener");
    let before = state(m).await;
    let oversized = format!(r#"{{"count": 1, "pad": "{}"}}"#, "x".repeat(70 * 1024));
    let mut refusals = 0;
    for (method, path, body) in ENDPOINTS.iter().filter(|e| e.0 != "GET") {
        let base = || authed(method, path);
        let unknown_field = format!(
            "{}, \"unknown\": 1}}",
            body.trim_end_matches('}').trim_end()
        );
        let unknown_field = if *body == "{}" {
            r#"{"unknown": 1}"#.to_string()
        } else {
            unknown_field
        };
        let cases: Vec<(&str, Req, u16)> = vec![
            (
                "no csrf",
                base().header("content-type", "application/json").body(body),
                403,
            ),
            (
                "csrf 0",
                base()
                    .header("x-balancer-csrf", "0")
                    .header("content-type", "application/json")
                    .body(body),
                403,
            ),
            (
                "csrf true",
                base()
                    .header("x-balancer-csrf", "true")
                    .header("content-type", "application/json")
                    .body(body),
                403,
            ),
            (
                "cross-site",
                mutation(method, path, body).header("sec-fetch-site", "cross-site"),
                403,
            ),
            (
                "text/plain",
                base()
                    .header("x-balancer-csrf", "1")
                    .header("content-type", "text/plain")
                    .body(body),
                415,
            ),
            (
                "no content-type",
                base().header("x-balancer-csrf", "1").body(body),
                415,
            ),
            ("oversized", mutation(method, path, &oversized), 413),
            (
                "two objects",
                mutation(method, path, &format!("{body}{body}")),
                400,
            ),
            ("unknown field", mutation(method, path, &unknown_field), 400),
            ("array", mutation(method, path, &format!("[{body}]")), 400),
            ("empty", mutation(method, path, ""), 400),
            ("not json", mutation(method, path, "count=1"), 400),
        ];
        for (what, req, status) in cases {
            let r = send(m, &req).await;
            assert_eq!(r.status, status, "{method} {path} {what}: {}", r.summary());
            assert_eq!(r.header("cache-control").as_deref(), Some("no-store"));
            assert_eq!(r.json()["code"], status);
            refusals += 1;
            assert_eq!(
                state(m).await,
                before,
                "{method} {path} {what} changed state"
            );
        }
    }
    // Handler-level refusals change nothing either.
    for (req, status) in [
        (
            mutation("POST", "/api/dashboard/backends", r#"{"count": 0}"#),
            400,
        ),
        (
            mutation("POST", "/api/dashboard/backends", r#"{"count": 3}"#),
            400,
        ),
        (
            mutation(
                "POST",
                "/api/dashboard/backends/nope",
                r#"{"enabled": true}"#,
            ),
            404,
        ),
        (
            mutation("POST", "/api/dashboard/backends/nope/drain", "{}"),
            404,
        ),
        (
            mutation("POST", "/api/dashboard/limit", r#"{"capacity": 101}"#),
            400,
        ),
        (
            mutation(
                "PATCH",
                "/api/dashboard/config",
                r#"{"retry": {"max_attempts": 9}, "rate_limit": {"capacity": 0}}"#,
            ),
            400,
        ),
    ] {
        let r = send(m, &req).await;
        assert_eq!(
            r.status,
            status,
            "{} {}: {}",
            req.method,
            req.target,
            r.summary()
        );
        refusals += 1;
        assert_eq!(
            state(m).await,
            before,
            "{} {} changed state",
            req.method,
            req.target
        );
    }
    let r = send(
        m,
        &mutation(
            "PATCH",
            "/api/dashboard/config",
            r#"{"retry": {"max_attempts": 9}, "rate_limit": {"capacity": 0}}"#,
        ),
    )
    .await;
    let paths: Vec<String> = r.json()["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| e["path"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        paths.contains(&"server.retry.max_attempts".to_string())
            && paths.contains(&"rate_limit.capacity".to_string()),
        "{paths:?}"
    );

    // The valid mutations apply.
    let r = send(
        m,
        &mutation("POST", "/api/dashboard/backends", r#"{"count": 1}"#),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.summary());
    let s = state(m).await;
    assert_eq!(
        s["backends"],
        json!([["m-a", true, false], ["m-b", false, false]])
    );
    let r = send(
        m,
        &mutation(
            "POST",
            "/api/dashboard/backends/m-b",
            r#"{"enabled": true}"#,
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.summary());
    let r = send(
        m,
        &mutation("POST", "/api/dashboard/backends/m-a/drain", "{}"),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.summary());
    let s = state(m).await;
    assert_eq!(
        s["backends"],
        json!([["m-a", true, true], ["m-b", true, false]])
    );
    // Traffic now goes to m-b only (m-a drains).
    for _ in 0..4 {
        assert_eq!(get(p.public, "/x").await.backend().as_deref(), Some("m-b"));
    }
    let r = send(
        m,
        &mutation(
            "POST",
            "/api/dashboard/backends/m-a",
            r#"{"enabled": true}"#,
        ),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        state(m).await["backends"],
        json!([["m-a", true, false], ["m-b", true, false]]),
        "enabling clears a drain"
    );
    // The caller's bucket: 100 - 4 requests; set it to 3.
    let r = send(
        m,
        &mutation("POST", "/api/dashboard/limit", r#"{"capacity": 3}"#),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.summary());
    assert_eq!(state(m).await["bucket_tokens"], 3);
    for _ in 0..3 {
        assert_eq!(get(p.public, "/x").await.status, 200);
    }
    assert_eq!(get(p.public, "/x").await.status, 429);
    let r = send(
        m,
        &mutation("POST", "/api/dashboard/limit", r#"{"capacity": 100}"#),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(state(m).await["bucket_tokens"], 100);
    // PATCH goes through the reload path (C-CONF-8) and shows in the status.
    let r = send(
        m,
        &mutation(
            "PATCH",
            "/api/dashboard/config",
            r#"{"retry": {"max_attempts": 3, "per_try_timeout": "750ms"}, "rate_limit": {"capacity": 50}, "health_check": {"interval": "200ms"}}"#,
        ),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.summary());
    assert_eq!(r.json(), json!({"status": "applied"}));
    let s = state(m).await;
    assert_eq!(s["retry"]["max_attempts"], 3);
    assert_eq!(s["retry"]["per_try_timeout"], "750ms");
    assert_eq!(s["rate_limit"]["capacity"], 50);
    assert_eq!(s["health_check"]["interval"], "200ms");
    assert_eq!(get(p.public, "/x").await.status, 200);

    // C-MGMT-5: every mutation is access-logged (sample rate 0: successes are not). A line is
    // written when its response is done, which may be a moment after the client has read it:
    // wait for the expected count, then check that it is exact.
    let management_lines = || -> Vec<Value> {
        p.logs()
            .stdout()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["target"] == "weir::access" && v["fields"]["listener"] == "management")
            .collect()
    };
    let count_mutations = |lines: &[Value]| {
        lines
            .iter()
            .filter(|v| v["fields"]["method"] != "GET" && v["fields"]["method"] != "HEAD")
            .count()
    };
    wait_until(Duration::from_secs(5), "mutation access-log lines", || {
        count_mutations(&management_lines()) >= refusals + 8
    })
    .await;
    let lines = management_lines();
    let mutations = count_mutations(&lines);
    // Every refusal, the repeated invalid PATCH and the 7 valid mutations: one line each.
    assert_eq!(
        mutations,
        refusals + 8,
        "mutation lines for {refusals} refusals and 8 more mutations"
    );
    for l in &lines {
        let f = &l["fields"];
        for key in [
            "request_id",
            "listener",
            "method",
            "path",
            "status",
            "duration_ms",
            "client",
        ] {
            assert!(!f[key].is_null(), "no {key} in {l}");
        }
        assert_eq!(f["path"], "[redacted]");
    }
    assert!(
        lines
            .iter()
            .any(|l| l["fields"]["endpoint"] == "set_enabled" && l["fields"]["status"] == 200),
        "no set_enabled line"
    );
    assert!(!p.logs().stdout().contains(ADMIN_TOKEN));
}

/// C-MGMT-4: `/api/dashboard/request` sends one `GET /` through the data plane with only the
/// whitelisted headers (a backend records what it received), from the caller's address and
/// through the same limiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_mgmt_4_dashboard_request_forwards_only_whitelisted_headers() {
    let a = Backend::start("d-a").await;
    let cfg = Config::new(&[&a]).management().rate_limit(3, 0.001);
    let p = Proxy::start(&bin(), &cfg).await;
    let m = p.management.expect("management listener");
    let sent = [
        ("accept", "application/json"),
        ("accept-language", "de"),
        ("user-agent", "console/1"),
        ("x-request-id", "dash-req-1"),
        (
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ),
        ("tracestate", "vendor=1"),
        ("cookie", "session=cookie-secret"),
        ("proxy-authorization", "Basic cHJveHk="),
        ("x-balancer-csrf", "1"),
        ("x-custom", "nope"),
        ("x-forwarded-for", "203.0.113.7"),
        ("forwarded", "for=203.0.113.8"),
        ("origin", "http://console.example"),
    ];
    let mut req = authed("GET", "/api/dashboard/request");
    for (n, v) in sent {
        req = req.header(n, v);
    }
    let r = send(m, &req).await;
    assert_eq!(r.status, 200, "{}", r.summary());
    let doc = r.json();
    assert_eq!(doc["status"], 200, "{doc}");
    assert_eq!(doc["backend"], "d-a");
    assert_eq!(doc["attempts"], 1);
    assert_eq!(doc["request_id"], "dash-req-1");
    assert_eq!(doc["headers"]["x-ratelimit-remaining"], "2");
    let seen = a.last().expect("the backend saw the synthetic request");
    assert_eq!(seen.method, "GET");
    assert_eq!(seen.target, "/");
    for (n, v) in &sent[..6] {
        assert_eq!(seen.header(n).as_deref(), Some(*v), "{n} not forwarded");
    }
    for n in [
        "authorization",
        "cookie",
        "proxy-authorization",
        "x-balancer-csrf",
        "x-custom",
        "forwarded",
        "origin",
    ] {
        assert!(!seen.has_header(n), "{n} reached the backend");
    }
    // The data plane resolved the caller's own address (no forwarding header was believed).
    assert_eq!(seen.header("x-forwarded-for").as_deref(), Some("127.0.0.1"));
    // Every header the backend got is whitelisted or written by the proxy itself.
    let allowed = [
        "accept",
        "accept-language",
        "user-agent",
        "x-request-id",
        "traceparent",
        "tracestate",
        "host",
        "x-forwarded-for",
        "x-real-ip",
        "x-forwarded-host",
        "x-forwarded-proto",
        "x-balancer-backend-attempt",
    ];
    for (n, _) in &seen.headers {
        assert!(
            allowed.contains(&n.as_str()),
            "unexpected header {n} upstream"
        );
    }
    // Same limiter and client address: the caller's bucket (3) is shared with the data plane.
    assert_eq!(get(p.public, "/x").await.status, 200);
    let r = send(m, &authed("GET", "/api/dashboard/request")).await;
    assert_eq!(r.json()["status"], 200);
    let r = send(m, &authed("GET", "/api/dashboard/request")).await;
    assert_eq!(r.json()["status"], 429, "{}", r.text());
}

/// C-MGMT-3: with `runtime_mutations: false` every mutation is `403` (after the C-MGMT-2
/// guards) and nothing changes; reads keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_mgmt_3_runtime_mutations_off() {
    let (a, b) = (Backend::start("m-a").await, Backend::start("m-b").await);
    let cfg = proxy_config(&a, &b).unset("management.runtime_mutations");
    let p = Proxy::start(&bin(), &cfg).await;
    let m = p.management.expect("management listener");
    let before = state(m).await;
    for (method, path, body) in ENDPOINTS.iter().filter(|e| e.0 != "GET") {
        let r = send(m, &mutation(method, path, body)).await;
        assert_eq!(r.status, 403, "{method} {path}: {}", r.summary());
        assert!(
            r.json()["message"]
                .as_str()
                .is_some_and(|s| s.contains("declarative")),
            "{}",
            r.text()
        );
        // A guard failure still answers as a guard failure.
        let r = send(
            m,
            &authed(method, path)
                .header("x-balancer-csrf", "1")
                .header("content-type", "text/plain")
                .body(body),
        )
        .await;
        assert_eq!(r.status, 415);
    }
    assert_eq!(state(m).await, before);
    for (_, path, _) in ENDPOINTS.iter().filter(|e| e.0 == "GET") {
        assert_eq!(send(m, &authed("GET", path)).await.status, 200, "{path}");
    }
    assert_eq!(state(m).await["backends"], before["backends"]);
}

/// C-MGMT-1: `allow_insecure` lifts authentication and the process warns at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_mgmt_1_allow_insecure_warns() {
    let a = Backend::start("i-a").await;
    let cfg = Config::new(&[&a])
        .set("management.enabled", true)
        .set("management.address", "127.0.0.1:9090")
        .set("management.allow_insecure", true);
    let yaml = cfg.yaml();
    let opts = StartOptions {
        management_bind: Some("127.0.0.1:0".into()),
        ..StartOptions::default()
    };
    let p = Proxy::start_with(&bin(), &yaml, opts)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let m = p.management.expect("management listener");
    let r = send(m, &Req::get("/api/dashboard/status")).await;
    assert_eq!(r.status, 200, "{}", r.summary());
    wait_until(Duration::from_secs(5), "insecure warning", || {
        p.logs().stdout().lines().any(|l| {
            serde_json::from_str::<Value>(l).is_ok_and(|v| {
                v["level"] == "WARN"
                    && v["fields"]["message"]
                        .as_str()
                        .is_some_and(|s| s.contains("allow_insecure"))
            })
        })
    })
    .await;
}

/// C-MGMT-5: a wrong token never affects the data plane; C-PATH-1: the data plane exposes no
/// management endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_mgmt_5_wrong_token_leaves_data_plane_alone() {
    let a = Backend::start("w-a").await;
    let p = Proxy::start(
        &bin(),
        &Config::new(&[&a]).management().rate_limit(5, 0.001),
    )
    .await;
    let m = p.management.expect("management listener");
    for _ in 0..20 {
        let r = send(
            m,
            &Req::get("/api/dashboard/request").header("authorization", &bearer("wrong")),
        )
        .await;
        assert_eq!(r.status, 401);
    }
    assert_eq!(a.count(), 0);
    for _ in 0..4 {
        assert_eq!(get(p.public, "/x").await.status, 200, "bucket untouched");
    }
    let r = send(p.public, &authed("GET", "/metrics")).await;
    assert_eq!(r.backend().as_deref(), Some("w-a"), "proxied, not served");
}
