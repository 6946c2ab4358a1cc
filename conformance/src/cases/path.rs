//! C-PATH: listeners, the order of work, request ids, balancer headers, raw paths, hop-by-hop
//! headers, streaming, upgrades, cancellation, graceful shutdown, weir's errors, client limits.

use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use serde_json::json;
use tokio::net::TcpStream;

use super::{expect_status, expect_weir_error, is_hex32, join, spawn_send};
use crate::backend::{Backend, End, Mode};
use crate::client::{Conn, Raw, Req, get, send, try_send};
use crate::config::{ADMIN_TOKEN, Config};
use crate::harness::{Binary, Proxy};
use crate::util::{eventually, ms, secs, stays, wait_until, within};

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

/// C-PATH-7: the first body bytes reach the client while the backend has not finished.
pub async fn c_path_7_first_bytes_before_backend_finishes(bin: Binary) {
    let b = Backend::start("b-1").await;
    b.set_mode(Mode::HoldBody);
    let p = Proxy::start(&bin, &Config::new(&[&b])).await;
    let mut c = Conn::open(p.public, None).await.expect("connect");
    let resp = c.send_head(&Req::get("/stream")).await.expect("head");
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let first = within(
        secs(5),
        "first chunk while the backend holds the rest",
        body.frame(),
    )
    .await
    .expect("a frame")
    .expect("frame ok");
    assert_eq!(first.data_ref().map(|d| d.as_ref()), Some(&b"first\n"[..]));
    let rec = b.last().expect("backend request");
    assert!(
        rec.end().is_none(),
        "backend had already finished: the first chunk was not streamed"
    );
    b.release_all();
    let rest = within(secs(5), "rest of the body", body.collect())
        .await
        .expect("body");
    assert_eq!(&rest.to_bytes()[..], b"last\n");
    wait_until(secs(2), "backend to finish", || rec.end().is_some()).await;
}

/// C-PATH-7 (and C-RETRY-5): server-sent events stream event by event, and with
/// `write_timeout: 0s` no deadline (read, idle, per-try) cuts a long stream.
pub async fn c_path_7_sse_streams_without_deadline(bin: Binary) {
    let b = Backend::start("b-1").await;
    b.set_mode(Mode::Sse {
        events: 12,
        interval: ms(150),
    });
    let cfg = Config::new(&[&b])
        .set("server.write_timeout", "0s")
        .set("server.read_timeout", "300ms")
        .set("server.idle_timeout", "500ms")
        .set("server.retry.per_try_timeout", "300ms");
    let p = Proxy::start(&bin, &cfg).await;
    let mut c = Conn::open(p.public, None).await.expect("connect");
    let resp = c
        .send_head(&Req::get("/events").header("accept", "text/event-stream"))
        .await
        .expect("head");
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("text/event-stream")
    );
    let mut body = resp.into_body();
    let mut got = Vec::new();
    let mut times = Vec::new();
    let start = Instant::now();
    while let Some(f) = within(secs(5), "next event", body.frame()).await {
        let f = f.unwrap_or_else(|e| panic!("stream broke after {} bytes: {e}", got.len()));
        if let Some(d) = f.data_ref() {
            got.extend_from_slice(d);
            times.push(start.elapsed());
        }
    }
    let text = String::from_utf8_lossy(&got);
    let expected: String = (0..12).map(|i| format!("data: {i}\n\n")).collect();
    assert_eq!(text, expected, "whole stream");
    let first = times.first().copied().unwrap_or_default();
    let last = times.last().copied().unwrap_or_default();
    assert!(
        last - first >= ms(1200),
        "events arrived in a burst (first {first:?}, last {last:?}): not streamed"
    );
}

/// C-PATH-8: an HTTP Upgrade is tunnelled both ways after `101`, and the backend slot is held
/// until the upgraded connection closes.
pub async fn c_path_8_upgrade_is_tunnelled_and_holds_the_slot(bin: Binary) {
    let b = Backend::start("b-1").await;
    let cfg = Config::new(&[&b])
        .set("server.upstream.max_concurrent_requests", 1)
        .passive_off();
    let p = Proxy::start(&bin, &cfg).await;
    let mut ws = Raw::connect(p.public).await;
    ws.write(
        b"GET /ws HTTP/1.1\r\nHost: ws.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
          Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    )
    .await
    .expect("write upgrade request");
    let head = ws.read_head(secs(5)).await.expect("upgrade response");
    assert_eq!(head.status, 101, "upgrade answer: {head:?}");
    assert_eq!(
        head.header("upgrade")
            .map(|v| v.to_ascii_lowercase())
            .as_deref(),
        Some("websocket")
    );
    let up = b.last().expect("backend saw the upgrade request");
    assert_eq!(
        up.header("upgrade")
            .map(|v| v.to_ascii_lowercase())
            .as_deref(),
        Some("websocket")
    );
    assert!(
        up.header_all("connection")
            .iter()
            .any(|v| v.to_ascii_lowercase().contains("upgrade")),
        "upstream Connection: {:?}",
        up.header_all("connection")
    );
    for msg in [
        &b"hello through the tunnel"[..],
        b"\x81\x05second",
        &[0u8; 3000][..],
    ] {
        ws.write(msg).await.expect("write through tunnel");
        let echo = ws.read_exact(msg.len(), secs(5)).await.expect("echo");
        assert_eq!(echo, msg, "echo through the tunnel");
    }
    let r = get(p.public, "/other").await;
    expect_weir_error(&r, 503, "backend slot held by the upgraded connection");
    drop(ws);
    wait_until(secs(5), "backend to see the tunnel closed", || {
        b.in_flight() == 0
    })
    .await;
    let r = eventually(
        secs(5),
        "slot released after the upgraded connection closed",
        || async {
            let r = get(p.public, "/other").await;
            (r.status == 200).then_some(r)
        },
    )
    .await;
    assert_eq!(r.backend().as_deref(), Some("b-1"));
}

/// C-PATH-9: a client that disconnects cancels the upstream attempt, and this does not count
/// against the backend's health.
pub async fn c_path_9_client_disconnect_cancels_and_is_not_a_failure(bin: Binary) {
    let a = Backend::start("b-1").await;
    let b = Backend::start("b-2").await;
    a.set_mode(Mode::Hold);
    let cfg = Config::new(&[&a, &b])
        .policy("pick_first")
        .set("health_check.failure_threshold", 1)
        .set("health_check.cooldown", "30s")
        .set("health_check.max_cooldown", "30s")
        .set("server.retry.per_try_timeout", "10s");
    let p = Proxy::start(&bin, &cfg).await;
    for i in 1..=3 {
        let mut c = Raw::connect(p.public).await;
        c.write(format!("GET /gone-{i} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .expect("write");
        a.wait_requests(i, secs(5)).await;
        let rec = a.last().expect("request at backend");
        drop(c);
        wait_until(
            secs(5),
            "upstream attempt cancelled after the client left",
            || matches!(rec.end(), Some((End::Cancelled, _))),
        )
        .await;
    }
    assert_eq!(b.count(), 0, "a cancelled request was retried elsewhere");
    a.set_mode(Mode::Ok);
    let r = get(p.public, "/after").await;
    expect_status(&r, 200, "after three client disconnects");
    assert_eq!(
        r.backend().as_deref(),
        Some("b-1"),
        "b-1's circuit opened on client disconnects"
    );
    assert_eq!(r.attempts(), Some(1));
}

/// C-PATH-9 (and C-POOL-6): a client that leaves in the middle of a streamed body cancels the
/// upstream response and frees the backend slot; the backend stays in use.
pub async fn c_path_9_client_leaving_mid_body_cancels_upstream(bin: Binary) {
    let b = Backend::start("b-1").await;
    b.set_mode(Mode::HoldBody);
    let cfg = Config::new(&[&b])
        .set("server.upstream.max_concurrent_requests", 1)
        .set("health_check.failure_threshold", 1)
        .set("health_check.cooldown", "30s")
        .set("health_check.max_cooldown", "30s");
    let p = Proxy::start(&bin, &cfg).await;
    for i in 0..3 {
        let mut c = Raw::connect(p.public).await;
        c.write(format!("GET /stream-{i} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .expect("write");
        let head = c.read_head(secs(5)).await.expect("head");
        assert_eq!(head.status, 200);
        let first = c.read_some(secs(5)).await.expect("first chunk");
        assert!(
            String::from_utf8_lossy(&first).contains("first"),
            "first chunk: {first:?}"
        );
        let rec = b.last().expect("backend request");
        drop(c);
        wait_until(
            secs(5),
            "upstream response cancelled after the client left mid-body",
            || matches!(rec.end(), Some((End::Cancelled, _))),
        )
        .await;
    }
    b.set_mode(Mode::Ok);
    let r = eventually(secs(5), "the slot to be free again", || async {
        let r = get(p.public, "/after").await;
        (r.status == 200).then_some(r)
    })
    .await;
    assert_eq!(r.backend().as_deref(), Some("b-1"));
}

/// C-PATH-10: SIGTERM closes the listeners, closes idle keep-alive connections, lets in-flight
/// requests finish, then exits 0.
pub async fn c_path_10_graceful_shutdown(bin: Binary) {
    let b = Backend::start("b-1").await;
    let cfg = Config::new(&[&b]).set("server.shutdown_timeout", "10s");
    let mut p = Proxy::start(&bin, &cfg).await;
    let mut idle = Conn::open(p.public, None).await.expect("connect");
    let r = idle
        .send(&Req::get("/warm"))
        .await
        .expect("first request on the idle connection");
    expect_status(&r, 200, "warm-up");
    b.set_mode(Mode::Hold);
    let in_flight = spawn_send(p.public, Req::get("/in-flight"));
    b.wait_in_flight(1, secs(5)).await;
    p.signal("TERM");
    eventually(
        secs(5),
        "public listener to refuse new connections",
        || async { TcpStream::connect(p.public).await.is_err().then_some(()) },
    )
    .await;
    wait_until(secs(5), "idle keep-alive connection to be closed", || {
        idle.is_closed()
    })
    .await;
    assert!(
        p.try_exit().is_none(),
        "exited with a request still in flight"
    );
    b.release_all();
    let r = join(in_flight, "in-flight request during shutdown").await;
    expect_status(&r, 200, "in-flight request finishes");
    assert_eq!(r.text(), "backend b-1\n");
    let st = p
        .wait_exit(secs(10))
        .await
        .expect("process exits after in-flight requests finish");
    assert_eq!(st.code(), Some(0), "exit status {st}");
}

/// C-PATH-10: `server.shutdown_timeout` bounds the wait for in-flight requests.
pub async fn c_path_10_shutdown_timeout_bounds_the_wait(bin: Binary) {
    let b = Backend::start("b-1").await;
    b.set_mode(Mode::Hold);
    let cfg = Config::new(&[&b])
        .set("server.shutdown_timeout", "300ms")
        .set("server.retry.per_try_timeout", "30s");
    let mut p = Proxy::start(&bin, &cfg).await;
    let _in_flight = spawn_send(p.public, Req::get("/never"));
    b.wait_in_flight(1, secs(5)).await;
    let start = Instant::now();
    p.signal("TERM");
    let st = p
        .wait_exit(secs(8))
        .await
        .expect("process exits once shutdown_timeout passes");
    assert_eq!(st.code(), Some(0), "exit status {st}");
    assert!(
        start.elapsed() >= ms(250),
        "exited after {:?}, before shutdown_timeout",
        start.elapsed()
    );
}

/// C-PATH-10: SIGINT is a graceful shutdown too.
pub async fn c_path_10_sigint_exits_zero(bin: Binary) {
    let b = Backend::start("b-1").await;
    let mut p = Proxy::start(&bin, &Config::new(&[&b])).await;
    expect_status(&get(p.public, "/x").await, 200, "before SIGINT");
    p.signal("INT");
    let st = p
        .wait_exit(secs(10))
        .await
        .expect("process exits on SIGINT");
    assert_eq!(st.code(), Some(0), "exit status {st}");
}

/// C-PATH-11: weir's own errors (503 no backend, 502 transport error, 504 per-try timeout) are
/// JSON `{"code","message","request_id"}`.
pub async fn c_path_11_weir_errors_are_json(bin: Binary) {
    let down = Backend::start("down-1").await;
    down.set_health(500);
    let reset = Backend::start("reset-1").await;
    reset.set_mode(Mode::Reset);
    let slow = Backend::start("slow-1").await;
    slow.set_mode(Mode::SlowHeaders(secs(3)));
    let cfg = Config::new(&[&down])
        .passive_off()
        .set("server.retry.per_try_timeout", "300ms")
        .pool("reset", "round_robin", &[&reset])
        .pool("slow", "round_robin", &[&slow])
        .route("/reset", "reset", None)
        .route("/slow", "slow", None);
    let p = Proxy::start(&bin, &cfg).await;
    expect_weir_error(&get(p.public, "/x").await, 503, "no healthy backend");
    expect_weir_error(&get(p.public, "/reset/x").await, 502, "connection reset");
    let r = get(p.public, "/slow/x").await;
    expect_weir_error(&r, 504, "per-try timeout");
    assert!(
        r.elapsed < secs(2),
        "504 took {:?} with per_try_timeout 300ms",
        r.elapsed
    );
    let r = send(
        p.public,
        &Req::new("POST", "/reset/y")
            .body("x")
            .header("x-request-id", "post-1"),
    )
    .await;
    expect_weir_error(&r, 502, "POST connection reset");
    assert_eq!(r.json()["request_id"], json!("post-1"));
}

/// C-PATH-12: a request whose headers do not complete within `read_header_timeout` has its
/// connection closed.
pub async fn c_path_12_slow_headers_connection_closed(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(
        &bin,
        &Config::new(&[&b]).set("server.read_header_timeout", "300ms"),
    )
    .await;
    let mut c = Raw::connect(p.public).await;
    c.write(b"GET /slowloris HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n")
        .await
        .expect("write partial head");
    let closed = c.wait_closed(secs(5)).await;
    let elapsed = closed.expect("connection with incomplete headers still open after 5s");
    assert!(
        elapsed >= ms(200),
        "closed after {elapsed:?}, before read_header_timeout"
    );
    // A connection that sends nothing at all: its head's timer runs from the accept (moved here
    // from adapter-tokio's smoke test, so both binaries run it).
    let mut silent = Raw::connect(p.public).await;
    let elapsed = silent
        .wait_closed(secs(5))
        .await
        .expect("connection that sent nothing still open after 5s");
    assert!(
        elapsed >= ms(200),
        "silent connection closed after {elapsed:?}, before read_header_timeout"
    );
    assert_eq!(b.count(), 0, "an incomplete request reached the backend");
}

/// C-PATH-12: headers over `max_header_bytes` get `431`; headers under it pass.
pub async fn c_path_12_oversized_headers_get_431(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(
        &bin,
        &Config::new(&[&b]).set("server.max_header_bytes", 4096),
    )
    .await;
    let small = "s".repeat(2000);
    let r = send(p.public, &Req::get("/small").header("x-small", &small)).await;
    expect_status(&r, 200, "2 KB of headers under a 4 KiB limit");
    let big = "b".repeat(16 * 1024);
    let mut c = Raw::connect(p.public).await;
    let _ = c
        .write(format!("GET /big HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n").as_bytes())
        .await;
    let head = c
        .read_head(secs(5))
        .await
        .expect("a response to oversized headers");
    assert_eq!(head.status, 431, "oversized headers: {head:?}");
    assert_eq!(b.count(), 1, "the oversized request reached the backend");
}

/// C-PATH-12: `Content-Length` with `Transfer-Encoding`, or conflicting `Content-Length`s, get
/// `400`, the connection closed, and nothing reaches a backend.
pub async fn c_path_12_ambiguous_framing_rejected(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(&bin, &Config::new(&[&b])).await;
    let requests: [&[u8]; 3] = [
        b"POST /smuggle HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"POST /smuggle HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        b"POST /smuggle HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\nhello!",
    ];
    for raw in requests {
        let what = String::from_utf8_lossy(raw)
            .lines()
            .skip(2)
            .take(2)
            .collect::<Vec<_>>()
            .join(" | ");
        let mut c = Raw::connect(p.public).await;
        let _ = c.write(raw).await;
        expect_400_and_closed(&mut c, &what).await;
    }
    stays(ms(300), "nothing reaches the backend", || b.count() == 0).await;
}

/// The connection's next response is a `400`, and the proxy then closes the connection.
async fn expect_400_and_closed(c: &mut Raw, what: &str) {
    let head = c
        .read_head(secs(5))
        .await
        .unwrap_or_else(|e| panic!("{what}: no response: {e}"));
    assert_eq!(head.status, 400, "{what}: {head:?}");
    assert!(
        c.wait_closed(secs(5)).await.is_some(),
        "{what}: connection left open after 400"
    );
}

/// C-PATH-12: the framing guard follows the client's byte stream, not single reads: a
/// `Transfer-Encoding` name split across two TCP segments, and a CL+TE request pipelined behind
/// a good one in the same write, get `400` and the connection closed; the good one is served and
/// is the only request that reaches the backend.
pub async fn c_path_12_framing_guard_spans_reads_and_pipelines(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(&bin, &Config::new(&[&b])).await;

    let mut c = Raw::connect(p.public).await;
    c.stream.set_nodelay(true).expect("nodelay");
    let _ = c
        .write(b"POST /split HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Enc")
        .await;
    tokio::time::sleep(ms(150)).await;
    let _ = c
        .write(b"oding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
        .await;
    expect_400_and_closed(&mut c, "name split across segments").await;

    let mut c = Raw::connect(p.public).await;
    let _ = c
        .write(
            b"POST /first HTTP/1.1\r\nHost: x\r\nContent-Length: 31\r\n\r\n\
              \nTransfer-Encoding: chunked\r\n\r\n\
              POST /second HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\
              Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        )
        .await;
    let (first, _) = c
        .read_response(secs(5))
        .await
        .expect("a response to the first request");
    assert_eq!(first.status, 200, "the good request first: {first:?}");
    let second = c
        .read_head(secs(5))
        .await
        .expect("a response to the pipelined CL+TE request");
    assert_eq!(second.status, 400, "pipelined CL+TE: {second:?}");
    assert!(
        c.wait_closed(secs(5)).await.is_some(),
        "pipelined: connection left open after 400"
    );
    stays(ms(300), "only /first reaches the backend", || {
        b.count() == 1
    })
    .await;
    assert_eq!(
        b.last().map(|x| x.target.clone()).as_deref(),
        Some("/first")
    );
}

/// C-PATH-12 (RFC 9112 §3.2): an HTTP/1.1 request without `Host`, or any request with two, gets
/// `400` and the connection closed, and nothing reaches a backend; HTTP/1.0 needs no `Host`.
pub async fn c_path_12_host_required_once(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(&bin, &Config::new(&[&b])).await;
    let refused: [&[u8]; 3] = [
        b"GET /none HTTP/1.1\r\nAccept: */*\r\n\r\n",
        b"GET /two HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
        b"GET /two10 HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n",
    ];
    for raw in refused {
        let what = String::from_utf8_lossy(raw).replace("\r\n", " | ");
        let mut c = Raw::connect(p.public).await;
        let _ = c.write(raw).await;
        expect_400_and_closed(&mut c, &what).await;
    }
    stays(ms(300), "nothing reaches the backend", || b.count() == 0).await;
    let mut c = Raw::connect(p.public).await;
    let _ = c.write(b"GET /old HTTP/1.0\r\n\r\n").await;
    let (head, _) = c
        .read_response(secs(5))
        .await
        .expect("an HTTP/1.0 response");
    assert_eq!(head.status, 200, "HTTP/1.0 without Host: {head:?}");
    assert_eq!(b.count(), 1, "the HTTP/1.0 request reached the backend");
}

/// C-PATH-12: an idle keep-alive connection is closed after `idle_timeout`.
pub async fn c_path_12_idle_keepalive_closed(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(
        &bin,
        &Config::new(&[&b]).set("server.idle_timeout", "300ms"),
    )
    .await;
    let mut c = Conn::open(p.public, None).await.expect("connect");
    let r = c.send(&Req::get("/one")).await.expect("request");
    expect_status(&r, 200, "request before idling");
    let start = Instant::now();
    wait_until(secs(5), "idle connection to be closed", || c.is_closed()).await;
    assert!(
        start.elapsed() >= ms(200),
        "closed after {:?}, before idle_timeout",
        start.elapsed()
    );
}

/// How long an idle HTTP/1 connection waits before weir parks it (1 s after the response, seen
/// by a watchdog that looks at least once a second) plus a margin: a case that sleeps this long
/// talks to a parked connection.
const PARKED: Duration = Duration::from_millis(2600);

/// C-PATH-12 (docs/proxy.md, "Idle connections"): a keep-alive connection idle long enough to
/// be parked (its HTTP machinery dropped, the socket kept) serves the next request on the same
/// socket, a pipelined pair included, and the next head gets a fresh `read_header_timeout`.
pub async fn c_path_12_parked_connection_serves_next_requests(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(
        &bin,
        &Config::new(&[&b])
            .set("server.idle_timeout", "30s")
            .set("server.read_header_timeout", "1s"),
    )
    .await;
    let mut c = Raw::connect(p.public).await;
    for round in 0..3 {
        tokio::time::sleep(if round == 0 { ms(0) } else { PARKED }).await;
        if round < 2 {
            c.write(format!("GET /parked-{round} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
                .await
                .expect("write after idling");
            let (head, _) = c.read_response(secs(5)).await.expect("response");
            assert_eq!(
                head.status, 200,
                "request {round} on the same socket: {head:?}"
            );
        } else {
            // Two requests in one write, after parking: both are answered, in order.
            c.write(b"GET /pipelined-a HTTP/1.1\r\nHost: x\r\n\r\nGET /pipelined-b HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .expect("write pipelined pair");
            for which in ["a", "b"] {
                let (head, _) = c.read_response(secs(5)).await.expect("pipelined response");
                assert_eq!(head.status, 200, "pipelined {which}: {head:?}");
            }
        }
    }
    let paths: Vec<String> = b.requests().iter().map(|r| r.target.clone()).collect();
    assert_eq!(
        paths,
        ["/parked-0", "/parked-1", "/pipelined-a", "/pipelined-b"],
        "every request reached the backend once, in order"
    );
    // A head that starts after parking and stalls is cut by read_header_timeout, measured
    // from its first byte, not from the end of the last response.
    tokio::time::sleep(PARKED).await;
    c.write(b"GET /slow HTTP/1.1\r\n")
        .await
        .expect("partial head");
    let closed = c.wait_closed(secs(6)).await;
    assert!(
        closed.is_some_and(|t| t >= ms(700)),
        "stalled head after parking: closed after {closed:?}, want about 1 s"
    );
}

/// C-PATH-12: a parked connection is still closed after `idle_timeout`, counted from the end
/// of its last response.
pub async fn c_path_12_parked_connection_closed_after_idle_timeout(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(&bin, &Config::new(&[&b]).set("server.idle_timeout", "3s")).await;
    let mut c = Raw::connect(p.public).await;
    c.write(b"GET /once HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let (head, _) = c.read_response(secs(5)).await.expect("response");
    assert_eq!(head.status, 200, "{head:?}");
    let closed = c.wait_closed(secs(8)).await;
    assert!(
        closed.is_some_and(|t| t >= ms(2500)),
        "closed after {closed:?}, want about idle_timeout (3 s)"
    );
}

/// C-PATH-12: `TE: trailers` is forwarded; other `TE` values are not.
pub async fn c_path_12_te_trailers_forwarded(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(&bin, &Config::new(&[&b])).await;
    let r = send(
        p.public,
        &Req::get("/te1")
            .header("te", "trailers")
            .header("connection", "TE"),
    )
    .await;
    expect_status(&r, 200, "TE: trailers");
    assert_eq!(
        b.last().map(|x| x.header_all("te")),
        Some(vec!["trailers".to_string()]),
        "TE: trailers upstream"
    );
    let r = send(p.public, &Req::get("/te2").header("te", "gzip, trailers")).await;
    expect_status(&r, 200, "TE: gzip, trailers");
    assert_eq!(
        b.last().map(|x| x.header_all("te")),
        Some(vec!["trailers".to_string()]),
        "only trailers kept"
    );
    let r = send(p.public, &Req::get("/te3").header("te", "gzip")).await;
    expect_status(&r, 200, "TE: gzip");
    assert!(
        !b.last().is_some_and(|x| x.has_header("te")),
        "TE: gzip forwarded"
    );
}
