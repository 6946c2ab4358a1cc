//! The Redis store on a real Redis Cluster and a real Sentinel setup, started by the tests
//! from Debian's `redis-server` (C-RATE-3, C-RATE-5): buckets spread over every
//! master and shared by two replicas; a master killed under load and its replica promoted,
//! failing only that master's keys and keeping the store up; a forced Sentinel failover that
//! keeps the buckets' state. Each test takes a few seconds; every wait is bounded.

mod common;
#[path = "topologies/servers.rs"]
mod servers;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use servers::{Cluster, Sentinels, cmd, wait_until};
use tokio::task::JoinHandle;
use weir_core::bucket::{BucketParams, Take};
use weir_core::config::RedisMode;
use weir_core::rate::{ClientKey, FailureMode, RateParams, StorageKind};
use weir_storage::{RateLimiter, RedisOptions, RedisStore, Store, StoreKind};

fn cluster_opts(seed: u16) -> RedisOptions {
    let mut o = RedisOptions::cluster([("127.0.0.1".to_owned(), seed)]);
    o.key_prefix = format!("{}:", unique("weirtest"));
    o.dial_timeout = Duration::from_millis(500);
    o
}

fn sentinel_opts(sentinels: &Sentinels) -> RedisOptions {
    let nodes = sentinels
        .sentinels
        .iter()
        .map(|s| ("127.0.0.1".to_owned(), s.port));
    let mut o = RedisOptions::sentinel(nodes, sentinels.name.clone());
    o.key_prefix = format!("{}:", unique("weirtest"));
    o.dial_timeout = Duration::from_millis(500);
    o
}

/// Take from `key` through `a` and `b` alternately `n` times: how many were allowed.
async fn shared_takes(
    a: &RedisStore,
    b: &RedisStore,
    key: ClientKey,
    p: &BucketParams,
    n: u32,
) -> u32 {
    let mut allowed = 0;
    for i in 0..n {
        let store = if i % 2 == 0 { a } else { b };
        if let Take::Allowed { .. } = store.take(key, p).await.expect("take") {
            allowed += 1;
        }
    }
    allowed
}

/// One request of the keyed load: which key, and what the limiter answered.
#[derive(Debug, Clone, Copy)]
struct Keyed {
    key: usize,
    record: Record,
}

/// `tasks` loops over `keys` against `limiter` until `stop`, recording every answer.
fn keyed_load(
    limiter: Arc<RateLimiter>,
    rate: RateParams,
    clock: Clock,
    keys: Arc<Vec<ClientKey>>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<Vec<Keyed>> {
    tokio::spawn(async move {
        let mut handles = Vec::new();
        for t in 0..4usize {
            let (limiter, rate, keys, stop) = (
                Arc::clone(&limiter),
                rate.clone(),
                Arc::clone(&keys),
                Arc::clone(&stop),
            );
            handles.push(tokio::spawn(async move {
                let mut out = Vec::new();
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    let k = i % keys.len();
                    let start = clock.elapsed();
                    let v = limiter.check(keys[k], &rate, clock.now()).await;
                    let answer = classify(&v, StorageKind::Redis, rate.failure_mode());
                    let elapsed = clock.elapsed() - start;
                    out.push(Keyed {
                        key: k,
                        record: Record {
                            start,
                            elapsed,
                            answer,
                        },
                    });
                    i += 1;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                out
            }));
        }
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.await.expect("load task"));
        }
        all.sort_by_key(|k| k.record.start);
        all
    })
}

/// C-RATE-3: on a 3-master cluster, found from one seed, buckets land on every
/// master, and two replicas (two stores, seeded from different nodes) share each bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_3_cluster_spreads_and_shares_buckets() {
    let cluster = tokio::task::block_in_place(|| Cluster::start(7000, 3));
    let a = RedisStore::new(cluster_opts(7000)).expect("store");
    let mut opts_b = cluster_opts(7004);
    opts_b.key_prefix = cluster_opts_prefix(&a);
    let b = RedisStore::new(opts_b).expect("store");
    assert_eq!(a.mode(), RedisMode::Cluster);
    a.health().await.expect("health");
    let p = BucketParams::new(3, 0.001).expect("valid");
    let mut masters = BTreeSet::new();
    for i in 0..30 {
        let k = key(i);
        assert_eq!(shared_takes(&a, &b, k, &p, 6).await, 3, "key {i}");
        assert_eq!(b.peek(k, &p).await.expect("peek") / 1000, 0);
        let redis_key = a.redis_key(k);
        masters.insert(tokio::task::block_in_place(|| {
            cluster.master_of(&redis_key)
        }));
    }
    assert_eq!(masters.len(), 3, "buckets on every master: {masters:?}");
    a.reset(key(0)).await.expect("reset");
    assert_eq!(b.peek(key(0), &p).await.expect("peek"), 3000);
}

/// The key prefix of `store` (its Redis key of a known client key, minus that key).
fn cluster_opts_prefix(store: &RedisStore) -> String {
    let k = key(0);
    let full = store.redis_key(k);
    full.strip_suffix(&k.to_string())
        .expect("prefix")
        .to_owned()
}

/// C-RATE-5: a master killed under load. Until its replica is promoted only the keys
/// it held get the policy's answer (fail-closed: 503); every other key keeps the shared store,
/// the store stays up and the limiter ready. After the promotion every key is back on the
/// store, and two replicas share the moved keys' buckets again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_5_cluster_master_killed_fails_only_its_keys() {
    let mut cluster = tokio::task::block_in_place(|| Cluster::start(7010, 3));
    let mode = FailureMode::FailClosed;
    let timeout = Duration::from_millis(250);
    let rate = rate(1_000_000, 1_000_000.0, StorageKind::Redis, mode, timeout);
    let store = RedisStore::new(cluster_opts(7010)).expect("store");
    let prefix = cluster_opts_prefix(&store);
    let keys: Vec<ClientKey> = (0..24).map(key).collect();
    let owners: Vec<u16> = tokio::task::block_in_place(|| {
        keys.iter()
            .map(|k| cluster.master_of(&format!("{prefix}{k}")))
            .collect()
    });
    let victim = owners[0];
    let limiter = Arc::new(RateLimiter::new(StoreKind::Redis(store), &rate, 7).expect("limiter"));
    limiter
        .prepare(Duration::from_secs(2), Clock::new().now())
        .await
        .expect("prepare");

    let clock = Clock::new();
    let stop = Arc::new(AtomicBool::new(false));
    let load = keyed_load(
        Arc::clone(&limiter),
        rate.clone(),
        clock,
        Arc::new(keys.clone()),
        Arc::clone(&stop),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t_kill = clock.elapsed();
    tokio::task::block_in_place(|| cluster.node(victim).stop());
    let mut ready_all_along = true;
    let survivor = owners
        .iter()
        .copied()
        .find(|p| *p != victim)
        .expect("another master");
    let promoted = loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let _ = limiter.probe(&rate, clock.now()).await;
        if ready_all_along && !(limiter.ready(mode) && limiter.store_up()) {
            eprintln!(
                "not ready at {:?}: {:?}",
                clock.elapsed() - t_kill,
                limiter.health()
            );
            ready_all_along = false;
        }
        let masters = tokio::task::block_in_place(|| cluster.masters_seen_by(survivor));
        if masters.len() == 3 && !masters.contains(&victim) {
            break clock.elapsed();
        }
        assert!(
            clock.elapsed() - t_kill < Duration::from_secs(15),
            "no promotion: {masters:?} {}",
            servers::text(survivor, &["CLUSTER", "NODES"])
        );
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    let records = load.await.expect("load");

    let plain: Vec<Record> = records.iter().map(|k| k.record).collect();
    assert_bounded(&plain, timeout);
    assert!(
        ready_all_along,
        "a partial outage made the limiter not ready"
    );
    let during = |k: &&Keyed| {
        k.record.start > t_kill + Duration::from_millis(100) && k.record.start < promoted
    };
    let (mut victim_policy, mut others_store, mut others_policy) = (0, 0, 0);
    for k in records.iter().filter(during) {
        match (owners[k.key] == victim, k.record.answer) {
            (true, Answer::Policy) => victim_policy += 1,
            (false, Answer::Store) => others_store += 1,
            (false, Answer::Policy) => others_policy += 1,
            _ => {}
        }
    }
    eprintln!(
        "promoted {:?} after the kill; during: victim's keys by policy {victim_policy}, \
         others by store {others_store}, others by policy {others_policy}",
        promoted - t_kill
    );
    assert!(
        victim_policy > 0,
        "the dead master's keys were never refused"
    );
    assert!(
        others_store > 0,
        "no other key used the store during the outage"
    );
    assert_eq!(
        others_policy, 0,
        "a key of a live master was decided by the policy"
    );
    for k in records
        .iter()
        .filter(|k| k.record.start > promoted + Duration::from_secs(1))
    {
        assert_eq!(
            k.record.answer,
            Answer::Store,
            "not back on the store: {k:?}"
        );
    }
    // Shared state again on the promoted replica's slots.
    let a = RedisStore::new(cluster_opts(survivor)).expect("store");
    let mut ob = cluster_opts(survivor);
    ob.key_prefix = cluster_opts_prefix(&a);
    let b = RedisStore::new(ob).expect("store");
    let p = BucketParams::new(3, 0.001).expect("valid");
    let moved = keys[0];
    assert_eq!(shared_takes(&a, &b, moved, &p, 6).await, 3);
}

/// C-RATE-3, C-RATE-5: Sentinel with one master, one replica and three sentinels; a
/// forced failover (`SENTINEL FAILOVER`) under load. The store finds the new master by itself,
/// every answer meanwhile is the store's or the policy's within the timeout, and a bucket's
/// state taken before the failover is the state after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_5_sentinel_forced_failover_keeps_the_buckets() {
    let s = tokio::task::block_in_place(|| Sentinels::start(7020, 7021, 26400));
    let store = RedisStore::new(sentinel_opts(&s)).expect("store");
    assert_eq!(store.mode(), RedisMode::Sentinel);
    let p = BucketParams::new(5, 0.001).expect("valid");
    let kept = key(77);
    for _ in 0..3 {
        assert!(matches!(
            store.take(kept, &p).await,
            Ok(Take::Allowed { .. })
        ));
    }
    let kept_key = store.redis_key(kept);
    // The takes reached the replica before the failover.
    let acked = tokio::task::block_in_place(|| cmd(7020, &["WAIT", "1", "2000"]));
    assert_eq!(acked, Some(redis::Value::Int(1)));

    let mode = FailureMode::FailClosed;
    let timeout = Duration::from_millis(250);
    let rate = rate(1_000_000, 1_000_000.0, StorageKind::Redis, mode, timeout);
    let limiter = Arc::new(RateLimiter::new(StoreKind::Redis(store), &rate, 7).expect("limiter"));
    let clock = Clock::new();
    let stop = Arc::new(AtomicBool::new(false));
    let keys: Vec<ClientKey> = (0..8).map(key).collect();
    let load = keyed_load(
        Arc::clone(&limiter),
        rate.clone(),
        clock,
        Arc::new(keys),
        Arc::clone(&stop),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t_failover = clock.elapsed();
    let name = s.name.clone();
    let ok = tokio::task::block_in_place(|| cmd(26401, &["SENTINEL", "FAILOVER", &name]));
    assert_eq!(ok, Some(redis::Value::Okay));
    tokio::task::block_in_place(|| {
        wait_until(Duration::from_secs(15), "the replica is the master", || {
            s.master_port() == Some(7021)
                && matches!(cmd(7021, &["ROLE"]), Some(redis::Value::Array(r))
                    if r.first() == Some(&redis::Value::BulkString(b"master".to_vec())))
        });
    });
    let switched = clock.elapsed();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    let records = load.await.expect("load");
    let plain: Vec<Record> = records.iter().map(|k| k.record).collect();
    assert_bounded(&plain, timeout);
    let back = assert_recovered(&plain, switched, Duration::MAX);
    let policy = plain.iter().filter(|r| r.answer == Answer::Policy).count();
    eprintln!(
        "switched {:?} after SENTINEL FAILOVER; back on the store {back:?} later; {policy} of {} \
         answers by policy",
        switched - t_failover,
        plain.len()
    );

    // The bucket followed the failover: 2 of 5 tokens left, on the new master.
    let limiter_store = limiter.store().shared().expect("shared");
    let mut after = Vec::new();
    for _ in 0..3 {
        after.push(matches!(
            limiter_store.take_dyn(kept, &p).await,
            Ok(Take::Allowed { .. })
        ));
    }
    assert_eq!(after, [true, true, false]);
    let on_new = tokio::task::block_in_place(|| cmd(7021, &["EXISTS", &kept_key]));
    assert_eq!(on_new, Some(redis::Value::Int(1)));
}

/// C-RATE-5: a cluster store made while no node runs fails its calls (the process
/// still starts) and uses the cluster once it is there, without being rebuilt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_5_cluster_store_made_before_the_cluster() {
    let store = RedisStore::new(cluster_opts(7030)).expect("store: nothing connects");
    let p = BucketParams::new(3, 0.001).expect("valid");
    assert!(store.take(key(1), &p).await.is_err(), "no cluster yet");
    assert!(store.health().await.is_err());
    let _cluster = tokio::task::block_in_place(|| Cluster::start(7030, 3));
    let clock = Clock::new();
    loop {
        if store.take(key(1), &p).await.is_ok() {
            break;
        }
        assert!(clock.elapsed() < Duration::from_secs(10), "never connected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    store.health().await.expect("health");
    eprintln!("connected {:?} after the cluster was made", clock.elapsed());
}

/// The cases every shared store runs, on the cluster too (set_tokens, peek/reset,
/// two replicas × 50 concurrent takers, refill on the server clock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_cases_on_the_cluster() {
    let _cluster = tokio::task::block_in_place(|| Cluster::start(7040, 3));
    let a = RedisStore::new(cluster_opts(7040)).expect("store");
    common::cases::set_tokens(&a).await;
    common::cases::peek_and_reset(&a).await;
    let mut ob = cluster_opts(7042);
    ob.key_prefix = cluster_opts_prefix(&a);
    let b = RedisStore::new(ob).expect("store");
    common::cases::atomic_across_two_replicas(Arc::new(a), Arc::new(b)).await;
    let c = RedisStore::new(cluster_opts(7041)).expect("store");
    refill_follows_clock(&c).await;
}
