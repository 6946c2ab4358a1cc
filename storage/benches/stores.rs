//! Takes per second and latency percentiles of the local, Redis and PostgreSQL stores in one
//! run (reported, never asserted; numbers in docs/storage.md).
//!
//! `cargo bench -p weir-storage --bench stores` against Redis on 127.0.0.1:6379 and
//! PostgreSQL on 127.0.0.1:5432 (database `test`, user `WEIR_TEST_PG_USER` or `postgres`).
//! `WEIR_BENCH_SECS` (default 3) sets each run's length, `WEIR_BENCH_TASKS` (default 32) the
//! concurrent takers of the shared stores. A store that is not reachable is skipped.
//! `WEIR_BENCH_CLUSTER=host:port` adds a Redis Cluster row (one seed node) and
//! `WEIR_BENCH_SENTINEL=host:port,host:port,...@master` a Sentinel row (issue 19; docs/storage.md
//! shows how the figures there were made).
#![allow(clippy::print_stdout)]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant};

use weir_core::bucket::BucketParams;
use weir_core::rate::{ClientKey, KeyParams, LocalStore, LocalStoreParams};
use weir_core::time::Instant;
use weir_storage::{PostgresOptions, PostgresStore, RedisOptions, RedisStore, Store};

fn key(i: u32) -> ClientKey {
    KeyParams::default().key(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)))
}

struct Row {
    name: String,
    takes: usize,
    secs: f64,
    lat_ns: Vec<u64>,
}

impl Row {
    fn print(&mut self) {
        self.lat_ns.sort_unstable();
        let pct = |p: f64| {
            let i =
                ((self.lat_ns.len() as f64 * p) as usize).min(self.lat_ns.len().saturating_sub(1));
            self.lat_ns.get(i).copied().unwrap_or(0) as f64 / 1000.0
        };
        println!(
            "| {:<34} | {:>12.0} | {:>9.1} | {:>9.1} | {:>9.1} |",
            self.name,
            self.takes as f64 / self.secs,
            pct(0.50),
            pct(0.99),
            pct(0.999),
        );
    }
}

fn bench_local(secs: f64) -> Row {
    let store = LocalStore::new(LocalStoreParams::default(), 1).expect("local store");
    let params = BucketParams::new(100, 100.0).expect("params");
    let origin = StdInstant::now();
    let end = Duration::from_secs_f64(secs);
    let mut lat = Vec::with_capacity(1 << 22);
    let mut i = 0u32;
    loop {
        let t0 = origin.elapsed();
        if t0 >= end {
            break;
        }
        let _ = store.take(
            key(i % 10_000),
            &params,
            Instant::from_nanos(t0.as_nanos() as u64),
        );
        lat.push((origin.elapsed() - t0).as_nanos() as u64);
        i = i.wrapping_add(1);
    }
    Row {
        name: "local (1 thread)".into(),
        takes: lat.len(),
        secs,
        lat_ns: lat,
    }
}

async fn bench_shared<S: Store + 'static>(
    name: String,
    store: Arc<S>,
    tasks: u32,
    secs: f64,
) -> Option<Row> {
    let params = BucketParams::new(100, 100.0).expect("params");
    if let Err(e) = store.take(key(0), &params).await {
        println!("| {name:<34} | skipped: {e} |");
        return None;
    }
    let origin = StdInstant::now();
    let end = Duration::from_secs_f64(secs);
    let mut handles = Vec::new();
    for t in 0..tasks {
        let store = Arc::clone(&store);
        handles.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut i = t * 100_000;
            let mut errors = 0u64;
            while origin.elapsed() < end {
                let t0 = StdInstant::now();
                if store.take(key(i % 10_000), &params).await.is_err() {
                    errors += 1;
                }
                lat.push(t0.elapsed().as_nanos() as u64);
                i = i.wrapping_add(1);
            }
            (lat, errors)
        }));
    }
    let mut lat = Vec::new();
    let mut errors = 0;
    for h in handles {
        let (l, e) = h.await.expect("task");
        lat.extend(l);
        errors += e;
    }
    let secs = origin.elapsed().as_secs_f64();
    let name = if errors > 0 {
        format!("{name} ({errors} errors)")
    } else {
        name
    };
    Some(Row {
        name,
        takes: lat.len(),
        secs,
        lat_ns: lat,
    })
}

fn host_port(s: &str) -> (String, u16) {
    let (h, p) = s.rsplit_once(':').expect("host:port");
    (h.to_owned(), p.parse().expect("a port"))
}

/// The cluster and sentinel rows the environment asks for.
fn topologies() -> Vec<(String, RedisOptions)> {
    let mut out = Vec::new();
    if let Ok(seed) = std::env::var("WEIR_BENCH_CLUSTER") {
        out.push((
            format!("redis cluster (seed {seed})"),
            RedisOptions::cluster([host_port(&seed)]),
        ));
    }
    if let Ok(spec) = std::env::var("WEIR_BENCH_SENTINEL") {
        let (nodes, master) = spec.split_once('@').expect("sentinels@master");
        let sentinels: Vec<(String, u16)> = nodes.split(',').map(host_port).collect();
        let n = sentinels.len();
        out.push((
            format!("redis sentinel ({n} sentinels)"),
            RedisOptions::sentinel(sentinels, master),
        ));
    }
    out
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` would pass nothing useful either.
    let secs: f64 = std::env::var("WEIR_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let tasks: u32 = std::env::var("WEIR_BENCH_TASKS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(32);
    let user = std::env::var("WEIR_TEST_PG_USER").unwrap_or_else(|_| "postgres".into());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "| store                              |     takes/s  |  p50 µs   |  p99 µs   | p99.9 µs  |"
    );
    println!(
        "|------------------------------------|-------------:|----------:|----------:|----------:|"
    );
    bench_local(secs).print();
    runtime.block_on(async {
        for conns in [1u32, 4] {
            let mut o = RedisOptions::new("127.0.0.1", 6379);
            o.connections = conns;
            o.key_prefix = format!("weirbench:{}:", std::process::id());
            let store = Arc::new(RedisStore::new(o).expect("redis store"));
            let name = format!("redis ({conns} conn, {tasks} takers)");
            if let Some(mut r) = bench_shared(name, store, tasks, secs).await {
                r.print();
            }
        }
        for (name, mut o) in topologies() {
            o.key_prefix = format!("weirbench:{}:", std::process::id());
            let store = Arc::new(RedisStore::new(o).expect("redis store"));
            let name = format!("{name}, {tasks} takers");
            if let Some(mut r) = bench_shared(name, store, tasks, secs).await {
                r.print();
            }
        }
        for conns in [4u32, 8] {
            let mut o = PostgresOptions::new("127.0.0.1", 5432, user.clone(), "test");
            o.max_connections = conns;
            o.key_prefix = format!("bench:{}:", std::process::id());
            let store = PostgresStore::new(o).expect("postgres store");
            if let Err(e) = store.migrate().await {
                println!("| postgres | skipped: {e} |");
                continue;
            }
            let name = format!("postgres ({conns} conn, {tasks} takers)");
            if let Some(mut r) = bench_shared(name, Arc::new(store), tasks, secs).await {
                r.print();
            }
        }
    });
}
