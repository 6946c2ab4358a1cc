//! The invariants, checked after every event (and the ones that belong to a moment: an attempt
//! being sent, an outcome being recorded, a request turned away, the liveness deadline, the end).
//!
//! Only public core APIs are read: `Backend::in_flight`, `circuit_state`, `breaker()`,
//! `availability`, `slow_start_permille`, `RetryBudget::tokens_milli`, `Gate::in_flight` and
//! `queued`, `Bulkhead::in_flight`, `LocalStore::peek`. The world keeps its own accounting of
//! what it holds (slots, gate slots, permits, retries granted) and independent models of the
//! token buckets and the slow-start ramp (`crate::model`), and compares.

use weir_core::breaker::{CircuitState, Outcome};
use weir_core::flow::Attempt;
use weir_core::outlier::{EjectReason, OutlierChange, OutlierEvent};
use weir_core::pool::Availability;

use super::{Arc, Current, Permit, World};
use crate::model;
use crate::report::Invariant;

impl World<'_> {
    /// The invariants that hold at every instant.
    pub(super) fn check_all(&mut self) {
        let now = self.now;
        // C-LOAD-1: the gate.
        let gate = self.services.gate();
        let (in_flight, queued) = (gate.in_flight(), gate.queued());
        let params = self.s.gate;
        if in_flight > params.max_concurrent_requests() || in_flight != self.gate_holders {
            self.fail(
                Invariant::GateSlots,
                format!(
                    "gate in flight {in_flight} (max {}), requests holding a gate slot {}",
                    params.max_concurrent_requests(),
                    self.gate_holders
                ),
            );
        }
        if queued > params.max_queue() {
            self.fail(
                Invariant::QueueBound,
                format!("{queued} waiters queued, max_queue {}", params.max_queue()),
            );
        }
        // C-RETRY-7, C-RETRY-3: the budget against its model.
        let budget = Arc::clone(self.runtime.budget());
        let tokens = budget.tokens_milli(now);
        let model_tokens = self.budget_model.tokens_milli(now);
        let bound = self.budget_model.max_grants(weir_core::Instant::ZERO, now);
        if tokens != model_tokens || tokens > budget.capacity() * 1000 || self.budget_grants > bound
        {
            self.fail(
                Invariant::RetryBudget,
                format!(
                    "budget holds {tokens} milli-tokens, model {model_tokens}; {} retries \
                     granted, bound capacity + refill x elapsed = {bound}",
                    self.budget_grants
                ),
            );
        }
        // C-LOAD-2: bulkheads.
        for route in 0..self.s.routes.len() {
            let Some(b) = self.runtime.bulkhead(route).map(Arc::clone) else {
                continue;
            };
            let held = self.bulkhead_holders[route];
            if b.in_flight() != held || b.limit().is_some_and(|l| b.in_flight() > l) {
                let detail = format!(
                    "route {route}: bulkhead in flight {} (limit {:?}), flows holding a permit {held}",
                    b.in_flight(),
                    b.limit()
                );
                self.fail(Invariant::Bulkhead, detail);
            }
        }
        self.check_backends();
    }

    /// Per backend: slots (C-POOL-6), circuit transitions, slow start (C-HEALTH-4).
    /// An interval judged by this request's start (C-OUT-2): count its ejections, and check
    /// that the pool's ejections stay within `max_ejection_percent` (one in a pool of two or
    /// more) and leave a serving backend when the pool had one.
    pub(super) fn check_outliers(&mut self, req: usize, events: &[OutlierEvent]) {
        let now = self.now;
        let snapshot = self.requests[req].snapshot;
        let pool = std::sync::Arc::clone(&self.snapshots[snapshot].pool);
        let params = *pool.params();
        self.note_pushbacks(req, events);
        let ejections = events
            .iter()
            .filter(|e| matches!(e.change, OutlierChange::Ejected { .. }))
            .count();
        self.stats.ejections += ejections as u64;
        if ejections == 0 {
            return;
        }
        let backends = pool.backends();
        let ejected = backends
            .iter()
            .filter(|b| b.is_ejected(&params, now))
            .count();
        let cap = params.outlier.max_ejected(backends.len());
        if ejected > cap {
            self.fail(
                Invariant::OutlierCap,
                format!(
                    "request {req}: {ejected} of {} backends ejected, cap {cap}",
                    backends.len()
                ),
            );
        }
        let serving = backends.iter().filter(|b| b.is_serving()).count();
        let left = backends
            .iter()
            .filter(|b| b.is_serving() && !b.is_ejected(&params, now))
            .count();
        if serving > 0 && left == 0 {
            self.fail(
                Invariant::OutlierCap,
                format!("request {req}: every one of {serving} serving backends ejected"),
            );
        }
    }

    /// Keep the world's own record of pushbacks (C-RETRY-11) from the ejections reported, and
    /// check each against `retry_after_max`.
    fn note_pushbacks(&mut self, req: usize, events: &[OutlierEvent]) {
        let snapshot = self.requests[req].snapshot;
        for e in events {
            let OutlierChange::Ejected {
                reason: EjectReason::RetryAfter,
                duration,
            } = e.change
            else {
                continue;
            };
            if duration > self.s.retry_after_max || duration.is_zero() {
                self.fail(
                    Invariant::PushedBackReached,
                    format!(
                        "request {req}: pushed back for {duration:?}, retry_after_max {:?}",
                        self.s.retry_after_max
                    ),
                );
            }
            if let Some(&t) = self.snapshots[snapshot].tracked.get(e.backend) {
                let until = self.now + duration;
                let t = &mut self.tracked[t];
                t.pushed_until = t.pushed_until.max(until);
            }
        }
    }

    fn check_backends(&mut self) {
        let now = self.now;
        let max = self.pool_params.max_concurrent_requests;
        let ss = self.pool_params.slow_start;
        for i in 0..self.tracked.len() {
            let t = &self.tracked[i];
            let in_flight = t.arc.in_flight();
            if in_flight > max || in_flight != t.slots {
                let detail = format!(
                    "backend {}: {in_flight} in flight (max {max}), slots held by requests {}",
                    t.arc.id(),
                    t.slots
                );
                self.fail(Invariant::BackendSlots, detail);
            }
            let t = &self.tracked[i];
            let state = t.arc.circuit_state(now);
            let eligible = t.arc.is_enabled() && !t.arc.is_draining() && t.arc.is_healthy();
            let (old_state, old_eligible, sim) = (t.state, t.eligible, t.sim as u32);
            if state != old_state {
                if state == CircuitState::Open {
                    self.stats.ejections += 1;
                }
                if state == CircuitState::Closed {
                    self.tracked[i].warm_since = now;
                }
                self.record(crate::trace::Rec::Circuit {
                    backend: sim,
                    state: state.as_str(),
                });
            }
            if eligible && !old_eligible {
                self.tracked[i].warm_since = now;
            }
            let t = &mut self.tracked[i];
            t.state = state;
            t.eligible = eligible;
            let core = t.arc.slow_start_permille(&ss, now);
            let expected = model::slow_start_permille(
                self.s.slow_start_window,
                self.s.slow_start_minimum_percent,
                t.warm_since,
                now,
            );
            if core != expected {
                let detail = format!(
                    "backend {}: slow-start share {core} permille, the formula gives {expected} \
                     (available since {:?})",
                    t.arc.id(),
                    t.warm_since
                );
                self.fail(Invariant::SlowStart, detail);
            }
        }
    }

    /// Checks at the moment an attempt is sent (its slot already reserved); returns how the
    /// slot was granted.
    pub(super) fn check_attempt(&mut self, req: usize, a: &Attempt, tracked: usize) -> Permit {
        let now = self.now;
        let (max_attempts, _) = self.generation_retry(self.requests[req].made.generation);
        if a.attempt > max_attempts {
            self.fail(
                Invariant::AttemptsExceedMax,
                format!(
                    "request {req}: attempt {} of max_attempts {max_attempts}",
                    a.attempt
                ),
            );
        }
        let tried = &self.requests[req].tried;
        if tried.contains(&a.backend) {
            self.fail(
                Invariant::RetryRevisits,
                format!(
                    "request {req}: attempt {} revisits backend index {} (tried {:?})",
                    a.attempt, a.backend, tried
                ),
            );
        }
        let arc = std::sync::Arc::clone(&self.tracked[tracked].arc);
        let state = arc.circuit_state(now);
        let pushed_until = self.tracked[tracked].pushed_until;
        if !a.panic && now < pushed_until {
            self.fail(
                Invariant::PushedBackReached,
                format!(
                    "request {req}: attempt {} sent to {}, pushed back until {pushed_until:?}",
                    a.attempt,
                    arc.id()
                ),
            );
        }
        if a.panic {
            self.stats.panic_selections += 1;
            // Panic routing only when nothing is available, and only on an open circuit.
            let snapshot = self.requests[req].snapshot;
            let pool = std::sync::Arc::clone(&self.snapshots[snapshot].pool);
            let params = *pool.params();
            // An ejected backend is open to panic routing like an open circuit (C-OUT-2).
            if arc.breaker().admits(&params.breaker, now) && !arc.is_ejected(&params, now) {
                self.fail(
                    Invariant::PanicRouting,
                    format!(
                        "request {req}: panic slot on {} whose circuit admits requests",
                        arc.id()
                    ),
                );
            }
            for (j, b) in pool.backends().iter().enumerate() {
                if j != a.backend
                    && !self.requests[req].tried.contains(&j)
                    && b.availability(&params, now) == Availability::Available
                {
                    self.fail(
                        Invariant::PanicRouting,
                        format!(
                            "request {req}: panic slot on {} while {} is available",
                            arc.id(),
                            b.id()
                        ),
                    );
                }
            }
            return Permit::Panic;
        }
        match state {
            CircuitState::Closed => Permit::Normal,
            CircuitState::HalfOpen => Permit::Trial,
            CircuitState::Open => {
                self.fail(
                    Invariant::CircuitOpenReached,
                    format!(
                        "request {req}: attempt {} sent to {} whose circuit is open (not a trial, \
                         not a panic selection)",
                        a.attempt,
                        arc.id()
                    ),
                );
                Permit::Normal
            }
        }
    }

    /// The breaker's answer to one recorded outcome (C-HEALTH-3, C-RETRY-8): on a closed circuit
    /// a failure counts and the `failure_threshold`-th in a row opens it, a success resets the
    /// count, a neutral outcome changes nothing. (Trials and half-open episodes are judged by
    /// liveness: a stale trial may legitimately change nothing.)
    pub(super) fn check_breaker(
        &mut self,
        req: usize,
        cur: Current,
        class: Outcome,
        before: (CircuitState, u32),
        after: (CircuitState, u32),
    ) {
        if before.0 != CircuitState::Closed || cur.permit == Permit::Trial {
            return;
        }
        let threshold = self.s.breaker_threshold;
        let expected = match class {
            Outcome::Failure if before.1 + 1 >= threshold => (CircuitState::Open, 0),
            Outcome::Failure => (CircuitState::Closed, before.1 + 1),
            Outcome::Success => (CircuitState::Closed, 0),
            Outcome::Neutral => before,
        };
        let matches = if expected.0 == CircuitState::Open {
            after.0 == CircuitState::Open
        } else {
            after == expected
        };
        if !matches {
            let id = self.tracked[cur.tracked].arc.id().to_owned();
            self.fail(
                Invariant::BreakerFollowsOutcomes,
                format!(
                    "request {req}: a {class:?} on {id} (closed, {} failures in a row, threshold \
                     {threshold}) left the circuit {:?} with {} failures; expected {:?}",
                    before.1, after.0, after.1, expected
                ),
            );
        }
    }

    /// A request was turned away (or a retry found nowhere to go): no healthy, enabled,
    /// unsaturated backend it had not tried may exist, whatever the circuits say (C-POOL-5).
    pub(super) fn check_never_emptied(&mut self, req: usize, why: &str) {
        let now = self.now;
        let snapshot = self.requests[req].snapshot;
        let pool = std::sync::Arc::clone(&self.snapshots[snapshot].pool);
        let max = pool.params().max_concurrent_requests;
        let tried = self.requests[req].tried.clone();
        let _ = now;
        for (j, b) in pool.backends().iter().enumerate() {
            if !tried.contains(&j)
                && b.is_enabled()
                && !b.is_draining()
                && b.is_healthy()
                && b.in_flight() < max
            {
                self.fail(
                    Invariant::PoolNeverEmptied,
                    format!(
                        "request {req} got no backend ({why}) while {} is healthy with a free slot \
                         (circuit {})",
                        b.id(),
                        b.circuit_state(now).as_str()
                    ),
                );
                return;
            }
        }
    }

    /// Before a first selection: whether it counts for the slow-start share measurement, and
    /// the watched backend's expected probability of being picked (C-HEALTH-4).
    pub(super) fn share_before(&self, snapshot: usize) -> Option<(usize, f64)> {
        let watch = self.s.checks.slow_start_watch?;
        let now = self.now;
        let snap = &self.snapshots[snapshot];
        let params = *snap.pool.params();
        let n = snap.pool.backends().len();
        let mut watched = None;
        for (j, &t) in snap.tracked.iter().enumerate() {
            let b = &self.tracked[t];
            if b.arc.availability(&params, now) != Availability::Available {
                return None;
            }
            if b.sim == watch {
                if b.arc.circuit_state(now) != CircuitState::Closed {
                    return None;
                }
                watched = Some((j, b.warm_since));
            } else if b.arc.slow_start_permille(&params.slow_start, now) < 1000 {
                return None; // another backend warming changes the odds
            }
        }
        let (index, since) = watched?;
        let share = model::slow_start_permille(
            self.s.slow_start_window,
            self.s.slow_start_minimum_percent,
            since,
            now,
        );
        if share >= 1000 {
            return None;
        }
        Some((index, f64::from(share) / 1000.0 / n as f64))
    }

    /// After that selection picked `chosen`.
    pub(super) fn share_after(&mut self, watch: Option<(usize, f64)>, chosen: usize) {
        if let Some((index, p)) = watch {
            self.share.samples += 1;
            self.share.expected += p;
            self.share.variance += p * (1.0 - p);
            self.share.observed += u64::from(chosen == index);
        }
    }

    /// The liveness deadline: every backend of every published pool is healthy again, no circuit
    /// is open, and none is half-open although a trial of it succeeded since the faults ended.
    pub(super) fn check_liveness(&mut self) {
        let now = self.now;
        for p in 0..self.pools.len() {
            let snapshot = self.pools[p].snapshot;
            for &t in &self.snapshots[snapshot].tracked.clone() {
                let b = &self.tracked[t];
                let state = b.arc.circuit_state(now);
                let stuck = if !b.arc.is_healthy() {
                    Some("still unhealthy")
                } else if state == CircuitState::Open {
                    Some("circuit still open")
                } else if state == CircuitState::HalfOpen && b.trial_successes > 0 {
                    Some("circuit still half-open after a successful trial")
                } else {
                    None
                };
                if let Some(why) = stuck {
                    let detail = format!(
                        "backend {}: {why} {} after the faults ended (bound {:?})",
                        b.arc.id(),
                        crate::report::Millis(weir_core::Instant::from_nanos(
                            now.as_nanos() - self.s.fault_end.as_nanos()
                        )),
                        self.s.liveness_bound()
                    );
                    self.fail(Invariant::Liveness, detail);
                    return;
                }
            }
        }
    }

    /// At the end: every request answered exactly once (or its client left), nothing held, and
    /// the watched backend's share within tolerance.
    pub(super) fn final_checks(&mut self) {
        for (i, r) in self.requests.iter().enumerate() {
            if !(r.responded || (r.abandoned && r.client_gone)) || !r.settled {
                let detail = format!(
                    "request {i} ({} {}) ended without a response (stage {:?}, client gone {})",
                    r.method, r.path, r.stage, r.client_gone
                );
                self.fail(Invariant::OneResponse, detail);
                return;
            }
        }
        let gate = self.services.gate();
        if gate.in_flight() != 0 || gate.queued() != 0 {
            let detail = format!(
                "the gate still holds {} slots and {} waiters at the end",
                gate.in_flight(),
                gate.queued()
            );
            self.fail(Invariant::GateSlots, detail);
        }
        let sh = &self.share;
        if sh.samples > 0 {
            let deviation = (sh.observed as f64 - sh.expected).abs();
            let tolerance = 5.0 * sh.variance.sqrt() + 2.0;
            if deviation > tolerance {
                let detail = format!(
                    "the ramping backend got {} of {} first attempts, the formula expects {:.1} \
                     (tolerance ±{:.1})",
                    sh.observed, sh.samples, sh.expected, tolerance
                );
                self.fail(Invariant::SlowStart, detail);
            }
        }
    }
}
