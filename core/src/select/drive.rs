//! The selection driver: one loop over a policy's candidates, the same for every policy (see the
//! `select` module doc), and the per-request set of backends already tried.

use core::ops::ControlFlow;

use super::{AnyPolicy, PickContext};
use crate::backend::{Availability, Backend, PoolParams, Slot};
use crate::rng::Rng;
use crate::sync::Arc;
use crate::time::Instant;

/// Why no backend could be selected (C-POOL-5). Each maps to a `503` with a JSON body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoBackend {
    /// The pool has no backends.
    EmptyPool,
    /// Every backend was already tried by this request (a retry has nowhere to go).
    AllTried,
    /// No backend is enabled, serving and healthy.
    NoHealthy,
    /// Every otherwise usable backend has an open circuit (and panic routing lost a race).
    AllOpen,
    /// Every usable backend is at `max_concurrent_requests`.
    AllSaturated,
    /// Every usable backend is at its adaptive concurrency limit, some below
    /// `max_concurrent_requests` (C-LOAD-4).
    AdaptiveLimit,
    /// Every untried backend is disabled or draining (none unhealthy, none circuit-open).
    NoneEnabled,
}

impl NoBackend {
    /// A stable snake_case name for logs, metrics and error bodies.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            NoBackend::EmptyPool => "empty_pool",
            NoBackend::AllTried => "all_tried",
            NoBackend::NoHealthy => "no_healthy_backend",
            NoBackend::AllOpen => "all_circuits_open",
            NoBackend::AllSaturated => "all_backends_saturated",
            NoBackend::AdaptiveLimit => "adaptive_concurrency_limit",
            NoBackend::NoneEnabled => "no_enabled_backend",
        }
    }
}

/// The result of a selection.
#[derive(Debug)]
pub enum Selection {
    /// A slot was reserved on backend `index` of the pool.
    Selected {
        /// The backend's index in the pool snapshot.
        index: usize,
        /// The reserved slot; dropping it releases it.
        slot: Slot,
    },
    /// Nothing could be reserved.
    Unavailable(NoBackend),
}

/// What the driver saw while visiting candidates.
#[derive(Debug, Default)]
struct Scan {
    untried: bool,
    saturated: bool,
    /// Some saturated backend was held back by its adaptive limit (C-LOAD-4).
    adaptive: bool,
    /// Some untried backend fails its health checks / has an open circuit (the `503`
    /// names the cause that holds, not `no_healthy_backend` for drained or ejected backends).
    unhealthy: bool,
    circuit_open: bool,
    open: Option<usize>,
    warming: Option<usize>,
}

/// What one pick is for: the request's context, the backends it already tried, and `now`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request<'a> {
    pub(crate) ctx: &'a PickContext,
    pub(crate) tried: &'a Tried,
    pub(crate) now: Instant,
}

/// The one selection driver (see the module doc); `take` reserves on a chosen backend
/// (`panic` = bypass the breaker) and may lose a race, in which case the driver moves on.
pub(crate) fn drive<T>(
    backends: &[Arc<Backend>],
    params: &PoolParams,
    policy: &AnyPolicy,
    request: &Request<'_>,
    rng: &mut dyn Rng,
    mut take: impl FnMut(&Arc<Backend>, bool) -> Result<T, Availability>,
) -> Result<(usize, T), NoBackend> {
    let Request { ctx, tried, now } = *request;
    if backends.is_empty() {
        return Err(NoBackend::EmptyPool);
    }
    let mut scan = Scan::default();
    let mut chosen: Option<(usize, T)> = None;
    let mut visit = |i: usize, rng: &mut dyn Rng| {
        let Some(b) = backends.get(i) else {
            return ControlFlow::Continue(());
        };
        if tried.contains(i) && !mutated!(RETRY_MAY_REUSE_BACKEND) {
            return ControlFlow::Continue(());
        }
        scan.untried = true;
        let mut why = b.availability(params, now);
        if why == Availability::Available {
            let share = b.slow_start_permille(&params.slow_start, now);
            if share < 1000 && !mutated!(SLOW_START_IGNORED) && !rng.chance_permille(share) {
                scan.warming.get_or_insert(i);
                return ControlFlow::Continue(());
            }
            match take(b, false) {
                Ok(t) => {
                    chosen = Some((i, t));
                    return ControlFlow::Break(());
                }
                Err(lost) => why = lost,
            }
        }
        match why {
            Availability::Unhealthy => scan.unhealthy = true,
            Availability::CircuitOpen | Availability::Ejected => scan.circuit_open = true,
            _ => {}
        }
        match why {
            Availability::Saturated => {
                scan.saturated = true;
                scan.adaptive |= b.at_adaptive_limit(params);
            }
            // Panic routing needs a backend whose only problem is its circuit or an ejection.
            Availability::CircuitOpen | Availability::Ejected
                if b.in_flight() < b.slot_limit(params) =>
            {
                scan.open.get_or_insert(i);
            }
            _ => {}
        }
        ControlFlow::Continue(())
    };
    policy
        .policy()
        .visit(backends, ctx, params, now, rng, &mut visit);
    if let Some(found) = chosen {
        return Ok(found);
    }
    if let Some(i) = scan.warming
        && let Ok(t) = take(&backends[i], false)
    {
        return Ok((i, t));
    }
    if let Some(i) = scan.open.filter(|_| !mutated!(PANIC_ROUTING_DISABLED)) {
        return take(&backends[i], true)
            .map(|t| (i, t))
            .map_err(|_| NoBackend::AllOpen);
    }
    Err(if !scan.untried {
        NoBackend::AllTried
    } else if scan.saturated && scan.adaptive {
        NoBackend::AdaptiveLimit
    } else if scan.saturated {
        NoBackend::AllSaturated
    } else if scan.unhealthy {
        NoBackend::NoHealthy
    } else if scan.circuit_open {
        NoBackend::AllOpen
    } else {
        NoBackend::NoneEnabled
    })
}

/// The maximum number of attempts per request the `Tried` set can remember.
pub const MAX_TRIED: usize = 8;

/// The backends (pool indices) a request has already tried: a retry never revisits one
/// (C-RETRY-2). Fixed size, no allocation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tried {
    len: u8,
    items: [u32; MAX_TRIED],
}

impl Tried {
    /// Nothing tried yet.
    #[must_use]
    pub const fn new() -> Tried {
        Tried {
            len: 0,
            items: [0; MAX_TRIED],
        }
    }

    /// Whether backend `index` was tried.
    #[must_use]
    pub fn contains(&self, index: usize) -> bool {
        self.items[..usize::from(self.len)]
            .iter()
            .any(|&i| i as usize == index)
    }

    /// Remember backend `index`. Returns false when the set is full (more attempts than
    /// [`MAX_TRIED`], which `retry.max_attempts` ≤ 5 rules out).
    pub fn insert(&mut self, index: usize) -> bool {
        if self.contains(index) {
            return true;
        }
        let Ok(i) = u32::try_from(index) else {
            return false;
        };
        if usize::from(self.len) == MAX_TRIED {
            return false;
        }
        self.items[usize::from(self.len)] = i;
        self.len += 1;
        true
    }

    /// How many backends were tried.
    #[must_use]
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether none was tried.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}
