//! The pool snapshot (C-POOL-2): backends in config order, the selection policy over them and
//! the pool's parameters.
//!
//! A [`Pool`] is immutable: its backend list, policy and parameters never change. Adapters
//! publish a new `Arc<Pool>` atomically on reload (arc-swap); a request keeps the snapshot it
//! started with, so backend indices stay valid for all its attempts. Backends themselves (and
//! their slots) are in `backend.rs`, the policies and the selection driver in `select.rs`; both
//! are re-exported here so that a pool's users need one path.

pub use crate::backend::{
    Availability, Backend, BackendSpec, MAX_CONCURRENT_REQUESTS, PoolParams, Slot,
};
pub use crate::select::{MAX_TRIED, Tried};

use core::time::Duration;

use crate::outlier::{
    HostStat, OutlierClock, OutlierEvent, admits_push_back, end_ejections, push_back, run_interval,
};
use crate::rng::Rng;
use crate::select::{AnyPolicy, NoBackend, PickContext, PolicyKind, Selection};
use crate::sync::Arc;
use crate::time::Instant;

/// Errors building a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolError {
    /// two backends share an id
    DuplicateId(String),
    /// a backend id is empty
    EmptyId,
    /// a weight is outside 1..=100
    Weight(String, u32),
    /// max_concurrent_requests must be within 1..=16777215
    Concurrency(u32),
}

impl core::fmt::Display for PoolError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PoolError::DuplicateId(id) => write!(f, "duplicate backend id {id:?}"),
            PoolError::EmptyId => write!(f, "backend id must not be empty"),
            PoolError::Weight(id, w) => {
                write!(f, "backend {id:?}: weight must be within 1..=100, got {w}")
            }
            PoolError::Concurrency(n) => write!(
                f,
                "max_concurrent_requests must be within 1..={MAX_CONCURRENT_REQUESTS}, got {n}"
            ),
        }
    }
}

impl std::error::Error for PoolError {}

/// Build the backend list of a new snapshot, taking over the runtime state of every backend of
/// `previous` with the same id and url (C-CONF-6). A declarative `disabled` replaces the runtime
/// enabled state and cancels an administrative drain; other state (health, breaker, counters,
/// slots) carries over untouched.
pub fn carry_over(
    specs: &[BackendSpec],
    previous: &[Arc<Backend>],
    params: &PoolParams,
    now: Instant,
) -> Result<Vec<Arc<Backend>>, PoolError> {
    if !(1..=MAX_CONCURRENT_REQUESTS).contains(&params.max_concurrent_requests) {
        return Err(PoolError::Concurrency(params.max_concurrent_requests));
    }
    let mut out: Vec<Arc<Backend>> = Vec::with_capacity(specs.len());
    for spec in specs {
        if spec.id.is_empty() {
            return Err(PoolError::EmptyId);
        }
        if !(1..=100).contains(&spec.weight) {
            return Err(PoolError::Weight(spec.id.clone(), spec.weight));
        }
        if out.iter().any(|b| b.id() == spec.id) {
            return Err(PoolError::DuplicateId(spec.id.clone()));
        }
        let kept = previous.iter().find(|b| {
            b.id() == spec.id
                && b.url() == spec.url
                && b.weight() == spec.weight
                && b.send_proxy() == spec.send_proxy
                && b.protocol() == spec.protocol
        });
        let backend = match kept {
            Some(b) => {
                b.set_enabled(!spec.disabled, now);
                Arc::clone(b)
            }
            None => Arc::new(Backend::new(spec, now)),
        };
        out.push(backend);
    }
    Ok(out)
}

/// One immutable pool snapshot: backends in config order, the selection policy over them and
/// the pool's parameters (C-POOL-2). The selection driver lives in `select.rs`.
#[derive(Debug)]
pub struct Pool {
    pub(crate) backends: Box<[Arc<Backend>]>,
    pub(crate) params: PoolParams,
    pub(crate) policy: AnyPolicy,
    /// The outlier interval's boundary, carried over from the previous snapshot so that
    /// frequent reloads do not postpone the judgment forever (C-OUT-1).
    outlier_clock: Arc<OutlierClock>,
}

impl Pool {
    /// Build a snapshot from `specs`, taking over the state of `previous`'s backends with the same
    /// id and url (C-CONF-6). `rng` seeds the policy (round-robin start index, C-POOL-4).
    pub fn new(
        specs: &[BackendSpec],
        policy: PolicyKind,
        params: PoolParams,
        previous: Option<&Pool>,
        now: Instant,
        rng: &mut dyn Rng,
    ) -> Result<Pool, PoolError> {
        let outlier_clock = previous.map_or_else(Arc::default, |p| Arc::clone(&p.outlier_clock));
        let previous: &[Arc<Backend>] = previous.map_or(&[], |p| &p.backends);
        let backends = carry_over(specs, previous, &params, now)?.into_boxed_slice();
        let policy = AnyPolicy::new(policy, &backends, rng);
        Ok(Pool {
            backends,
            params,
            policy,
            outlier_clock,
        })
    }

    /// The same backends (and outlier clock) under other parameters and policy.
    pub(crate) fn with_params(&self, params: PoolParams, policy: AnyPolicy) -> Pool {
        Pool {
            backends: self.backends.clone(),
            params,
            policy,
            outlier_clock: Arc::clone(&self.outlier_clock),
        }
    }

    /// Judge the outlier interval that ended before `now`, if one did and this caller is the one
    /// to judge it (C-OUT-1, C-OUT-2): one load when no boundary passed. Returns the ejections
    /// and returns it caused, in backend order, for the adapter's events and metrics.
    /// With outlier detection off and pushback on (C-RETRY-11), the boundary only ends the
    /// pushbacks that are over, for their return events.
    pub fn judge_outliers(&self, now: Instant) -> Option<Vec<OutlierEvent>> {
        let params = &self.params.outlier;
        if !params.enabled && self.params.retry_after_max.is_zero() {
            return None;
        }
        let intervals = self.outlier_clock.due(params, now)?;
        let _ejecting = self.outlier_clock.ejecting();
        let events = if params.enabled {
            let cells = self.backends.iter().map(|b| (b.outlier(), b.is_serving()));
            run_interval(cells, params, intervals, now)
        } else {
            end_ejections(self.backends.iter().map(|b| b.outlier()), now)
        };
        (!events.is_empty()).then_some(events)
    }

    /// Backend `index` answered `503` with a `Retry-After` of `requested` at `now`
    /// (C-RETRY-11): take it out of selection for that long, capped at `retry_after_max`, as an
    /// ejection with reason `retry_after` within C-OUT-2's cap (never beyond
    /// `max_ejection_percent`, never the last serving backend, not one already ejected).
    /// Returns the ejection for the adapter's event and metrics, or `None` when pushback is off
    /// or the cap refused it.
    pub fn push_back(
        &self,
        index: usize,
        requested: Duration,
        now: Instant,
    ) -> Option<OutlierEvent> {
        let time = requested.min(self.params.retry_after_max);
        let backend = self.backends.get(index)?;
        if time.is_zero() {
            return None;
        }
        let _ejecting = self.outlier_clock.ejecting();
        let stats: Vec<HostStat> = self
            .backends
            .iter()
            .map(|b| HostStat {
                ejected: b.is_ejected(&self.params, now),
                serving: b.is_serving(),
                ..HostStat::default()
            })
            .collect();
        admits_push_back(&stats, index, &self.params.outlier)
            .then(|| push_back(backend.outlier(), index, time, now))
    }

    /// The backends in config order.
    #[must_use]
    pub fn backends(&self) -> &[Arc<Backend>] {
        &self.backends
    }

    /// The pool's parameters.
    #[must_use]
    pub fn params(&self) -> &PoolParams {
        &self.params
    }

    /// The backend with this id.
    #[must_use]
    pub fn find(&self, id: &str) -> Option<(usize, &Arc<Backend>)> {
        self.backends.iter().enumerate().find(|(_, b)| b.id() == id)
    }

    /// Select a backend and reserve a slot on it, skipping those in `tried`. Never blocks. See
    /// the `select` module doc for the driver's rules.
    pub fn select(
        &self,
        ctx: &PickContext,
        tried: &Tried,
        now: Instant,
        rng: &mut dyn Rng,
    ) -> Selection {
        let params = &self.params;
        let reserve = |b: &Arc<Backend>, panic: bool| Backend::try_reserve(b, params, now, panic);
        match self.drive(ctx, tried, now, rng, reserve) {
            Ok((index, slot)) => Selection::Selected { index, slot },
            Err(why) => Selection::Unavailable(why),
        }
    }

    /// The backend [`Pool::select`] would pick now, without reserving anything: the same
    /// decision, for reports, the simulator's oracle and benchmarks of the decision alone.
    /// Advances the policy's cursor like a real pick.
    pub fn choose(
        &self,
        ctx: &PickContext,
        tried: &Tried,
        now: Instant,
        rng: &mut dyn Rng,
    ) -> Result<usize, NoBackend> {
        self.drive(ctx, tried, now, rng, |_, _| Ok(()))
            .map(|(index, ())| index)
    }

    fn drive<T>(
        &self,
        ctx: &PickContext,
        tried: &Tried,
        now: Instant,
        rng: &mut dyn Rng,
        take: impl FnMut(&Arc<Backend>, bool) -> Result<T, Availability>,
    ) -> Result<(usize, T), NoBackend> {
        let request = crate::select::Request { ctx, tried, now };
        crate::select::drive(
            &self.backends,
            &self.params,
            &self.policy,
            &request,
            rng,
            take,
        )
    }

    /// The policy of this pool.
    #[must_use]
    pub fn policy_kind(&self) -> PolicyKind {
        self.policy.kind()
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
