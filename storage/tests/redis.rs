//! The Redis store against the real Redis on 127.0.0.1:6379 and private `redis-server`s
//! (C-RATE-1, C-RATE-3, C-RATE-5, C-RATE-6).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use weir_core::bucket::{BucketParams, Take};
use weir_core::rate::{FailureMode, StorageKind};
use weir_storage::{RateLimiter, RedisStore, Store, StoreError, StoreKind, Verdict};

const REDIS: u16 = 6379;

async fn get_raw(store: &RedisStore, port: u16, k: weir_core::rate::ClientKey) -> Option<String> {
    let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    redis::cmd("GET")
        .arg(store.redis_key(k))
        .query_async(&mut c)
        .await
        .expect("GET")
}

/// C-RATE-3: the script is weir-core's GCRA step on the server clock (the shared case).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_3_script_matches_core_arithmetic() {
    let store = RedisStore::new(redis_opts(REDIS)).expect("store");
    cases::matches_core_arithmetic(
        async |k, params| store.take_traced(k, params).await.expect("take"),
        async |k| {
            get_raw(&store, REDIS, k)
                .await
                .map_or(0, |s| s.parse::<u64>().expect("a number"))
        },
    )
    .await;
}

/// C-RATE-3: the key TTL is the full refill time plus the margin; peek reads without taking;
/// reset refills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_3_ttl_peek_reset() {
    let store = RedisStore::new(redis_opts(REDIS)).expect("store");
    let params = BucketParams::new(4, 2.0).expect("valid"); // full refill 2 s
    let k = key(1);
    let mut c = redis::Client::open("redis://127.0.0.1:6379/")
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let (clock, second_take) = common::two_takes_then_peek(&store, k, &params).await;
    let pttl: i64 = redis::cmd("PTTL")
        .arg(store.redis_key(k))
        .query_async(&mut c)
        .await
        .expect("PTTL");
    // Set to 3 s by the second take (called at `second_take`), then counting down.
    let since = (clock.elapsed() - second_take).as_millis() as i64;
    assert!(
        (3000 - since - 1..=3000).contains(&pttl),
        "ttl {pttl} ms = 2 s refill + 1 s margin, less the {since} ms since the last take"
    );
    store.reset(k).await.expect("reset");
    assert_eq!(store.peek(k, &params).await.expect("peek"), 4000);
    store.health().await.expect("health");
}

/// C-MGMT-4: the shared `set_tokens` case, then Redis's own: a full bucket is no key, and the
/// key's TTL is the refill plus the margin.
#[tokio::test]
async fn c_mgmt_4_set_tokens() {
    let store = RedisStore::new(redis_opts(REDIS)).expect("store");
    let (k, params) = cases::set_tokens(&store).await;
    let mut c = redis::Client::open("redis://127.0.0.1:6379/")
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let pttl: i64 = redis::cmd("PTTL")
        .arg(store.redis_key(k))
        .query_async(&mut c)
        .await
        .expect("PTTL");
    assert!(
        (1_000_000..=1_001_000).contains(&pttl),
        "ttl {pttl} ms = 1000 s refill + 1 s margin"
    );
    store.set_tokens(k, &params, 10).await.expect("set full");
    let exists: i64 = redis::cmd("EXISTS")
        .arg(store.redis_key(k))
        .query_async(&mut c)
        .await
        .expect("EXISTS");
    assert_eq!(exists, 0, "a full bucket is the absent key");
}

/// Acceptance: two stores (two replicas) × 50 concurrent takers on one key, capacity 20:
/// exactly 20 allowed (C-RATE-3; the shared case).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_3_atomic_across_two_replicas() {
    let opts = redis_opts(REDIS);
    let a = Arc::new(RedisStore::new(opts.clone()).expect("store a"));
    let b = Arc::new(RedisStore::new(opts).expect("store b"));
    cases::atomic_across_two_replicas(a, b).await;
}

/// Acceptance: after a burst, the takes allowed follow capacity + refill × elapsed on the
/// server clock, within one token (C-RATE-1, C-RATE-3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_1_refill_follows_server_clock() {
    let store = RedisStore::new(redis_opts(REDIS)).expect("store");
    refill_follows_clock(&store).await;
}

/// The script is reloaded after `SCRIPT FLUSH` (EVALSHA answers NOSCRIPT).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evalsha_reloads_on_noscript() {
    let server = RedisServer::start(None, &[]);
    let store = RedisStore::new(redis_opts(server.port)).expect("store");
    let params = BucketParams::new(3, 1.0).expect("valid");
    assert_eq!(
        store.take(key(1), &params).await,
        Ok(Take::Allowed { remaining: 2 })
    );
    let mut c = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut c)
        .await
        .expect("flush");
    assert_eq!(
        store.take(key(1), &params).await,
        Ok(Take::Allowed { remaining: 1 })
    );
}

/// Acceptance (C-RATE-6): a private Redis with maxmemory 1mb and noeviction, filled up: takes
/// fail as store errors (out of memory), and the policy applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_6_maxmemory_is_a_store_failure() {
    let server = RedisServer::start(
        None,
        &["--maxmemory", "1mb", "--maxmemory-policy", "noeviction"],
    );
    let store = RedisStore::new(redis_opts(server.port)).expect("store");
    let params = BucketParams::new(3, 1.0).expect("valid");
    store
        .take(key(1), &params)
        .await
        .expect("room before filling");
    let mut c = server
        .client()
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let blob = vec![b'x'; 16 * 1024];
    let mut filled = false;
    for i in 0..1000 {
        let r: redis::RedisResult<()> = redis::cmd("SET")
            .arg(format!("fill:{i}"))
            .arg(&blob)
            .query_async(&mut c)
            .await;
        if r.is_err() {
            filled = true;
            break;
        }
    }
    assert!(filled, "maxmemory never reached");
    let err = store
        .take(key(2), &params)
        .await
        .expect_err("a write must fail");
    assert!(matches!(err, StoreError::OutOfMemory(_)), "{err:?}");

    // The policies apply to it (fail-closed answers 503; local-fallback decides locally).
    for mode in [
        FailureMode::FailClosed,
        FailureMode::LocalFallback,
        FailureMode::FailOpen,
    ] {
        let rate = rate(3, 1.0, StorageKind::Redis, mode, Duration::from_millis(200));
        let limiter = RateLimiter::new(
            StoreKind::Redis(RedisStore::new(redis_opts(server.port)).expect("store")),
            &rate,
            1,
        )
        .expect("limiter");
        let clock = Clock::new();
        let v = limiter.check(key(3), &rate, clock.now()).await;
        assert_eq!(
            classify(&v, StorageKind::Redis, mode),
            Answer::Policy,
            "{mode}"
        );
        assert!(matches!(
            limiter.health().last_error,
            Some(StoreError::OutOfMemory(_))
        ));
        assert_eq!(limiter.ready(mode), mode != FailureMode::FailClosed);
        assert_eq!(limiter.degraded(mode), mode != FailureMode::FailClosed);
        if mode == FailureMode::FailClosed {
            assert_eq!(v, Verdict::Unavailable);
            assert_eq!(v.status(), Some(503));
        }
    }
}

/// Acceptance (C-RATE-5), for one policy: Redis down at start (nothing on the port), then
/// started; `CLIENT KILL` under load; killed and restarted under load. Every request gets the
/// store's or the policy's answer and none hangs, the policy answers while the store is down,
/// and after each return the requests use the store again and stay on it. The operation
/// timeout is generous: a slow answer of a healthy store on a loaded machine would otherwise
/// be cut and decided by the policy (c_rate_5_silent_store_is_cut_at_the_operation_timeout
/// checks the timeout itself).
async fn outage_scenario(mode: FailureMode) {
    let timeout = Duration::from_secs(2);
    let mut server = RedisServer::not_started(free_port(), &[]);
    let rate = rate(1_000_000, 1_000_000.0, StorageKind::Redis, mode, timeout);
    let limiter = Arc::new(
        RateLimiter::new(
            StoreKind::Redis(RedisStore::new(redis_opts(server.port)).expect("store")),
            &rate,
            7,
        )
        .expect("limiter"),
    );
    common::outage_scenario(limiter, rate, mode, &mut server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_5_outages_fail_open() {
    outage_scenario(FailureMode::FailOpen).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_5_outages_fail_closed() {
    outage_scenario(FailureMode::FailClosed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_5_outages_local_fallback() {
    outage_scenario(FailureMode::LocalFallback).await;
}

/// C-RATE-5: a fail-closed replica gets no traffic while not ready; the recovery probe alone
/// brings it back once the store returns (within a generous bound: its pace is
/// `retry_interval`'s, checked in the limiter's unit tests; the delay is printed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_5_probe_recovers_without_traffic() {
    let timeout = Duration::from_millis(100);
    let mut server = RedisServer::not_started(free_port(), &[]);
    let rate = rate(
        10,
        10.0,
        StorageKind::Redis,
        FailureMode::FailClosed,
        timeout,
    );
    let limiter = RateLimiter::new(
        StoreKind::Redis(RedisStore::new(redis_opts(server.port)).expect("store")),
        &rate,
        7,
    )
    .expect("limiter");
    let clock = Clock::new();
    assert!(limiter.prepare(timeout, clock.now()).await.is_err());
    assert!(!limiter.ready(FailureMode::FailClosed));
    assert!(!limiter.probe(&rate, clock.now()).await);
    server = tokio::task::spawn_blocking(move || {
        server.restart();
        server
    })
    .await
    .expect("start");
    let back = clock.elapsed();
    while !limiter.probe(&rate, clock.now()).await {
        assert!(
            clock.elapsed() - back < WAIT,
            "not ready {WAIT:?} after the store returned"
        );
        tokio::time::sleep(limiter.retry_interval() / 4).await;
    }
    eprintln!(
        "ready {:?} after the store returned",
        clock.elapsed() - back
    );
    assert!(limiter.ready(FailureMode::FailClosed));
    let v = limiter.check(key(1), &rate, clock.now()).await;
    assert_eq!(
        classify(&v, StorageKind::Redis, FailureMode::FailClosed),
        Answer::Store
    );
    drop(server);
}

/// C-RATE-5: a Redis that accepts connections and never answers. Its dial and response
/// timeouts are a minute, so only the operation timeout can end a call: it does, and the
/// policy decides, for every policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_5_silent_store_is_cut_at_the_operation_timeout() {
    let silent = Silent::start().await;
    for mode in [
        FailureMode::FailOpen,
        FailureMode::FailClosed,
        FailureMode::LocalFallback,
    ] {
        let rate = rate(
            10,
            10.0,
            StorageKind::Redis,
            mode,
            Duration::from_millis(300),
        );
        let mut o = redis_opts(silent.port);
        o.dial_timeout = Duration::from_secs(60);
        o.response_timeout = Duration::from_secs(60);
        let store = RedisStore::new(o).expect("store");
        let limiter = RateLimiter::new(StoreKind::Redis(store), &rate, 7).expect("limiter");
        silent_store_is_cut(&limiter, &rate).await;
    }
}

/// C-RATE-3: the shared peek/reset case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_3_peek_and_reset_shared_case() {
    let store = RedisStore::new(redis_opts(REDIS)).expect("store");
    cases::peek_and_reset(&store).await;
}
