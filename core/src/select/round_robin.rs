//! `round_robin` (C-POOL-4): each available backend in turn, starting at a random index.
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
//! While a backend is down (disabled, draining, unhealthy, circuit open) the rotation is over the
//! others: a, b, c with a down go b, c, b, c, not b, b, c (the backend after the missing one used
//! to get its turn as well). `rotation.rs` has how, and why that way. When the next backend is
//! unusable for a passing reason (a full slot, a slow-start draw, a retry that already tried it)
//! it keeps its turn and the driver asks for the ones after it, in order.

use super::rotation::{Rotation, Sequence};
use super::{PickContext, Policy, Visit};
use crate::backend::{Backend, PoolParams};
use crate::rng::Rng;
use crate::sync::Arc;
use crate::time::Instant;

/// The round-robin policy. See the module doc.
#[derive(Debug)]
pub struct RoundRobin {
    rotation: Rotation,
}

impl RoundRobin {
    /// A rotation over `n` backends from a random start.
    #[must_use]
    pub fn new(n: usize, rng: &mut dyn Rng) -> RoundRobin {
        RoundRobin {
            rotation: Rotation::new(n, Sequence::Rotation(n), false, 1, rng),
        }
    }
}

impl Policy for RoundRobin {
    fn visit(
        &self,
        backends: &[Arc<Backend>],
        _ctx: &PickContext,
        params: &PoolParams,
        now: Instant,
        rng: &mut dyn Rng,
        visit: &mut Visit<'_>,
    ) {
        self.rotation.visit(backends, params, now, rng, visit);
    }
}
