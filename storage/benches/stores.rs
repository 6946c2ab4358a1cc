//! Takes per second and latency percentiles of the local, Redis and PostgreSQL stores in one
//! run (reported, never asserted; numbers in docs/storage.md).
//!
//! `cargo bench -p weir-storage --bench stores` against Redis on 127.0.0.1:6379 and
//! PostgreSQL on 127.0.0.1:5432 (database `test`, user `WEIR_TEST_PG_USER` or `postgres`).
//! `WEIR_BENCH_SECS` (default 3) sets each run's length, `WEIR_BENCH_TASKS` (default 32) the
//! concurrent takers of the shared stores. A store that is not reachable is skipped.
//! `WEIR_BENCH_CLUSTER=host:port` adds Redis Cluster rows (one seed node) and
//! `WEIR_BENCH_SENTINEL=host:port,host:port,...@master` Sentinel rows.
//! `WEIR_BENCH_REDIS=host:port` (default 127.0.0.1:6379, `none`: no such rows) is the standalone server,
//! `WEIR_BENCH_POOLS=1,4,16` the connection counts each Redis topology is run with, and
//! `WEIR_BENCH_ONLY_REDIS=1` leaves out the local store and PostgreSQL. `load/store-bench` starts
//! private standalone, Cluster and Sentinel servers and runs this in a release build
//! (docs/storage.md shows the figures).
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
    /// This process's CPU time (user + system) over the row, in clock ticks (1/100 s).
    cpu_ticks: u64,
}

/// utime + stime of this process from /proc/self/stat, in clock ticks; 0 where unreadable.
fn cpu_ticks() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0;
    };
    // Fields after the `(comm)`: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|x| x.parse().ok())
        .collect();
    f.iter().sum()
}

impl Row {
    fn print(&mut self) {
        self.lat_ns.sort_unstable();
        let pct = |p: f64| {
            let i =
                ((self.lat_ns.len() as f64 * p) as usize).min(self.lat_ns.len().saturating_sub(1));
            self.lat_ns.get(i).copied().unwrap_or(0) as f64 / 1000.0
        };
        let cpu_us = self.cpu_ticks as f64 * 10_000.0 / self.takes.max(1) as f64;
        println!(
            "| {:<34} | {:>12.0} | {:>9.1} | {:>9.1} | {:>9.1} | {:>9.1} |",
            self.name,
            self.takes as f64 / self.secs,
            pct(0.50),
            pct(0.99),
            pct(0.999),
            cpu_us,
        );
    }
}

fn bench_local(secs: f64) -> Row {
    let store = LocalStore::new(LocalStoreParams::default(), 1).expect("local store");
    let params = BucketParams::new(100, 100.0).expect("params");
    let cpu0 = cpu_ticks();
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
        cpu_ticks: cpu_ticks().saturating_sub(cpu0),
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
    let cpu0 = cpu_ticks();
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
        cpu_ticks: cpu_ticks().saturating_sub(cpu0),
    })
}

fn host_port(s: &str) -> (String, u16) {
    let (h, p) = s.rsplit_once(':').expect("host:port");
    (h.to_owned(), p.parse().expect("a port"))
}

/// The Redis rows: standalone, and the cluster and sentinel the environment names, each with
/// every connection count of `WEIR_BENCH_POOLS`.
fn topologies() -> Vec<(String, RedisOptions)> {
    let pools: Vec<u32> = std::env::var("WEIR_BENCH_POOLS")
        .unwrap_or_else(|_| "1,4".into())
        .split(',')
        .map(|p| p.trim().parse().expect("WEIR_BENCH_POOLS: numbers"))
        .collect();
    let standalone = std::env::var("WEIR_BENCH_REDIS").unwrap_or_else(|_| "127.0.0.1:6379".into());
    let mut out = Vec::new();
    let mut add = |name: String, o: RedisOptions| {
        for &conns in &pools {
            let mut o = o.clone();
            o.connections = conns;
            out.push((format!("{name}, pool {conns}"), o));
        }
    };
    if standalone != "none" {
        let (h, p) = host_port(&standalone);
        add("redis standalone".into(), RedisOptions::new(h, p));
    }
    if let Ok(seed) = std::env::var("WEIR_BENCH_CLUSTER") {
        add(
            "redis cluster".into(),
            RedisOptions::cluster([host_port(&seed)]),
        );
    }
    if let Ok(spec) = std::env::var("WEIR_BENCH_SENTINEL") {
        let (nodes, master) = spec.split_once('@').expect("sentinels@master");
        let sentinels: Vec<(String, u16)> = nodes.split(',').map(host_port).collect();
        add(
            "redis sentinel".into(),
            RedisOptions::sentinel(sentinels, master),
        );
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
        "| store                              |     takes/s  |  p50 µs   |  p99 µs   | p99.9 µs  | client CPU µs/take |"
    );
    println!(
        "|------------------------------------|-------------:|----------:|----------:|----------:|----------:|"
    );
    let only_redis = std::env::var_os("WEIR_BENCH_ONLY_REDIS").is_some();
    if !only_redis {
        bench_local(secs).print();
    }
    runtime.block_on(async {
        for (name, mut o) in topologies() {
            o.key_prefix = format!("weirbench:{}:", std::process::id());
            let store = Arc::new(RedisStore::new(o).expect("redis store"));
            let name = format!("{name}, {tasks} takers");
            if let Some(mut r) = bench_shared(name, store, tasks, secs).await {
                r.print();
            }
        }
        for conns in if only_redis { &[][..] } else { &[4u32, 8][..] } {
            let conns = *conns;
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
