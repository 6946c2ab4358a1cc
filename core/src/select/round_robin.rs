//! `round_robin` (C-POOL-4): each backend in turn, starting at a random index.
//!
//! The random start (gRPC's round_robin picker does the same, reference/001) keeps replicas that
//! start together from all sending their first request to the first backend. The cursor is kept
//! per worker, as Envoy keeps one load balancer per worker thread: workers never write the same
//! cache line, so a pick costs the same on 2 cores as on 64, and the aggregate sequence is still
//! an even rotation (each worker's cursor cycles through every backend).
//!
//! When the next backend is unavailable the driver asks for the one after it, so a backend that
//! is down passes its turn to its successor (nginx and HAProxy behave the same).

use super::{PickContext, Policy, Visit};
use crate::pool::{Backend, PoolParams};
use crate::rng::Rng;
use crate::sync::Padded;
use crate::sync::{Arc, AtomicUsize, Ordering};
use crate::time::Instant;

/// Per-worker cursors; a worker index is reduced modulo this.
const WORKER_CURSORS: usize = 16;

/// The round-robin policy. See the module doc.
#[derive(Debug)]
pub struct RoundRobin {
    cursors: Box<[Padded<AtomicUsize>]>,
}

impl RoundRobin {
    /// A rotation over `n` backends with a random start per worker cursor.
    #[must_use]
    pub fn new(n: usize, rng: &mut dyn Rng) -> RoundRobin {
        let cursors = (0..WORKER_CURSORS)
            .map(|_| Padded(AtomicUsize::new(rng.below(n as u64) as usize)))
            .collect();
        RoundRobin { cursors }
    }
}

impl Policy for RoundRobin {
    fn visit(
        &self,
        backends: &[Arc<Backend>],
        ctx: &PickContext,
        _params: &PoolParams,
        _now: Instant,
        rng: &mut dyn Rng,
        visit: &mut Visit<'_>,
    ) {
        let n = backends.len();
        if n == 0 {
            return;
        }
        let cursor = &self.cursors[ctx.worker % WORKER_CURSORS].0;
        // A worker's cursor has one writer, so a load and a store suffice (no locked
        // read-modify-write on the hot path). Two callers sharing a worker index may read the
        // same value and pick the same backend once: harmless for balance, never unsafe.
        let start = cursor.load(Ordering::Relaxed);
        cursor.store(start.wrapping_add(1), Ordering::Relaxed);
        let mut i = start % n;
        for _ in 0..n {
            if visit(i, rng).is_break() {
                return;
            }
            i += 1;
            if i == n {
                i = 0;
            }
        }
    }
}
