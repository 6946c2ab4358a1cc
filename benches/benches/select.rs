//! Backend selection: pick + slot release for every policy at 8, 64, 100 and 1,024 backends,
//! single-threaded and in parallel on every core (as the reference's BenchmarkRoundRobinStrategy
//! with 100 backends does).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use weir_benches::{healthy_pool, run_parallel};
use weir_core::pool::{Pool, Tried};
use weir_core::select::{PickContext, PolicyKind, Selection};
use weir_core::{Instant, WyRand};

fn bench_select(c: &mut Criterion) {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let now = Instant::from_secs(1);
    for &kind in PolicyKind::ALL {
        let mut group = c.benchmark_group(format!("pick/{}", kind.as_str()));
        for n in [8usize, 64, 100, 1024] {
            let pool = healthy_pool(n, kind);
            // `choose`: the decision alone (what the reference's Next() measures);
            // `select`: decision + slot reservation + release (an attempt's full cost).
            for reserve in [false, true] {
                let what = if reserve { "select" } else { "choose" };
                group.bench_with_input(
                    BenchmarkId::new(format!("{what}/single"), n),
                    &n,
                    |b, _| {
                        let mut rng = WyRand::new(1);
                        let tried = Tried::new();
                        let mut key = 0u64;
                        b.iter(|| {
                            key = key.wrapping_add(0x9e37_79b9_7f4a_7c15);
                            let ctx = PickContext { hash: Some(key) };
                            one(&pool, &ctx, &tried, now, &mut rng, reserve)
                        });
                    },
                );
                let id = BenchmarkId::new(format!("{what}/parallel{threads}"), n);
                group.bench_with_input(id, &n, |b, _| {
                    b.iter_custom(|iters| {
                        run_parallel(threads, iters, |worker, per| {
                            let mut rng = WyRand::new(worker as u64 + 1);
                            let tried = Tried::new();
                            let mut key = worker as u64;
                            for _ in 0..per {
                                key = key.wrapping_add(0x9e37_79b9_7f4a_7c15);
                                let ctx = PickContext { hash: Some(key) };
                                one(&pool, &ctx, &tried, now, &mut rng, reserve);
                            }
                        })
                    });
                });
            }
        }
        group.finish();
    }
}

#[inline]
fn one(
    pool: &Pool,
    ctx: &PickContext,
    tried: &Tried,
    now: Instant,
    rng: &mut WyRand,
    reserve: bool,
) -> bool {
    if reserve {
        black_box(matches!(
            pool.select(ctx, tried, now, rng),
            Selection::Selected { .. }
        ))
    } else {
        black_box(pool.choose(ctx, tried, now, rng).is_ok())
    }
}

criterion_group!(benches, bench_select);
criterion_main!(benches);
