//! `redis.tls` and `redis.sentinel_password` against real servers (C-RATE-3,
//! C-RATE-5, C-CONF-3): Debian's `redis-server` started by the test with `--tls-port` and
//! certificates made by the test (rcgen). A take over TLS works on a standalone server, a
//! 3-master Cluster (`tls-cluster yes`) and a master found through a TLS sentinel; a server
//! certificate from an untrusted CA, one for another name, and the system roots (which do not
//! hold the test CA) all fail with an error that says "certificate", and the failure policy
//! decides those calls; a server that verifies clients takes the configured client
//! certificate; a sentinel with `requirepass` needs `sentinel_password`, apart from the
//! master's password.
//!
//! Ports (the 7100-7499 range of these tests): standalone 7200-7205, cluster 7210-7232,
//! sentinel 7240-7243.

mod common;
#[path = "topologies/servers.rs"]
mod servers;
#[path = "tls/setup.rs"]
mod setup;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::*;
use servers::{Cluster, ClusterTls, cmd_at, wait_until};
use setup::{Pki, path};
use weir_core::bucket::{BucketParams, Take};
use weir_core::rate::{FailureMode, StorageKind};
use weir_storage::{RateLimiter, RedisOptions, RedisStore, Store, StoreError, StoreKind};

fn params() -> BucketParams {
    BucketParams::new(3, 0.001).expect("valid")
}

/// Four takes from a capacity-3 bucket: three allowed, then denied.
async fn three_of_four(store: &RedisStore, i: u32) {
    let p = params();
    let mut allowed = 0;
    for _ in 0..4 {
        if let Take::Allowed { .. } = store.take(key(i), &p).await.expect("take over TLS") {
            allowed += 1;
        }
    }
    assert_eq!(allowed, 3, "key {i}");
}

async fn tls_failure(o: RedisOptions) -> StoreError {
    let store = RedisStore::new(o).expect("the store is made; connecting fails");
    store
        .take(key(1), &params())
        .await
        .expect_err("must not connect")
}

/// C-RATE-3, C-RATE-5: a standalone server over TLS, verified against the CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_3_standalone_over_tls_verifies_the_server() {
    let pki = Pki::new();
    let _server = tokio::task::block_in_place(|| pki.server(7200, 7201, "no"));
    let store = RedisStore::new(pki.opts(7201)).expect("store");
    store.health().await.expect("PING over TLS");
    three_of_four(&store, 1).await;
    // The bucket is on this server (read over its plain port): the take went there.
    let k = store.redis_key(key(1));
    assert_eq!(
        tokio::task::block_in_place(|| servers::cmd(7200, &["EXISTS", &k])),
        Some(redis::Value::Int(1))
    );

    // An untrusted CA, the system roots (no test CA in them), a plain client on the TLS port.
    let mut untrusted = pki.opts(7201);
    untrusted.tls_ca_file = Some(pki.other_ca.clone());
    let e = tls_failure(untrusted.clone()).await;
    assert!(
        matches!(e, StoreError::Connection(_)) && e.to_string().contains("certificate"),
        "untrusted CA: {e}"
    );
    let mut system = pki.opts(7201);
    system.tls_ca_file = None;
    let e = tls_failure(system).await;
    assert!(e.to_string().contains("certificate"), "system roots: {e}");
    let mut plain = pki.opts(7201);
    plain.tls = false;
    tls_failure(plain).await;

    // The failure policy decides the calls an untrusted server cannot answer, and every call
    // returns (the time each took is printed: the redis crate reads the system's roots on
    // every TLS connection attempt, synchronously, which no timeout can cut short).
    let clock = Clock::new();
    for mode in [
        FailureMode::FailOpen,
        FailureMode::FailClosed,
        FailureMode::LocalFallback,
    ] {
        let timeout = Duration::from_millis(300);
        let rate = rate(3, 0.001, StorageKind::Redis, mode, timeout);
        let s = RedisStore::new(untrusted.clone()).expect("store");
        let limiter = RateLimiter::new(StoreKind::Redis(s), &rate, 7).expect("limiter");
        for _ in 0..3 {
            let start = Instant::now();
            let v = tokio::time::timeout(HANG, limiter.check(key(2), &rate, clock.now()))
                .await
                .unwrap_or_else(|_| panic!("{mode}: a check hung for {HANG:?}"));
            assert_eq!(
                classify(&v, StorageKind::Redis, mode),
                Answer::Policy,
                "{mode}"
            );
            eprintln!("{mode}: the policy answered after {:?}", start.elapsed());
        }
    }
}

/// A certificate from the trusted CA for another name is refused (the host name is
/// verified, not only the chain).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_3_tls_verifies_the_host_name() {
    let pki = Pki::new();
    let args = pki.server_args(7205, "no", true);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let _server = tokio::task::block_in_place(|| RedisServer::start(Some(7204), &args));
    let e = tls_failure(pki.opts(7205)).await;
    assert!(e.to_string().contains("certificate"), "wrong name: {e}");
}

/// A server with `tls-auth-clients yes` refuses a client without a certificate
/// and serves one with the configured certificate and key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_3_client_certificate_when_the_server_asks() {
    let pki = Pki::new();
    let _server = tokio::task::block_in_place(|| pki.server(7202, 7203, "yes"));
    let e = tls_failure(pki.opts(7203)).await;
    assert!(
        matches!(e, StoreError::Connection(_)),
        "no client certificate: {e}"
    );
    let mut o = pki.opts(7203);
    o.tls_client = Some((pki.client_cert.clone(), pki.client_key.clone()));
    let store = RedisStore::new(o).expect("store");
    three_of_four(&store, 1).await;
}

/// Files the store cannot use stop the start with their name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_conf_1_unusable_tls_files_stop_the_start() {
    let pki = Pki::new();
    for mode in ["standalone", "cluster", "sentinel"] {
        let mut o = match mode {
            "standalone" => RedisOptions::new("127.0.0.1", 7201),
            "cluster" => RedisOptions::cluster([("127.0.0.1".to_owned(), 7220)]),
            _ => RedisOptions::sentinel([("127.0.0.1".to_owned(), 7243)], "m"),
        };
        pki.secure(&mut o);
        o.tls_ca_file = Some(pki.dir.join("missing.pem"));
        let e = RedisStore::new(o.clone()).expect_err(mode);
        assert!(
            matches!(&e, StoreError::Config(m) if m.contains("tls_ca_file") && m.contains("missing.pem")),
            "{mode}: {e}"
        );
        // A key file that is not a key, a CA file without a certificate: named, not quoted.
        o.tls_ca_file = Some(pki.ca.clone());
        o.tls_client = Some((pki.client_cert.clone(), pki.client_cert.clone()));
        let e = RedisStore::new(o.clone()).expect_err(mode);
        assert!(
            matches!(&e, StoreError::Config(m) if m.contains("tls_key_file") && m.contains("PRIVATE KEY")),
            "{mode}: {e}"
        );
        o.tls_client = None;
        o.tls_ca_file = Some(pki.client_key.clone());
        let e = RedisStore::new(o).expect_err(mode);
        assert!(
            matches!(&e, StoreError::Config(m) if m.contains("tls_ca_file") && !m.contains("MII")),
            "{mode}: {e}"
        );
    }
}

/// C-RATE-3: a 3-master cluster over TLS (`tls-cluster yes`: the slot map names
/// the TLS ports), found from one seed; buckets on every master; `pool_size` connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_3_cluster_over_tls() {
    let pki = Pki::new();
    let tls = ClusterTls {
        tls_base: 7220,
        bus_base: 7230,
        args: pki.server_args(0, "no", false)[2..].to_vec(),
        cli: vec!["--tls".into(), "--cacert".into(), path(&pki.ca)],
    };
    let cluster = tokio::task::block_in_place(|| Cluster::start_with(7210, 3, 0, Some(&tls)));
    let mut o = RedisOptions::cluster([("127.0.0.1".to_owned(), 7221)]);
    pki.secure(&mut o);
    o.connections = 3;
    let store = RedisStore::new(o).expect("store");
    assert!(format!("{store:?}").contains("connections: 3"), "{store:?}");
    store.health().await.expect("PING over TLS");
    let mut masters = BTreeSet::new();
    for i in 0..24 {
        three_of_four(&store, i).await;
        let k = store.redis_key(key(i));
        masters.insert(tokio::task::block_in_place(|| cluster.master_of(&k)));
    }
    assert_eq!(masters.len(), 3, "buckets on every master: {masters:?}");
    // Without the CA the cluster's certificates are refused.
    let mut o = RedisOptions::cluster([("127.0.0.1".to_owned(), 7221)]);
    pki.secure(&mut o);
    o.tls_ca_file = Some(pki.other_ca.clone());
    let store = RedisStore::new(o).expect("store");
    store.take(key(1), &params()).await.expect_err("untrusted");
    // The cluster client only says it has no connection; the health probe names the cause.
    let e = store.health().await.expect_err("untrusted");
    assert!(
        e.to_string().contains("certificate"),
        "cluster, untrusted: {e}"
    );
}

/// C-CONF-3: a master (password `mpw`, TLS on 7241) behind a sentinel that speaks
/// TLS (7243), talks to the master over TLS, and has its own password (`spw`): with both
/// passwords and TLS the store finds the master and takes there; without the sentinel's
/// password, or with the master's in its place, the sentinel refuses and the call fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_rate_3_sentinel_over_tls_with_its_own_password() {
    let pki = Pki::new();
    let margs = pki.server_args(7241, "no", false);
    let mut margs: Vec<&str> = margs.iter().map(String::as_str).collect();
    margs.extend(["--requirepass", "mpw"]);
    let _master = tokio::task::block_in_place(|| RedisServer::start(Some(7240), &margs));
    let conf = pki.dir.join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "port 7242\nbind 127.0.0.1\ntls-port 7243\ntls-cert-file {}\ntls-key-file {}\n\
             tls-ca-cert-file {}\ntls-auth-clients no\ntls-replication yes\nrequirepass spw\n\
             sentinel monitor weirtls 127.0.0.1 7241 1\nsentinel auth-pass weirtls mpw\n\
             sentinel down-after-milliseconds weirtls 1000\n",
            path(&pki.server_cert),
            path(&pki.server_key),
            path(&pki.ca)
        ),
    )
    .expect("sentinel.conf");
    let conf = path(&conf);
    let _sentinel = tokio::task::block_in_place(|| RedisServer::start_sentinel(7242, &conf));
    tokio::task::block_in_place(|| {
        wait_until(
            Duration::from_secs(10),
            "the sentinel reaches the master",
            || {
                let Some(redis::Value::Array(info)) = cmd_at(
                    "redis://:spw@127.0.0.1:7242/",
                    &["SENTINEL", "MASTER", "weirtls"],
                ) else {
                    return false;
                };
                let flags = info.iter().position(
                    |v| matches!(v, redis::Value::BulkString(b) if b.as_slice() == b"flags"),
                );
                matches!(flags.and_then(|i| info.get(i + 1)),
                Some(redis::Value::BulkString(b)) if b.as_slice() == b"master")
            },
        );
    });
    let opts = || {
        let mut o = RedisOptions::sentinel([("127.0.0.1".to_owned(), 7243)], "weirtls");
        pki.secure(&mut o);
        o.password = Some("mpw".into());
        o
    };
    let mut o = opts();
    o.sentinel_password = Some("spw".into());
    let store = RedisStore::new(o).expect("store");
    three_of_four(&store, 1).await;
    let k = store.redis_key(key(1));
    let on_master =
        tokio::task::block_in_place(|| cmd_at("redis://:mpw@127.0.0.1:7240/", &["EXISTS", &k]));
    assert_eq!(on_master, Some(redis::Value::Int(1)));

    let e = tls_failure(opts()).await;
    assert!(
        e.to_string().contains("NOAUTH"),
        "no sentinel password: {e}"
    );
    let mut wrong = opts();
    wrong.sentinel_password = Some("mpw".into());
    let e = tls_failure(wrong).await;
    assert!(
        e.to_string()
            .to_lowercase()
            .contains("authentication failed"),
        "the master's password for the sentinel's: {e}"
    );
}
