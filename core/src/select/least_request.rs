//! `least_request` (C-POOL-4): the power of two choices on requests in flight.
//!
//! Each pick draws two distinct backends at random and prefers the one with fewer requests in
//! flight. Mitzenmacher ("The Power of Two Choices in Randomized Load Balancing", 2001) shows
//! that this takes the maximum load from `Θ(log n / log log n)` (one random choice) to
//! `Θ(log log n)`, while costing O(1) per pick: two random draws and two atomic loads, however
//! large the pool. Envoy's `LEAST_REQUEST` (with its default `choice_count` of 2) and Finagle's
//! `P2C` balancers use the same algorithm. Scanning every backend for the global minimum would
//! be O(n) and, worse, would send every concurrent pick to the same momentarily idle backend
//! (herding); two random choices avoid both.
//!
//! Order offered to the driver: the less loaded of the pair (on a tie, the first draw, which is
//! itself random), then the other, then every remaining backend from a random start, so a pick
//! succeeds whenever any backend is available (C-POOL-3) and a retry (C-RETRY-2) still finds
//! the untried ones.
//!
//! The load is read through [`LoadMetric`], so a latency-weighted cost (Finagle's Peak EWMA:
//! in-flight × smoothed round-trip time) can replace the in-flight count later without changing
//! the policy.

use core::fmt::Debug;
use core::marker::PhantomData;

use super::{PickContext, Policy, Visit};
use crate::backend::{Backend, PoolParams};
use crate::rng::Rng;
use crate::sync::Arc;
use crate::time::Instant;

/// What "less loaded" means to [`LeastRequest`]: lower is better. Must be O(1) and not block.
pub trait LoadMetric: Debug + Send + Sync + 'static {
    /// The backend's current load.
    fn load(backend: &Backend) -> u64;
}

/// Requests in flight on the backend (slots held, C-POOL-6): Envoy's and Finagle's least-loaded
/// measure.
#[derive(Debug, Clone, Copy, Default)]
pub struct InFlight;

impl LoadMetric for InFlight {
    fn load(backend: &Backend) -> u64 {
        u64::from(backend.in_flight())
    }
}

/// The power-of-two-choices policy over the load `M`. See the module doc. It has no state of its
/// own: the loads live in the backends.
#[derive(Debug, Clone, Copy, Default)]
pub struct LeastRequest<M: LoadMetric = InFlight> {
    metric: PhantomData<M>,
}

impl<M: LoadMetric> LeastRequest<M> {
    /// The policy (stateless).
    #[must_use]
    pub const fn new() -> LeastRequest<M> {
        LeastRequest {
            metric: PhantomData,
        }
    }

    /// Two distinct uniform indices in `0..n` (`n >= 2`): the second is drawn from the `n - 1`
    /// others, so no rejection loop is needed.
    fn pair(n: usize, rng: &mut dyn Rng) -> (usize, usize) {
        let a = rng.below(n as u64) as usize;
        let mut b = rng.below(n as u64 - 1) as usize;
        if b >= a {
            b += 1;
        }
        (a, b)
    }
}

impl<M: LoadMetric> Policy for LeastRequest<M> {
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
        if n == 1 {
            let _ = visit(0, rng);
            return;
        }
        let (a, b) = Self::pair(n, rng);
        let (first, second) = if M::load(&backends[b]) < M::load(&backends[a]) {
            (b, a)
        } else {
            (a, b)
        };
        if visit(first, rng).is_break() || visit(second, rng).is_break() {
            return;
        }
        let mut i = rng.below(n as u64) as usize;
        for _ in 0..n {
            if i != first && i != second && visit(i, rng).is_break() {
                return;
            }
            i += 1;
            if i == n {
                i = 0;
            }
        }
    }
}
