//! Shared fixtures for weir-core's criterion benchmarks (`benches/`) and the allocation test
//! (`tests/alloc.rs`). Benchmarks report; they never assert a duration.

use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant};

use weir_core::Instant;
use weir_core::pool::{BackendSpec, Pool, PoolParams};
use weir_core::select::PolicyKind;
use weir_core::slow_start::SlowStart;

/// A pool of `n` healthy backends with the given policy, slow start off.
#[must_use]
pub fn healthy_pool(n: usize, kind: PolicyKind) -> Arc<Pool> {
    let specs: Vec<BackendSpec> = (0..n)
        .map(|i| {
            BackendSpec::new(
                format!("b{i}"),
                format!("http://10.0.{}.{}:80", i / 256, i % 256),
            )
        })
        .collect();
    let params = PoolParams {
        slow_start: SlowStart::off(),
        ..PoolParams::default()
    };
    let pool = Pool::new(
        &specs,
        kind,
        params,
        None,
        Instant::ZERO,
        &mut weir_core::WyRand::new(7),
    )
    .expect("valid pool");
    for b in pool.backends() {
        b.set_healthy(true, Instant::ZERO);
    }
    Arc::new(pool)
}

/// Run `op` `iters` times split over `threads` OS threads and return the wall time: divided by
/// `iters` this is ns/op in the sense of Go's `b.RunParallel` (aggregate throughput).
pub fn run_parallel<F>(threads: usize, iters: u64, op: F) -> Duration
where
    F: Fn(usize, u64) + Sync,
{
    let per = iters.div_ceil(threads as u64);
    let start = StdInstant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let op = &op;
            s.spawn(move || op(t, per));
        }
    });
    start.elapsed()
}
