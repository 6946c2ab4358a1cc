//! C-RETRY: what is retried, where, at what cost, and what the client gets when it is not.

use std::time::Instant;

use super::{expect_status, expect_weir_error};
use crate::backend::{Backend, End, Mode};
use crate::client::{Req, get, send};
use crate::config::Config;
use crate::h2backend::H2Backend;
use crate::harness::{Binary, Proxy};
use crate::util::{ms, secs, wait_until};

/// Two backends `r-1`, `r-2` with `pick_first` (so the first attempt always goes to `r-1`) and
/// passive ejection off.
async fn pair(bin: &Binary, tweak: impl FnOnce(Config) -> Config) -> (Backend, Backend, Proxy) {
    let a = Backend::start("r-1").await;
    let b = Backend::start("r-2").await;
    let cfg = tweak(Config::new(&[&a, &b]).policy("pick_first").passive_off());
    let p = Proxy::start(bin, &cfg).await;
    (a, b, p)
}

#[track_caller]
fn expect_retried(r: &crate::client::Resp, what: &str) {
    expect_status(r, 200, what);
    assert_eq!(
        r.backend().as_deref(),
        Some("r-2"),
        "{what}: {}",
        r.summary()
    );
    assert_eq!(r.attempts(), Some(2), "{what}: {}", r.summary());
}

#[track_caller]
fn expect_not_retried(r: &crate::client::Resp, status: u16, what: &str) {
    expect_status(r, status, what);
    assert_eq!(
        r.backend().as_deref(),
        Some("r-1"),
        "{what}: {}",
        r.summary()
    );
    assert_eq!(r.attempts(), Some(1), "{what}: {}", r.summary());
}

/// C-RETRY-1: `502`, `503`, `504` to `GET`, `HEAD`, `OPTIONS` are retried on another backend.
pub async fn c_retry_1_retryable_statuses_and_methods(bin: Binary) {
    let (a, b, p) = pair(&bin, |c| c).await;
    for status in [502, 503, 504] {
        a.set_mode(Mode::Status(status));
        for method in ["GET", "HEAD", "OPTIONS"] {
            let what = format!("{method} answered {status}");
            let r = send(p.public, &Req::new(method, "/r")).await;
            expect_retried(&r, &what);
        }
    }
    assert_eq!(
        a.count(),
        b.count(),
        "each retried request reached both backends once"
    );
}

/// C-RETRY-1: other statuses (500 included) are delivered, not retried.
pub async fn c_retry_1_other_statuses_not_retried(bin: Binary) {
    let (a, b, p) = pair(&bin, |c| c).await;
    for status in [500, 501, 404, 429, 400, 505] {
        a.set_mode(Mode::Status(status));
        let r = get(p.public, "/r").await;
        expect_not_retried(&r, status, &format!("status {status}"));
        assert_eq!(
            r.text(),
            format!("backend r-1 status {status}\n"),
            "backend body delivered"
        );
    }
    assert_eq!(b.count(), 0);
}

/// C-RETRY-1: only `retry.methods` are retried, matched case-insensitively from the config.
pub async fn c_retry_1_methods(bin: Binary) {
    let (a, b, p) = pair(&bin, |c| c).await;
    a.set_mode(Mode::Status(503));
    for method in ["POST", "PUT", "DELETE", "PATCH"] {
        let r = send(p.public, &Req::new(method, "/m").body("payload")).await;
        expect_not_retried(&r, 503, method);
    }
    assert_eq!(b.count(), 0);
    drop(p);
    let (a, b, p) = pair(&bin, |c| {
        c.set("server.retry.methods", serde_json::json!(["get", "Post"]))
    })
    .await;
    a.set_mode(Mode::Status(503));
    let r = send(p.public, &Req::post("/m", "replay me")).await;
    expect_retried(&r, "POST with methods [get, Post]");
    assert_eq!(
        &b.last().expect("retry").body[..],
        b"replay me",
        "replayed body"
    );
    expect_retried(&get(p.public, "/m").await, "GET with methods [get, Post]");
    let r = send(p.public, &Req::new("HEAD", "/m")).await;
    expect_not_retried(&r, 503, "HEAD is not in [get, Post]");
}

/// C-RETRY-1: connection resets, connections closed without an answer and refused connections
/// are retried.
pub async fn c_retry_1_transport_errors_retried(bin: Binary) {
    let (a, _b, p) = pair(&bin, |c| c).await;
    a.set_mode(Mode::Reset);
    expect_retried(&get(p.public, "/reset").await, "connection reset");
    a.set_mode(Mode::CloseWithoutAnswer);
    expect_retried(&get(p.public, "/close").await, "closed without an answer");
    a.down().await;
    expect_retried(&get(p.public, "/refused").await, "connection refused");
}

/// C-RETRY-1: a per-try timeout is retried. The slow backend would send its headers only after
/// a minute, longer than the client waits: an answer at all means the attempt was cut.
pub async fn c_retry_1_per_try_timeout_retried(bin: Binary) {
    let (a, _b, p) = pair(&bin, |c| c.set("server.retry.per_try_timeout", "300ms")).await;
    a.set_mode(Mode::SlowHeaders(secs(60)));
    let r = get(p.public, "/slow").await;
    expect_retried(&r, "per-try timeout");
}

/// C-RETRY-1: only replayable bodies are retried: none, or a `Content-Length` within
/// `body_limit`; chunked bodies never.
pub async fn c_retry_1_body_must_be_replayable(bin: Binary) {
    let (a, b, p) = pair(&bin, |c| {
        c.set("server.retry.methods", serde_json::json!(["GET", "PUT"]))
            .set("server.retry.body_limit", 64)
    })
    .await;
    a.set_mode(Mode::Status(503));
    let r = send(p.public, &Req::new("PUT", "/b").body("0123456789")).await;
    expect_retried(&r, "PUT with a small Content-Length body");
    assert_eq!(&b.last().expect("retry").body[..], b"0123456789");
    let r = send(
        p.public,
        &Req::new("PUT", "/b").chunked(&["01234", "56789"]),
    )
    .await;
    expect_not_retried(&r, 503, "PUT with a chunked body");
    assert_eq!(
        &a.last().expect("first attempt").body[..],
        b"0123456789",
        "chunked body forwarded"
    );
    let big = "x".repeat(100);
    let r = send(p.public, &Req::new("PUT", "/b").body(&big)).await;
    expect_not_retried(&r, 503, "PUT with a body over body_limit");
    assert_eq!(a.last().expect("first attempt").body.len(), 100);
}

/// C-RETRY-1: at most `max_attempts` attempts.
pub async fn c_retry_1_max_attempts(bin: Binary) {
    for max in [1u32, 3] {
        let bs = Backend::start_many("ma", 4).await;
        for b in &bs {
            b.set_mode(Mode::Status(503));
        }
        let refs: Vec<&Backend> = bs.iter().collect();
        let cfg = Config::new(&refs)
            .policy("pick_first")
            .passive_off()
            .set("server.retry.max_attempts", max);
        let p = Proxy::start(&bin, &cfg).await;
        let r = get(p.public, "/ma").await;
        expect_status(&r, 503, &format!("max_attempts {max}"));
        assert_eq!(
            r.attempts(),
            Some(max),
            "max_attempts {max}: {}",
            r.summary()
        );
        let total: usize = bs.iter().map(Backend::count).sum();
        assert_eq!(
            total, max as usize,
            "upstream attempts with max_attempts {max}"
        );
    }
}

/// C-RETRY-2: a retry never goes to a backend already tried.
pub async fn c_retry_2_never_the_same_backend(bin: Binary) {
    let (a, b, p) = pair(&bin, |c| c.set("server.retry.max_attempts", 5)).await;
    a.set_mode(Mode::Status(503));
    b.set_mode(Mode::Status(503));
    for i in 0..5 {
        let r = get(p.public, "/same").await;
        expect_status(&r, 503, "both fail");
        assert_eq!(r.attempts(), Some(2), "request {i}: {}", r.summary());
    }
    assert_eq!(
        (a.count(), b.count()),
        (5, 5),
        "each backend tried once per request"
    );
    drop(p);
    let solo = Backend::start("solo").await;
    solo.set_mode(Mode::Status(503));
    let p = Proxy::start(
        &bin,
        &Config::new(&[&solo])
            .passive_off()
            .set("server.retry.max_attempts", 5),
    )
    .await;
    let r = get(p.public, "/solo").await;
    expect_status(&r, 503, "single backend");
    assert_eq!(r.attempts(), Some(1));
    assert_eq!(solo.count(), 1, "the only backend was retried");
}

/// C-RETRY-3: a retry that finds no backend costs no budget token.
pub async fn c_retry_3_no_token_spent_without_a_backend(bin: Binary) {
    let a = Backend::start("r-1").await;
    let b = Backend::start("r-2").await;
    b.set_health(500);
    let cfg = Config::new(&[&a, &b])
        .policy("pick_first")
        .set("health_check.failure_threshold", 50)
        .set("server.retry.budget_capacity", 1)
        .set("server.retry.budget_refill_per_second", 0.001);
    let p = Proxy::start(&bin, &cfg).await;
    a.set_mode(Mode::Status(503));
    for i in 0..5 {
        let r = get(p.public, "/nb").await;
        expect_not_retried(&r, 503, &format!("request {i}: no other backend"));
        assert!(
            r.header("x-balancer-retry-budget").is_none(),
            "request {i}: {}",
            r.summary()
        );
    }
    b.set_health(200);
    let start = Instant::now();
    loop {
        let r = get(p.public, "/nb").await;
        if r.status == 200 {
            expect_retried(
                &r,
                "first retry once r-2 is healthy: the budget's only token is still there",
            );
            break;
        }
        expect_not_retried(&r, 503, "while r-2 is still unhealthy");
        assert!(
            r.header("x-balancer-retry-budget").is_none(),
            "a token was spent: {}",
            r.summary()
        );
        assert!(start.elapsed() < secs(5), "r-2 never became healthy");
        tokio::time::sleep(ms(20)).await;
    }
}

/// C-RETRY-4: with no retry possible the client gets the last backend response as it was; a
/// synthetic `502` only for transport errors, `504` for a per-try timeout.
pub async fn c_retry_4_last_response_delivered_as_is(bin: Binary) {
    let (a, b, p) = pair(&bin, |c| c).await;
    a.set_mode(Mode::Status(503));
    b.set_mode(Mode::Status(503));
    b.set_response_headers(&[("x-own", "from-r-2"), ("content-type", "text/plain")]);
    let r = get(p.public, "/last").await;
    expect_status(&r, 503, "both backends 503");
    assert_eq!(r.backend().as_deref(), Some("r-2"));
    assert_eq!(
        r.text(),
        "backend r-2 status 503\n",
        "the backend's body, not weir's"
    );
    assert_eq!(
        r.header("x-own").as_deref(),
        Some("from-r-2"),
        "the backend's headers"
    );
    drop(p);
    let solo = Backend::start("solo").await;
    let p = Proxy::start(
        &bin,
        &Config::new(&[&solo])
            .passive_off()
            .set("server.retry.per_try_timeout", "300ms"),
    )
    .await;
    solo.set_mode(Mode::Reset);
    expect_weir_error(&get(p.public, "/x").await, 502, "reset, no retry possible");
    solo.set_mode(Mode::CloseWithoutAnswer);
    expect_weir_error(&get(p.public, "/x").await, 502, "closed, no retry possible");
    solo.set_mode(Mode::SlowHeaders(secs(3)));
    expect_weir_error(
        &get(p.public, "/x").await,
        504,
        "per-try timeout, no retry possible",
    );
    solo.set_mode(Mode::Status(502));
    let r = get(p.public, "/x").await;
    expect_status(&r, 502, "backend's own 502");
    assert_eq!(
        r.text(),
        "backend solo status 502\n",
        "the backend's 502 is delivered, not replaced"
    );
}

/// C-RETRY-5: `per_try_timeout` bounds the wait for headers only; a body that has started is
/// never cut by it.
pub async fn c_retry_5_per_try_timeout_bounds_headers_only(bin: Binary) {
    let (a, _b, p) = pair(&bin, |c| c.set("server.retry.per_try_timeout", "300ms")).await;
    a.set_mode(Mode::SlowBody {
        chunks: 8,
        interval: ms(120),
    });
    let r = get(p.public, "/slow-body").await;
    expect_not_retried(&r, 200, "slow body");
    let want: String = (0..8).map(|i| format!("chunk {i}\n")).collect();
    assert_eq!(r.text(), want, "whole body");
    assert!(r.elapsed >= ms(900), "body of 8×120ms took {:?}", r.elapsed);
}

/// C-RETRY-6: a retryable response is not drained: a backend that sent `503` headers and hangs
/// holds neither the request nor its slot.
pub async fn c_retry_6_hanging_503_is_not_drained(bin: Binary) {
    let (a, _b, p) = pair(&bin, |c| {
        c.set("server.upstream.max_concurrent_requests", 1)
    })
    .await;
    a.set_mode(Mode::StatusThenHang(503));
    for i in 0..3 {
        let r = get(p.public, "/h").await;
        expect_retried(&r, &format!("request {i} after a hanging 503"));
        assert!(
            r.elapsed < secs(2),
            "request {i} waited {:?} on the hanging body",
            r.elapsed
        );
        let rec = a.last().expect("first attempt");
        wait_until(secs(5), "the hanging 503's connection to be closed", || {
            matches!(rec.end(), Some((End::Cancelled, _)))
        })
        .await;
    }
    assert_eq!(a.count(), 3, "r-1's slot leaked: later requests skipped it");
}

/// C-RETRY-7 (and C-PATH-4): the retry budget bounds extra attempts; when it stops a retry the
/// response says `X-Balancer-Retry-Budget: exhausted`.
pub async fn c_retry_7_budget_bounds_retries(bin: Binary) {
    let (a, b, p) = pair(&bin, |c| {
        c.set("server.retry.budget_capacity", 2)
            .set("server.retry.budget_refill_per_second", 0.001)
    })
    .await;
    a.set_mode(Mode::Status(503));
    b.set_mode(Mode::Status(503));
    for i in 0..2 {
        let r = get(p.public, "/bud").await;
        assert_eq!(
            r.attempts(),
            Some(2),
            "request {i} with tokens left: {}",
            r.summary()
        );
        assert!(
            r.header("x-balancer-retry-budget").is_none(),
            "request {i}: {}",
            r.summary()
        );
    }
    for i in 2..12 {
        let r = get(p.public, "/bud").await;
        expect_not_retried(&r, 503, &format!("request {i} with the budget empty"));
        assert_eq!(
            r.header("x-balancer-retry-budget").as_deref(),
            Some("exhausted"),
            "request {i}"
        );
        assert_eq!(
            r.text(),
            "backend r-1 status 503\n",
            "current error returned"
        );
    }
    assert_eq!(
        a.count() + b.count(),
        12 + 2,
        "upstream attempts = requests + budget"
    );
}

/// C-RETRY-8: a per-try timeout counts as a passive failure.
pub async fn c_retry_8_per_try_timeout_is_a_passive_failure(bin: Binary) {
    let a = Backend::start("r-1").await;
    let b = Backend::start("r-2").await;
    a.set_mode(Mode::SlowHeaders(secs(5)));
    let cfg = Config::new(&[&a, &b])
        .policy("pick_first")
        .set("server.retry.per_try_timeout", "200ms")
        .set("health_check.failure_threshold", 2)
        .set("health_check.cooldown", "30s")
        .set("health_check.max_cooldown", "30s");
    let p = Proxy::start(&bin, &cfg).await;
    for i in 0..2 {
        expect_retried(&get(p.public, "/t").await, &format!("timeout {i}"));
    }
    let r = get(p.public, "/t").await;
    expect_status(&r, 200, "after two timeouts");
    assert_eq!(r.backend().as_deref(), Some("r-2"));
    assert_eq!(
        r.attempts(),
        Some(1),
        "r-1's circuit should be open after two per-try timeouts"
    );
    assert_eq!(a.count(), 2);
}

/// C-RETRY-11: a backend's `429` is an answer: it reaches the client with its `Retry-After`, is
/// never retried on another backend and never counts as a passive failure (a breaker with
/// `failure_threshold: 1` stays closed, so `pick_first` keeps sending to the same backend).
pub async fn c_retry_11_backend_429_passes_through_not_retried_nor_a_failure(bin: Binary) {
    let a = Backend::start("tm-1").await;
    let b = Backend::start("tm-2").await;
    a.set_mode(Mode::Status(429));
    a.set_response_headers(&[("retry-after", "7")]);
    let cfg = Config::new(&[&a, &b])
        .policy("pick_first")
        .set("health_check.failure_threshold", 1);
    let p = Proxy::start(&bin, &cfg).await;
    for i in 0..5 {
        let r = get(p.public, "/t").await;
        expect_status(&r, 429, &format!("request {i}"));
        assert_eq!(r.header("retry-after").as_deref(), Some("7"), "request {i}");
        assert_eq!(r.backend().as_deref(), Some("tm-1"), "request {i}");
    }
    assert_eq!(a.count(), 5);
    assert_eq!(b.count(), 0, "a 429 was retried or opened the circuit");
}

/// C-RETRY-11: weir's own `503` for a full route bulkhead carries `Retry-After: 1`, as its
/// `503` for a full gate does.
pub async fn c_retry_11_full_bulkhead_503_carries_retry_after(bin: Binary) {
    let slow = Backend::start("bh-1").await;
    slow.set_mode(Mode::Hold);
    let cfg = Config::new(&[&slow]).route("/slow", "default", Some(1));
    let p = Proxy::start(&bin, &cfg).await;
    let held = super::spawn_send(p.public, Req::get("/slow/1"));
    slow.wait_in_flight(1, secs(5)).await;
    let r = get(p.public, "/slow/2").await;
    expect_weir_error(&r, 503, "bulkhead full");
    assert_eq!(r.header("retry-after").as_deref(), Some("1"));
    slow.set_mode(Mode::Ok);
    slow.release_all();
    expect_status(&super::join(held, "held").await, 200, "held request");
}

/// Bodies of `n` requests, each a chunked body of 8 chunks (about 5 KB) unique to its request:
/// far over the `body_limit` of 64 the C-RETRY-9 cases set, so never replayable.
fn streamed_bodies(n: usize) -> Vec<Vec<String>> {
    (0..n)
        .map(|i| {
            (0..8)
                .map(|k| format!("request {i} chunk {k};").repeat(40))
                .collect()
        })
        .collect()
}

/// The HTTP/2 backends `backends` (`protocol: h2c`, probed over TCP) as the default pool,
/// passive ejection off, `body_limit` 64.
fn h2c_pool(backends: &[&H2Backend]) -> Config {
    let list: Vec<serde_json::Value> = backends
        .iter()
        .map(|b| serde_json::json!({"id": b.id(), "url": b.url(), "protocol": "h2c"}))
        .collect();
    Config::new(&[])
        .set("backends", serde_json::Value::Array(list))
        .set("health_check.mode", "tcp")
        .passive_off()
        .set("server.retry.body_limit", 64)
}

/// Send every body of `bodies` as a chunked `POST` (not in `retry.methods`, over `body_limit`:
/// never replayable); each must be `200` from a backend other than `dead`. Returns how many
/// took a second attempt.
async fn post_all(p: &Proxy, bodies: &[Vec<String>], dead: &str) -> usize {
    let mut retried = 0;
    for (i, chunks) in bodies.iter().enumerate() {
        let refs: Vec<&str> = chunks.iter().map(String::as_str).collect();
        let r = send(p.public, &Req::new("POST", "/upload").chunked(&refs)).await;
        expect_status(&r, 200, &format!("streamed POST {i}"));
        assert_ne!(
            r.backend().as_deref(),
            Some(dead),
            "POST {i}: {}",
            r.summary()
        );
        if r.attempts() == Some(2) {
            retried += 1;
        }
    }
    retried
}

/// C-RETRY-9: a chunked `POST` larger than `body_limit` (so never replayable, and `POST` not in
/// `retry.methods`) to a pool of three round-robin backends, one of which refuses connections,
/// gets `200` every time: an attempt whose connect was refused is sent again to another
/// backend, its streamed body whole.
pub async fn c_retry_9_streamed_post_whose_connect_was_refused_goes_to_another_backend(
    bin: Binary,
) {
    let a = Backend::start("n-1").await;
    let dead = Backend::start("n-2").await;
    let c = Backend::start("n-3").await;
    let cfg = Config::new(&[&a, &dead, &c])
        .passive_off()
        .set("server.retry.body_limit", 64);
    let p = Proxy::start(&bin, &cfg).await;
    // Healthy first (a backend takes traffic once a probe passed); with passive ejection off
    // it stays in the pool for 255 failed probes after its port closes.
    for _ in 0..100 {
        get(p.public, "/warm").await;
        if dead.count() > 0 {
            break;
        }
        tokio::time::sleep(ms(20)).await;
    }
    assert!(dead.count() > 0, "n-2 never took traffic");
    dead.down().await;
    let bodies = streamed_bodies(9);
    let retried = post_all(&p, &bodies, "n-2").await;
    assert!(retried >= 1, "round robin never picked the dead backend");
    let mut got: Vec<Vec<u8>> = a
        .requests()
        .iter()
        .chain(c.requests().iter())
        .filter(|r| r.method == "POST")
        .map(|r| r.body.to_vec())
        .collect();
    let mut want: Vec<Vec<u8>> = bodies.iter().map(|b| b.concat().into_bytes()).collect();
    got.sort();
    want.sort();
    assert!(
        got == want,
        "every body arrived whole, once, at a live backend"
    );
}

/// C-RETRY-9 (and C-RETRY-1): a chunked `POST` whose attempt failed after its body was sent
/// (the backend read it, then reset the connection) is not retried: `502`, one attempt.
pub async fn c_retry_9_post_that_failed_after_its_body_was_sent_is_not_retried(bin: Binary) {
    let (a, b, p) = pair(&bin, |c| c.set("server.retry.body_limit", 64)).await;
    a.set_mode(Mode::Reset);
    let bodies = streamed_bodies(1);
    let refs: Vec<&str> = bodies[0].iter().map(String::as_str).collect();
    let r = send(p.public, &Req::new("POST", "/upload").chunked(&refs)).await;
    expect_weir_error(&r, 502, "reset after the body");
    assert_eq!(r.attempts(), Some(1), "{}", r.summary());
    assert_eq!(b.count(), 0, "not retried");
    let r = send(p.public, &Req::new("POST", "/upload").body("small")).await;
    expect_weir_error(
        &r,
        502,
        "reset after a small body (POST is not in retry.methods)",
    );
    assert_eq!(b.count(), 0, "not retried");
}

/// C-RETRY-9 over HTTP/2: the same streamed `POST`s to a pool of three `h2c` backends, one of
/// which resets every stream with `REFUSED_STREAM`: `200` every time, each body whole at a
/// backend that answered.
pub async fn c_retry_9_h2c_refused_stream_goes_to_another_backend(bin: Binary) {
    let a = H2Backend::start("s-1", None, 0).await;
    let refusing = H2Backend::refusing("s-2").await;
    let c = H2Backend::start("s-3", None, 0).await;
    let p = Proxy::start(&bin, &h2c_pool(&[&a, &refusing, &c])).await;
    let bodies = streamed_bodies(9);
    let retried = post_all(&p, &bodies, "s-2").await;
    assert!(retried >= 1 && refusing.refused() >= 1, "never refused");
    expect_h2_bodies(&[&a, &c], &bodies);
}

/// C-RETRY-9 over HTTP/2: a stream above the `last_stream_id` of the backend's `GOAWAY` was not
/// processed and goes to another backend, its streamed body whole.
pub async fn c_retry_9_h2c_stream_past_goaway_goes_to_another_backend(bin: Binary) {
    let a = H2Backend::start("g-1", None, 0).await;
    let leaving = H2Backend::going_away("g-2").await;
    let c = H2Backend::start("g-3", None, 0).await;
    let p = Proxy::start(&bin, &h2c_pool(&[&a, &leaving, &c])).await;
    let bodies = streamed_bodies(9);
    let retried = post_all(&p, &bodies, "g-2").await;
    assert!(retried >= 1 && leaving.refused() >= 1, "never sent GOAWAY");
    expect_h2_bodies(&[&a, &c], &bodies);
}

/// Every body of `bodies` arrived once, whole, at one of `backends`.
#[track_caller]
fn expect_h2_bodies(backends: &[&H2Backend], bodies: &[Vec<String>]) {
    let mut got: Vec<Vec<u8>> = backends
        .iter()
        .flat_map(|b| b.requests())
        .map(|r| r.body.to_vec())
        .collect();
    let mut want: Vec<Vec<u8>> = bodies.iter().map(|b| b.concat().into_bytes()).collect();
    got.sort();
    want.sort();
    assert!(
        got == want,
        "every body arrived whole, once, at a backend that answered"
    );
}

/// C-RETRY-10: with `backoff_base` = `backoff_max` = 200ms, a retry reaches the second backend
/// a full-jitter delay after the first answered `503`: never more than 200ms (plus generous
/// slack for the machine), and, over 20 requests, not all at once (20 uniform draws from
/// [0, 200ms) all below 20ms has probability 10^-20). A connect error is retried at once
/// (C-RETRY-9: no backoff), which the other C-RETRY-9 cases exercise.
pub async fn c_retry_10_a_retry_waits_a_jittered_backoff(bin: Binary) {
    let (a, b, p) = pair(&bin, |c| {
        c.set("server.retry.backoff_base", "200ms")
            .set("server.retry.backoff_max", "200ms")
    })
    .await;
    a.set_mode(Mode::Status(503));
    let mut waits = Vec::new();
    for i in 0..20 {
        let r = get(p.public, "/backoff").await;
        expect_retried(&r, &format!("request {i}"));
        let (first, retry) = (a.last().expect("first attempt"), b.last().expect("retry"));
        waits.push(retry.at.saturating_duration_since(first.at));
    }
    let slowest = waits.iter().max().copied().unwrap_or_default();
    assert!(
        slowest < ms(200) + secs(1),
        "a wait beyond backoff_max and the slack: {waits:?}"
    );
    assert!(slowest >= ms(20), "no retry waited: {waits:?}");
}
