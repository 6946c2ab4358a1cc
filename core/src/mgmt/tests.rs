//! Management API: authentication (C-MGMT-1), guards in order (C-MGMT-2), runtime_mutations
//! (C-MGMT-3), endpoints (C-MGMT-4) and the shared apply path (C-CONF-8).

use std::net::{IpAddr, Ipv4Addr};

use http::{HeaderMap, HeaderValue, Method};
use proptest::prelude::*;

use super::*;
use crate::config::{MapSecrets, Secret, load};
use crate::rate::ClientKey;
use crate::response::ManagementError;
use crate::rng::WyRand;
use crate::runtime::Runtime;
use crate::time::Instant;

const TOKEN: &str = "s3cret-token-value";
const T0: Instant = Instant::ZERO;
const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9));

fn text(mutations: bool) -> String {
    format!(
        "management:\n  enabled: true\n  auth_token_env: ADMIN\n  runtime_mutations: {mutations}\n\
         rate_limit:\n  enabled: true\n  capacity: 10\n  refill_per_second: 5\n\
         backends:\n  - id: a\n    url: http://10.0.0.1:80\n  - id: b\n    url: http://10.0.0.2:80\n  \
         - id: c\n    url: http://10.0.0.3:80\n\
         pools:\n  api:\n    backends:\n      - id: api/1\n        url: http://10.0.1.1:80\n\
         routes:\n  - prefix: /api\n    pool: api\n    max_concurrent_requests: 5\n"
    )
}

fn runtime(mutations: bool) -> Runtime {
    let secrets = MapSecrets::new().with_env("ADMIN", TOKEN);
    let v = load(&text(mutations), &secrets).expect("valid");
    Runtime::build(v, None, T0, &mut WyRand::new(1)).expect("runtime")
}

/// A request under construction.
#[derive(Clone)]
struct Req {
    method: Method,
    path: String,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Req {
    fn new(method: Method, path: &str) -> Req {
        Req {
            method,
            path: path.to_owned(),
            headers: HeaderMap::new(),
            body: Vec::new(),
        }
    }

    fn header(mut self, name: &'static str, value: &str) -> Req {
        self.headers
            .append(name, HeaderValue::from_str(value).expect("value"));
        self
    }

    fn without(mut self, name: &'static str) -> Req {
        self.headers.remove(name);
        self
    }

    fn bearer(self, token: &str) -> Req {
        self.header("authorization", &format!("Bearer {token}"))
    }

    fn authed(self) -> Req {
        self.bearer(TOKEN)
    }

    /// A well-formed mutating request: token, CSRF header, JSON body.
    fn mutation(method: Method, path: &str, body: &str) -> Req {
        let mut r = Req::new(method, path)
            .authed()
            .header("x-balancer-csrf", "1")
            .header("content-type", "application/json; charset=utf-8")
            .header("sec-fetch-site", "same-origin");
        r.body = body.as_bytes().to_vec();
        r
    }

    fn body(mut self, body: &[u8]) -> Req {
        self.body = body.to_vec();
        self
    }

    fn view(&self) -> MgmtRequest<'_> {
        MgmtRequest {
            method: &self.method,
            path: &self.path,
            headers: &self.headers,
            body: &self.body,
            client: CLIENT,
        }
    }

    fn handle(&self, rt: &Runtime) -> Decision {
        handle(&self.view(), rt, T0, &mut WyRand::new(9))
    }
}

/// One valid request per endpoint (reads: GET; mutations: a body the handler accepts).
fn every_endpoint() -> Vec<Req> {
    let get = |p: &str| Req::new(Method::GET, p).authed();
    let post = |p: &str, b: &str| Req::mutation(Method::POST, p, b);
    vec![
        get("/healthz"),
        get("/readyz"),
        get("/metrics"),
        get("/api/dashboard/status"),
        get("/api/dashboard/request"),
        post("/api/dashboard/backends", r#"{"count": 2}"#),
        post("/api/dashboard/backends/b", r#"{"enabled": false}"#),
        post("/api/dashboard/backends/c/drain", "{}"),
        post("/api/dashboard/limit", r#"{"capacity": 3}"#),
        Req::mutation(
            Method::PATCH,
            "/api/dashboard/config",
            r#"{"rate_limit": {"capacity": 20}}"#,
        ),
    ]
}

/// Everything a management request could change: backend flags and the configuration.
fn snapshot(rt: &Runtime) -> (Vec<(String, bool, bool, bool)>, crate::config::Config) {
    let backends = rt
        .backends()
        .map(|(_, b)| {
            (
                b.id().to_owned(),
                b.is_enabled(),
                b.is_draining(),
                b.is_healthy(),
            )
        })
        .collect();
    (backends, rt.config().config.clone())
}

fn refused(d: &Decision) -> Option<ManagementError> {
    match d {
        Decision::Reply(Reply::Refused(e)) => Some(*e),
        // A refused body and an unknown backend id are answered with their details
        // (`body::problem`, `unknown_backend`); the class is the same.
        Decision::Reply(Reply::Problem {
            status: 400,
            message,
            ..
        }) if message.starts_with("request body") => Some(ManagementError::BadRequest),
        Decision::Reply(Reply::Problem {
            status: 404,
            message,
            ..
        }) if message.starts_with("no backend with id") => Some(ManagementError::NotFound),
        _ => None,
    }
}

#[test]
fn c_mgmt_1_every_endpoint_needs_the_token() {
    for req in every_endpoint() {
        let rt = runtime(true);
        let before = snapshot(&rt);
        let no_token = req.clone().without("authorization");
        let wrong = req
            .clone()
            .without("authorization")
            .bearer("s3cret-token-valuf");
        let prefix = req.clone().without("authorization").bearer("s3cret");
        let longer = req
            .clone()
            .without("authorization")
            .bearer(&format!("{TOKEN}x"));
        let basic = req
            .clone()
            .without("authorization")
            .header("authorization", &format!("Basic {TOKEN}"));
        let twice = req.clone().bearer(TOKEN);
        for bad in [no_token, wrong, prefix, longer, basic, twice] {
            let d = bad.handle(&rt);
            assert_eq!(
                refused(&d),
                Some(ManagementError::Unauthorized),
                "{} {}",
                req.method,
                req.path
            );
        }
        assert_eq!(snapshot(&rt), before, "a refused request changes nothing");
        let d = req.handle(&rt);
        assert!(
            d.reply().is_none_or(|r| r.status() < 300),
            "{} {}: {:?}",
            req.method,
            req.path,
            d.reply()
        );
        let lower = req
            .clone()
            .without("authorization")
            .header("authorization", &format!("bearer {TOKEN}"));
        assert!(
            refused(&lower.handle(&runtime(true))).is_none(),
            "scheme is case-insensitive"
        );
    }
}

#[test]
fn c_mgmt_1_auth_comes_before_routing_and_guards() {
    let rt = runtime(true);
    let unknown = Req::new(Method::GET, "/nope");
    assert_eq!(
        refused(&unknown.handle(&rt)),
        Some(ManagementError::Unauthorized)
    );
    let cross = Req::mutation(Method::POST, "/api/dashboard/backends", "{}")
        .without("authorization")
        .header("sec-fetch-site", "cross-site");
    assert_eq!(
        refused(&cross.handle(&rt)),
        Some(ManagementError::Unauthorized)
    );
    let wrong_method = Req::new(Method::DELETE, "/metrics");
    assert_eq!(
        refused(&wrong_method.handle(&rt)),
        Some(ManagementError::Unauthorized)
    );
}

#[test]
fn c_mgmt_1_allow_insecure_lifts_the_token_and_nothing_else() {
    let req = Req::new(Method::GET, "/metrics");
    let token = Secret::new(TOKEN);
    assert!(authorize(&req.view(), None, true).is_ok());
    assert!(authorize(&req.view(), Some(&token), true).is_ok());
    assert_eq!(
        authorize(&req.view(), None, false),
        Err(ManagementError::Unauthorized),
        "no token configured and not insecure: nobody gets in"
    );
    let access = Access {
        token: None,
        allow_insecure: true,
        runtime_mutations: true,
    };
    let cross = Req::mutation(Method::POST, "/api/dashboard/limit", r#"{"capacity":1}"#)
        .header("sec-fetch-site", "cross-site");
    assert_eq!(
        parse(&cross.view(), &access),
        Err(ManagementError::CrossSite)
    );
}

#[test]
fn c_mgmt_2_guards_apply_in_order_and_change_nothing() {
    let rt = runtime(true);
    let before = snapshot(&rt);
    let good = Req::mutation(Method::POST, "/api/dashboard/backends", r#"{"count": 1}"#);
    let big = vec![b' '; MAX_BODY_BYTES + 1];

    // Everything wrong at once; fix one thing at a time and the next check speaks.
    let r = good
        .clone()
        .without("sec-fetch-site")
        .header("sec-fetch-site", "cross-site")
        .without("x-balancer-csrf")
        .without("content-type")
        .header("content-type", "text/plain")
        .body(&big);
    let steps: Vec<(Req, ManagementError)> = vec![
        (r.clone(), ManagementError::CrossSite),
        (
            r.clone()
                .without("sec-fetch-site")
                .header("sec-fetch-site", "same-origin"),
            ManagementError::CsrfHeader,
        ),
    ];
    let r = r.without("sec-fetch-site");
    let mut cases = steps;
    cases.push((r.clone(), ManagementError::CsrfHeader));
    cases.push((
        r.clone().header("x-balancer-csrf", "true"),
        ManagementError::CsrfHeader,
    ));
    cases.push((
        r.clone().header("x-balancer-csrf", " 1"),
        ManagementError::CsrfHeader,
    ));
    cases.push((
        r.clone()
            .header("x-balancer-csrf", "1")
            .header("x-balancer-csrf", "1"),
        ManagementError::CsrfHeader,
    ));
    let r = r.header("x-balancer-csrf", "1");
    cases.push((r.clone(), ManagementError::UnsupportedMediaType));
    cases.push((
        r.clone()
            .without("content-type")
            .header("content-type", "application/jsonx"),
        ManagementError::UnsupportedMediaType,
    ));
    cases.push((
        r.clone().without("content-type"),
        ManagementError::UnsupportedMediaType,
    ));
    let r = r
        .without("content-type")
        .header("content-type", "Application/JSON ; charset=utf-8");
    cases.push((r.clone(), ManagementError::PayloadTooLarge));
    for body in [
        &br#"{"count": 1}{"count": 1}"#[..],
        br#"{"count": 1} x"#,
        br#"[1]"#,
        br#""#,
        br#"null"#,
        br#"{"count": 1, "extra": true}"#,
        br#"{"count": 1, "count": 2}"#,
        br#"{"count": "1"}"#,
        br#"{"count": -1}"#,
    ] {
        cases.push((r.clone().body(body), ManagementError::BadRequest));
    }
    for (req, expected) in &cases {
        let d = req.handle(&rt);
        assert_eq!(
            refused(&d),
            Some(*expected),
            "body {:?}",
            String::from_utf8_lossy(&req.body).get(..40)
        );
        let resp = d.reply().expect("reply").to_http("rid");
        assert_eq!(resp.status().as_u16(), expected.status());
        assert_eq!(resp.headers()["cache-control"], "no-store");
        assert_eq!(snapshot(&rt), before, "{expected:?} changed state");
    }
    // Exactly 64 KiB is allowed; whitespace around the object is fine.
    let mut body = br#"{"count": 1}"#.to_vec();
    body.resize(MAX_BODY_BYTES, b' ');
    let d = r.clone().body(&body).handle(&rt);
    assert_eq!(d.reply().map(Reply::status), Some(200));
}

#[test]
fn c_mgmt_3_mutations_disabled_refuse_every_mutation_but_reads_work() {
    let rt = runtime(false);
    let before = snapshot(&rt);
    for req in every_endpoint() {
        let d = req.handle(&rt);
        if route(&req.method, &req.path).expect("route").is_mutating() {
            assert_eq!(
                refused(&d),
                Some(ManagementError::MutationsDisabled),
                "{}",
                req.path
            );
            let body = d.reply().expect("reply").body("r");
            assert!(body.contains("declaratively"), "{body}");
        } else {
            assert!(matches!(d, Decision::Read(_)), "{}", req.path);
        }
    }
    assert_eq!(snapshot(&rt), before);
    // The form is checked first: a cross-site request gets the same answer either way.
    let cross = Req::mutation(Method::POST, "/api/dashboard/limit", r#"{"capacity":1}"#)
        .without("sec-fetch-site")
        .header("sec-fetch-site", "cross-site");
    assert_eq!(
        refused(&cross.handle(&rt)),
        Some(ManagementError::CrossSite)
    );
}

#[test]
fn c_mgmt_4_routing_404_405_and_head() {
    let m = |s: &str| Method::from_bytes(s.as_bytes()).expect("method");
    assert_eq!(route(&Method::GET, "/nope"), Err(ManagementError::NotFound));
    assert_eq!(
        route(&Method::GET, "/api/dashboard/status/"),
        Err(ManagementError::NotFound)
    );
    assert_eq!(
        route(&Method::POST, "/api/dashboard/backends/"),
        Err(ManagementError::NotFound)
    );
    assert_eq!(
        route(&Method::POST, "/api/dashboard/backends/a/b"),
        Err(ManagementError::NotFound)
    );
    assert_eq!(
        route(&Method::POST, "/api/dashboard/backends/%zz"),
        Err(ManagementError::NotFound)
    );
    assert_eq!(
        route(&Method::HEAD, "/api/dashboard/status"),
        Ok(Endpoint::Status)
    );
    assert_eq!(route(&Method::GET, "/metrics?x=1"), Ok(Endpoint::Metrics));
    assert_eq!(
        route(&Method::POST, "/api/dashboard/status"),
        Err(ManagementError::MethodNotAllowed { allow: "GET, HEAD" })
    );
    assert_eq!(
        route(&Method::GET, "/api/dashboard/backends"),
        Err(ManagementError::MethodNotAllowed { allow: "POST" })
    );
    assert_eq!(
        route(&Method::POST, "/api/dashboard/config"),
        Err(ManagementError::MethodNotAllowed { allow: "PATCH" })
    );
    assert_eq!(
        route(&m("HEAD"), "/api/dashboard/limit"),
        Err(ManagementError::MethodNotAllowed { allow: "POST" })
    );
    assert_eq!(
        route(&Method::POST, "/api/dashboard/backends/api%2F1/drain"),
        Ok(Endpoint::Drain { id: "api/1".into() })
    );
    assert_eq!(
        route(&Method::POST, "/api/dashboard/backends/x%2Fdrain"),
        Ok(Endpoint::SetEnabled {
            id: "x/drain".into()
        })
    );
    let resp = Reply::Refused(ManagementError::MethodNotAllowed { allow: "POST" }).to_http("r");
    assert_eq!(resp.headers()["allow"], "POST");
    let rt = runtime(true);
    let d = Req::new(Method::PUT, "/healthz").authed().handle(&rt);
    assert_eq!(
        refused(&d),
        Some(ManagementError::MethodNotAllowed { allow: "GET, HEAD" })
    );
}

fn status(d: &Decision) -> u16 {
    d.reply().expect("reply").status()
}

#[test]
fn c_mgmt_4_count_enables_the_first_n_of_the_default_pool() {
    let rt = runtime(true);
    let count = |n: i64| {
        Req::mutation(
            Method::POST,
            "/api/dashboard/backends",
            &format!(r#"{{"count": {n}}}"#),
        )
    };
    let before = snapshot(&rt);
    for bad in [0, 4] {
        let d = count(bad).handle(&rt);
        assert_eq!(status(&d), 400, "count {bad}");
        assert!(d.reply().expect("reply").body("r").contains("1..=3"));
        assert_eq!(snapshot(&rt), before);
    }
    assert_eq!(status(&count(2).handle(&rt)), 200);
    let enabled: Vec<bool> = rt.pools()[0]
        .backends()
        .iter()
        .map(|b| b.is_enabled())
        .collect();
    assert_eq!(enabled, [true, true, false]);
    assert!(
        rt.find_backend("api/1").expect("api").1.is_enabled(),
        "other pools untouched"
    );
    assert_eq!(status(&count(3).handle(&rt)), 200);
    assert!(rt.pools()[0].backends().iter().all(|b| b.is_enabled()));
}

#[test]
fn c_mgmt_4_enable_disable_and_drain() {
    let rt = runtime(true);
    let b = std::sync::Arc::clone(rt.find_backend("b").expect("b").1);
    let set = |id: &str, on: bool| {
        Req::mutation(
            Method::POST,
            &format!("/api/dashboard/backends/{id}"),
            &format!(r#"{{"enabled": {on}}}"#),
        )
    };
    let drain = |id: &str| {
        Req::mutation(
            Method::POST,
            &format!("/api/dashboard/backends/{id}/drain"),
            "{}",
        )
    };
    assert_eq!(
        refused(&set("zz", true).handle(&rt)),
        Some(ManagementError::NotFound)
    );
    assert_eq!(
        refused(&drain("zz").handle(&rt)),
        Some(ManagementError::NotFound)
    );
    assert_eq!(status(&set("b", false).handle(&rt)), 200);
    assert!(!b.is_enabled());
    assert_eq!(status(&set("b", true).handle(&rt)), 200);
    b.set_healthy(true, T0);
    let slot =
        crate::pool::Backend::try_reserve(&b, &rt.config().pool_params, T0, false).expect("slot");
    assert_eq!(status(&drain("b").handle(&rt)), 202);
    assert!(b.is_draining());
    assert_eq!(
        b.in_flight(),
        1,
        "in-flight stays visible while draining (C-POOL-7)"
    );
    assert_eq!(status(&set("b", true).handle(&rt)), 200);
    assert!(!b.is_draining(), "enabling clears a drain");
    drop(slot);
    assert_eq!(
        refused(&drain("b").body(b"").handle(&rt)),
        Some(ManagementError::BadRequest),
        "drain takes an empty object"
    );
    // An id with a slash, percent-encoded.
    assert_eq!(status(&drain("api%2F1").handle(&rt)), 202);
    assert!(rt.find_backend("api/1").expect("api").1.is_draining());
}

#[test]
fn c_mgmt_4_limit_refills_the_callers_bucket() {
    let rt = runtime(true);
    let limit = |n: u64| {
        Req::mutation(
            Method::POST,
            "/api/dashboard/limit",
            &format!(r#"{{"capacity": {n}}}"#),
        )
    };
    match limit(4).handle(&rt) {
        Decision::RefillBucket { key, tokens, reply } => {
            assert_eq!(key, ClientKey::new(CLIENT, &rt.config().rate.key()));
            assert_eq!(tokens, 4);
            assert_eq!(reply.status(), 200);
        }
        other => panic!("expected a refill, got {other:?}"),
    }
    assert_eq!(status(&limit(11).handle(&rt)), 400, "beyond the capacity");
}

fn patch(rt: &Runtime, body: &str) -> Decision {
    Req::mutation(Method::PATCH, "/api/dashboard/config", body).handle(rt)
}

#[test]
fn c_conf_8_patch_applies_through_validation_and_build() {
    let rt = runtime(true);
    rt.find_backend("b").expect("b").1.set_enabled(false, T0);
    let a = std::sync::Arc::clone(rt.find_backend("a").expect("a").1);
    a.set_healthy(true, T0);
    let body = r#"{
        "rate_limit": {"capacity": 20, "refill_per_second": 2.5, "failure_mode": "fail-open"},
        "health_check": {"interval": "7s", "cooldown": "3s", "max_cooldown": "1m", "mode": "tcp",
                         "expected_statuses": [200], "slow_start": "0s"},
        "retry": {"max_attempts": 3, "per_try_timeout": "750ms", "methods": ["GET"],
                  "budget_capacity": 40, "budget_refill_per_second": null}
    }"#;
    let before = snapshot(&rt);
    let d = patch(&rt, body);
    let Decision::Publish {
        runtime: next,
        reply,
    } = d
    else {
        panic!("expected a runtime to publish, got {d:?}");
    };
    assert_eq!(reply.status(), 200);
    assert_eq!(reply.body("r"), r#"{"status":"applied"}"#);
    assert_eq!(
        snapshot(&rt),
        before,
        "the runtime in force is untouched until published"
    );
    let c = next.config();
    assert_eq!(c.rate.capacity(), 20);
    assert_eq!(c.rate.failure_mode().as_str(), "fail-open");
    assert_eq!(
        c.health.params.interval(),
        core::time::Duration::from_secs(7)
    );
    assert_eq!(c.config.health_check.mode.as_str(), "tcp");
    assert_eq!(next.retry().max_attempts(), 3);
    assert_eq!(next.retry().methods(), ["GET"]);
    assert_eq!(next.budget().capacity(), 40);
    assert!(
        (next.budget().refill_per_second() - 10.0).abs() < 1e-9,
        "null keeps the value"
    );
    assert_eq!(next.pools()[0].params().breaker, c.pool_params.breaker);
    // Same backends, runtime flags kept (a management change does not re-apply `disabled`).
    assert!(std::sync::Arc::ptr_eq(
        next.find_backend("a").expect("a").1,
        &a
    ));
    assert!(a.is_healthy());
    assert!(!next.find_backend("b").expect("b").1.is_enabled());
    // Only dynamic fields moved.
    let d = crate::config::diff(rt.config(), c);
    assert!(!d.needs_restart(), "{d:?}");
    assert!(d.dynamic_paths().any(|p| p == "rate_limit.capacity"));
}

#[test]
fn c_conf_8_patch_with_invalid_values_lists_errors_and_changes_nothing() {
    let rt = runtime(true);
    let before = snapshot(&rt);
    let d = patch(
        &rt,
        r#"{"rate_limit": {"capacity": 0, "failure_mode": "maybe"},
            "retry": {"max_attempts": 9, "statuses": [200]},
            "health_check": {"interval": "0s"}}"#,
    );
    let Decision::Reply(reply @ Reply::Problem { .. }) = &d else {
        panic!("expected a 400 with errors, got {d:?}");
    };
    assert_eq!(reply.status(), 400);
    let body: serde_json::Value = serde_json::from_str(&reply.body("rid")).expect("json");
    assert_eq!(body["code"], 400);
    assert_eq!(body["request_id"], "rid");
    let paths: Vec<&str> = body["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter_map(|e| e["path"].as_str())
        .collect();
    for p in [
        "rate_limit.capacity",
        "rate_limit.failure_mode",
        "server.retry.max_attempts",
        "server.retry.statuses",
        "health_check.interval",
    ] {
        assert!(paths.contains(&p), "{p} missing from {paths:?}");
    }
    assert_eq!(snapshot(&rt), before);

    // Values outside their operating bounds: each named with its range, nothing
    // changes.
    let d = patch(
        &rt,
        r#"{"health_check": {"interval": "1ns"}, "retry": {"per_try_timeout": "2h"},
            "rate_limit": {"refill_per_second": 1e12}}"#,
    );
    let Decision::Reply(reply @ Reply::Problem { .. }) = &d else {
        panic!("expected a 400 with errors, got {d:?}");
    };
    assert_eq!(reply.status(), 400);
    let body: serde_json::Value = serde_json::from_str(&reply.body("rid")).expect("json");
    let errors = body["errors"].as_array().expect("errors").clone();
    let message = |path: &str| {
        errors
            .iter()
            .find(|e| e["path"] == path)
            .and_then(|e| e["message"].as_str())
            .unwrap_or_else(|| panic!("no error at {path}: {errors:?}"))
            .to_owned()
    };
    assert_eq!(
        message("health_check.interval"),
        "must be within 100ms..=1h, got 1ns"
    );
    assert!(message("server.retry.per_try_timeout").contains("10ms..=1h"));
    assert!(message("rate_limit.refill_per_second").contains("0.001..=1000000000"));
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert_eq!(snapshot(&rt), before);

    // A duration that does not parse is reported at its path before validation.
    let d = patch(
        &rt,
        r#"{"health_check": {"timeout": "soon"}, "retry": {"per_try_timeout": "5"}}"#,
    );
    let body = d.reply().expect("reply").body("r");
    assert!(body.contains("health_check.timeout") && body.contains("server.retry.per_try_timeout"));
    // Unknown fields anywhere in the patch: 400 before anything else.
    for bad in [
        r#"{"server": {}}"#,
        r#"{"rate_limit": {"storage": "redis"}}"#,
    ] {
        assert_eq!(
            refused(&patch(&rt, bad)),
            Some(ManagementError::BadRequest),
            "{bad}"
        );
    }
    assert_eq!(snapshot(&rt), before);
}

fn facts(instance_id: &str) -> StatusFacts<'_> {
    StatusFacts {
        instance_id,
        ready: true,
        client: CLIENT,
        bucket: BucketFacts {
            tokens: 7,
            degraded: false,
        },
        gate_in_flight: 3,
        gate_queued: 1,
        dns: &[],
    }
}

#[test]
fn c_mgmt_4_status_document_has_the_contract_fields_and_no_secret() {
    let rt = runtime(true);
    let b = rt.find_backend("b").expect("b").1;
    b.set_healthy(true, T0);
    b.start_drain(T0);
    let doc = status_document(&rt, &facts("replica-1"), Instant::from_secs(1));
    let json = serde_json::to_value(&doc).expect("json");
    for key in [
        "instance_id",
        "ready",
        "runtime_mutations_enabled",
        "client_ip",
        "strategy",
        "backends",
        "bucket",
        "rate_limit",
        "health_check",
        "retry",
        "protection",
    ] {
        assert!(json.get(key).is_some(), "{key} missing");
    }
    for key in [
        "id",
        "url",
        "healthy",
        "enabled",
        "draining",
        "available",
        "protocol",
        "circuit_state",
        "ejected",
        "inflight",
        "requests",
        "passive_failures",
        "slow_start_percent",
        "concurrency_limit",
    ] {
        assert!(
            json["backends"][0].get(key).is_some(),
            "backends[].{key} missing"
        );
    }
    assert_eq!(json["client_ip"], "203.0.113.9");
    assert_eq!(json["strategy"], "round_robin");
    assert_eq!(json["runtime_mutations_enabled"], true);
    assert_eq!(json["backends"][1]["draining"], true);
    assert_eq!(json["backends"][1]["available"], false);
    assert_eq!(json["backends"][3]["pool"], "api");
    assert_eq!(
        json["bucket"],
        serde_json::json!({"capacity": 10, "tokens": 7, "refill_per_second": 5.0,
                           "storage": "local", "degraded": false})
    );
    assert_eq!(json["retry"]["budget"]["capacity"], 100);
    assert_eq!(json["retry"]["budget"]["tokens"], 100);
    assert_eq!(json["health_check"]["interval"], "5s");
    assert_eq!(json["health_check"]["jitter"], "500ms");
    assert_eq!(json["protection"]["overload"]["in_flight"], 3);
    assert_eq!(
        json["protection"]["overload"]["max_concurrent_requests"],
        2048
    );
    assert_eq!(
        json["protection"]["routes"][0]["max_concurrent_requests"],
        5
    );
    assert_eq!(json["protection"]["routes"][0]["in_flight"], 0);
    // Adaptive concurrency off: no limit to show (C-LOAD-4); dry run off (C-RATE-8).
    assert_eq!(
        json["backends"][0]["concurrency_limit"],
        serde_json::Value::Null
    );
    assert_eq!(json["rate_limit"]["dry_run"], false);
    let text = json.to_string();
    assert!(!text.contains(TOKEN), "the token leaked");
    assert!(!text.contains("ADMIN"), "not even the secret's name");
    let reply = Reply::Json {
        status: 200,
        body: json,
    };
    let resp = reply.to_http("rid");
    assert_eq!(resp.headers()["cache-control"], "no-store");
    assert_eq!(resp.headers()["content-type"], "application/json");
    assert_eq!(resp.headers()["x-request-id"], "rid");
}

#[test]
fn c_mgmt_4_dashboard_request_forwards_only_the_whitelist() {
    let mut h = HeaderMap::new();
    for (n, v) in [
        ("accept", "text/html"),
        ("accept-language", "ru"),
        ("user-agent", "console"),
        ("x-request-id", "abc"),
        ("traceparent", "00-1-2-01"),
        ("tracestate", "k=v"),
        ("authorization", "Bearer x"),
        ("cookie", "s=1"),
        ("proxy-authorization", "Basic y"),
        ("x-balancer-csrf", "1"),
        ("x-forwarded-for", "1.2.3.4"),
        ("host", "mgmt"),
        ("content-type", "application/json"),
    ] {
        h.append(n, HeaderValue::from_static(v));
    }
    h.append("accept", HeaderValue::from_static("application/json"));
    let out = dashboard_forward_headers(&h);
    let mut names: Vec<&str> = out.keys().map(http::HeaderName::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "accept",
            "accept-language",
            "traceparent",
            "tracestate",
            "user-agent",
            "x-request-id"
        ]
    );
    assert_eq!(out.get_all("accept").iter().count(), 2);
}

#[test]
fn reply_bodies_follow_c_path_11() {
    let r = Reply::Problem {
        status: 400,
        message: "count must be within 1..=3, got 0".into(),
        errors: vec![],
    };
    let v: serde_json::Value = serde_json::from_str(&r.body("id-1")).expect("json");
    assert_eq!(v["code"], 400);
    assert_eq!(v["request_id"], "id-1");
    let r = Reply::Refused(ManagementError::Unauthorized).to_http("id-2");
    assert_eq!(r.status().as_u16(), 401);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    assert_eq!(r.headers()["cache-control"], "no-store");
}

#[test]
fn format_duration_examples() {
    use core::time::Duration as D;
    for (d, s) in [
        (D::ZERO, "0s"),
        (D::from_nanos(750), "750ns"),
        (D::from_micros(20), "20us"),
        (D::from_millis(250), "250ms"),
        (D::from_micros(1500), "1.5ms"),
        (D::from_secs(5), "5s"),
        (D::from_millis(1500), "1.5s"),
        (D::from_secs(90), "1m30s"),
        (D::from_secs(7200) + D::from_millis(250), "2h0m0.25s"),
    ] {
        assert_eq!(format_duration(d), s);
    }
}

proptest! {
    /// The status document's durations read back exactly (so the console can PATCH them back).
    #[test]
    fn format_duration_round_trips(nanos in any::<u64>()) {
        let d = core::time::Duration::from_nanos(nanos);
        prop_assert_eq!(crate::config::parse_duration(&format_duration(d)), Ok(d));
    }

    /// The fuzz entry never panics, and nothing but a right token gets past authentication
    /// (C-MGMT-1).
    #[test]
    fn parse_raw_never_panics(
        method in proptest::collection::vec(any::<u8>(), 0..8),
        path in proptest::collection::vec(any::<u8>(), 0..40),
        headers in proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 0..16), proptest::collection::vec(any::<u8>(), 0..24)),
            0..6,
        ),
        body in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let token = Secret::new(TOKEN);
        let access = Access { token: Some(&token), allow_insecure: false, runtime_mutations: true };
        let h: Vec<(&[u8], &[u8])> = headers.iter().map(|(n, v)| (&n[..], &v[..])).collect();
        let r = parse_raw(&method, &path, &h, &body, CLIENT, &access);
        prop_assert!(matches!(r, Err(ManagementError::Unauthorized | ManagementError::BadRequest)));
    }

    /// With the token and a mutating path, arbitrary headers and bodies are parsed or refused,
    /// never panic, and a refusal follows the guard order (C-MGMT-2).
    #[test]
    fn parse_raw_guarded_bodies(
        body in proptest::collection::vec(any::<u8>(), 0..80),
        json in "\\{(\"(count|enabled|capacity|rate_limit|retry)\": ?(1|true|\\{\\}|\"x\"|null), ?){0,3}\\}",
        which in 0usize..4,
    ) {
        let token = Secret::new(TOKEN);
        let access = Access { token: Some(&token), allow_insecure: false, runtime_mutations: true };
        let path: &[u8] = [&b"/api/dashboard/backends"[..], b"/api/dashboard/backends/a", b"/api/dashboard/limit", b"/api/dashboard/config"][which];
        let method: &[u8] = if which == 3 { b"PATCH" } else { b"POST" };
        let auth = format!("Bearer {TOKEN}");
        let h: Vec<(&[u8], &[u8])> = vec![
            (b"authorization", auth.as_bytes()),
            (b"x-balancer-csrf", b"1"),
            (b"content-type", b"application/json"),
        ];
        for b in [&body[..], json.as_bytes()] {
            match parse_raw(method, path, &h, b, CLIENT, &access) {
                Ok(Parsed::Mutate(_)) | Err(ManagementError::BadRequest) => {}
                other => prop_assert!(false, "unexpected {:?}", other),
            }
        }
    }
}

/// C-LOAD-4, C-RATE-8: with adaptive concurrency on, each backend's current limit is in the
/// status document; the rate limit's dry-run state is in its `rate_limit` part.
#[test]
fn c_load_4_status_document_shows_each_backends_concurrency_limit() {
    let yaml = text(true).replace(
        "rate_limit:\n  enabled: true\n",
        "rate_limit:\n  enabled: true\n  dry_run: true\n",
    ) + "server:\n  upstream:\n    adaptive_concurrency:\n      enabled: true\n      min_limit: 4\n";
    let secrets = MapSecrets::new().with_env("ADMIN", TOKEN);
    let v = load(&yaml, &secrets).expect("valid");
    let rt = Runtime::build(v, None, T0, &mut WyRand::new(1)).expect("runtime");
    let doc = status_document(&rt, &facts("replica-1"), Instant::from_secs(1));
    let json = serde_json::to_value(&doc).expect("json");
    for b in json["backends"].as_array().expect("backends") {
        assert_eq!(b["concurrency_limit"], 4, "{b}");
    }
    assert_eq!(json["rate_limit"]["dry_run"], true);
}

/// C-DISC-1: a DNS pool's status names what it resolves and its last resolution; other pools
/// carry no `dns` key.
#[test]
fn c_disc_1_status_shows_a_dns_pools_last_resolution() {
    let text = "backends: [{id: a, url: 'http://127.0.0.1:1'}]\n\
                pools: {api: {dns: {name: api.internal, port: 8080, interval: 2s}}}\n";
    let v = crate::config::load(text, &crate::config::MapSecrets::new()).expect("valid");
    let rt = Runtime::build(v, None, T0, &mut WyRand::new(1)).expect("runtime");
    let dns = [crate::mgmt::DnsFacts {
        pool: "api".to_owned(),
        at_unix_ms: 1_700_000_000_000,
        result: crate::discovery::Outcome::ServFail,
    }];
    let mut f = facts("i");
    f.dns = &dns;
    let doc = status_document(&rt, &f, T0);
    let json = serde_json::to_value(&doc).expect("json");
    assert!(json["pools"][0].get("dns").is_none(), "{json}");
    let d = &json["pools"][1]["dns"];
    assert_eq!(d["name"], "api.internal");
    assert_eq!(d["port"], 8080);
    assert_eq!(d["interval"], "2s");
    assert_eq!(d["last_resolution_unix_ms"], 1_700_000_000_000_u64);
    assert_eq!(d["last_result"], "servfail");
    let none = status_document(&rt, &facts("i"), T0);
    let json = serde_json::to_value(&none).expect("json");
    assert!(json["pools"][1]["dns"]["last_result"].is_null());
}
