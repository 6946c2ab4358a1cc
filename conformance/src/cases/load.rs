//! C-LOAD: the global overload gate, route bulkheads, protection-event counters.

use std::time::Instant;

use super::{expect_status, expect_weir_error, join, sample, spawn_send};
use crate::backend::{Backend, Mode};
use crate::client::{Raw, Req, get, send};
use crate::config::{ADMIN_TOKEN, Config};
use crate::harness::{Binary, Proxy};
use crate::util::{eventually, ms, secs};

#[track_caller]
fn expect_overloaded(r: &crate::client::Resp, what: &str) {
    expect_weir_error(r, 503, what);
    assert_eq!(
        r.header("retry-after").as_deref(),
        Some("1"),
        "{what}: Retry-After"
    );
    assert_eq!(
        r.header("x-balancer-overloaded").as_deref(),
        Some("true"),
        "{what}: X-Balancer-Overloaded"
    );
}

/// Waits (30 s at most) until the proxy counts `n` requests in the gate's queue
/// (`load_balancer_queued_requests`).
async fn wait_queued(p: &Proxy, n: usize) {
    eventually(secs(30), &format!("{n} request(s) queued"), || async {
        let v = sample(p, "load_balancer_queued_requests", "").await;
        (v == Some(n as f64)).then_some(())
    })
    .await;
}

/// C-LOAD-1: over `max_concurrent_requests` a request waits up to `queue_timeout`, then gets
/// `503` with `Retry-After: 1` and `X-Balancer-Overloaded: true`; readiness is unaffected.
pub async fn c_load_1_overload_after_queue_timeout(bin: Binary) {
    let b = Backend::start("g-1").await;
    b.set_mode(Mode::Hold);
    let cfg = Config::new(&[&b])
        .set("server.overload.max_concurrent_requests", 1)
        .set("server.overload.queue_timeout", "300ms");
    let p = Proxy::start(&bin, &cfg).await;
    let held = spawn_send(p.public, Req::get("/held"));
    b.wait_in_flight(1, secs(5)).await;
    let start = Instant::now();
    let r = send(
        p.public,
        &Req::get("/over").header("x-request-id", "over-1"),
    )
    .await;
    let waited = start.elapsed();
    expect_overloaded(&r, "gate full");
    assert_eq!(r.header("x-request-id").as_deref(), Some("over-1"));
    assert!(
        waited >= ms(250),
        "overload answered after {waited:?}, before queue_timeout 300ms"
    );
    // The slot it waited for is held until released below: the answer came from the queue
    // timeout, not from the slot coming free.
    assert!(
        !held.is_finished(),
        "overload answered only once the held request ended"
    );
    expect_status(
        &get(p.public, "/readyz").await,
        200,
        "/readyz while overloaded",
    );
    assert_eq!(b.count(), 1, "the rejected request reached the backend");
    b.release_all();
    expect_status(&join(held, "held").await, 200, "held request");
}

/// C-LOAD-1: `queue_timeout: 0s` rejects at once.
pub async fn c_load_1_no_wait_when_queue_timeout_zero(bin: Binary) {
    let b = Backend::start("g-1").await;
    b.set_mode(Mode::Hold);
    let cfg = Config::new(&[&b])
        .set("server.overload.max_concurrent_requests", 1)
        .set("server.overload.queue_timeout", "0s");
    let p = Proxy::start(&bin, &cfg).await;
    let held = spawn_send(p.public, Req::get("/held"));
    b.wait_in_flight(1, secs(5)).await;
    let r = get(p.public, "/over").await;
    expect_overloaded(&r, "gate full, no wait");
    assert!(
        !held.is_finished(),
        "overload answered only once the held request ended"
    );
    b.release_all();
    expect_status(&join(held, "held").await, 200, "held request");
}

/// C-LOAD-1 (issue 14): a request's gate slot is free once its client has read the response:
/// it is released before the last byte is handed to the socket (HTTP/1 as HTTP/2). With one
/// slot and no queue, requests alternating over two keep-alive connections, each sent once the
/// previous response was read whole, are never refused.
pub async fn c_load_1_slot_is_free_once_the_response_is_read(bin: Binary) {
    let b = Backend::start("g-1").await;
    let cfg = Config::new(&[&b])
        .set("server.overload.max_concurrent_requests", 1)
        .set("server.overload.queue_timeout", "0s");
    let p = Proxy::start(&bin, &cfg).await;
    let mut conns = [Raw::connect(p.public).await, Raw::connect(p.public).await];
    for i in 0..200 {
        let c = &mut conns[i % 2];
        c.write(format!("GET /r{i} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .expect("write");
        let (head, body) = c.read_response(secs(5)).await.expect("a response");
        assert_eq!(
            head.status,
            200,
            "request {i} after the previous response was read: {head:?} {}",
            String::from_utf8_lossy(&body)
        );
    }
}

/// C-LOAD-1: queued requests are admitted in FIFO order when slots free up.
pub async fn c_load_1_queue_is_fifo(bin: Binary) {
    let b = Backend::start("g-1").await;
    b.set_mode(Mode::Hold);
    let cfg = Config::new(&[&b])
        .set("server.overload.max_concurrent_requests", 1)
        .set("server.overload.max_queue", 8)
        .set("server.overload.queue_timeout", "60s")
        .management();
    let p = Proxy::start(&bin, &cfg).await;
    let held = spawn_send(p.public, Req::get("/held"));
    b.wait_in_flight(1, secs(30)).await;
    let mut waiters = Vec::new();
    for i in 0..4 {
        waiters.push(spawn_send(p.public, Req::get(&format!("/w{i}"))));
        // Each waiter joins the queue before the next is sent.
        wait_queued(&p, i + 1).await;
    }
    assert_eq!(b.count(), 1, "a request passed a full gate");
    b.set_mode(Mode::Ok);
    b.release_all();
    expect_status(&join(held, "held").await, 200, "held request");
    for (i, w) in waiters.into_iter().enumerate() {
        expect_status(&join(w, "waiter").await, 200, &format!("waiter {i}"));
    }
    let order: Vec<String> = b
        .requests()
        .iter()
        .skip(1)
        .map(|r| r.target.clone())
        .collect();
    assert_eq!(order, ["/w0", "/w1", "/w2", "/w3"], "admission order");
}

/// C-LOAD-1: a client that disconnects while queued leaves the queue at once.
pub async fn c_load_1_disconnected_waiter_leaves_queue(bin: Binary) {
    let b = Backend::start("g-1").await;
    b.set_mode(Mode::Hold);
    let cfg = Config::new(&[&b])
        .set("server.overload.max_concurrent_requests", 1)
        .set("server.overload.max_queue", 1)
        .set("server.overload.queue_timeout", "60s")
        .management();
    let p = Proxy::start(&bin, &cfg).await;
    let held = spawn_send(p.public, Req::get("/held"));
    b.wait_in_flight(1, secs(30)).await;
    let mut gone = Raw::connect(p.public).await;
    gone.write(b"GET /gone HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    wait_queued(&p, 1).await;
    drop(gone);
    // The queue's only place is free again while the slot is still held: the departed client
    // left it (rather than being admitted).
    wait_queued(&p, 0).await;
    let next = spawn_send(p.public, Req::get("/next"));
    wait_queued(&p, 1).await;
    assert!(
        !next.is_finished(),
        "the next request was answered at once: the queue still held the departed client"
    );
    b.set_mode(Mode::Ok);
    b.release_all();
    expect_status(&join(held, "held").await, 200, "held");
    expect_status(&join(next, "next").await, 200, "next waiter admitted");
    let targets: Vec<String> = b.requests().iter().map(|r| r.target.clone()).collect();
    assert_eq!(
        targets,
        ["/held", "/next"],
        "the departed client's request was served"
    );
}

/// C-LOAD-1, C-PATH-9: a client that leaves while its request holds the gate's only slot (its
/// attempt still at the backend) hands the slot to the queued request at once: the waiter is
/// served long before its 60 s queue deadline, because the handler's drop guard tells the
/// request engine at once, and the engine announces the hand-off.
pub async fn c_load_1_departed_holder_hands_its_slot_on(bin: Binary) {
    let b = Backend::start("g-1").await;
    b.set_mode(Mode::Hold);
    let cfg = Config::new(&[&b])
        .set("server.overload.max_concurrent_requests", 1)
        .set("server.overload.queue_timeout", "60s")
        .management();
    let p = Proxy::start(&bin, &cfg).await;
    let mut holder = Raw::connect(p.public).await;
    holder
        .write(b"GET /held HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    b.wait_in_flight(1, secs(30)).await;
    let next = spawn_send(p.public, Req::get("/next"));
    wait_queued(&p, 1).await;
    b.set_mode(Mode::Ok); // `/next` is answered at once; `/held` stays held
    drop(holder);
    // `join` waits 20 s at most: long before the waiter's 60 s queue deadline.
    let r = join(next, "the waiter, given the departed client's slot").await;
    expect_status(&r, 200, "next");
    b.release_all();
}

/// C-LOAD-2: a full route bulkhead answers `503` at once and leaves other routes unaffected.
pub async fn c_load_2_bulkhead_isolates_routes(bin: Binary) {
    let slow = Backend::start("slow-1").await;
    slow.set_mode(Mode::Hold);
    let fast = Backend::start("fast-1").await;
    let cfg = Config::new(&[&fast])
        .pool("slow", "round_robin", &[&slow])
        .route("/slow", "slow", Some(2));
    let p = Proxy::start(&bin, &cfg).await;
    let h1 = spawn_send(p.public, Req::get("/slow/1"));
    let h2 = spawn_send(p.public, Req::get("/slow/2"));
    slow.wait_in_flight(2, secs(5)).await;
    let r = get(p.public, "/slow/3").await;
    expect_weir_error(&r, 503, "bulkhead full");
    assert!(
        r.header("x-balancer-overloaded").is_none(),
        "a bulkhead is not the global gate"
    );
    // The slow route's requests are held until released below: the rejection did not wait
    // for them, and the other route is served while they are held.
    for i in 0..20 {
        let r = get(p.public, "/other").await;
        expect_status(&r, 200, &format!("other route {i}"));
    }
    assert!(
        !h1.is_finished() && !h2.is_finished(),
        "a slow route request ended before its release"
    );
    slow.set_mode(Mode::Ok);
    slow.release_all();
    expect_status(&join(h1, "h1").await, 200, "h1");
    expect_status(&join(h2, "h2").await, 200, "h2");
    expect_status(&get(p.public, "/slow/4").await, 200, "bulkhead free again");
}

/// Reads a counter from a Prometheus text exposition.
fn counter(metrics: &str, name: &str, label: &str) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(name) && l.contains(label))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// C-LOAD-3: overload, bulkhead-full and rate-limited events are counted in
/// `load_balancer_protection_events_total{reason}` (read from the management listener).
pub async fn c_load_3_protection_events_counted(bin: Binary) {
    let d = Backend::start("d-1").await;
    d.set_mode(Mode::Hold);
    let s = Backend::start("s-1").await;
    s.set_mode(Mode::Hold);
    let cfg = Config::new(&[&d])
        .management()
        .rate_limit(6, 0.001)
        .set("server.overload.max_concurrent_requests", 2)
        .set("server.overload.queue_timeout", "0s")
        .pool("s", "round_robin", &[&s])
        .route("/slow", "s", Some(1));
    let p = Proxy::start(&bin, &cfg).await;
    let h1 = spawn_send(p.public, Req::get("/slow/1"));
    s.wait_in_flight(1, secs(5)).await;
    expect_weir_error(&get(p.public, "/slow/2").await, 503, "bulkhead full");
    let h2 = spawn_send(p.public, Req::get("/d"));
    d.wait_in_flight(1, secs(5)).await;
    let r = get(p.public, "/over").await;
    assert_eq!(
        r.header("x-balancer-overloaded").as_deref(),
        Some("true"),
        "overload: {}",
        r.summary()
    );
    d.set_mode(Mode::Ok);
    s.set_mode(Mode::Ok);
    d.release_all();
    s.release_all();
    join(h1, "h1").await;
    join(h2, "h2").await;
    let mut limited = false;
    for _ in 0..10 {
        if get(p.public, "/x").await.status == 429 {
            limited = true;
            break;
        }
    }
    assert!(limited, "never rate limited");
    let m = p.management.expect("management listener");
    let r = send(
        m,
        &Req::get("/metrics").header("authorization", &format!("Bearer {ADMIN_TOKEN}")),
    )
    .await;
    expect_status(&r, 200, "GET /metrics");
    let text = r.text();
    for reason in ["overload", "bulkhead_full", "rate_limited"] {
        let v = counter(
            &text,
            "load_balancer_protection_events_total",
            &format!("reason=\"{reason}\""),
        );
        assert!(
            v.is_some_and(|v| v >= 1.0),
            "protection_events_total{{reason=\"{reason}\"}} = {v:?}"
        );
    }
}

/// One answer a C-LOAD-4 client saw: when it was sent (from the run's start), its status,
/// how long it took, and whether a `503` was weir's adaptive-limit answer.
struct Seen {
    sent: std::time::Duration,
    status: u16,
    took: std::time::Duration,
    adaptive_503: bool,
    /// Any other answer's status, `Retry-After` and body, to say what it was.
    other: Option<String>,
}

/// C-LOAD-4: 64 clients against a backend that serves 4 requests at a time (20 ms each) with
/// adaptive concurrency on, for 6 s: some requests are shed at once with `503`, reason
/// `adaptive concurrency limit` and `Retry-After: 1`; the admitted requests' median latency
/// over the last 3 s stays under 150 ms (static slots would queue each ~320 ms); the exported
/// `load_balancer_backend_concurrency_limit` is between 1 and 63. A shed client waits 50 ms
/// before its next request.
pub async fn c_load_4_adaptive_limit_sheds_and_keeps_latency(bin: Binary) {
    let b = Backend::start("a-1").await;
    b.set_workers(4);
    b.set_mode(Mode::Workers(ms(20)));
    let cfg = Config::new(&[&b])
        .management()
        .set("server.upstream.adaptive_concurrency.enabled", true);
    let p = Proxy::start(&bin, &cfg).await;
    let start = Instant::now();
    let run = secs(6);
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let addr = p.public;
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut conn = crate::client::Conn::open(addr, None).await.ok();
                while start.elapsed() < run {
                    let Some(c) = conn.as_mut() else {
                        conn = crate::client::Conn::open(addr, None).await.ok();
                        continue;
                    };
                    let sent = start.elapsed();
                    let t0 = Instant::now();
                    let r = match c.send(&Req::get(&format!("/c{i}"))).await {
                        Ok(r) => r,
                        Err(e) => panic!("client {i}: {e}"),
                    };
                    let took = t0.elapsed();
                    let adaptive_503 = r.status == 503
                        && r.header("retry-after").as_deref() == Some("1")
                        && r.json()["message"]
                            .as_str()
                            .is_some_and(|m| m.contains("adaptive concurrency limit"));
                    if r.header("connection").as_deref() == Some("close") {
                        conn = None;
                    }
                    let other = (r.status != 200 && !adaptive_503).then(|| {
                        format!(
                            "{} retry-after {:?}: {}",
                            r.status,
                            r.header("retry-after"),
                            String::from_utf8_lossy(&r.body)
                        )
                    });
                    seen.push(Seen {
                        sent,
                        status: r.status,
                        took,
                        adaptive_503,
                        other,
                    });
                    if r.status == 503 {
                        tokio::time::sleep(ms(50)).await;
                    }
                }
                seen
            })
        })
        .collect();
    let mut limits = Vec::new();
    while start.elapsed() < run {
        tokio::time::sleep(ms(500)).await;
        let l = sample(
            &p,
            "load_balancer_backend_concurrency_limit",
            "backend=\"a-1\"",
        )
        .await;
        limits.push(l.unwrap_or(0.0));
    }
    eprintln!("c_load_4: exported limit every 500 ms: {limits:?}");
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("client task"));
    }
    let limit = sample(
        &p,
        "load_balancer_backend_concurrency_limit",
        "backend=\"a-1\"",
    )
    .await;
    let ok = all.iter().filter(|s| s.status == 200).count();
    let shed = all.iter().filter(|s| s.adaptive_503).count();
    let other: Vec<&str> = all.iter().filter_map(|s| s.other.as_deref()).collect();
    let mut late: Vec<std::time::Duration> = all
        .iter()
        .filter(|s| s.status == 200 && s.sent >= secs(3))
        .map(|s| s.took)
        .collect();
    late.sort_unstable();
    let median = late.get(late.len() / 2).copied();
    eprintln!(
        "c_load_4: {} requests, {ok} answered, {shed} shed (adaptive limit), other {other:?}; \
         median of the last 3 s {median:?} over {} answers; exported limit {limit:?}; \
         backend max in flight {}",
        all.len(),
        late.len(),
        b.max_in_flight()
    );
    assert!(
        other.is_empty(),
        "statuses other than 200 and the adaptive 503: {other:?}"
    );
    assert!(shed > 0, "nothing was shed");
    let median = median.expect("answers in the last 3 s");
    assert!(
        median < ms(150),
        "median latency of the last 3 s {median:?}"
    );
    assert!(
        limit.is_some_and(|l| (1.0..=63.0).contains(&l)),
        "load_balancer_backend_concurrency_limit {limit:?}"
    );
}
