//! `pick_first` (C-POOL-4): the first available backend in config order.
//!
//! gRPC's default policy (reference/001, `balancer/pickfirst`): addresses are tried in sequence
//! and the first that works takes every call; the others are spares. Here the policy offers the
//! backends in config order on every pick, and the driver takes the first one that is available
//! (C-POOL-3): when backend 0 fails its checks, is ejected, drained or saturated, traffic falls
//! over to backend 1, then 2, and returns to backend 0 as soon as it is available again (through
//! its slow-start ramp, C-HEALTH-4, which sends part of the traffic on to the next one). A retry
//! (C-RETRY-2) goes to the next backend in the list.
//!
//! It is the policy for an active/standby pair, not for spreading load. Unlike gRPC it keeps no
//! "current" backend: the order is fixed by the config, so every replica agrees on the primary.

use super::{PickContext, Policy, Visit};
use crate::backend::{Backend, PoolParams};
use crate::rng::Rng;
use crate::sync::Arc;
use crate::time::Instant;

/// The pick-first policy. See the module doc. It has no state.
#[derive(Debug, Clone, Copy, Default)]
pub struct PickFirst;

impl PickFirst {
    /// The policy (stateless).
    #[must_use]
    pub const fn new() -> PickFirst {
        PickFirst
    }
}

impl Policy for PickFirst {
    fn visit(
        &self,
        backends: &[Arc<Backend>],
        _ctx: &PickContext,
        _params: &PoolParams,
        _now: Instant,
        rng: &mut dyn Rng,
        visit: &mut Visit<'_>,
    ) {
        for i in 0..backends.len() {
            if visit(i, rng).is_break() {
                return;
            }
        }
    }
}
