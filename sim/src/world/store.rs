//! The virtual shared rate-limit store (C-RATE-3..5): the world plays Redis for the engine's
//! `Output::StoreTake` and answers with `Input::StoreAnswer`, or does not answer (a hang, an
//! answer after `operation_timeout`), while the scenario's faults switch it between up, erroring,
//! hanging and slow. Its buckets are a `LocalStore` of their own (what the shared store holds),
//! checked against an independent model; the engine's `rate::StoreCircuit` (in the world's
//! `Services`) decides when a down store is tried again.
//!
//! Checks (`store_policy`): a store answer decides (storage `redis`, not degraded); a failed,
//! late or skipped call is decided by `failure_mode` (fail-open: allowed, degraded; fail-closed:
//! `503`; local-fallback: the local store decides, degraded, and its decisions equal the model's);
//! no call is skipped while the store is up; no call outlives `operation_timeout`; at most one
//! recovery trial is in flight, and the circuit says the same; the store is up again within
//! `retry_interval + operation_timeout + 2 s` after its last outage ends.

use core::time::Duration;

use weir_core::bucket::{BucketParams, Take};
use weir_core::exchange::{Input, Stage as XStage, StoreFailure};
use weir_core::rate::{FailureMode, StorageKind};

mod state;

pub(super) use state::{StoreReply, StoreView, VirtualStore, services};

use super::{Ev, World};
use crate::backend::uniform;
use crate::model::BucketModel;
use crate::report::Invariant;
use crate::scenario::StoreState;
use crate::trace::Rec;

/// Slack after the last outage for the circuit to be up again: a trial is due every
/// `retry_interval`, takes under `operation_timeout`, and traffic runs at ≥ 20 req/s.
const RECOVERY_SLACK: Duration = Duration::from_secs(2);

impl World<'_> {
    /// Schedule the store's faults and the recovery check.
    pub(super) fn start_store(&mut self) {
        let Some(store) = &self.store else {
            return;
        };
        let faults = store.setup.faults.clone();
        let check = store.setup.recovered_at()
            + self.services.circuit().retry_interval()
            + store.setup.operation_timeout
            + RECOVERY_SLACK;
        for (at, state) in faults {
            self.schedule(at, Ev::StoreFault { state });
        }
        self.schedule(check, Ev::StoreRecovered);
    }

    pub(super) fn store_fault(&mut self, state: StoreState) {
        if let Some(store) = self.store.as_mut() {
            store.state = state;
        }
        self.record(Rec::Store {
            state: state.as_str(),
        });
    }

    /// The exchange asks for a token from the shared store.
    pub(super) fn store_take(&mut self, req: usize) {
        let now = self.now;
        let Some(store) = self.store.as_mut() else {
            return self.fail(
                Invariant::RateBucket,
                format!("request {req}: a shared-store call, but the world's store is local"),
            );
        };
        let op = store.setup.operation_timeout;
        let state = store.state;
        let latency = store.setup.latency;
        store.waiting.insert(req);
        self.stats.store_calls += 1;
        let r = &mut self.requests[req];
        r.store.calls += 1;
        let x = r.x.as_ref();
        let trial =
            x.is_some_and(|x| matches!(x.stage(), XStage::Store { call, .. } if call.trial));
        let deadline = x.and_then(|x| x.poll_timeout());
        if deadline != Some(now + op) {
            self.fail(
                Invariant::StorePolicy,
                format!("request {req}: store call bounded by {deadline:?}, not now + {op:?}"),
            );
        }
        self.record(Rec::StoreCall {
            req: req as u64,
            trial,
        });
        let rng = &mut self.rng_backends;
        let (after, reply) = match state {
            StoreState::Up => (latency.0 + uniform(rng, latency.1), StoreReply::Answer),
            StoreState::Errors => (
                Duration::from_micros(100) + uniform(rng, Duration::from_millis(1)),
                StoreReply::Error,
            ),
            StoreState::Hang => return,
            StoreState::Slow => (
                op + Duration::from_millis(1) + uniform(rng, op),
                StoreReply::Late,
            ),
        };
        self.schedule(now + after, Ev::StoreReply { req, reply });
    }

    /// The store's answer (or error) arrives.
    pub(super) fn store_reply(&mut self, req: usize, reply: StoreReply) {
        let waiting = self
            .store
            .as_ref()
            .is_some_and(|s| s.waiting.contains(&req));
        let input = match reply {
            StoreReply::Error => Input::StoreAnswer(Err(StoreFailure::Error)),
            StoreReply::Answer | StoreReply::Late => {
                let take = self.remote_take(req);
                if reply == StoreReply::Late {
                    return;
                }
                self.requests[req].store.answered = Some(matches!(take, Take::Allowed { .. }));
                Input::StoreAnswer(Ok(take))
            }
        };
        if waiting {
            self.input(req, input);
        }
    }

    /// The shared store takes a token for the request's key, checked against the model
    /// (`rate_bucket`, C-RATE-1).
    fn remote_take(&mut self, req: usize) -> Take {
        let now = self.now;
        let key = self.requests[req].key;
        let bucket: BucketParams = self
            .bucket
            .unwrap_or_else(|| self.base.config().rate.bucket());
        let store = self.store.as_mut().expect("a store reply without a store");
        let take = store.buckets.take(key, &bucket, now);
        let entry = store.models.entry(key).or_insert_with(|| {
            (
                now,
                0,
                BucketModel::new(bucket.capacity(), bucket.interval()),
            )
        });
        let model_allows = entry.2.take(now);
        let allowed = matches!(take, Take::Allowed { .. });
        entry.1 += u64::from(allowed);
        let (first, grants, model) = *entry;
        let peek = store.buckets.peek(key, &bucket, now);
        if allowed != model_allows
            || grants > model.max_grants(first, now)
            || peek != model.tokens_milli(now)
        {
            self.fail(
                Invariant::RateBucket,
                format!(
                    "shared store, client {key}: allowed {allowed} (model {model_allows}), \
                     {grants} grants since {first:?}, {peek} milli-tokens (model {})",
                    model.tokens_milli(now)
                ),
            );
        }
        take
    }

    /// Keep the set of requests waiting on the store in step with the exchange.
    pub(super) fn track_store_wait(&mut self, req: usize) {
        let waits = self.requests[req]
            .x
            .as_ref()
            .is_some_and(|x| matches!(x.stage(), XStage::Store { .. }));
        if let Some(store) = self.store.as_mut()
            && !waits
        {
            store.waiting.remove(&req);
        }
    }

    /// After every event: no call past its deadline, at most one trial, as the circuit says.
    pub(super) fn check_store(&mut self) {
        let Some(store) = self.store.as_ref() else {
            return;
        };
        let now = self.now;
        let mut trials = 0;
        let mut late = None;
        for &req in &store.waiting {
            if let Some(XStage::Store { call, deadline }) =
                self.requests[req].x.as_ref().map(|x| x.stage())
            {
                trials += u32::from(call.trial);
                if now > deadline {
                    late = Some((req, deadline));
                }
            }
        }
        if let Some((req, deadline)) = late {
            self.fail(
                Invariant::StorePolicy,
                format!("request {req} still waits on the store past {deadline:?}"),
            );
        }
        let in_flight = self.services.circuit().trial_in_flight();
        if trials > 1 || (trials == 1) != in_flight {
            self.fail(
                Invariant::StorePolicy,
                format!("{trials} recovery trials in flight; the circuit says {in_flight}"),
            );
        }
    }

    /// The store recovered a while ago: the circuit is up again.
    pub(super) fn check_store_recovered(&mut self) {
        if !self.services.circuit().is_up() {
            let c = self.services.circuit().counters();
            self.fail(
                Invariant::StorePolicy,
                format!(
                    "the store is still down {RECOVERY_SLACK:?} after its recovery + \
                     retry_interval + operation_timeout ({} failures in a row)",
                    c.consecutive_failures
                ),
            );
        }
    }

    /// The request's rate decision under a shared store (C-RATE-5).
    pub(super) fn check_store_decision(
        &mut self,
        req: usize,
        outcome: Option<(bool, bool, StorageKind)>,
    ) {
        let Some(store) = self.store.as_ref() else {
            return;
        };
        let mode = store.setup.failure_mode;
        let v = self.requests[req].store;
        let fail = |w: &mut Self, what: String| {
            w.fail(Invariant::StorePolicy, format!("request {req}: {what}"));
        };
        if let Some(allowed) = v.answered {
            if outcome != Some((allowed, false, StorageKind::Redis)) {
                fail(
                    self,
                    format!("the store answered allowed={allowed}, the decision is {outcome:?}"),
                );
            }
            return;
        }
        self.stats.policy_decisions += 1;
        if v.calls == 0 && v.up_before {
            fail(
                self,
                "decided without calling the store while it was up".into(),
            );
        }
        match (mode, outcome) {
            (FailureMode::FailOpen, Some((true, true, _))) => {}
            (FailureMode::FailClosed, None) if v.refused => {}
            (FailureMode::LocalFallback, Some((allowed, true, StorageKind::Local))) => {
                self.check_rate(req, allowed);
            }
            _ => fail(
                self,
                format!(
                    "store failed under {}, but the decision is {outcome:?} (refused {})",
                    mode.as_str(),
                    v.refused
                ),
            ),
        }
    }
}
