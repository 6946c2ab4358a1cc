//! C-MIRROR-1, request mirroring: a share of a route's requests copied to a backend of another
//! pool, its answer discarded; the primary is never slowed, failed or altered by it, mirrors in
//! flight are bounded, a body that cannot be replayed skips the mirror; every mirror is counted
//! in `load_balancer_mirror_requests_total{result}`.

use std::time::{Duration, Instant};

use super::expect_status;
use super::obs::metrics;
use crate::backend::{Backend, Mode};
use crate::client::{Req, h2c_get, send};
use crate::config::Config;
use crate::harness::{Binary, Proxy};
use crate::util::{eventually, metric, ms, secs};

/// `load_balancer_mirror_requests_total{result}` now.
async fn mirrored(p: &Proxy, result: &str) -> f64 {
    let text = metrics(p).await;
    metric(
        &text,
        "load_balancer_mirror_requests_total",
        &format!("result=\"{result}\""),
    )
    .unwrap_or_else(|| panic!("no mirror series {result}:\n{text}"))
}

/// Waits until the mirror counter for `result` reads `n`.
async fn wait_mirrored(p: &Proxy, result: &str, n: f64) {
    eventually(secs(5), &format!("{n} mirrors {result}"), || async move {
        (mirrored(p, result).await == n).then_some(())
    })
    .await;
}

/// A POST mirrored to a shadow that answers after 2 s is answered well under 500 ms; the shadow
/// gets the same method, target and body, with `Host: <name>-shadow`; an HTTP/2 client's
/// request is mirrored too.
pub async fn c_mirror_1_slow_shadow_never_delays_the_primary_and_gets_the_post(bin: Binary) {
    let primary = Backend::start("mir-p").await;
    let shadow = Backend::start("mir-s").await;
    shadow.set_mode(Mode::SlowHeaders(secs(2)));
    let cfg = Config::new(&[&primary])
        .pool("shadow", "round_robin", &[&shadow])
        .mirror_route("/", "default", "shadow", None)
        .management();
    let p = Proxy::start(&bin, &cfg).await;
    let body = "{\"order\": 42, \"mirror\": true}";
    let req = Req::post("/orders?x=1", body)
        .header("host", "shop.example")
        .header("content-type", "application/json");
    let started = Instant::now();
    let r = send(p.public, &req).await;
    let took = started.elapsed();
    expect_status(&r, 200, "the primary's answer");
    assert_eq!(
        r.backend().as_deref(),
        Some("mir-p"),
        "the primary's backend"
    );
    assert!(
        took < ms(500),
        "the primary waited for the 2 s shadow: answered in {took:?}"
    );
    eprintln!("c_mirror_1: primary answered in {took:?} (shadow answers after 2 s)");
    let got = primary.last().expect("the primary got the request");
    assert_eq!(got.header("host").as_deref(), Some("shop.example"));
    shadow.wait_requests(1, secs(5)).await;
    let m = shadow.last().expect("the shadow got the mirror");
    assert_eq!(m.method, "POST");
    assert_eq!(m.target, "/orders?x=1");
    assert_eq!(m.body.as_ref(), body.as_bytes(), "the same body bytes");
    assert_eq!(m.header("host").as_deref(), Some("shop.example-shadow"));
    assert_eq!(
        m.header("content-type").as_deref(),
        Some("application/json")
    );
    assert_eq!(
        m.header("x-request-id"),
        got.header("x-request-id"),
        "the mirror carries the primary's request id"
    );
    // HTTP/2 from the client: mirrored the same way, and not waited for either.
    let started = Instant::now();
    let r = h2c_get(p.public, "/h2", &[("host", "shop.example")])
        .await
        .expect("h2c GET");
    let took = started.elapsed();
    expect_status(&r, 200, "the HTTP/2 primary");
    assert!(took < ms(500), "HTTP/2 primary answered in {took:?}");
    shadow.wait_requests(2, secs(5)).await;
    let m = shadow.last().expect("the second mirror");
    assert_eq!(m.target, "/h2");
    assert_eq!(m.header("host").as_deref(), Some("shop.example-shadow"));
    wait_mirrored(&p, "sent", 2.0).await;
    assert_eq!(mirrored(&p, "dropped").await, 0.0);
    assert_eq!(mirrored(&p, "skipped").await, 0.0);
}

/// `percent: 25` mirrors 25 % ± 10 of 200 requests, drawn per request.
pub async fn c_mirror_1_percent_mirrors_that_share(bin: Binary) {
    let primary = Backend::start("pct-p").await;
    let shadow = Backend::start("pct-s").await;
    let cfg = Config::new(&[&primary])
        .pool("shadow", "round_robin", &[&shadow])
        .mirror_route("/", "default", "shadow", Some(25))
        .management();
    let p = Proxy::start(&bin, &cfg).await;
    for i in 0..200 {
        let r = send(p.public, &Req::get(&format!("/p/{i}"))).await;
        expect_status(&r, 200, &format!("request {i}"));
    }
    assert_eq!(primary.count(), 200);
    let sent = eventually(secs(5), "the mirrors counted and received", || async {
        let sent = mirrored(&p, "sent").await;
        (sent as usize == shadow.count()).then_some(sent)
    })
    .await;
    eprintln!("c_mirror_1: percent 25 mirrored {sent} of 200");
    assert!(
        (30.0..=70.0).contains(&sent),
        "25 % ± 10 of 200 is 30..=70, mirrored {sent}"
    );
}

/// A mirror pool whose backend dies changes nothing for the client: every answer is the
/// primary's, as fast; the mirrors fail (or are dropped once its circuit opens) and are counted.
pub async fn c_mirror_1_dead_mirror_pool_changes_nothing_for_the_client(bin: Binary) {
    let primary = Backend::start("dead-p").await;
    let shadow = Backend::start("dead-s").await;
    let cfg = Config::new(&[&primary])
        .pool("shadow", "round_robin", &[&shadow])
        .mirror_route("/", "default", "shadow", None)
        .management();
    let p = Proxy::start(&bin, &cfg).await;
    shadow.down().await;
    for i in 0..20 {
        let r = send(p.public, &Req::post("/d", "payload")).await;
        expect_status(&r, 200, &format!("request {i}"));
        assert_eq!(r.backend().as_deref(), Some("dead-p"));
        assert_eq!(r.attempts(), Some(1), "no retry, no extra attempt");
        assert!(r.elapsed < ms(500), "request {i} took {:?}", r.elapsed);
    }
    assert_eq!(primary.count(), 20);
    eventually(secs(5), "20 mirrors counted", || async {
        let n = mirrored(&p, "sent").await + mirrored(&p, "dropped").await;
        (n == 20.0).then_some(())
    })
    .await;
}

/// Over `server.upstream.mirror_max_in_flight` a mirror is dropped and counted, and the primary
/// is served as ever.
pub async fn c_mirror_1_in_flight_bound_drops_and_counts(bin: Binary) {
    let primary = Backend::start("cap-p").await;
    let shadow = Backend::start("cap-s").await;
    shadow.set_mode(Mode::Hold);
    let cfg = Config::new(&[&primary])
        .pool("shadow", "round_robin", &[&shadow])
        .mirror_route("/", "default", "shadow", None)
        .set("server.upstream.mirror_max_in_flight", 2)
        .management();
    let p = Proxy::start(&bin, &cfg).await;
    for i in 0..2 {
        let r = send(p.public, &Req::get(&format!("/c/{i}"))).await;
        expect_status(&r, 200, &format!("request {i}"));
    }
    shadow.wait_in_flight(2, secs(5)).await;
    for i in 2..5 {
        let r = send(p.public, &Req::get(&format!("/c/{i}"))).await;
        expect_status(&r, 200, &format!("request {i} over the bound"));
        assert!(r.elapsed < ms(500), "request {i} took {:?}", r.elapsed);
    }
    assert_eq!(mirrored(&p, "sent").await, 2.0);
    assert_eq!(mirrored(&p, "dropped").await, 3.0);
    assert_eq!(
        shadow.count(),
        2,
        "the dropped ones never reached the shadow"
    );
    shadow.release_all();
    // Places are given back once the held mirrors end: the next one is sent.
    eventually(secs(5), "the held mirrors ended", || async {
        (shadow.in_flight() == 0).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = send(p.public, &Req::get("/c/again")).await;
    expect_status(&r, 200, "after the release");
    wait_mirrored(&p, "sent", 3.0).await;
}

/// A body over `retry.body_limit` skips the mirror (counted) and streams to the primary as
/// before.
pub async fn c_mirror_1_body_over_the_limit_skips_the_mirror(bin: Binary) {
    let primary = Backend::start("big-p").await;
    let shadow = Backend::start("big-s").await;
    let cfg = Config::new(&[&primary])
        .pool("shadow", "round_robin", &[&shadow])
        .mirror_route("/", "default", "shadow", None)
        .set("server.retry.body_limit", 16)
        .management();
    let p = Proxy::start(&bin, &cfg).await;
    let big = "x".repeat(64);
    let r = send(p.public, &Req::post("/big", &big)).await;
    expect_status(&r, 200, "the primary");
    assert_eq!(primary.last().expect("primary").body.len(), 64);
    let r = send(p.public, &Req::new("POST", "/chunked").chunked(&["a", "b"])).await;
    expect_status(&r, 200, "a chunked primary");
    let r = send(p.public, &Req::post("/small", "tiny")).await;
    expect_status(&r, 200, "a small body");
    wait_mirrored(&p, "sent", 1.0).await;
    assert_eq!(mirrored(&p, "skipped").await, 2.0);
    shadow.wait_requests(1, secs(5)).await;
    assert_eq!(shadow.count(), 1, "only the small body was mirrored");
    assert_eq!(shadow.last().expect("mirror").body.as_ref(), b"tiny");
}
