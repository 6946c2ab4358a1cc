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
use servers::{Announcements, Cluster, Sentinels, cmd, role, subscribers, text, wait_until};
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

/// Four request loops over `keys` against `limiter` until `stop`; each record's `key` is the
/// index in `keys`.
fn keyed_load(
    limiter: Arc<RateLimiter>,
    rate: RateParams,
    clock: Clock,
    keys: Arc<Vec<ClientKey>>,
    stop: Arc<AtomicBool>,
) -> (Log, JoinHandle<()>) {
    load_keys(limiter, rate, clock, 4, stop, move |t, i| {
        let k = (t + i) as usize % keys.len();
        (k, keys[k])
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
/// store and stays there, and two replicas share the moved keys' buckets again. The operation
/// timeout is generous, so that no answer of a live master is cut on a loaded machine; every
/// phase ends on an event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_5_cluster_master_killed_fails_only_its_keys() {
    let mut cluster = tokio::task::block_in_place(|| Cluster::start(7010, 3));
    let mode = FailureMode::FailClosed;
    let timeout = Duration::from_secs(2);
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
    let (log, load) = keyed_load(
        Arc::clone(&limiter),
        rate.clone(),
        clock,
        Arc::new(keys.clone()),
        Arc::clone(&stop),
    );
    log.wait_answers(Duration::ZERO, Answer::Store, 50, "the store's answers")
        .await;
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
            clock.elapsed() - t_kill < WAIT,
            "no promotion: {masters:?} {}",
            servers::text(survivor, &["CLUSTER", "NODES"])
        );
    };
    // Back: every key answered by the store, from a request started after the promotion was
    // seen; from the end of that answer on, the key stays on the store.
    let mut back = vec![Duration::ZERO; keys.len()];
    log.wait_for(
        "every key answered by the store after the promotion",
        |rs| {
            back.iter_mut().enumerate().all(|(k, at)| {
                let first = rs
                    .iter()
                    .find(|r| r.key == k && r.start >= promoted && r.answer == Answer::Store);
                first.is_some_and(|r| {
                    *at = r.end();
                    true
                })
            })
        },
    )
    .await;
    let have = log.records().len();
    log.wait_for("200 more answers", |rs| rs.len() >= have + 200)
        .await;
    stop.store(true, Ordering::Relaxed);
    load.await.expect("load");
    let records = log.records();

    assert!(
        ready_all_along,
        "a partial outage made the limiter not ready"
    );
    let during = |r: &&Record| r.start > t_kill + Duration::from_millis(100) && r.end() < promoted;
    let (mut victim_policy, mut others_store, mut others_policy) = (0, 0, 0);
    for r in records.iter().filter(during) {
        match (owners[r.key] == victim, r.answer) {
            (true, Answer::Policy) => victim_policy += 1,
            (false, Answer::Store) => others_store += 1,
            (false, Answer::Policy) => others_policy += 1,
            _ => {}
        }
    }
    eprintln!(
        "promoted {:?} after the kill; during: victim's keys by policy {victim_policy}, \
         others by store {others_store}, others by policy {others_policy}; slowest {:?}",
        promoted - t_kill,
        slowest(&records)
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
    for r in records.iter().filter(|r| r.start >= back[r.key]) {
        assert_eq!(r.answer, Answer::Store, "not back on the store: {r:?}");
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
    let timeout = Duration::from_secs(2);
    let rate = rate(1_000_000, 1_000_000.0, StorageKind::Redis, mode, timeout);
    let limiter = Arc::new(RateLimiter::new(StoreKind::Redis(store), &rate, 7).expect("limiter"));
    let clock = Clock::new();
    let stop = Arc::new(AtomicBool::new(false));
    let keys: Vec<ClientKey> = (0..8).map(key).collect();
    let (log, load) = keyed_load(
        Arc::clone(&limiter),
        rate.clone(),
        clock,
        Arc::new(keys),
        Arc::clone(&stop),
    );
    log.wait_answers(Duration::ZERO, Answer::Store, 50, "the store's answers")
        .await;
    let t_failover = clock.elapsed();
    tokio::task::block_in_place(|| s.failover(26401));
    tokio::task::block_in_place(|| {
        wait_until(WAIT, "the replica is the master", || {
            s.master_port() == Some(7021)
                && matches!(cmd(7021, &["ROLE"]), Some(redis::Value::Array(r))
                    if r.first() == Some(&redis::Value::BulkString(b"master".to_vec())))
        });
    });
    let switched = clock.elapsed();
    // From the store's first script call on the new master on, it has moved there (the old
    // master stays a master for seconds, so answers alone do not tell which one decided).
    tokio::task::block_in_place(|| {
        wait_until(WAIT, "the store calling the new master", || {
            text(7021, &["INFO", "commandstats"]).contains("cmdstat_evalsha:")
        });
    });
    let moved = clock.elapsed();
    let back = log
        .wait_back(moved, "the store's answers on the new master")
        .await;
    let have = log.records().len();
    log.wait_for("200 more answers", |rs| rs.len() >= have + 200)
        .await;
    stop.store(true, Ordering::Relaxed);
    load.await.expect("load");
    let plain = log.records();
    let (stayed, _) = assert_stays(&plain, back, Duration::MAX);
    let policy = plain.iter().filter(|r| r.answer == Answer::Policy).count();
    eprintln!(
        "switched {:?} after SENTINEL FAILOVER; the store on the new master {:?} later, back on \
         the store {:?} later ({stayed} store answers since); {policy} of {} answers by policy, \
         slowest {:?}",
        switched - t_failover,
        moved.saturating_sub(switched),
        back.saturating_sub(switched),
        plain.len(),
        slowest(&plain)
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

/// One decision taken after the sentinels announced a switch, and where it landed.
#[derive(Debug)]
struct Landed {
    /// When it started, after the test saw the first `+switch-master`.
    start: Duration,
    /// The tokens the store said were left, or what went wrong.
    answer: Result<u64, String>,
    /// The new master's bucket changed with it: it was written there.
    on_new: bool,
    /// The whole tokens the new master's bucket holds after it.
    new_tokens: u64,
    /// The old master still said `master` after it (it was not demoted yet).
    old_was_master: bool,
}

/// The tokens left after a take, or what went wrong.
fn left(t: Result<Take, weir_storage::StoreError>) -> Result<u64, String> {
    match t {
        Ok(Take::Allowed { remaining }) => Ok(remaining),
        Ok(denied) => Err(format!("{denied:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// C-RATE-3: a planned failover (`SENTINEL FAILOVER`). The old master keeps answering as a
/// master for seconds after the sentinels announce the switch (until they demote it), so a
/// store that only moves on a connection error or `READONLY` keeps writing there, and those
/// decisions are lost when the old master resyncs. The store follows the announcement: from
/// its first decision on the new master on, every decision lands there (the new master's
/// bucket holds exactly what the answers said), and it moved while the old master was still
/// a master, within a generous bound of the announcement (the target is 1 s; measured in ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_3_sentinel_planned_failover_moves_on_the_announcement() {
    let s = tokio::task::block_in_place(Sentinels::start_free);
    let (old, new) = (s.master.port, s.replica.port);
    let sentinel_ports: Vec<u16> = s.sentinels.iter().map(|x| x.port).collect();
    let store = RedisStore::new(sentinel_opts(&s)).expect("store");
    let mut direct = redis_opts(new);
    direct.key_prefix = cluster_opts_prefix(&store);
    let new_master = RedisStore::new(direct).expect("store");
    // 1000 tokens refilled at 0.01 a second: for the whole test the tokens left are exactly
    // the capacity minus the takes a server has seen.
    let p = BucketParams::new(1000, 0.01).expect("valid");
    let k = key(91);
    let redis_key = store.redis_key(k);
    for remaining in [999, 998, 997] {
        assert_eq!(store.take(k, &p).await, Ok(Take::Allowed { remaining }));
    }
    let acked = tokio::task::block_in_place(|| cmd(old, &["WAIT", "1", "2000"]));
    assert_eq!(acked, Some(redis::Value::Int(1)), "replicated");

    let announcements = tokio::task::block_in_place(|| Announcements::subscribe(&sentinel_ports));
    let name = s.name.clone();
    let failover = std::time::Instant::now();
    tokio::task::block_in_place(|| s.failover(sentinel_ports[1]));
    let get = |port: u16| tokio::task::block_in_place(|| cmd(port, &["GET", &redis_key]));

    // Decisions one after another, 10 ms apart. Until the announcement they may land on either
    // master. From the announcement on, each is classified by whether the new master's bucket
    // changed with it (the promoted replica no longer replicates from the old master).
    let mut announced = None;
    let mut before = 0;
    let mut landed: Vec<Landed> = Vec::new();
    loop {
        if announced.is_none() {
            announced = announcements.first();
        }
        match &announced {
            None => {
                assert!(
                    failover.elapsed() < Duration::from_secs(20),
                    "no +switch-master within 20 s of SENTINEL FAILOVER"
                );
                if left(store.take(k, &p).await).is_ok() {
                    before += 1;
                }
            }
            Some((at, _)) => {
                let was = get(new);
                let start = at.elapsed();
                let answer = left(store.take(k, &p).await);
                let on_new = get(new) != was;
                let new_tokens = new_master.peek(k, &p).await.expect("peek the new master") / 1000;
                let old_was_master =
                    tokio::task::block_in_place(|| role(old)).is_some_and(|r| r == "master");
                landed.push(Landed {
                    start,
                    answer,
                    on_new,
                    new_tokens,
                    old_was_master,
                });
                let moved = landed.iter().position(|l| l.on_new);
                // Enough decisions after the move, or the generous bound is over.
                if moved.is_some_and(|m| landed.len() - m > 50) || start > Duration::from_secs(10) {
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let (at, text) = announced.expect("announced");
    assert_eq!(text, format!("{name} 127.0.0.1 {old} 127.0.0.1 {new}"));
    let from: Vec<(u64, u16)> = announcements
        .all()
        .iter()
        .map(|(t, port, _)| (t.saturating_duration_since(at).as_millis() as u64, *port))
        .collect();
    let Some(moved) = landed.iter().position(|l| l.on_new) else {
        panic!(
            "no decision reached the new master within {:?} of the announcement: all {} \
             decisions since were written to the old master (a master after each of them: {}) \
             and are lost",
            landed.last().map(|l| l.start),
            landed.len(),
            landed.iter().all(|l| l.old_was_master)
        );
    };
    let m = &landed[moved];
    // Every decision allowed, against what reached the new master's bucket: the rest were
    // written to the old master after the replica stopped following it, most of them before
    // the announcement (which no client can hear of earlier).
    let allowed = 3 + before + landed.iter().filter(|l| l.answer.is_ok()).count() as u64;
    let reached = 1000 - landed.last().map_or(1000, |l| l.new_tokens);
    eprintln!(
        "announced {:?} after SENTINEL FAILOVER (ms after the first, by sentinel: {from:?}); \
         {before} decisions allowed before it; the store's first decision on the new master \
         started {:?} after it, {moved} decisions after the announcement went to the old \
         master; {} of {allowed} allowed decisions did not reach the new master",
        at - failover,
        m.start,
        allowed - reached
    );
    assert!(
        m.old_was_master,
        "the store moved only once the old master was demoted, {:?} after the announcement: \
         the {moved} decisions between were written to the old master and are lost",
        m.start
    );
    for l in &landed[moved..] {
        assert!(
            l.on_new,
            "a decision went to the old master after the move: {l:?}"
        );
        assert_eq!(
            l.answer,
            Ok(l.new_tokens),
            "the answer is not what the new master's bucket holds: {l:?}"
        );
    }
}

/// C-RATE-3: the store hears one sentinel only, and that sentinel goes away and comes back.
/// The store subscribes to it again by itself, and follows a planned failover started at
/// another sentinel through it: it writes to the new master while the old one still answers
/// as a master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_3_sentinel_subscription_comes_back_with_its_sentinel() {
    let mut s = tokio::task::block_in_place(Sentinels::start_free);
    let (old, new) = (s.master.port, s.replica.port);
    let only = s.sentinels[0].port;
    let mut o = sentinel_opts(&s);
    o.nodes = vec![("127.0.0.1".to_owned(), only)];
    let store = RedisStore::new(o).expect("store");
    let p = BucketParams::new(1000, 0.01).expect("valid");
    let k = key(92);
    let redis_key = store.redis_key(k);
    store.take(k, &p).await.expect("take");
    let wait = |what: &str, f: &mut dyn FnMut() -> bool| {
        tokio::task::block_in_place(|| wait_until(Duration::from_secs(10), what, f));
    };
    wait("the store subscribed to its sentinel", &mut || {
        subscribers(only) == 1
    });
    tokio::task::block_in_place(|| s.sentinels[0].stop());
    // The master did not change: the store keeps deciding there.
    store
        .take(k, &p)
        .await
        .expect("take while the sentinel is away");
    tokio::time::sleep(Duration::from_millis(300)).await;
    tokio::task::block_in_place(|| s.sentinels[0].restart());
    wait("the store subscribed again", &mut || subscribers(only) == 1);

    let failover = std::time::Instant::now();
    tokio::task::block_in_place(|| s.failover(s.sentinels[1].port));
    let get = |port: u16| tokio::task::block_in_place(|| cmd(port, &["GET", &redis_key]));
    // Once the replica is a master it no longer replicates: its bucket changes only with a
    // decision written there.
    let moved = loop {
        assert!(
            failover.elapsed() < Duration::from_secs(15),
            "no decision reached the new master within 15 s of SENTINEL FAILOVER"
        );
        let promoted = tokio::task::block_in_place(|| role(new)).is_some_and(|r| r == "master");
        let was = get(new);
        let _ = store.take(k, &p).await;
        if promoted && get(new) != was {
            let old_was_master =
                tokio::task::block_in_place(|| role(old)).is_some_and(|r| r == "master");
            break (failover.elapsed(), old_was_master);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    eprintln!(
        "first decision on the new master {:?} after SENTINEL FAILOVER",
        moved.0
    );
    assert!(
        moved.1,
        "the store moved only once the old master was demoted ({:?} after SENTINEL FAILOVER)",
        moved.0
    );
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
