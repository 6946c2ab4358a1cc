//! C-OUT: outlier detection over real sockets: a backend answering `500` to everything is
//! ejected and comes back; a pool of two both failing keeps serving.

use std::time::Instant;

use super::expect_status;
use super::obs::metrics;
use crate::backend::{Backend, Mode};
use crate::client::get;
use crate::config::Config;
use crate::harness::{Binary, Proxy};
use crate::util::{eventually, ms, secs};

/// The `outlier_ejected` lines logged so far for `backend` (docs/operations.md, "Log events").
fn ejections(p: &Proxy, backend: &str) -> usize {
    p.logs()
        .stdout()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["fields"]["event"] == "outlier_ejected" && v["fields"]["backend"] == backend)
        .count()
}

/// Outlier detection judged every second on small volumes, so a case sees it within seconds.
fn outlier_config(cfg: Config, base_ejection_time: &str) -> Config {
    cfg.set("server.retry.max_attempts", 1)
        .set("health_check.outlier.interval", "1s")
        .set("health_check.outlier.failure_percentage_request_volume", 5)
        .set(
            "health_check.outlier.base_ejection_time",
            base_ejection_time,
        )
}

/// Sends requests (a few ms apart) until `backend` has an `outlier_ejected` line; returns the
/// instant of the last check that found none, before which the ejection cannot have started.
async fn drive_until_ejected(p: &Proxy, backend: &str) -> Instant {
    let mut before = Instant::now();
    eventually(secs(30), "an outlier_ejected line", || {
        let found = ejections(p, backend) > 0;
        if !found {
            before = Instant::now();
        }
        let addr = p.public;
        async move {
            if found {
                return Some(());
            }
            let _ = get(addr, "/o").await;
            tokio::time::sleep(ms(5)).await;
            None
        }
    })
    .await;
    before
}

/// C-OUT-1, C-OUT-2: one of three backends answers `500` to everything. Once the interval that
/// saw it is judged, it gets none of the next 60 requests sent while its ejection lasts; after
/// `base_ejection_time` it takes traffic again. The `WARN` line and the metrics say so.
pub async fn c_out_1_backend_answering_500_is_ejected_then_returns(bin: Binary) {
    let bad = Backend::start("ol-1").await;
    let others = [Backend::start("ol-2").await, Backend::start("ol-3").await];
    bad.set_mode(Mode::Status(500));
    let base = secs(10);
    let cfg = outlier_config(
        Config::new(&[&bad, &others[0], &others[1]]).management(),
        "10s",
    );
    let p = Proxy::start(&bin, &cfg).await;
    let before = drive_until_ejected(&p, "ol-1").await;
    // Requests sent from now until `before + base` are all inside the ejection.
    let mut counted = 0;
    let mut to_bad = 0;
    while counted < 60 {
        let sent = Instant::now();
        let r = get(p.public, "/o").await;
        if sent >= before + base {
            break;
        }
        expect_status(&r, 200, "while ol-1 is ejected");
        counted += 1;
        if r.backend().as_deref() == Some("ol-1") {
            to_bad += 1;
        }
    }
    assert!(
        counted > 0,
        "no request inside the ejection: the case proves nothing"
    );
    assert!(
        to_bad <= 1,
        "{to_bad} of {counted} requests went to the ejected backend"
    );
    let text = metrics(&p).await;
    assert!(
        text.lines()
            .any(|l| l.starts_with("load_balancer_outlier_ejections_total")
                && l.contains("backend=\"ol-1\"")
                && l.contains("reason=\"failure_percentage\"")
                && !l.ends_with(" 0")),
        "ejection counted:\n{text}"
    );
    // After base_ejection_time the backend gets traffic again.
    let returned = eventually(secs(60), "ol-1 to get traffic again", || {
        let addr = p.public;
        async move {
            let r = get(addr, "/o").await;
            tokio::time::sleep(ms(10)).await;
            (r.backend().as_deref() == Some("ol-1")).then(Instant::now)
        }
    })
    .await;
    assert!(
        returned >= before + base,
        "back after {:?}, base_ejection_time {base:?}",
        returned - before
    );
}

/// C-OUT-2: both backends of a pool of two answer `500`: one may be ejected, never both, and
/// every request still gets a backend's answer (never weir's `503`).
pub async fn c_out_2_pool_of_two_both_failing_keeps_serving(bin: Binary) {
    let a = Backend::start("op-1").await;
    let b = Backend::start("op-2").await;
    a.set_mode(Mode::Status(500));
    b.set_mode(Mode::Status(500));
    let cfg = outlier_config(Config::new(&[&a, &b]).management(), "30s");
    let p = Proxy::start(&bin, &cfg).await;
    eventually(secs(30), "one of the two to be ejected", || {
        let n = ejections(&p, "op-1") + ejections(&p, "op-2");
        let addr = p.public;
        async move {
            if n > 0 {
                return Some(());
            }
            let r = get(addr, "/o").await;
            expect_status(&r, 500, "a backend's answer");
            tokio::time::sleep(ms(5)).await;
            None
        }
    })
    .await;
    // Three more intervals of traffic: still served, and never both ejected.
    let until = Instant::now() + secs(3);
    while Instant::now() < until {
        let r = get(p.public, "/o").await;
        expect_status(&r, 500, "a backend's answer while one is ejected");
        assert!(r.backend().is_some(), "answered by a backend");
        tokio::time::sleep(ms(10)).await;
    }
    let text = metrics(&p).await;
    let ejected: f64 = text
        .lines()
        .filter(|l| l.starts_with("load_balancer_backend_ejected{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(ejected, 1.0, "exactly one of two ejected:\n{text}");
    assert!(
        ejections(&p, "op-1") == 0 || ejections(&p, "op-2") == 0,
        "both backends of the pool were ejected"
    );
}

/// C-OUT-1: one of six backends fails half its requests (every other one answered `500`): below
/// `failure_percentage_threshold` (85 %), so only success rate can find it; with enough volume
/// per interval its success rate (50 %) is below the pool's mean minus 1.9 standard deviations
/// and it is ejected with reason `success_rate`, while the five healthy ones stay in.
pub async fn c_out_1_one_of_six_failing_half_is_ejected_by_success_rate(bin: Binary) {
    let bad = Backend::start("os-1").await;
    let good = Backend::start_many("os-g", 5).await;
    bad.set_mode(Mode::EveryOther(500));
    let mut all = vec![&bad];
    all.extend(good.iter());
    let cfg = outlier_config(Config::new(&all).management(), "30s")
        .set("health_check.outlier.success_rate_request_volume", 10);
    let p = Proxy::start(&bin, &cfg).await;
    // Volume: batches of twelve concurrent requests, so every backend sees well over
    // `success_rate_request_volume` requests per interval.
    eventually(secs(30), "an outlier_ejected line for os-1", || {
        let found = ejections(&p, "os-1") > 0;
        let addr = p.public;
        async move {
            if found {
                return Some(());
            }
            let batch: Vec<_> = (0..12)
                .map(|_| tokio::spawn(async move { get(addr, "/o").await }))
                .collect();
            for t in batch {
                let _ = t.await;
            }
            None
        }
    })
    .await;
    let text = metrics(&p).await;
    assert!(
        text.lines()
            .any(|l| l.starts_with("load_balancer_outlier_ejections_total")
                && l.contains("backend=\"os-1\"")
                && l.contains("reason=\"success_rate\"")
                && !l.ends_with(" 0")),
        "ejected by success rate:\n{text}"
    );
    for g in &good {
        assert_eq!(
            ejections(&p, g.id()),
            0,
            "{} (always 200) was ejected",
            g.id()
        );
    }
    // While it is ejected, it gets (almost) nothing of the traffic.
    let mut to_bad = 0;
    for _ in 0..30 {
        let r = get(p.public, "/o").await;
        expect_status(&r, 200, "while os-1 is ejected");
        if r.backend().as_deref() == Some("os-1") {
            to_bad += 1;
        }
    }
    assert!(
        to_bad <= 1,
        "{to_bad} of 30 requests went to the ejected backend"
    );
}
