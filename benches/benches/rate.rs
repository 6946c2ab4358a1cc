//! Local rate-limit store takes: one hot key (single thread and every core in parallel), and
//! 100k+ distinct keys through a full store (every take inserts and evicts: the C-RATE-4 path).

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};

use criterion::{Criterion, criterion_group, criterion_main};
use weir_benches::run_parallel;
use weir_core::Instant;
use weir_core::bucket::BucketParams;
use weir_core::rate::{KeyParams, LocalStore, LocalStoreParams};

fn store() -> LocalStore {
    LocalStore::new(LocalStoreParams::default(), 42).expect("valid store")
}

fn bench_rate(c: &mut Criterion) {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let keys = KeyParams::default();
    // A bucket that never runs dry at these rates, so every take is an allowed take.
    let bucket = BucketParams::new(1_000_000_000, 1e9).expect("valid bucket");
    let hot = keys.key(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7)));
    let mut group = c.benchmark_group("local_take");

    let s = store();
    let mut t = 0u64;
    group.bench_function("hot_key/single", |b| {
        b.iter(|| {
            t += 1;
            black_box(s.take(hot, &bucket, Instant::from_nanos(t)))
        });
    });
    group.bench_function(format!("hot_key/parallel{threads}"), |b| {
        b.iter_custom(|iters| {
            run_parallel(threads, iters, |_, per| {
                for i in 0..per {
                    black_box(s.take(hot, &bucket, Instant::from_nanos(i)));
                }
            })
        });
    });

    // 100k-bucket store, keys cycling over 400k addresses: each take misses, inserts, evicts.
    let full = store();
    let distinct: Vec<_> = (0..400_000u32)
        .map(|i| keys.key(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i))))
        .collect();
    for k in &distinct[..100_000] {
        full.take(*k, &bucket, Instant::ZERO);
    }
    let mut i = 0usize;
    group.bench_function("distinct_100k_evicting/single", |b| {
        b.iter(|| {
            i = (i + 1) % distinct.len();
            black_box(full.take(distinct[i], &bucket, Instant::from_nanos(i as u64)))
        });
    });
    group.finish();
}

criterion_group!(benches, bench_rate);
criterion_main!(benches);
