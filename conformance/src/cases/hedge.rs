//! C-HEDGE-1, hedging over real sockets: with `retry.hedge_delay: 100ms`, a GET whose first
//! backend takes 1.5 s is answered by the other backend well within 600 ms, and the slow
//! backend sees its connection closed long before its answer would have come; a POST is never
//! hedged; the retry budget and `max_attempts` bound hedges as they bound retries. Either
//! attempt may be on an HTTP/2 (`h2c`) backend, in a pool of HTTP/2 backends or one that mixes
//! both protocols: a losing HTTP/2 attempt's stream is reset with `CANCEL` (seen on the wire by
//! the slow backend of [`crate::h2slow`]) and its connection kept.

use std::time::Duration;

use serde_json::{Value, json};

use super::expect_status;
use super::obs::metrics;
use crate::backend::{Backend, End, Mode};
use crate::client::{Req, get, send};
use crate::config::Config;
use crate::h2slow::{Ending, SlowBackend, SlowCall};
use crate::harness::{Binary, Proxy};
use crate::util::{metric, ms, secs, wait_until};

/// How long the slow backend waits before its response head.
const SLOW: Duration = Duration::from_millis(1500);

/// A slow backend (`h-1`, picked first) and a fast one (`h-2`), hedging after 100 ms.
async fn hedged_pair(
    bin: &Binary,
    tweak: impl FnOnce(Config) -> Config,
) -> (Backend, Backend, Proxy) {
    let slow = Backend::start("h-1").await;
    let fast = Backend::start("h-2").await;
    slow.set_mode(Mode::SlowHeaders(SLOW));
    let cfg = tweak(
        Config::new(&[&slow, &fast])
            .policy("pick_first")
            .passive_off()
            .management()
            .set("server.retry.hedge_delay", "100ms")
            .set("server.retry.backoff_base", "0s"),
    );
    let p = Proxy::start(bin, &cfg).await;
    (slow, fast, p)
}

/// `load_balancer_hedges_total{result}` now.
async fn hedges(p: &Proxy, result: &str) -> f64 {
    let text = metrics(p).await;
    metric(
        &text,
        "load_balancer_hedges_total",
        &format!("result=\"{result}\""),
    )
    .unwrap_or(-1.0)
}

/// C-HEDGE-1: a GET whose first backend has no response head after `hedge_delay` (100 ms) gets
/// a second attempt on the other backend, whose `200` is the answer, in < 600 ms (not 1.5 s).
/// The slow backend's connection is closed (it sees the request cancelled) well before its
/// 1.5 s, and the hedge is counted `sent` and `won`.
pub async fn c_hedge_1_slow_get_is_answered_by_the_hedge_and_the_loser_is_closed(bin: Binary) {
    let (slow, fast, p) = hedged_pair(&bin, |c| c).await;
    let r = get(p.public, "/h").await;
    expect_status(&r, 200, "a hedged GET");
    assert_eq!(r.backend().as_deref(), Some("h-2"), "{}", r.summary());
    assert!(r.elapsed < ms(600), "answered in {:?}", r.elapsed);
    assert_eq!(
        r.attempts(),
        Some(2),
        "the hedge is attempt 2: {}",
        r.summary()
    );
    assert_eq!(fast.count(), 1);
    let first = slow.last().expect("the first attempt reached h-1");
    wait_until(secs(3), "h-1's request to be cancelled", || {
        first.end().is_some()
    })
    .await;
    let (end, at) = first.end().expect("ended");
    assert_eq!(
        end,
        End::Cancelled,
        "the losing attempt's connection is closed"
    );
    assert!(
        at.saturating_duration_since(first.at) < ms(1000),
        "closed {:?} after the request reached h-1 (its head was due at 1.5 s)",
        at.saturating_duration_since(first.at)
    );
    assert_eq!(hedges(&p, "sent").await, 1.0);
    assert_eq!(hedges(&p, "won").await, 1.0);
    // The loser is no passive failure: h-1 is still picked first.
    slow.set_mode(Mode::Ok);
    let r = get(p.public, "/h").await;
    assert_eq!(r.backend().as_deref(), Some("h-1"), "{}", r.summary());
}

/// C-HEDGE-1: a POST (not in `retry.methods`) is never hedged: it waits for its backend's
/// 1.5 s answer, and the other backend never sees it.
pub async fn c_hedge_1_post_is_never_hedged(bin: Binary) {
    let (slow, fast, p) = hedged_pair(&bin, |c| c).await;
    let r = send(p.public, &Req::post("/h", "payload")).await;
    expect_status(&r, 200, "a slow POST");
    assert_eq!(r.backend().as_deref(), Some("h-1"), "{}", r.summary());
    assert!(r.elapsed >= ms(1400), "answered in {:?}", r.elapsed);
    assert_eq!(fast.count(), 0, "the POST reached the other backend");
    assert_eq!(slow.count(), 1);
    assert_eq!(hedges(&p, "sent").await, 0.0);
}

/// C-HEDGE-1: a hedge needs a retry-budget token and an attempt left under `max_attempts`.
/// With a budget of one token the first slow GET is hedged and the second is not; with
/// `max_attempts: 1` no GET is hedged.
pub async fn c_hedge_1_budget_and_max_attempts_bound_hedges(bin: Binary) {
    let (slow, fast, p) = hedged_pair(&bin, |c| {
        c.set("server.retry.budget_capacity", 1)
            .set("server.retry.budget_refill_per_second", 0.001)
    })
    .await;
    let r = get(p.public, "/h").await;
    assert_eq!(
        r.backend().as_deref(),
        Some("h-2"),
        "hedged: {}",
        r.summary()
    );
    let r = get(p.public, "/h").await;
    expect_status(&r, 200, "the second GET");
    assert_eq!(
        r.backend().as_deref(),
        Some("h-1"),
        "no token left: {}",
        r.summary()
    );
    assert!(r.elapsed >= ms(1400), "answered in {:?}", r.elapsed);
    assert_eq!((slow.count(), fast.count()), (2, 1));
    assert_eq!(hedges(&p, "sent").await, 1.0);
    drop(p);

    let (slow, fast, p) = hedged_pair(&bin, |c| c.set("server.retry.max_attempts", 1)).await;
    let r = get(p.public, "/h").await;
    expect_status(&r, 200, "a GET with max_attempts 1");
    assert_eq!(r.backend().as_deref(), Some("h-1"), "{}", r.summary());
    assert!(r.elapsed >= ms(1400), "answered in {:?}", r.elapsed);
    assert_eq!((slow.count(), fast.count()), (1, 0));
    assert_eq!(hedges(&p, "sent").await, 0.0);
}

/// A backend of a hedged pool: HTTP/1, or HTTP/2 with prior knowledge.
enum Either<'b> {
    H1(&'b Backend),
    H2c(&'b SlowBackend),
}

/// The pool `backends` in that order (`pick_first`: the first is tried first), probed over TCP
/// (the h2c ones speak only HTTP/2), hedging after 100 ms, and a breaker that opens on one
/// failure, so that a loser counted as a failure would move the next request elsewhere.
fn mixed_pool(backends: &[Either<'_>]) -> Config {
    let list: Vec<Value> = backends
        .iter()
        .map(|b| match b {
            Either::H1(b) => json!({"id": b.id(), "url": b.url()}),
            Either::H2c(b) => json!({"id": b.id(), "url": b.url(), "protocol": "h2c"}),
        })
        .collect();
    Config::new(&[])
        .set("backends", Value::Array(list))
        .set("health_check.mode", "tcp")
        .set("health_check.failure_threshold", 1)
        .policy("pick_first")
        .management()
        .set("server.retry.hedge_delay", "100ms")
        .set("server.retry.backoff_base", "0s")
}

/// The hedged GET's answer: `200` from `winner` (attempt 2) in under 600 ms, though the first
/// backend takes 1.5 s; the hedge counted `sent` and `won`.
async fn answered_by_the_hedge(p: &Proxy, winner: &str) {
    let r = get(p.public, "/h").await;
    expect_status(&r, 200, "a hedged GET");
    assert_eq!(r.backend().as_deref(), Some(winner), "{}", r.summary());
    assert!(r.elapsed < ms(600), "answered in {:?}", r.elapsed);
    assert_eq!(
        r.attempts(),
        Some(2),
        "the hedge is attempt 2: {}",
        r.summary()
    );
    assert_eq!(hedges(p, "sent").await, 1.0);
    assert_eq!(hedges(p, "won").await, 1.0);
}

/// `backend`'s attempts by outcome: the loser is counted `cancelled` once and never as a
/// failure (timeout, transport or connect error, failure status), and it was never ejected.
async fn loser_counted_cancelled(p: &Proxy, backend: &str) {
    let text = metrics(p).await;
    let attempts = |outcome: &str| {
        metric(
            &text,
            "load_balancer_upstream_attempts_total",
            &format!("backend=\"{backend}\",outcome=\"{outcome}\""),
        )
    };
    assert_eq!(attempts("cancelled"), Some(1.0), "{text}");
    for outcome in [
        "timeout",
        "transport_error",
        "connect_error",
        "failure_status",
    ] {
        assert_eq!(attempts(outcome), Some(0.0), "{outcome}: {text}");
    }
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("load_balancer_outlier_ejections_total")
                && l.contains(&format!("backend=\"{backend}\""))
                && !l.ends_with(" 0")),
        "the loser was ejected:\n{text}"
    );
}

/// The h2c backend's one call, once its stream was reset by weir: with `CANCEL`, less than
/// 1 s after it arrived (its answer was due at 1.5 s), its connection kept (not lost).
async fn reset_with_cancel(b: &SlowBackend) -> SlowCall {
    wait_until(secs(3), "the losing stream to be reset", || {
        b.calls()
            .first()
            .is_some_and(|c| c.ending != Ending::Pending)
    })
    .await;
    let call = b.calls().remove(0);
    match call.ending {
        Ending::Reset(reason, at) => {
            assert_eq!(reason, h2::Reason::CANCEL, "{call:?}");
            assert!(
                at.saturating_duration_since(call.received) < ms(1000),
                "reset {:?} after the call arrived",
                at.saturating_duration_since(call.received)
            );
        }
        other => panic!("the losing stream ended {other:?}, not reset with CANCEL"),
    }
    call
}

/// C-HEDGE-1 in a mixed pool: the first attempt on a slow HTTP/1 backend, the hedge on an h2c
/// backend that answers at once. The hedge runs as a stream on the h2c backend and wins in
/// under 600 ms; the HTTP/1 loser's connection is closed; the loser is counted cancelled, no
/// failure, and is still picked first.
pub async fn c_hedge_1_mixed_pool_hedge_on_h2c_backend_wins(bin: Binary) {
    let slow = Backend::start("mx-1").await;
    slow.set_mode(Mode::SlowHeaders(SLOW));
    let fast = SlowBackend::start("mx-2", Duration::ZERO).await;
    let p = Proxy::start(&bin, &mixed_pool(&[Either::H1(&slow), Either::H2c(&fast)])).await;
    answered_by_the_hedge(&p, "mx-2").await;
    assert_eq!(fast.count(), 1);
    let first = slow.last().expect("the first attempt reached mx-1");
    wait_until(secs(3), "mx-1's request to be cancelled", || {
        first.end().is_some()
    })
    .await;
    let (end, at) = first.end().expect("ended");
    assert_eq!(
        end,
        End::Cancelled,
        "the HTTP/1 loser's connection is closed"
    );
    assert!(
        at.saturating_duration_since(first.at) < ms(1000),
        "closed {:?} after the request reached mx-1",
        at.saturating_duration_since(first.at)
    );
    loser_counted_cancelled(&p, "mx-1").await;
    slow.set_mode(Mode::Ok);
    let r = get(p.public, "/h").await;
    assert_eq!(r.backend().as_deref(), Some("mx-1"), "{}", r.summary());
}

/// C-HEDGE-1 in a mixed pool, the other way round: the first attempt on a slow h2c backend,
/// the hedge on an HTTP/1 one that answers at once and wins in under 600 ms; the h2c loser's
/// stream is reset with `CANCEL` and its connection kept; no failure is counted.
pub async fn c_hedge_1_mixed_pool_h2c_first_attempt_is_hedged(bin: Binary) {
    let slow = SlowBackend::start("my-1", SLOW).await;
    let fast = Backend::start("my-2").await;
    let p = Proxy::start(&bin, &mixed_pool(&[Either::H2c(&slow), Either::H1(&fast)])).await;
    answered_by_the_hedge(&p, "my-2").await;
    assert_eq!(fast.count(), 1);
    reset_with_cancel(&slow).await;
    loser_counted_cancelled(&p, "my-1").await;
    slow.set_delay(Duration::ZERO);
    let r = get(p.public, "/h").await;
    assert_eq!(r.backend().as_deref(), Some("my-1"), "{}", r.summary());
    assert_eq!(slow.connections(), 1, "the loser's connection was not kept");
}

/// C-HEDGE-1 between two h2c backends: the first takes 1.5 s, the second answers at once. A
/// GET is answered by the second in under 600 ms; the first sees `RST_STREAM` with `CANCEL`
/// on its stream, its connection kept for the next request (one connection in all); the loser
/// is counted cancelled, never a failure, and is still picked first.
pub async fn c_hedge_1_h2c_loser_stream_is_reset_with_cancel(bin: Binary) {
    let slow = SlowBackend::start("hh-1", SLOW).await;
    let fast = SlowBackend::start("hh-2", Duration::ZERO).await;
    let p = Proxy::start(&bin, &mixed_pool(&[Either::H2c(&slow), Either::H2c(&fast)])).await;
    answered_by_the_hedge(&p, "hh-2").await;
    assert_eq!(fast.count(), 1);
    reset_with_cancel(&slow).await;
    loser_counted_cancelled(&p, "hh-1").await;
    slow.set_delay(Duration::ZERO);
    let r = get(p.public, "/h").await;
    expect_status(&r, 200, "the next GET");
    assert_eq!(r.backend().as_deref(), Some("hh-1"), "{}", r.summary());
    assert_eq!(slow.connections(), 1, "the loser's connection was not kept");
}

/// C-HEDGE-1 on h2c backends: a POST is never hedged: it waits for the first backend's 1.5 s
/// answer, the other never sees it, no hedge is counted.
pub async fn c_hedge_1_h2c_post_is_never_hedged(bin: Binary) {
    let slow = SlowBackend::start("hp-1", SLOW).await;
    let fast = SlowBackend::start("hp-2", Duration::ZERO).await;
    let p = Proxy::start(&bin, &mixed_pool(&[Either::H2c(&slow), Either::H2c(&fast)])).await;
    let r = send(p.public, &Req::post("/h", "payload")).await;
    expect_status(&r, 200, "a slow POST");
    assert_eq!(r.backend().as_deref(), Some("hp-1"), "{}", r.summary());
    assert!(r.elapsed >= ms(1400), "answered in {:?}", r.elapsed);
    assert_eq!(fast.count(), 0, "the POST reached the other backend");
    assert_eq!(slow.count(), 1);
    assert_eq!(hedges(&p, "sent").await, 0.0);
}

/// C-HEDGE-1 for a request from an HTTP/2 client: a `GET` over h2c whose first attempt (on a
/// slow h2c backend) has no head after 100 ms is hedged on the HTTP/1 backend, which answers
/// it in under 600 ms; the h2c loser's stream is reset with `CANCEL`, counted cancelled only.
/// With the slow backend HTTP/1 and the fast one h2c, the HTTP/1 loser's connection is closed.
pub async fn c_hedge_1_h2_client_get_is_hedged(bin: Binary) {
    let slow = SlowBackend::start("hc-1", SLOW).await;
    let fast = Backend::start("hc-2").await;
    let p = Proxy::start(&bin, &mixed_pool(&[Either::H2c(&slow), Either::H1(&fast)])).await;
    let uri = format!("http://127.0.0.1:{}/h", p.public.port());
    let r = match crate::client::h2c_get(p.public, &uri, &[]).await {
        Ok(r) => r,
        Err(e) => panic!("h2c request failed: {e}"),
    };
    expect_status(&r, 200, "a hedged GET from an HTTP/2 client");
    assert_eq!(r.backend().as_deref(), Some("hc-2"), "{}", r.summary());
    assert!(r.elapsed < ms(600), "answered in {:?}", r.elapsed);
    assert_eq!(r.attempts(), Some(2), "{}", r.summary());
    assert_eq!(hedges(&p, "sent").await, 1.0);
    assert_eq!(hedges(&p, "won").await, 1.0);
    reset_with_cancel(&slow).await;
    loser_counted_cancelled(&p, "hc-1").await;
    drop(p);

    let slow = Backend::start("hd-1").await;
    slow.set_mode(Mode::SlowHeaders(SLOW));
    let fast = SlowBackend::start("hd-2", Duration::ZERO).await;
    let p = Proxy::start(&bin, &mixed_pool(&[Either::H1(&slow), Either::H2c(&fast)])).await;
    let uri = format!("http://127.0.0.1:{}/h", p.public.port());
    let r = match crate::client::h2c_get(p.public, &uri, &[]).await {
        Ok(r) => r,
        Err(e) => panic!("h2c request failed: {e}"),
    };
    expect_status(&r, 200, "a hedged GET from an HTTP/2 client");
    assert_eq!(r.backend().as_deref(), Some("hd-2"), "{}", r.summary());
    assert!(r.elapsed < ms(600), "answered in {:?}", r.elapsed);
    let first = slow.last().expect("the first attempt reached hd-1");
    wait_until(secs(3), "hd-1's request to be cancelled", || {
        first.end().is_some()
    })
    .await;
    assert_eq!(first.end().map(|e| e.0), Some(End::Cancelled));
    loser_counted_cancelled(&p, "hd-1").await;
}
