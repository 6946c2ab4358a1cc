//! C-PATH: listeners, the order of work, request ids, balancer headers, raw paths, hop-by-hop
//! headers, streaming, upgrades, cancellation, graceful shutdown, weir's errors, client limits.

use super::{expect_status, expect_weir_error, is_hex32, join, spawn_send};
use crate::backend::{Backend, Mode};
use crate::client::{Req, get, send, try_send};
use crate::config::{ADMIN_TOKEN, Config};
use crate::harness::{Binary, Proxy};
use crate::util::secs;

mod limits;
mod streams;

pub use limits::*;
pub use streams::*;

/// C-PATH-1: the data plane answers `/healthz` and `/readyz` itself and proxies everything else,
/// management paths included.
pub async fn c_path_1_data_plane_serves_only_healthz_and_readyz(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(&bin, &Config::new(&[&b])).await;
    for path in ["/healthz", "/readyz"] {
        let r = get(p.public, path).await;
        expect_status(&r, 200, path);
    }
    assert_eq!(b.count(), 0, "/healthz and /readyz reached the backend");
    for path in [
        "/metrics",
        "/api/dashboard/status",
        "/api/dashboard/backends",
        "/readyz/x",
        "/healthzz",
    ] {
        let r = get(p.public, path).await;
        expect_status(&r, 200, path);
        assert_eq!(
            r.backend().as_deref(),
            Some("b-1"),
            "{path} was not proxied: {}",
            r.summary()
        );
        assert_eq!(r.text(), "backend b-1\n", "{path}");
        assert_eq!(b.last().map(|x| x.target.clone()).as_deref(), Some(path));
    }
}

/// C-PATH-1: management is a separate listener; its endpoints are not on the data plane even
/// with a valid token.
pub async fn c_path_1_management_is_a_separate_listener(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(&bin, &Config::new(&[&b]).management()).await;
    let m = p
        .management
        .expect("ready file names a management listener when management is enabled");
    assert_ne!(
        m, p.public,
        "management and public listeners are the same socket"
    );
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let r = send(m, &Req::get("/healthz").header("authorization", &auth)).await;
    expect_status(&r, 200, "management /healthz");
    let r = send(
        p.public,
        &Req::get("/api/dashboard/status").header("authorization", &auth),
    )
    .await;
    expect_status(&r, 200, "public /api/dashboard/status");
    assert_eq!(
        r.backend().as_deref(),
        Some("b-1"),
        "dashboard path on the data plane must be proxied"
    );
    let last = b.last().expect("backend saw the dashboard path");
    assert_eq!(last.target, "/api/dashboard/status");
}

/// C-PATH-2: the gate comes before the limiter (an overload `503` costs no token) and
/// `/healthz`/`/readyz` pass neither.
pub async fn c_path_2_gate_before_limiter_and_probes_bypass_both(bin: Binary) {
    let b = Backend::start("b-1").await;
    b.set_mode(Mode::Hold);
    let cfg = Config::new(&[&b])
        .rate_limit(2, 0.001)
        .set("server.overload.max_concurrent_requests", 1)
        .set("server.overload.queue_timeout", "0s");
    let p = Proxy::start(&bin, &cfg).await;
    let held = spawn_send(p.public, Req::get("/held"));
    b.wait_in_flight(1, secs(5)).await;
    for path in ["/healthz", "/readyz", "/healthz", "/readyz", "/healthz"] {
        let r = get(p.public, path).await;
        expect_status(&r, 200, &format!("{path} with the gate full"));
        assert!(
            r.header("x-ratelimit-limit").is_none(),
            "{path} went through the limiter"
        );
        assert!(
            r.header("x-balancer-overloaded").is_none(),
            "{path} went through the gate"
        );
    }
    let r = get(p.public, "/over").await;
    expect_weir_error(&r, 503, "request over the gate");
    assert_eq!(r.header("x-balancer-overloaded").as_deref(), Some("true"));
    b.release_all();
    let r = join(held, "held request").await;
    expect_status(&r, 200, "held request");
    assert_eq!(
        r.header("x-ratelimit-remaining").as_deref(),
        Some("1"),
        "held request: {}",
        r.summary()
    );
    b.set_mode(Mode::Ok);
    let r = get(p.public, "/after").await;
    expect_status(
        &r,
        200,
        "second token (the overload 503 and the probes spent none)",
    );
    assert_eq!(r.header("x-ratelimit-remaining").as_deref(), Some("0"));
    let r = get(p.public, "/after2").await;
    expect_weir_error(&r, 429, "bucket now empty");
}

/// C-PATH-2: the limiter runs before routing, the bulkhead and backend selection: a request
/// turned away by a full bulkhead or by "no backend" has spent its token, and a limited client
/// gets `429`, not `503`.
pub async fn c_path_2_limiter_before_bulkhead_and_selection(bin: Binary) {
    let slow = Backend::start("slow-1").await;
    slow.set_mode(Mode::Hold);
    let down = Backend::start("down-1").await;
    down.set_health(500);
    let cfg = Config::new(&[&down])
        .rate_limit(3, 0.001)
        .pool("slow", "round_robin", &[&slow])
        .route("/slow", "slow", Some(1));
    let p = Proxy::start(&bin, &cfg).await;
    let held = spawn_send(p.public, Req::get("/slow/held")); // token 1
    slow.wait_in_flight(1, secs(5)).await;
    let r = get(p.public, "/slow/second").await; // token 2
    expect_weir_error(&r, 503, "bulkhead full");
    let r = get(p.public, "/x").await; // token 3
    expect_weir_error(&r, 503, "no healthy backend in the default pool");
    let r = get(p.public, "/x").await;
    expect_weir_error(&r, 429, "limiter before selection");
    let r = get(p.public, "/slow/third").await;
    expect_weir_error(&r, 429, "limiter before the bulkhead");
    slow.release_all();
    expect_status(&join(held, "held").await, 200, "held request");
}

/// C-PATH-3: a valid `X-Request-ID` is kept, sent upstream and returned.
pub async fn c_path_3_valid_request_id_is_kept(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(&bin, &Config::new(&[&b])).await;
    let long = "a".repeat(128);
    for id in [
        "Abc.def-123:XYZ",
        "x",
        long.as_str(),
        "0123456789abcdef0123456789abcdef",
    ] {
        let r = send(p.public, &Req::get("/id").header("x-request-id", id)).await;
        expect_status(&r, 200, id);
        assert_eq!(r.header_all("x-request-id"), [id], "response id");
        let up = b.last().expect("upstream request");
        assert_eq!(up.header_all("x-request-id"), [id], "upstream id");
    }
}

/// C-PATH-3: a missing or invalid id is replaced by 32 hex characters, upstream and back.
pub async fn c_path_3_invalid_or_missing_request_id_is_replaced(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(&bin, &Config::new(&[&b])).await;
    let too_long = "a".repeat(129);
    let mut seen = Vec::new();
    let cases: Vec<Option<&str>> = vec![
        None,
        Some(""),
        Some("has space"),
        Some("a/b"),
        Some("semi;colon"),
        Some(too_long.as_str()),
        Some("ünï"),
    ];
    for id in cases {
        let mut req = Req::get("/id");
        if let Some(id) = id {
            req = req.header("x-request-id", id);
        }
        let r = match try_send(p.public, &req).await {
            Ok(r) => r,
            Err(e) => panic!("id {id:?}: {e}"),
        };
        expect_status(&r, 200, &format!("id {id:?}"));
        let got = r.header_all("x-request-id");
        assert_eq!(got.len(), 1, "id {id:?}: response ids {got:?}");
        assert!(
            is_hex32(&got[0]),
            "id {id:?}: generated id {:?} is not 32 hex characters",
            got[0]
        );
        let up = b.last().expect("upstream request");
        assert_eq!(
            up.header_all("x-request-id"),
            got,
            "id {id:?}: upstream must carry the id in force"
        );
        seen.push(got[0].clone());
    }
    let n = seen.len();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), n, "generated ids repeat");
}

/// C-PATH-3: weir's own `429`, `503` and `502` carry the id in force.
pub async fn c_path_3_request_id_on_weir_errors(bin: Binary) {
    let down = Backend::start("down-1").await;
    down.set_health(500);
    let reset = Backend::start("reset-1").await;
    reset.set_mode(Mode::Reset);
    let cfg = Config::new(&[&down])
        .passive_off()
        .rate_limit(2, 0.001)
        .pool("r", "round_robin", &[&reset])
        .route("/reset", "r", None);
    let p = Proxy::start(&bin, &cfg).await;
    let r = send(p.public, &Req::get("/x").header("x-request-id", "req-503")).await;
    expect_weir_error(&r, 503, "no backend");
    assert_eq!(r.header("x-request-id").as_deref(), Some("req-503"));
    let r = send(
        p.public,
        &Req::get("/reset/x").header("x-request-id", "req-502"),
    )
    .await;
    expect_weir_error(&r, 502, "backend reset");
    assert_eq!(r.header("x-request-id").as_deref(), Some("req-502"));
    let r = send(p.public, &Req::get("/x").header("x-request-id", "req-429")).await;
    expect_weir_error(&r, 429, "rate limited");
    assert_eq!(r.header("x-request-id").as_deref(), Some("req-429"));
    let r = send(p.public, &Req::get("/x").header("x-request-id", "bad id")).await;
    expect_weir_error(&r, 429, "rate limited, invalid id");
    assert!(
        is_hex32(&r.header("x-request-id").unwrap_or_default()),
        "generated id on a 429"
    );
}

/// C-PATH-4: `X-Balancer-Backend`, `X-Balancer-Attempts`, `X-Request-ID` on responses from a
/// backend (replacing any a backend sent), `X-Balancer-Backend-Attempt` on upstream requests.
pub async fn c_path_4_balancer_headers(bin: Binary) {
    let a = Backend::start("b-1").await;
    let b = Backend::start("b-2").await;
    a.set_mode(Mode::Status(503));
    b.set_response_headers(&[
        ("x-balancer-backend", "spoofed"),
        ("x-balancer-attempts", "9"),
    ]);
    let cfg = Config::new(&[&a, &b]).policy("pick_first").passive_off();
    let p = Proxy::start(&bin, &cfg).await;
    let r = send(p.public, &Req::get("/h").header("x-request-id", "rid-4")).await;
    expect_status(&r, 200, "retried on b-2");
    assert_eq!(r.header_all("x-balancer-backend"), ["b-2"]);
    assert_eq!(r.header_all("x-balancer-attempts"), ["2"]);
    assert_eq!(r.header_all("x-request-id"), ["rid-4"]);
    assert!(
        r.header("x-balancer-retry-budget").is_none(),
        "budget was not exhausted"
    );
    assert_eq!(
        a.last()
            .and_then(|x| x.header("x-balancer-backend-attempt"))
            .as_deref(),
        Some("b-1")
    );
    assert_eq!(
        b.last()
            .and_then(|x| x.header("x-balancer-backend-attempt"))
            .as_deref(),
        Some("b-2")
    );
    a.set_mode(Mode::Ok);
    let r = get(p.public, "/h").await;
    expect_status(&r, 200, "first attempt");
    assert_eq!(r.header_all("x-balancer-backend"), ["b-1"]);
    assert_eq!(r.header_all("x-balancer-attempts"), ["1"]);
    assert!(r.header("x-request-id").is_some());
}

/// C-PATH-5: path bytes and the query string reach the backend exactly as sent.
pub async fn c_path_5_path_and_query_bytes_are_kept(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(&bin, &Config::new(&[&b])).await;
    let targets = [
        "/a%2Fb/%2E%2E/%252F/c?q=%20x&a=1&a=2&empty=&plus=a+b",
        "/a/../b//c/./d",
        "/%7Euser/caf%C3%A9/%2e%2E%2f?x=%2F&y=%25",
        "/UPPER/lower/MiXeD%aa%AA",
        "/trailing/",
        "/q?",
        "/semi;param=1/x?k=v;w",
    ];
    for t in targets {
        let r = get(p.public, t).await;
        expect_status(&r, 200, t);
        assert_eq!(
            b.last().map(|x| x.target.clone()).as_deref(),
            Some(t),
            "upstream target"
        );
    }
}

/// C-PATH-5 (with C-ROUTE-1): encodings are not decoded into another route.
pub async fn c_path_5_encoded_paths_do_not_change_route(bin: Binary) {
    let web = Backend::start("web-1").await;
    let api = Backend::start("api-1").await;
    let cfg = Config::new(&[&web])
        .pool("api", "round_robin", &[&api])
        .route("/api", "api", None);
    let p = Proxy::start(&bin, &cfg).await;
    for (t, want) in [
        ("/api/x", "api-1"),
        ("/api", "api-1"),
        ("/%61pi/x", "web-1"),
        ("/api%2Fx", "web-1"),
        ("/apix", "web-1"),
        ("/x/..%2Fapi/y", "web-1"),
        ("/api/..%2F..%2Fadmin", "api-1"),
    ] {
        let r = get(p.public, t).await;
        expect_status(&r, 200, t);
        assert_eq!(r.backend().as_deref(), Some(want), "route for {t}");
        let got = if want == "api-1" {
            api.last()
        } else {
            web.last()
        };
        assert_eq!(
            got.map(|x| x.target.clone()).as_deref(),
            Some(t),
            "upstream target for {t}"
        );
    }
}

/// C-PATH-6: hop-by-hop request headers are removed; end-to-end ones pass.
pub async fn c_path_6_hop_by_hop_request_headers_removed(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(&bin, &Config::new(&[&b])).await;
    let req = Req::get("/hop")
        .header("connection", "keep-alive, X-Custom-Hop")
        .header("x-custom-hop", "secret")
        .header("keep-alive", "timeout=5")
        .header("proxy-connection", "keep-alive")
        .header("te", "gzip")
        .header("trailer", "X-Trailer")
        .header("upgrade", "h2c")
        .header("x-end-to-end", "kept");
    let r = send(p.public, &req).await;
    expect_status(&r, 200, "request with hop-by-hop headers");
    let up = b.last().expect("upstream request");
    for h in [
        "x-custom-hop",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
    ] {
        assert!(
            !up.has_header(h),
            "upstream request still has {h}: {:?}",
            up.headers
        );
    }
    for v in up.header_all("connection") {
        assert!(
            !v.to_ascii_lowercase().contains("x-custom-hop"),
            "upstream Connection names {v}"
        );
    }
    assert_eq!(up.header("x-end-to-end").as_deref(), Some("kept"));
}

/// C-PATH-6: hop-by-hop response headers are removed; end-to-end ones pass.
pub async fn c_path_6_hop_by_hop_response_headers_removed(bin: Binary) {
    let b = Backend::start("b-1").await;
    b.set_response_headers(&[
        ("connection", "X-Backend-Hop"),
        ("x-backend-hop", "secret"),
        ("keep-alive", "timeout=5"),
        ("proxy-connection", "keep-alive"),
        ("upgrade", "foo"),
        ("trailer", "X-Trailer"),
        ("x-end-to-end", "kept"),
    ]);
    let p = Proxy::start(&bin, &Config::new(&[&b])).await;
    let r = get(p.public, "/hop").await;
    expect_status(&r, 200, "response with hop-by-hop headers");
    for h in [
        "x-backend-hop",
        "keep-alive",
        "proxy-connection",
        "upgrade",
        "trailer",
    ] {
        assert!(r.header(h).is_none(), "client got {h}: {:?}", r.headers);
    }
    for v in r.header_all("connection") {
        assert!(
            !v.to_ascii_lowercase().contains("x-backend-hop"),
            "client Connection names {v}"
        );
    }
    assert_eq!(r.header("x-end-to-end").as_deref(), Some("kept"));
    assert_eq!(r.text(), "backend b-1\n");
}
