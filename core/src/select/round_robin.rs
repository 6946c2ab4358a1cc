//! `round_robin` (C-POOL-4): each backend in turn, starting at a random index.
//!
//! The random start (gRPC's round_robin picker does the same, reference/001) keeps replicas that
//! start together from all sending their first request to the first backend. There is one cursor
//! per process (per pool snapshot), advanced with one relaxed `fetch_add`: consecutive picks
//! from any worker follow one rotation, so six requests over two backends go a, b, a, b, a, b
//! whatever worker each lands on (C-POOL-4; nginx and HAProxy share their rotation between
//! workers too, Envoy's per-worker load balancers do not and users notice). The cost is one
//! contended cache line: nanoseconds against the microseconds a proxied request takes
//! (docs/balancing.md has the measurement).
//!
//! When the next backend is unavailable the driver asks for the one after it, so a backend that
//! is down passes its turn to its successor (nginx and HAProxy behave the same).

use super::{PickContext, Policy, Visit};
use crate::backend::{Backend, PoolParams};
use crate::rng::Rng;
use crate::sync::Padded;
use crate::sync::{Arc, AtomicUsize, Ordering};
use crate::time::Instant;

/// The round-robin policy. See the module doc.
#[derive(Debug)]
pub struct RoundRobin {
    cursor: Padded<AtomicUsize>,
}

impl RoundRobin {
    /// A rotation over `n` backends from a random start.
    #[must_use]
    pub fn new(n: usize, rng: &mut dyn Rng) -> RoundRobin {
        RoundRobin {
            cursor: Padded(AtomicUsize::new(rng.below(n as u64) as usize)),
        }
    }
}

impl Policy for RoundRobin {
    fn visit(
        &self,
        backends: &[Arc<Backend>],
        _ctx: &PickContext,
        _params: &PoolParams,
        _now: Instant,
        rng: &mut dyn Rng,
        visit: &mut Visit<'_>,
    ) {
        let n = backends.len();
        if n == 0 {
            return;
        }
        // One read-modify-write: concurrent picks each get their own position.
        let mut i = self.cursor.0.fetch_add(1, Ordering::Relaxed) % n;
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
