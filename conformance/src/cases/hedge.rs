//! C-HEDGE-1, hedging over real sockets: with `retry.hedge_delay: 100ms`, a GET whose first
//! backend takes 1.5 s is answered by the other backend well within 600 ms, and the slow
//! backend sees its connection closed long before its answer would have come; a POST is never
//! hedged; the retry budget and `max_attempts` bound hedges as they bound retries.

use std::time::Duration;

use super::expect_status;
use super::obs::metrics;
use crate::backend::{Backend, End, Mode};
use crate::client::{Req, get, send};
use crate::config::Config;
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
