//! C-POOL: backend identity, availability, policies, saturation.

use std::collections::HashMap;

use super::{counts, expect_status, expect_weir_error, join, spawn_send, wait_backend_in_flight};
use crate::backend::{Backend, Mode};
use crate::client::{Conn, Req, get, send};
use crate::config::{Config, entry};
use crate::harness::{Binary, Proxy, StartOptions};
use crate::util::{eventually, secs, wait_until};

/// C-POOL-1: the backend id is the configured one, in responses and upstream.
pub async fn c_pool_1_backend_id_is_given(bin: Binary) {
    let b = Backend::start("alpha").await;
    let c = Backend::start("beta").await;
    let p = Proxy::start(&bin, &Config::new(&[&b, &c])).await;
    let mut seen = Vec::new();
    for _ in 0..4 {
        let r = get(p.public, "/id").await;
        expect_status(&r, 200, "request");
        let id = r.backend().expect("X-Balancer-Backend");
        let body_id = r.text().trim().trim_start_matches("backend ").to_string();
        assert_eq!(
            id, body_id,
            "X-Balancer-Backend names another backend than the one that answered"
        );
        seen.push(id);
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen, ["alpha", "beta"]);
    assert_eq!(
        b.last()
            .and_then(|x| x.header("x-balancer-backend-attempt"))
            .as_deref(),
        Some("alpha")
    );
}

/// C-POOL-1: a config with duplicate backend ids is rejected at start (exit 1, message on stderr).
pub async fn c_pool_1_duplicate_ids_rejected(bin: Binary) {
    let a = Backend::start("dup").await;
    let b = Backend::start("dup").await;
    let cfg = Config::new(&[&a]).set(
        "backends",
        serde_json::json!([{"id": "dup", "url": a.url()}, {"id": "dup", "url": b.url()}]),
    );
    match Proxy::start_with(&bin, &cfg.yaml(), StartOptions::default()).await {
        Ok(p) => panic!("proxy started with duplicate ids (public {})", p.public),
        Err(e) => {
            assert_eq!(e.status.and_then(|s| s.code()), Some(1), "{e}");
            let err = e.logs.stderr();
            assert!(
                err.contains("dup"),
                "stderr does not name the duplicate id: {err}"
            );
        }
    }
}

/// C-POOL-3 (and C-HEALTH-5): disabled and unhealthy backends get no traffic; a backend that
/// becomes healthy does.
pub async fn c_pool_3_unavailable_backends_are_skipped(bin: Binary) {
    let ok = Backend::start("ok").await;
    let off = Backend::start("off").await;
    let sick = Backend::start("sick").await;
    sick.set_health(500);
    let cfg = Config::with_entries(vec![entry(&ok), entry(&off).disabled(), entry(&sick)]);
    let p = Proxy::start(&bin, &cfg).await;
    for _ in 0..20 {
        let r = get(p.public, "/x").await;
        expect_status(&r, 200, "request");
        assert_eq!(r.backend().as_deref(), Some("ok"), "{}", r.summary());
    }
    sick.set_health(200);
    eventually(
        secs(5),
        "a backend that became healthy to get traffic",
        || async {
            let r = get(p.public, "/x").await;
            (r.backend().as_deref() == Some("sick")).then_some(())
        },
    )
    .await;
    assert_eq!(off.count(), 0, "a disabled backend got traffic");
    assert!(
        off.probe_count() >= 1,
        "a disabled backend is not health-checked (C-HEALTH-5)"
    );
}

/// C-POOL-4: round robin cycles through the backends in order.
pub async fn c_pool_4_round_robin_cycles(bin: Binary) {
    let bs = Backend::start_many("rr", 3).await;
    let refs: Vec<&Backend> = bs.iter().collect();
    let p = Proxy::start(&bin, &Config::new(&refs)).await;
    let mut c = Conn::open(p.public, None).await.expect("connect");
    let mut seq = Vec::new();
    for _ in 0..30 {
        let r = c.send(&Req::get("/rr")).await.expect("request");
        expect_status(&r, 200, "round robin");
        seq.push(r.backend().expect("backend"));
    }
    assert_eq!(counts(&refs), [10, 10, 10], "sequence {seq:?}");
    for i in 3..seq.len() {
        assert_eq!(seq[i], seq[i - 3], "not a fixed rotation: {seq:?}");
    }
}

/// C-POOL-4 (refined: one rotation per process): with two workers and a new connection per
/// request, consecutive requests alternate between two backends whatever worker each
/// connection lands on (per-worker cursors gave a, a, b, b); weighted round robin with equal
/// weights too.
pub async fn c_pool_4_round_robin_alternates_across_workers(bin: Binary) {
    let bs = Backend::start_many("alt", 2).await;
    let refs: Vec<&Backend> = bs.iter().collect();
    for policy in ["round_robin", "weighted_round_robin"] {
        let cfg = Config::new(&refs).policy(policy);
        let opts = StartOptions {
            workers: Some(2),
            ..StartOptions::for_config(&cfg)
        };
        let p = Proxy::start_config(&bin, &cfg, opts).await;
        let mut seq = Vec::new();
        for _ in 0..8 {
            let r = get(p.public, "/alt").await;
            expect_status(&r, 200, policy);
            seq.push(r.backend().expect("backend"));
        }
        for i in 1..seq.len() {
            assert_ne!(seq[i], seq[i - 1], "{policy}: no alternation: {seq:?}");
        }
    }
}

/// C-POOL-4: round robin starts at a random index per process.
pub async fn c_pool_4_round_robin_starts_at_random_index(bin: Binary) {
    let bs = Backend::start_many("start", 4).await;
    let refs: Vec<&Backend> = bs.iter().collect();
    let cfg = Config::new(&refs);
    let mut firsts = Vec::new();
    for _ in 0..8 {
        let p = Proxy::start(&bin, &cfg).await;
        let r = get(p.public, "/first").await;
        expect_status(&r, 200, "first request");
        firsts.push(r.backend().expect("backend"));
    }
    let mut distinct = firsts.clone();
    distinct.sort();
    distinct.dedup();
    assert!(
        distinct.len() > 1,
        "8 processes all started on the same backend: {firsts:?}"
    );
}

/// C-POOL-4: smooth weighted round robin: weights 5,1,1 give 5:1:1, interleaved.
pub async fn c_pool_4_weighted_round_robin_is_smooth(bin: Binary) {
    let bs = Backend::start_many("w", 3).await;
    let cfg = Config::with_entries(vec![
        entry(&bs[0]).weight(5),
        entry(&bs[1]).weight(1),
        entry(&bs[2]).weight(1),
    ])
    .policy("weighted_round_robin");
    let p = Proxy::start(&bin, &cfg).await;
    let mut c = Conn::open(p.public, None).await.expect("connect");
    let mut seq = Vec::new();
    for _ in 0..70 {
        let r = c.send(&Req::get("/w")).await.expect("request");
        expect_status(&r, 200, "weighted");
        seq.push(r.backend().expect("backend"));
    }
    let refs: Vec<&Backend> = bs.iter().collect();
    assert_eq!(counts(&refs), [50, 10, 10], "sequence {seq:?}");
    let mut run = 0;
    let mut longest = 0;
    for id in &seq {
        run = if id == "w-1" { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    assert!(
        longest < 5,
        "w-1 served {longest} in a row: not smooth: {seq:?}"
    );
}

/// C-POOL-4: least request sends new requests to the backend with fewer in flight. Each pick is
/// made once the proxy counts the held request on the busy backend and nothing on the idle one
/// (the slot of the previous request may still be held for a moment after its response was
/// read, which would make the two backends equal).
pub async fn c_pool_4_least_request_prefers_idle_backend(bin: Binary) {
    let a = Backend::start("lr-1").await;
    let b = Backend::start("lr-2").await;
    a.set_mode(Mode::Hold);
    b.set_mode(Mode::Hold);
    let cfg = Config::new(&[&a, &b]).policy("least_request").management();
    let p = Proxy::start(&bin, &cfg).await;
    let held = spawn_send(p.public, Req::get("/held"));
    wait_until(secs(30), "one held request", || {
        a.in_flight() + b.in_flight() == 1
    })
    .await;
    let (busy, idle) = if a.in_flight() == 1 {
        (&a, &b)
    } else {
        (&b, &a)
    };
    a.set_mode(Mode::Ok);
    b.set_mode(Mode::Ok);
    for i in 0..10 {
        wait_backend_in_flight(&p, busy.id(), 1).await;
        wait_backend_in_flight(&p, idle.id(), 0).await;
        let r = get(p.public, "/lr").await;
        expect_status(&r, 200, "least request");
        assert_eq!(
            r.backend().as_deref(),
            Some(idle.id()),
            "request {i} went to the busy backend {}",
            busy.id()
        );
    }
    busy.release_all();
    expect_status(&join(held, "held").await, 200, "held request");
}

/// C-POOL-4: pick first uses the first available backend in list order and falls over in order.
pub async fn c_pool_4_pick_first_falls_over_in_order(bin: Binary) {
    let bs = Backend::start_many("pf", 3).await;
    let refs: Vec<&Backend> = bs.iter().collect();
    let p = Proxy::start(&bin, &Config::new(&refs).policy("pick_first")).await;
    let first_is = |want: &'static str| {
        let addr = p.public;
        async move {
            eventually(
                secs(5),
                &format!("traffic to go to {want}"),
                || async move {
                    let r = get(addr, "/pf").await;
                    (r.backend().as_deref() == Some(want)).then_some(())
                },
            )
            .await;
            for _ in 0..5 {
                let r = get(addr, "/pf").await;
                assert_eq!(
                    r.backend().as_deref(),
                    Some(want),
                    "pick_first: {}",
                    r.summary()
                );
            }
        }
    };
    first_is("pf-1").await;
    bs[0].set_health(500);
    first_is("pf-2").await;
    bs[1].set_health(500);
    first_is("pf-3").await;
    bs[0].set_health(200);
    first_is("pf-1").await;
}

/// C-POOL-4: consistent hashing by a header keeps keys on their backend, and when a backend
/// leaves only the keys it owned move.
pub async fn c_pool_4_consistent_hash_moves_only_departed_keys(bin: Binary) {
    let bs = Backend::start_many("ch", 4).await;
    let refs: Vec<&Backend> = bs.iter().collect();
    let cfg = Config::new(&refs)
        .policy("consistent_hash")
        .hash_key("header:X-User");
    let p = Proxy::start(&bin, &cfg).await;
    let mut c = Conn::open(p.public, None).await.expect("connect");
    let keys: Vec<String> = (0..60).map(|i| format!("user-{i}")).collect();
    let mut map = HashMap::new();
    for k in &keys {
        let r = c
            .send(&Req::get("/ch").header("x-user", k))
            .await
            .expect("request");
        map.insert(k.clone(), r.backend().expect("backend"));
    }
    for k in &keys {
        let r = c
            .send(&Req::get("/ch").header("x-user", k))
            .await
            .expect("request");
        assert_eq!(
            r.backend().as_ref(),
            map.get(k),
            "key {k} moved without a change"
        );
    }
    let mut owned: HashMap<String, usize> = HashMap::new();
    for v in map.values() {
        *owned.entry(v.clone()).or_default() += 1;
    }
    assert!(
        owned.len() >= 2,
        "60 keys all hashed to one backend: {owned:?}"
    );
    let (victim, _) = owned
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(k, n)| (k.clone(), *n))
        .expect("an owner");
    let vb = bs
        .iter()
        .find(|b| b.id() == victim)
        .expect("victim backend");
    vb.set_health(500);
    let probe_key = map
        .iter()
        .find(|(_, v)| **v == victim)
        .map(|(k, _)| k.clone())
        .expect("a key of the victim");
    eventually(secs(5), "the departed backend's keys to move", || {
        let addr = p.public;
        let k = probe_key.clone();
        let victim = victim.clone();
        async move {
            let r = send(addr, &Req::get("/ch").header("x-user", &k)).await;
            (r.status == 200 && r.backend() != Some(victim)).then_some(())
        }
    })
    .await;
    for k in &keys {
        let r = c
            .send(&Req::get("/ch").header("x-user", k))
            .await
            .expect("request");
        let now = r.backend().expect("backend");
        if map[k] == victim {
            assert_ne!(now, victim, "key {k} still on the unhealthy backend");
        } else {
            assert_eq!(now, map[k], "key {k} moved although its backend stayed");
        }
    }
}

/// C-POOL-5: with no available backend, selection answers `503` at once.
pub async fn c_pool_5_no_backend_is_503_at_once(bin: Binary) {
    let a = Backend::start("sick-1").await;
    let b = Backend::start("sick-2").await;
    a.set_health(500);
    b.set_health(503);
    let p = Proxy::start(&bin, &Config::new(&[&a, &b])).await;
    for _ in 0..3 {
        let r = get(p.public, "/x").await;
        // No backend ever becomes healthy here: a request that waited for one would get no
        // answer at all within the client's bound, and `get` would fail.
        expect_weir_error(&r, 503, "no healthy backend");
    }
    assert_eq!(a.count() + b.count(), 0, "an unhealthy backend got traffic");
}

/// C-POOL-6: a saturated backend is skipped, never queued on; all saturated is `503` at once.
pub async fn c_pool_6_saturated_backends_skipped_not_queued(bin: Binary) {
    let a = Backend::start("sat-1").await;
    let b = Backend::start("sat-2").await;
    a.set_mode(Mode::Hold);
    b.set_mode(Mode::Hold);
    let cfg = Config::new(&[&a, &b])
        .set("server.upstream.max_concurrent_requests", 1)
        .passive_off();
    let p = Proxy::start(&bin, &cfg).await;
    let h1 = spawn_send(p.public, Req::get("/h1"));
    wait_until(secs(5), "first held request", || {
        a.in_flight() + b.in_flight() == 1
    })
    .await;
    let h2 = spawn_send(p.public, Req::get("/h2"));
    wait_until(
        secs(5),
        "one held request on each backend (the saturated one skipped)",
        || a.in_flight() == 1 && b.in_flight() == 1,
    )
    .await;
    let r = get(p.public, "/third").await;
    expect_weir_error(&r, 503, "every backend saturated");
    // The held requests end only when released below: an answer before that was not queued
    // behind them.
    assert!(
        !h1.is_finished() && !h2.is_finished(),
        "the saturated answer came after a held request ended: queued?"
    );
    a.set_mode(Mode::Ok);
    b.set_mode(Mode::Ok);
    a.release_all();
    b.release_all();
    expect_status(&join(h1, "h1").await, 200, "h1");
    expect_status(&join(h2, "h2").await, 200, "h2");
    // The held requests' slots are released once their responses have ended, which their
    // clients may see first.
    eventually(
        secs(30),
        "slots released after the held requests",
        || async { (get(p.public, "/after").await.status == 200).then_some(()) },
    )
    .await;
}

/// C-POOL-6: the slot is held until the response body finishes.
pub async fn c_pool_6_slot_held_until_body_ends(bin: Binary) {
    let b = Backend::start("body-1").await;
    b.set_mode(Mode::HoldBody);
    let cfg = Config::new(&[&b])
        .set("server.upstream.max_concurrent_requests", 1)
        .passive_off();
    let p = Proxy::start(&bin, &cfg).await;
    let mut c = Conn::open(p.public, None).await.expect("connect");
    let resp = c.send_head(&Req::get("/stream")).await.expect("head");
    assert_eq!(resp.status(), 200);
    let r = get(p.public, "/second").await;
    expect_weir_error(&r, 503, "slot held by a response whose body has not ended");
    b.set_mode(Mode::Ok);
    b.release_all();
    use http_body_util::BodyExt;
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(&body[..], b"first\nlast\n");
    eventually(secs(5), "slot released after the body ended", || async {
        let r = get(p.public, "/third").await;
        (r.status == 200).then_some(())
    })
    .await;
}

/// C-POOL-6: slots are released when attempts fail (no leak after many failures). With one
/// slot, the proxy must count it free again after each failed attempt (it may still be held
/// for a moment after the client read the answer), and the next request then reaches the
/// backend.
pub async fn c_pool_6_slot_released_after_failed_attempts(bin: Binary) {
    let b = Backend::start("fail-1").await;
    let cfg = Config::new(&[&b])
        .set("server.upstream.max_concurrent_requests", 1)
        .passive_off()
        .management();
    let p = Proxy::start(&bin, &cfg).await;
    b.set_mode(Mode::Status(503));
    for i in 0..8 {
        wait_backend_in_flight(&p, "fail-1", 0).await;
        let r = send(p.public, &Req::post("/p", "x")).await;
        expect_status(&r, 503, &format!("POST {i} answered by the backend"));
        assert_eq!(
            r.backend().as_deref(),
            Some("fail-1"),
            "POST {i}: {}",
            r.summary()
        );
    }
    b.set_mode(Mode::Reset);
    for i in 0..5 {
        wait_backend_in_flight(&p, "fail-1", 0).await;
        let r = send(p.public, &Req::post("/p", "x")).await;
        expect_weir_error(&r, 502, &format!("POST {i} to a resetting backend"));
    }
    b.set_mode(Mode::CloseWithoutAnswer);
    for i in 0..5 {
        wait_backend_in_flight(&p, "fail-1", 0).await;
        let r = send(p.public, &Req::post("/p", "x")).await;
        expect_weir_error(&r, 502, &format!("POST {i} to a backend that closes"));
    }
    b.set_mode(Mode::Ok);
    wait_backend_in_flight(&p, "fail-1", 0).await;
    let r = send(p.public, &Req::get("/ok")).await;
    expect_status(&r, 200, "after the failures the slot is free");
    assert_eq!(b.count(), 19, "every request reached the backend");
}
