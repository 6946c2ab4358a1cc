//! C-PATH-7..10: streaming, upgrades, cancellation, graceful shutdown.

use std::time::Instant;

use http_body_util::BodyExt;
use tokio::net::TcpStream;

use super::super::{expect_status, expect_weir_error, join, spawn_send, stalled_body_config};
use crate::backend::{Backend, End, Mode};
use crate::client::{Conn, Raw, Req, get};
use crate::config::Config;
use crate::harness::{Binary, Proxy};
use crate::util::{eventually, ms, secs, wait_until, within};

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

/// C-PATH-9: a client that sends its head and part of a streamed body, then goes silent, is
/// answered `408` once `server.read_timeout` has passed (nginx's `client_body_timeout`), logged
/// as `body_timeout`; the attempt is the client's fault: no retry on the other backend, and
/// the backend's circuit (`failure_threshold: 1`) stays closed.
pub async fn c_path_9_stalled_request_body_is_408_not_a_backend_failure(bin: Binary) {
    let a = Backend::start("b-1").await;
    let b = Backend::start("b-2").await;
    let cfg = stalled_body_config(&a, &b).set("server.access_log_sample_rate", 1.0);
    let p = Proxy::start(&bin, &cfg).await;
    for i in 1..=2 {
        let mut c = Raw::connect(p.public).await;
        // POST is not retried by default: the body streams to the backend as it arrives.
        c.write(
            format!("POST /stall-{i} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
                .as_bytes(),
        )
        .await
        .expect("write the head and 10 of 100 bytes");
        let head = c
            .read_head(secs(10))
            .await
            .expect("an answer to the stalled body");
        assert_eq!(head.status, 408, "{head:?}");
        let access = eventually(
            secs(5),
            "the access line of the stalled request",
            || async {
                p.logs()
                    .stdout()
                    .lines()
                    .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                    .find(|v| {
                        v["target"] == "weir::access"
                            && v["fields"]["status"] == 408
                            && v["fields"]["reason"] == "body_timeout"
                    })
            },
        )
        .await;
        assert_eq!(access["fields"]["attempts"], 1, "{access}");
    }
    assert_eq!(b.count(), 0, "a stalled client body was retried elsewhere");
    let r = get(p.public, "/after").await;
    expect_status(&r, 200, "after two stalled clients");
    assert_eq!(
        r.backend().as_deref(),
        Some("b-1"),
        "b-1's circuit opened on stalled clients"
    );
    assert_eq!(r.attempts(), Some(1));
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
