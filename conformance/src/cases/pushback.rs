//! C-RETRY-11, pushback: a backend's `503` with `Retry-After` takes it out of selection for as
//! long as it asked (delta-seconds or an HTTP-date), capped at `health_check.retry_after_max`,
//! within the outlier cap; the request is retried on another backend. The same holds for an
//! HTTP/2 (`h2c`) backend's `503` and `429`, whose heads reach the engine through the
//! protocol translation (C-GRPC-1).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::expect_status;
use super::obs::metrics;
use crate::backend::{Backend, Mode};
use crate::client::get;
use crate::config::Config;
use crate::h2slow::SlowBackend;
use crate::harness::{Binary, Proxy};
use crate::util::{eventually, ms, secs};

/// The `outlier_ejected` lines with reason `retry_after` logged so far for `backend`, with
/// their `ejection_ms`.
fn pushbacks(p: &Proxy, backend: &str) -> Vec<u64> {
    p.logs()
        .stdout()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| {
            let f = &v["fields"];
            f["event"] == "outlier_ejected"
                && f["backend"] == backend
                && f["reason"] == "retry_after"
        })
        .filter_map(|v| v["fields"]["ejection_ms"].as_u64())
        .collect()
}

/// `secs` since the Unix epoch as an IMF-fixdate (RFC 9110 §5.6.7), written here on its own
/// rather than with weir's code, so the case checks weir's reading against a second writer.
fn http_date(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = secs / 86_400;
    // Civil date from days since 1970-01-01, by walking years and months (cheap for a test).
    let (mut year, mut left) = (1970u64, days);
    loop {
        let len = if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) {
            366
        } else {
            365
        };
        if left < len {
            break;
        }
        left -= len;
        year += 1;
    }
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let lens = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    let mut month = 0;
    while left >= lens[month] {
        left -= lens[month];
        month += 1;
    }
    let t = secs % 86_400;
    format!(
        "{}, {:02} {} {year} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        left + 1,
        MONTHS[month],
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

/// Sends GETs (10 ms apart) for `length`, each of which must be answered `200`.
async fn traffic(p: &Proxy, length: Duration) {
    let until = Instant::now() + length;
    while Instant::now() < until {
        let r = get(p.public, "/pb").await;
        expect_status(&r, 200, "a request while a backend pushes back");
        tokio::time::sleep(ms(10)).await;
    }
}

/// The arrival of `bad`'s first request, sending GETs until it has one.
async fn first_hit(p: &Proxy, bad: &Backend) -> Instant {
    first_of(p, || bad.requests().first().map(|r| r.at)).await
}

/// The first arrival `first` reads, sending GETs until there is one.
async fn first_of(p: &Proxy, first: impl Fn() -> Option<Instant>) -> Instant {
    eventually(secs(10), "a request to reach the pushing backend", || {
        let first = first();
        let addr = p.public;
        async move {
            if first.is_some() {
                return first;
            }
            let r = get(addr, "/pb").await;
            expect_status(&r, 200, "retried on another backend");
            None
        }
    })
    .await
}

/// The arrivals at `bad` after `t0`, as offsets from it.
fn later_hits(bad: &Backend, t0: Instant) -> Vec<Duration> {
    bad.requests()
        .iter()
        .filter(|r| r.at > t0)
        .map(|r| r.at - t0)
        .collect()
}

/// C-RETRY-11: of three backends, one answers `503` with `Retry-After: 2`. Its first `503` is
/// retried on another backend (the client gets `200`), and it gets no request for ~2 s (none
/// within 1.5 s), then traffic again (by 4 s). The ejection is a `WARN` line with reason
/// `retry_after` and is counted in `load_balancer_outlier_ejections_total`.
pub async fn c_retry_11_503_with_retry_after_pushes_the_backend_back(bin: Binary) {
    let bad = Backend::start("pb-1").await;
    let others = [Backend::start("pb-2").await, Backend::start("pb-3").await];
    bad.set_mode(Mode::Status(503));
    bad.set_response_headers(&[("retry-after", "2")]);
    let cfg = Config::new(&[&bad, &others[0], &others[1]]).management();
    let p = Proxy::start(&bin, &cfg).await;
    let t0 = first_hit(&p, &bad).await;
    traffic(&p, secs(4)).await;
    let hits = later_hits(&bad, t0);
    assert!(
        hits.iter().all(|d| *d >= ms(1500)),
        "requests reached the pushed-back backend at {hits:?} after its 503"
    );
    assert!(
        hits.iter().any(|d| *d <= secs(4)),
        "no request reached it again within 4 s: {hits:?}"
    );
    let logged = pushbacks(&p, "pb-1");
    assert!(
        logged.contains(&2000),
        "ejection_ms of the pushbacks: {logged:?}"
    );
    let text = metrics(&p).await;
    assert!(
        text.lines()
            .any(|l| l.starts_with("load_balancer_outlier_ejections_total")
                && l.contains("backend=\"pb-1\"")
                && l.contains("reason=\"retry_after\"")
                && !l.ends_with(" 0")),
        "pushback counted:\n{text}"
    );
}

/// C-RETRY-11: `Retry-After` as an HTTP-date three seconds ahead pushes the backend back until
/// that date (2–3 s, the date having whole seconds).
pub async fn c_retry_11_retry_after_http_date_pushes_back_until_then(bin: Binary) {
    let bad = Backend::start("pd-1").await;
    let others = [Backend::start("pd-2").await, Backend::start("pd-3").await];
    bad.set_mode(Mode::Status(503));
    let cfg = Config::new(&[&bad, &others[0], &others[1]]).management();
    let p = Proxy::start(&bin, &cfg).await;
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970");
    let date = http_date(wall.as_secs() + 3);
    bad.set_response_headers(&[("retry-after", &date)]);
    let t0 = first_hit(&p, &bad).await;
    traffic(&p, secs(2)).await;
    let hits = later_hits(&bad, t0);
    assert!(
        hits.iter().all(|d| *d >= ms(1500)),
        "requests reached the backend pushed back until {date} at {hits:?}"
    );
    let logged = pushbacks(&p, "pd-1");
    assert!(
        logged.iter().any(|ms| (1000..=3000).contains(ms)),
        "a pushback of 1–3 s until {date}: {logged:?}"
    );
}

/// C-RETRY-11: a `Retry-After` beyond `health_check.retry_after_max` is capped: with a cap of
/// 1 s, an hour's `Retry-After` keeps the backend out for one second.
pub async fn c_retry_11_retry_after_is_capped_at_retry_after_max(bin: Binary) {
    let bad = Backend::start("pc-1").await;
    let others = [Backend::start("pc-2").await, Backend::start("pc-3").await];
    bad.set_mode(Mode::Status(503));
    bad.set_response_headers(&[("retry-after", "3600")]);
    let cfg = Config::new(&[&bad, &others[0], &others[1]])
        .management()
        .set("health_check.retry_after_max", "1s");
    let p = Proxy::start(&bin, &cfg).await;
    let t0 = first_hit(&p, &bad).await;
    traffic(&p, secs(3)).await;
    let hits = later_hits(&bad, t0);
    assert!(
        hits.iter().all(|d| *d >= ms(700)),
        "requests reached the backend during its 1 s pushback: {hits:?}"
    );
    assert!(
        hits.iter().any(|d| *d <= secs(3)),
        "capped at 1 s, yet no request reached it again within 3 s: {hits:?}"
    );
    let logged = pushbacks(&p, "pc-1");
    assert!(
        !logged.is_empty() && logged.iter().all(|ms| *ms == 1000),
        "every pushback capped at 1000 ms: {logged:?}"
    );
}

/// C-RETRY-11 within C-OUT-2: a pool of one is never emptied. Its `503` with `Retry-After`
/// passes to the client as it was (header included), and the next request reaches it at once.
pub async fn c_retry_11_pool_of_one_is_never_emptied(bin: Binary) {
    let only = Backend::start("po-1").await;
    only.set_mode(Mode::Status(503));
    only.set_response_headers(&[("retry-after", "30")]);
    let cfg = Config::new(&[&only]);
    let p = Proxy::start(&bin, &cfg).await;
    for i in 0..3 {
        let r = get(p.public, "/pb").await;
        expect_status(&r, 503, &format!("request {i}: the backend's own 503"));
        assert_eq!(r.backend().as_deref(), Some("po-1"), "request {i}");
        assert_eq!(
            r.header("retry-after").as_deref(),
            Some("30"),
            "request {i}"
        );
    }
    assert_eq!(only.count(), 3, "every request reached the only backend");
    assert!(
        pushbacks(&p, "po-1").is_empty(),
        "the only backend was ejected"
    );
}

/// The h2c backends `backends` (probed over TCP: they speak only HTTP/2) as the default pool.
fn h2c_pool(backends: &[&SlowBackend]) -> Config {
    let list: Vec<serde_json::Value> = backends
        .iter()
        .map(|b| serde_json::json!({"id": b.id(), "url": b.url(), "protocol": "h2c"}))
        .collect();
    Config::new(&[])
        .set("backends", serde_json::Value::Array(list))
        .set("health_check.mode", "tcp")
}

/// C-RETRY-11 from an HTTP/2 backend: of three h2c backends, one answers `503` with
/// `Retry-After: 2`. Its `503` is retried on another backend (the client gets `200`), it gets
/// no request within 1.5 s and one again by 4 s, and the pushback is logged as 2000 ms.
pub async fn c_retry_11_h2c_503_with_retry_after_pushes_the_backend_back(bin: Binary) {
    let bad = SlowBackend::start("hb-1", Duration::ZERO).await;
    let others = [
        SlowBackend::start("hb-2", Duration::ZERO).await,
        SlowBackend::start("hb-3", Duration::ZERO).await,
    ];
    bad.set_answer(503, &[("retry-after", "2"), ("content-type", "text/plain")]);
    let p = Proxy::start(
        &bin,
        &h2c_pool(&[&bad, &others[0], &others[1]]).management(),
    )
    .await;
    let t0 = first_of(&p, || bad.calls().first().map(|c| c.received)).await;
    traffic(&p, secs(4)).await;
    let hits: Vec<Duration> = bad
        .calls()
        .iter()
        .filter(|c| c.received > t0)
        .map(|c| c.received - t0)
        .collect();
    assert!(
        hits.iter().all(|d| *d >= ms(1500)),
        "requests reached the pushed-back h2c backend at {hits:?} after its 503"
    );
    assert!(
        hits.iter().any(|d| *d <= secs(4)),
        "no request reached it again within 4 s: {hits:?}"
    );
    let logged = pushbacks(&p, "hb-1");
    assert!(
        logged.contains(&2000),
        "ejection_ms of the pushbacks: {logged:?}"
    );
}

/// C-RETRY-11 from an HTTP/2 backend: an h2c backend's `429` with `Retry-After: 7` reaches the
/// client five times with its header, from the same `pick_first` backend: never retried, and a
/// threshold-1 breaker stays closed.
pub async fn c_retry_11_h2c_backend_429_passes_through_not_retried(bin: Binary) {
    let a = SlowBackend::start("ht-1", Duration::ZERO).await;
    let b = SlowBackend::start("ht-2", Duration::ZERO).await;
    a.set_answer(429, &[("retry-after", "7"), ("content-type", "text/plain")]);
    let cfg = h2c_pool(&[&a, &b])
        .policy("pick_first")
        .set("health_check.failure_threshold", 1);
    let p = Proxy::start(&bin, &cfg).await;
    for i in 0..5 {
        let r = get(p.public, "/t").await;
        expect_status(&r, 429, &format!("request {i}"));
        assert_eq!(r.header("retry-after").as_deref(), Some("7"), "request {i}");
        assert_eq!(r.backend().as_deref(), Some("ht-1"), "request {i}");
    }
    assert_eq!(a.count(), 5);
    assert_eq!(b.count(), 0, "a 429 was retried or opened the circuit");
    assert!(
        pushbacks(&p, "ht-1").is_empty(),
        "a 429 pushed its backend back"
    );
}
