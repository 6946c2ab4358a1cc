//! On-call observability (issue 20) on both binaries: the access-log line written at the end of
//! the response body (its whole duration, request and response body bytes), `/readyz`'s `503`
//! naming its cause, and the metric families of admission, the rate-limit store and upstream
//! connections, each read from a running proxy.

use serde_json::Value;

use super::{expect_status, join, spawn_send};
use crate::backend::{Backend, Mode};
use crate::client::{Raw, Req, get, send};
use crate::config::{ADMIN_TOKEN, Config};
use crate::harness::{Binary, Proxy};
use crate::util::{eventually, ms, secs};

/// The access lines the proxy wrote so far.
pub(super) fn access_lines(p: &Proxy) -> Vec<Value> {
    p.logs()
        .stdout()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "weir::access")
        .collect()
}

/// The access line of the request answered with `X-Request-ID: rid`, waiting for it.
pub(super) async fn line_of(p: &Proxy, rid: &str) -> Value {
    eventually(secs(5), &format!("the access line of {rid}"), || async {
        access_lines(p)
            .into_iter()
            .find(|v| v["fields"]["request_id"] == rid)
    })
    .await
}

fn u(v: &Value, field: &str) -> u64 {
    v["fields"][field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} is not a whole number in {v}"))
}

/// One sample of a Prometheus text exposition: the line of `name` with every one of `labels`.
pub(super) fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .find(|l| labels.iter().all(|want| l.contains(want)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The management listener's `/metrics` text.
pub(super) async fn metrics(p: &Proxy) -> String {
    let m = p.management.expect("management listener");
    let r = send(
        m,
        &Req::get("/metrics").header("authorization", &format!("Bearer {ADMIN_TOKEN}")),
    )
    .await;
    expect_status(&r, 200, "GET /metrics");
    r.text()
}

/// C-OBS-3, issue 20: a line is written when the response body ends: `duration_us` covers the
/// slow body (and `head_us` only the head), `response_bytes` is what the client got,
/// `request_bytes` what was read of a buffered and of a streamed (chunked) request body.
pub async fn c_obs_3_access_line_at_body_end_with_bytes(bin: Binary) {
    let slow = Backend::start("slow-body").await;
    slow.set_mode(Mode::SlowBody {
        chunks: 3,
        interval: ms(150),
    });
    let cfg = Config::new(&[&slow]).set("server.access_log_sample_rate", 1.0);
    let p = Proxy::start(&bin, &cfg).await;

    let r = get(p.public, "/slow").await;
    expect_status(&r, 200, "slow body");
    let v = line_of(&p, &r.header("x-request-id").unwrap_or_default()).await;
    let (total, head) = (u(&v, "duration_us"), u(&v, "head_us"));
    assert!(
        total >= head + 300_000,
        "duration_us must cover the 450 ms body, head_us only the head: {v}"
    );
    assert_eq!(u(&v, "response_bytes"), r.body.len() as u64, "{v}");
    assert_eq!(u(&v, "request_bytes"), 0, "{v}");
    assert_eq!(v["fields"]["upstream_status"], 200, "{v}");

    slow.set_mode(Mode::Ok);
    let body = "x".repeat(1000);
    let r = send(p.public, &Req::post("/buffered", &body)).await;
    expect_status(&r, 200, "buffered POST");
    let v = line_of(&p, &r.header("x-request-id").unwrap_or_default()).await;
    assert_eq!(u(&v, "request_bytes"), 1000, "a buffered body: {v}");
    assert_eq!(u(&v, "response_bytes"), r.body.len() as u64, "{v}");

    let r = send(
        p.public,
        &Req::new("POST", "/streamed").chunked(&["abc", "defgh"]),
    )
    .await;
    expect_status(&r, 200, "chunked POST");
    assert_eq!(slow.last().map(|q| q.body.len()), Some(8), "backend got it");
    let v = line_of(&p, &r.header("x-request-id").unwrap_or_default()).await;
    assert_eq!(u(&v, "request_bytes"), 8, "a streamed body: {v}");

    // A synthetic answer: its own body's bytes, a reason, no upstream status.
    let r = get(p.public, "/readyz").await;
    expect_status(&r, 200, "ready");
    let v = line_of(&p, &r.header("x-request-id").unwrap_or_default()).await;
    assert_eq!(u(&v, "response_bytes"), r.body.len() as u64, "{v}");
    assert!(v["fields"]["upstream_status"].is_null(), "{v}");
}

/// C-OBS-3, C-OBS-2, C-PATH-11, C-PATH-12: a head the HTTP/1 codec refuses before any exchange
/// (malformed `400`, request line too long `414`, header section too large or too many header
/// lines `431`) is answered like any of weir's own errors (JSON body, `X-Request-ID`,
/// `Connection: close`), written to the access log with its status, its reason and the client
/// address, on a line with the fields of weir's other own answers (the host aside: the head was
/// not read), even at sample rate 0, and counted in `load_balancer_http_requests_total`.
pub async fn c_obs_3_refused_heads_are_logged_and_counted(bin: Binary) {
    let b = Backend::start("b-1").await;
    let cfg = Config::new(&[&b])
        .management()
        .set("server.access_log_sample_rate", 0.0)
        .set("server.max_header_bytes", 16 * 1024);
    let p = Proxy::start(&bin, &cfg).await;
    // weir's own error on a head it read: the line every refused head's line is compared with.
    let r = send(p.public, &Req::new("TRACE", "/t")).await;
    expect_status(&r, 405, "TRACE");
    let reference = line_of(&p, &r.header("x-request-id").unwrap_or_default()).await;
    let many: String = (0..120).map(|i| format!("X-H{i}: v\r\n")).collect();
    let cases = [
        (
            "a header line without a colon",
            "GET /a HTTP/1.1\r\nHost: x\r\nno-colon-here\r\n\r\n".to_owned(),
            400,
            "malformed_request",
        ),
        (
            "a request line over the limit",
            format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "u".repeat(9000)),
            414,
            "uri_too_long",
        ),
        (
            "a header section over max_header_bytes",
            format!(
                "GET /h HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
                "h".repeat(20 * 1024)
            ),
            431,
            "header_too_large",
        ),
        (
            "more header lines than weir reads",
            format!("GET /m HTTP/1.1\r\nHost: x\r\n{many}\r\n"),
            431,
            "header_too_large",
        ),
    ];
    for (what, raw, status, reason) in &cases {
        refused_and_logged(&p, &reference, what, raw, *status, reason).await;
    }
    let text = metrics(&p).await;
    let count = |code: &str| {
        sample(
            &text,
            "load_balancer_http_requests_total",
            &["listener=\"public\"", &format!("code=\"{code}\"")],
        )
    };
    assert_eq!(
        (count("400"), count("414"), count("431")),
        (Some(1.0), Some(1.0), Some(2.0)),
        "{text}"
    );
    assert_eq!(b.count(), 0, "nothing reached the backend");
}

/// The names of an access line's fields, but `host`.
fn field_names(v: &Value) -> Vec<String> {
    let mut names: Vec<String> = v["fields"]
        .as_object()
        .map(|o| o.keys().filter(|k| *k != "host").cloned().collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// Send the head `raw` on a new connection: weir's JSON `status` comes back, closing, and its
/// access line says `status` and `reason`, with the fields of `reference` (the host aside).
async fn refused_and_logged(
    p: &Proxy,
    reference: &Value,
    what: &str,
    raw: &str,
    status: u16,
    reason: &str,
) {
    let mut c = Raw::connect(p.public).await;
    let _ = c.write(raw.as_bytes()).await;
    let (head, body) = c
        .read_response(secs(5))
        .await
        .unwrap_or_else(|e| panic!("{what}: no answer: {e}"));
    assert_eq!(head.status, status, "{what}: {head:?}");
    assert_eq!(
        head.header("content-type").as_deref(),
        Some("application/json"),
        "{what}: {head:?}"
    );
    assert_eq!(
        head.header("connection").as_deref(),
        Some("close"),
        "{what}"
    );
    let rid = head.header("x-request-id").expect("a request id");
    let json: Value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("{what}: a JSON body: {e}: {body:?}"));
    assert_eq!(json["code"], status, "{what}: {json}");
    assert_eq!(json["request_id"], rid.as_str(), "{what}: {json}");
    assert!(json["message"].as_str().is_some_and(|m| !m.is_empty()));

    let v = line_of(p, &rid).await;
    let f = &v["fields"];
    assert_eq!(f["status"], status, "{what}: {v}");
    assert_eq!(f["reason"], reason, "{what}: {v}");
    assert_eq!(f["listener"], "public", "{what}: {v}");
    assert_eq!(f["client"], "127.0.0.1", "{what}: {v}");
    assert_eq!(f["path"], "[redacted]", "{what}: {v}");
    assert_eq!(f["attempts"], 0, "{what}: {v}");
    assert_eq!(u(&v, "response_bytes"), body.len() as u64, "{what}: {v}");
    assert!(f["backend"].is_null() && f["host"].is_null(), "{what}: {v}");
    assert_eq!(
        field_names(&v),
        field_names(reference),
        "{what}: the fields of weir's other own answers: {v} against {reference}"
    );
}

/// C-OBS-4, issue 20: the data plane's `/readyz` `503` names which cause holds.
pub async fn c_obs_4_readyz_503_names_its_cause(bin: Binary) {
    let a = Backend::start("never-healthy").await;
    a.set_health(503);
    let cfg = Config::new(&[&a]);
    let p = Proxy::start(&bin, &cfg).await;
    let r = get(p.public, "/readyz").await;
    expect_status(&r, 503, "/readyz with no healthy backend");
    let message = r.json()["message"].as_str().unwrap_or_default().to_owned();
    assert!(
        message.contains("no_backend_available") && message.contains("unhealthy"),
        "the cause, by name and in words: {message}"
    );
}

/// C-OBS-1, C-LOAD-1, C-LOAD-2, issue 20: the gate's queue wait, a route bulkhead's in-flight
/// and limit, request-path rate-limit store calls by store and result, and upstream
/// connections opened and reused per backend, read from `/metrics` of a running proxy.
pub async fn c_obs_1_admission_store_and_connection_metrics(bin: Binary) {
    let web = Backend::start("web").await;
    let held = Backend::start("held").await;
    held.set_mode(Mode::Hold);
    let cfg = Config::new(&[&web])
        .management()
        .rate_limit(1000, 1000.0)
        .set("server.overload.max_concurrent_requests", 1)
        .set("server.overload.queue_timeout", "200ms")
        .pool("h", "round_robin", &[&held])
        .route("/held", "h", Some(3));
    let p = Proxy::start(&bin, &cfg).await;
    for _ in 0..3 {
        expect_status(&get(p.public, "/x").await, 200, "keep-alive request");
    }
    let holder = spawn_send(p.public, Req::get("/held/1"));
    held.wait_in_flight(1, secs(5)).await;
    let r = get(p.public, "/x").await;
    expect_status(&r, 503, "queued for 200 ms behind the holder, then refused");
    let text = metrics(&p).await;
    let route = ["route=\"/held\""];
    assert_eq!(
        sample(&text, "load_balancer_route_inflight_requests", &route),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "load_balancer_route_capacity_requests", &route),
        Some(3.0)
    );
    let waited = sample(
        &text,
        "load_balancer_overload_queue_wait_seconds_count",
        &[],
    );
    // Only the refused request waited: a request's slot is released before the last byte of
    // its response is handed to the socket (on HTTP/1 as on HTTP/2), so the next request, sent
    // once the client has read that byte, finds it free.
    assert_eq!(waited, Some(1.0), "one request waited");
    let sum = sample(&text, "load_balancer_overload_queue_wait_seconds_sum", &[]);
    assert!(sum.is_some_and(|s| s >= 0.15), "it waited ~200 ms: {sum:?}");
    held.release_all();
    expect_status(&join(holder, "holder").await, 200, "holder");

    let text = metrics(&p).await;
    let local_ok = sample(
        &text,
        "load_balancer_rate_limit_store_requests_total",
        &["storage=\"local\"", "result=\"ok\""],
    );
    assert!(
        local_ok.is_some_and(|n| n >= 4.0),
        "local takes: {local_ok:?}"
    );
    let conns = |backend: &str, kind: &str| {
        sample(
            &text,
            "load_balancer_upstream_connections_total",
            &[
                &format!("backend=\"{backend}\""),
                &format!("connection=\"{kind}\""),
            ],
        )
        .unwrap_or(-1.0)
    };
    assert!(conns("web", "opened") >= 1.0, "{text}");
    assert!(
        conns("web", "reused") >= 1.0,
        "three requests over keep-alive"
    );
    assert_eq!(conns("held", "opened"), 1.0, "one request to held");
    assert_eq!(conns("held", "reused"), 0.0);
}
