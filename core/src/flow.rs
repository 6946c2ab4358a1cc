//! The per-request flow machine: one request's way from the route bulkhead to the response the
//! client gets, with every retry decision in between (C-RETRY-1..8, C-POOL-5, C-POOL-6, C-PATH-4,
//! C-PATH-9, C-LOAD-2, C-LOAD-3).
//!
//! The adapter runs the IO; the flow decides. The adapter feeds facts (a response head arrived,
//! the attempt failed, the header deadline passed, the body ended) and performs the [`Action`]
//! each fact returns. It takes no decision of its own: which backend, whether to retry, what the
//! client receives and which protection event to count are all answered here. The shape is
//! quinn-proto's and str0m's sans-IO engines: time and randomness are arguments, the only timer
//! leaves through [`Flow::poll_timeout`], and inputs and outputs are plain-data enums
//! ([`FlowEvent`], [`Action`]) so a run can be recorded, replayed and fuzzed ([`drive`]).
//!
//! ```text
//!  start ──bulkhead full / no backend──────────────────────────────► Reject ─┐
//!    │ reserve slot                                                           │
//!    ▼                                                                        │
//!  AwaitingHead ──head, retry allowed, slot reserved, token spent──► Retry ─┐ │
//!    ▲  │  │  │                                                            │ │
//!    └──┼──┼──┼────────────────────────────────────────────────────────────┘ │
//!       │  │  └─error/timeout, no retry────────────────────────────► Fail ───┤
//!       │  └─client gone───────────────────────────────────────────► Abandon ┤
//!       └─head, no retry─► Deliver ─► Streaming ──body end──────────────────►├─► Finished
//! ```
//!
//! Retry decision order (C-RETRY-1, C-RETRY-3), the same for a retryable status and for an error:
//! classify the attempt and record it on the slot for passive health (C-HEALTH-3, C-RETRY-8);
//! ask [`RetryPolicy::decide`] (client there, outcome retryable, method, replayable body,
//! attempts below `max_attempts`); then reserve another untried backend (C-RETRY-2) and only then
//! withdraw a budget token ([`reserve_then_spend`]). Without a retry the client gets the last
//! backend response as it was, or a synthetic `502`/`504` when there is none (C-RETRY-4).
//!
//! Passive health is recorded once per attempt, when its fate is known: at the response head (by
//! the status: a status in `retry.statuses` is a failure, any other a success), at a connect or
//! transport error or per-try timeout (failure), or at a client cancellation (neutral, C-PATH-9).
//! Nothing is recorded at the end of the body: a long SSE stream must not hold a half-open
//! circuit's decision, and a body that breaks after a success head does not count as a failure
//! (Envoy's outlier detection also judges by the response head). See docs/request-flow.md.
//!
//! Resources are RAII: the backend slot ([`Slot`]) and the route bulkhead permit
//! ([`BulkheadPermit`]) live inside the flow, are released when the flow reaches `Finished`
//! (C-POOL-6), and are released by `Drop` if the adapter drops the flow at any point (a panic, a
//! cancelled task). A flow holds at most one slot at a time.

mod events;

#[cfg(all(test, not(loom)))]
pub(crate) mod tests;

pub use events::{
    Action, Attempt, AttemptError, BodyEnd, Deliver, Failure, FlowEvent, FlowTarget, Phase,
    RequestMeta, valid_upstream_status,
};

use crate::breaker::Transition;
use crate::budget::RetryBudget;
use crate::bulkhead::{Bulkhead, BulkheadPermit};
use crate::outcome::{ProtectionReason, Reject};
use crate::outlier::{OutlierEvent, Verdict};
use crate::pool::{Backend, Pool, Slot, Tried};
use crate::retry::{
    AttemptClass, AttemptOutcome, BodyKind, NoRetryReason, RetryFacts, RetryPolicy, RetryVerdict,
    reserve_then_spend,
};
use crate::rng::Rng;
use crate::select::{NoBackend, PickContext, Selection};
use crate::sync::Arc;
use crate::time::Instant;

/// An attempt in progress (or whose response is being delivered).
#[derive(Debug)]
struct Current {
    slot: Slot,
    header_deadline: Instant,
    /// Its number, 1-based.
    attempt: u32,
    /// Its backend's index in the pool snapshot.
    backend: usize,
    /// When it was sent (its deadlines count from it).
    sent: Instant,
}

/// One attempt awaiting its response head, as the exchange sees it (C-HEDGE-1: up to two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    /// Its number, 1-based.
    pub attempt: u32,
    /// Its backend's index in the pool snapshot.
    pub backend: usize,
    /// When it was sent.
    pub sent: Instant,
    /// Its `per_try_timeout` deadline (C-RETRY-5).
    pub header_deadline: Instant,
}

impl Current {
    fn pending(&self) -> Pending {
        Pending {
            attempt: self.attempt,
            backend: self.backend,
            sent: self.sent,
            header_deadline: self.header_deadline,
        }
    }
}

/// An attempt the flow gave up while another went on (C-HEDGE-1): the adapter ends its IO
/// (HTTP/1: closes its connection; HTTP/2: resets its stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cancelled {
    /// The attempt.
    pub attempt: u32,
    /// Its backend's index in the pool snapshot.
    pub backend: usize,
    /// When it was sent.
    pub sent: Instant,
    /// It lost the race to the other attempt's head (its outcome is neutral: not a failure);
    /// `false` when its own failure ended it (already reported).
    pub lost: bool,
}

/// The per-request flow machine. See the module doc.
///
/// Kinds of methods:
/// - constructor: [`Flow::start`] (returns the first action);
/// - facts in, each returning the next [`Action`]: [`Flow::handle_response_head`],
///   [`Flow::handle_error`], [`Flow::handle_timeout`], [`Flow::handle_body_end`] (and
///   [`Flow::handle`], which dispatches a [`FlowEvent`]);
/// - timer out: [`Flow::poll_timeout`];
/// - getters: [`Flow::phase`], [`Flow::attempts`], [`Flow::backend`], [`Flow::backend_id`],
///   [`Flow::backend_url`], [`Flow::tried`], [`Flow::pool`].
///
/// Time that goes backwards is clamped to the latest `now` seen.
#[derive(Debug)]
pub struct Flow {
    pool: Arc<Pool>,
    policy: Arc<RetryPolicy>,
    budget: Arc<RetryBudget>,
    method: http::Method,
    body: BodyKind,
    ctx: PickContext,
    /// Held from start until the flow finishes (C-LOAD-2).
    permit: Option<BulkheadPermit>,
    /// The slot of the attempt in progress (the earlier of two) or of the response being
    /// delivered.
    current: Option<Current>,
    /// The hedge sent beside `current` while both await their heads (C-HEDGE-1).
    second: Option<Current>,
    /// When a hedge is due, while one may still be sent.
    hedge_at: Option<Instant>,
    /// A hedge was sent (one per request).
    hedged: bool,
    /// An attempt given up while the other went on, until taken.
    cancelled: Option<Cancelled>,
    /// Index of the backend of the latest attempt.
    backend: Option<usize>,
    tried: Tried,
    attempts: u32,
    phase: Phase,
    now: Instant,
    /// The breaker transition the latest recorded outcome caused, until taken (logs, metrics).
    transition: Option<(usize, Transition)>,
    /// The outlier ejections and returns this request's start judged (C-OUT-1), until taken.
    outliers: Option<Vec<OutlierEvent>>,
    /// The delivered head was judged good for outlier detection, so a failing gRPC status at
    /// the body's end may still count against its backend, once (C-OUT-1).
    late_judged: bool,
}

impl Flow {
    /// Start a request on `target`: take a bulkhead permit (C-LOAD-2), select a backend and
    /// reserve its slot (C-POOL-5, C-POOL-6). Returns the flow and its first action:
    /// [`Action::Attempt`], or [`Action::Reject`] (bulkhead full, or no backend with its typed
    /// reason), in which case the flow is already `Finished` and holds nothing.
    pub fn start(
        target: FlowTarget,
        policy: &Arc<RetryPolicy>,
        budget: &Arc<RetryBudget>,
        meta: RequestMeta,
        now: Instant,
        rng: &mut dyn Rng,
    ) -> (Flow, Action) {
        let mut slot = None;
        let action = Flow::start_in(&mut slot, target, policy, budget, meta, now, rng);
        let Some(flow) = slot else {
            unreachable!("start_in fills its slot")
        };
        (flow, action)
    }

    /// [`Flow::start`] made in `slot` (the exchange's) rather than returned, so that the flow is
    /// not copied on its way there; returns the first action.
    pub fn start_in(
        slot: &mut Option<Flow>,
        target: FlowTarget,
        policy: &Arc<RetryPolicy>,
        budget: &Arc<RetryBudget>,
        meta: RequestMeta,
        now: Instant,
        rng: &mut dyn Rng,
    ) -> Action {
        let FlowTarget { pool, bulkhead } = target;
        let RequestMeta { method, body, ctx } = meta;
        let flow = slot.insert(Flow {
            pool,
            policy: Arc::clone(policy),
            budget: Arc::clone(budget),
            method,
            body,
            ctx,
            permit: None,
            current: None,
            second: None,
            hedge_at: None,
            hedged: false,
            cancelled: None,
            backend: None,
            tried: Tried::new(),
            attempts: 0,
            phase: Phase::Finished,
            now,
            transition: None,
            outliers: None,
            late_judged: false,
        });
        if let Some(bulkhead) = &bulkhead {
            match Bulkhead::try_acquire(bulkhead) {
                Ok(permit) => flow.permit = Some(permit),
                Err(full) => return Action::Reject(Reject::BulkheadFull(full)),
            }
        }
        // The interval boundary is checked where requests start: no timer, the engine's clock.
        flow.outliers = flow.pool.judge_outliers(now);
        match flow.pool.select(&flow.ctx, &flow.tried, now, rng) {
            Selection::Selected { index, slot } => Action::Attempt(flow.begin(index, slot, now)),
            Selection::Unavailable(why) => {
                flow.finish();
                Action::Reject(Reject::NoBackend(why))
            }
        }
    }

    /// A response head with `status` arrived for the current attempt. Records passive health by
    /// the status (C-HEALTH-3), then retries on another backend when C-RETRY-1 allows it
    /// ([`Action::Retry`]) or delivers this response as it was ([`Action::Deliver`], C-RETRY-4).
    /// A status outside 100..=599 is no response at all: it is handled as
    /// [`AttemptError::InvalidResponse`] ([`valid_upstream_status`]; the adapter drops the
    /// response and its connection unread). Ignored ([`Action::Nothing`]) unless awaiting a head.
    pub fn handle_response_head(&mut self, status: u16, now: Instant, rng: &mut dyn Rng) -> Action {
        let attempt = self.primary();
        self.handle_response_head_of(attempt, status, now, rng)
    }

    /// [`Flow::handle_response_head`] for attempt `attempt`, which may be one of two in flight
    /// (C-HEDGE-1). While the other is out, a head whose status is in `retry.statuses` ends
    /// only this attempt (recorded as the failure it is, its connection given up: [`Cancelled`]
    /// with `lost: false`) and the request waits for the other; any other head wins: the other
    /// attempt is cancelled, neutral for its backend's health ([`Flow::take_cancelled`]), and
    /// this head is delivered.
    pub fn handle_response_head_of(
        &mut self,
        attempt: u32,
        status: u16,
        now: Instant,
        rng: &mut dyn Rng,
    ) -> Action {
        if !valid_upstream_status(status) {
            return self.handle_error_of(attempt, AttemptError::InvalidResponse, now, rng);
        }
        let now = self.clamp(now);
        if self.phase != Phase::AwaitingHead || self.leg(attempt).is_none() {
            return Action::Nothing;
        }
        let outcome = AttemptOutcome::Status(status);
        self.record(attempt, outcome, now);
        if self.second.is_some() {
            if self.policy.classify(outcome) == AttemptClass::Failure {
                self.give_up(attempt, false);
                return Action::Nothing;
            }
            let other = self.other(attempt);
            let lost = if mutated!(HEDGE_LOSER_FAILS) {
                AttemptOutcome::Transport
            } else {
                AttemptOutcome::ClientGone
            };
            self.record(other, lost, now);
            self.give_up(other, true);
        }
        self.hedge_at = None;
        let stopped = match self.try_retry(outcome, now, rng) {
            Ok(attempt) => return Action::Retry(attempt),
            Err(stopped) => stopped,
        };
        self.phase = Phase::Streaming;
        // A trailers-only `UNAVAILABLE` came as the `503` it stands for: already a failure.
        self.late_judged = Verdict::of_status(status) == Verdict::Good;
        if let Some(current) = &mut self.current {
            // The header deadline no longer applies: a started body is never cut (C-RETRY-5).
            current.header_deadline = Instant::MAX;
        }
        Action::Deliver(Deliver {
            backend: self.backend.unwrap_or(0), // always Some while awaiting a head
            attempt,
            status,
            budget_exhausted: stopped.budget_exhausted(),
            protection: stopped.protection,
        })
    }

    /// The current attempt failed before a response head. Records passive health (a failure, or
    /// neutral for a client that went away: C-RETRY-8, C-PATH-9), then retries when C-RETRY-1
    /// allows it, or fails with `502`/`504` (`503` for a saturated backend) (C-RETRY-4), or abandons the request when the client
    /// is gone. Ignored unless awaiting a head.
    pub fn handle_error(&mut self, error: AttemptError, now: Instant, rng: &mut dyn Rng) -> Action {
        let attempt = self.primary();
        self.handle_error_of(attempt, error, now, rng)
    }

    /// [`Flow::handle_error`] for attempt `attempt`, which may be one of two in flight
    /// (C-HEDGE-1): while the other is out, the failure ends only this attempt (recorded,
    /// given up: [`Cancelled`] with `lost: false`) and the request waits for the other. A client
    /// that went away ends both, neutral for both backends.
    pub fn handle_error_of(
        &mut self,
        attempt: u32,
        error: AttemptError,
        now: Instant,
        rng: &mut dyn Rng,
    ) -> Action {
        let now = self.clamp(now);
        if self.phase != Phase::AwaitingHead || self.leg(attempt).is_none() {
            return Action::Nothing;
        }
        let outcome = error.outcome();
        if error == AttemptError::ClientGone {
            for leg in [self.primary(), self.other(attempt)] {
                self.record(leg, outcome, now);
            }
            self.finish();
            return Action::Abandon;
        }
        self.record(attempt, outcome, now);
        if error == AttemptError::PerTryTimeout && mutated!(FLOW_TIMEOUT_ABANDONS) {
            self.finish();
            return Action::Abandon;
        }
        if self.second.is_some() {
            self.give_up(attempt, false);
            return Action::Nothing;
        }
        self.hedge_at = None;
        let stopped = match self.try_retry(outcome, now, rng) {
            Ok(attempt) => return Action::Retry(attempt),
            Err(stopped) => stopped,
        };
        let backend = self.backend.unwrap_or(0); // always Some while awaiting a head
        self.finish();
        Action::Fail(Failure {
            status: match crate::retry::no_retry_response(outcome) {
                crate::retry::NoRetryResponse::Synthetic(status) => status,
                _ => 502,
            },
            cause: error,
            no_retry: stopped.reason,
            backend,
            attempts: self.attempts,
            budget_exhausted: stopped.budget_exhausted(),
            protection: stopped.protection,
        })
    }

    /// The earliest header deadline of the attempts awaiting their heads, and the hedge's time
    /// when one is due (C-RETRY-5: it bounds the wait for response headers only, so there is
    /// none while a body streams; C-HEDGE-1).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.phase != Phase::AwaitingHead {
            return None;
        }
        self.pending()
            .map(|p| p.header_deadline)
            .chain(self.hedge_at)
            .min()
    }

    /// Time passed: an attempt whose header deadline came is
    /// `handle_error_of(attempt, AttemptError::PerTryTimeout)`; else, when the hedge is due,
    /// [`Flow::hedge`]; earlier (or with no deadline) it is a no-op.
    pub fn handle_timeout(&mut self, now: Instant, rng: &mut dyn Rng) -> Action {
        let now = self.clamp(now);
        if self.phase != Phase::AwaitingHead {
            return Action::Nothing;
        }
        let due = self.pending().find(|p| now >= p.header_deadline);
        if let Some(p) = due {
            return self.handle_error_of(p.attempt, AttemptError::PerTryTimeout, now, rng);
        }
        self.hedge(now, rng)
    }

    /// The attempts awaiting their response heads: none, one, or two while a hedge is out
    /// (C-HEDGE-1), the earlier first.
    pub fn pending(&self) -> impl Iterator<Item = Pending> + '_ {
        let awaiting = self.phase == Phase::AwaitingHead;
        self.current
            .iter()
            .chain(self.second.iter())
            .filter(move |_| awaiting)
            .map(Current::pending)
    }

    /// When the hedge is due, if one may still be sent (C-HEDGE-1).
    #[must_use]
    pub fn hedge_at(&self) -> Option<Instant> {
        self.hedge_at.filter(|_| self.phase == Phase::AwaitingHead)
    }

    /// The hedge (C-HEDGE-1), at or after [`Flow::hedge_at`]: one attempt is awaiting its head
    /// and it had none after `hedge_delay`, so one more attempt goes out beside it on another
    /// backend ([`Action::Hedge`]) when `max_attempts` allows one more, another backend is
    /// available (chosen by the pool's policy among the untried) and the retry budget gives a
    /// token, in that order ([`reserve_then_spend`]). Otherwise the first attempt goes on alone
    /// and no hedge is tried again. Earlier, or when no hedge is armed, a no-op.
    pub fn hedge(&mut self, now: Instant, rng: &mut dyn Rng) -> Action {
        let now = self.clamp(now);
        match self.hedge_at() {
            Some(at) if now >= at => {}
            _ => return Action::Nothing,
        }
        self.hedge_at = None;
        if self.second.is_some() || self.current.is_none() {
            return Action::Nothing;
        }
        if self.attempts >= self.policy.max_attempts() && !mutated!(HEDGE_BEYOND_MAX_ATTEMPTS) {
            return Action::Nothing;
        }
        let (pool, ctx, tried) = (&self.pool, &self.ctx, &self.tried);
        let mut select = || match pool.select(ctx, tried, now, rng) {
            Selection::Selected { index, slot } => Some((index, slot)),
            Selection::Unavailable(_) => None,
        };
        let reserved = if mutated!(HEDGE_SKIPS_BUDGET) {
            select().ok_or(NoRetryReason::NoOtherBackend)
        } else {
            reserve_then_spend(&self.budget, now, select, |(_, slot): (usize, Slot)| {
                slot.cancel();
            })
        };
        let Ok((index, slot)) = reserved else {
            return Action::Nothing;
        };
        self.hedged = true;
        let attempt = self.make(index, slot, now);
        let hedge = Attempt {
            backend: attempt.backend,
            attempt: attempt.attempt,
            header_deadline: attempt.header_deadline,
            panic: attempt.slot.is_panic(),
            at: now,
        };
        self.second = Some(attempt);
        Action::Hedge(hedge)
    }

    /// The attempt the flow gave up while another went on (C-HEDGE-1), once: the adapter ends
    /// its IO, and counts it cancelled when it lost the race.
    pub fn take_cancelled(&mut self) -> Option<Cancelled> {
        self.cancelled.take()
    }

    /// The delivered response's body ended (or the upgraded connection closed, C-PATH-8): release
    /// the slot (C-POOL-6) and the bulkhead permit. Passive health was recorded at the head and is
    /// not changed here, whatever `end` says. Ignored unless streaming.
    pub fn handle_body_end(&mut self, end: BodyEnd, now: Instant) -> Action {
        self.clamp(now);
        let _ = end; // the end is a fact for logs; health was settled at the head
        if self.phase == Phase::Streaming {
            self.finish();
        }
        Action::Nothing
    }

    /// The delivered response's gRPC status `code` (C-OUT-1), as the adapter saw it when the
    /// body ended: in the trailers after the body, or in a trailers-only head. A failing one
    /// ([`Verdict::of_grpc_status`]) counts against the backend for outlier detection, once,
    /// unless its head already did (a trailers-only `UNAVAILABLE`, judged as a `503`). Retries
    /// and the breaker keep the head's judgment: the answer already went to the client.
    pub fn handle_grpc_status(&mut self, code: u8) {
        if self.phase != Phase::Streaming || !self.late_judged {
            return;
        }
        self.late_judged = false;
        if Verdict::of_grpc_status(code) == Verdict::Failed
            && let Some(current) = &self.current
        {
            current.slot.record_late_failure(self.pool.params());
        }
    }

    /// Dispatch one plain-data event to its `handle_*` method.
    pub fn handle(&mut self, event: FlowEvent, now: Instant, rng: &mut dyn Rng) -> Action {
        match event {
            FlowEvent::ResponseHead(status) => self.handle_response_head(status, now, rng),
            FlowEvent::Error(error) => self.handle_error(error, now, rng),
            FlowEvent::Timeout => self.handle_timeout(now, rng),
            FlowEvent::BodyEnd(end) => self.handle_body_end(end, now),
        }
    }

    /// Where the flow is.
    #[must_use]
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Attempts sent so far.
    #[must_use]
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The backend of the latest attempt (the one whose response is delivered, or whose failure
    /// ended the flow), if any attempt was made.
    #[must_use]
    pub fn backend(&self) -> Option<&Arc<Backend>> {
        self.backend.and_then(|i| self.pool.backends().get(i))
    }

    /// Its id: `X-Balancer-Backend`, `X-Balancer-Backend-Attempt` and the access log.
    #[must_use]
    pub fn backend_id(&self) -> Option<&str> {
        self.backend().map(|b| b.id())
    }

    /// Its base URL, for building the upstream request.
    #[must_use]
    pub fn backend_url(&self) -> Option<&str> {
        self.backend().map(|b| b.url())
    }

    /// The backends tried so far (C-RETRY-2).
    #[must_use]
    pub fn tried(&self) -> &Tried {
        &self.tried
    }

    /// The pool snapshot this request runs on.
    #[must_use]
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    fn clamp(&mut self, now: Instant) -> Instant {
        self.now = self.now.max(now);
        self.now
    }

    /// Take `slot` on backend `index` as the next attempt, to be sent at `at`.
    fn begin(&mut self, index: usize, slot: Slot, at: Instant) -> Attempt {
        let current = self.make(index, slot, at);
        let attempt = Attempt {
            backend: index,
            attempt: current.attempt,
            header_deadline: current.header_deadline,
            panic: current.slot.is_panic(),
            at,
        };
        // Replacing the previous attempt drops its slot: released as the flow moves on.
        self.current = Some(current);
        self.phase = Phase::AwaitingHead;
        // C-HEDGE-1: one hedge per request, armed while it has not been sent.
        self.hedge_at = match self.policy.hedge_delay() {
            Some(delay)
                if !self.hedged
                    && (self.policy.may_hedge(self.method.as_str(), self.body)
                        || mutated!(HEDGE_ANY_METHOD)) =>
            {
                Some(at.saturating_add(delay))
            }
            _ => None,
        };
        attempt
    }

    /// The next attempt on backend `index` with `slot`, sent at `at`.
    fn make(&mut self, index: usize, slot: Slot, at: Instant) -> Current {
        // At most `max_attempts` (<= 5) distinct indices: the set (8) never fills.
        let _ = self.tried.insert(index);
        self.attempts += 1;
        self.backend = Some(index);
        Current {
            slot,
            header_deadline: self.policy.header_deadline(at),
            attempt: self.attempts,
            backend: index,
            sent: at,
        }
    }

    /// The attempt awaiting its head (the earlier of two), 0 when there is none.
    fn primary(&self) -> u32 {
        self.current.as_ref().map_or(0, |c| c.attempt)
    }

    /// The in-flight attempt other than `attempt` (itself when it is alone).
    fn other(&self, attempt: u32) -> u32 {
        match (&self.current, &self.second) {
            (Some(c), Some(s)) if c.attempt == attempt => s.attempt,
            (Some(c), Some(_)) => c.attempt,
            _ => attempt,
        }
    }

    fn leg(&self, attempt: u32) -> Option<&Current> {
        self.current
            .iter()
            .chain(self.second.iter())
            .find(|c| c.attempt == attempt)
    }

    /// Drop attempt `attempt` (one of two in flight): its slot is released, the other attempt
    /// is the current one; `lost`: it lost the race ([`Cancelled`]).
    fn give_up(&mut self, attempt: u32, lost: bool) {
        let gone = if self.second.as_ref().is_some_and(|s| s.attempt == attempt) {
            self.second.take()
        } else if self.current.as_ref().is_some_and(|c| c.attempt == attempt) {
            core::mem::replace(&mut self.current, self.second.take())
        } else {
            None
        };
        let Some(gone) = gone else {
            return;
        };
        self.backend = self.current.as_ref().map(|c| c.backend);
        self.cancelled = Some(Cancelled {
            attempt: gone.attempt,
            backend: gone.backend,
            sent: gone.sent,
            lost,
        });
    }

    /// Record attempt `attempt`'s outcome for passive health (once per slot).
    fn record(&mut self, attempt: u32, outcome: AttemptOutcome, now: Instant) {
        let class: AttemptClass = self.policy.classify(outcome);
        let verdict = match outcome {
            AttemptOutcome::Status(status) => Verdict::of_status(status),
            AttemptOutcome::ClientGone | AttemptOutcome::Saturated => Verdict::Ignored,
            AttemptOutcome::Connect
            | AttemptOutcome::Refused
            | AttemptOutcome::Transport
            | AttemptOutcome::PerTryTimeout => Verdict::Failed,
        };
        let params = self.pool.params();
        if let Some(current) = self
            .current
            .iter_mut()
            .chain(self.second.iter_mut())
            .find(|c| c.attempt == attempt)
        {
            current
                .slot
                .record_load(crate::adaptive::Signal::of(outcome), params, now);
            if let Some(t) = current.slot.record_attempt(class, verdict, params, now) {
                let b = current.backend;
                self.transition = Some((b, t));
            }
        }
    }

    /// The circuit transition (C-HEALTH-3) the latest outcome caused, with its backend's
    /// index, once: for the adapter's log line and transition counter.
    pub fn take_transition(&mut self) -> Option<(usize, Transition)> {
        self.transition.take()
    }

    /// The outlier ejections and returns (C-OUT-2) judged when this request started, once: for
    /// the adapter's events and metrics.
    pub fn take_outlier_events(&mut self) -> Option<Vec<OutlierEvent>> {
        self.outliers.take()
    }

    /// The C-RETRY-1 predicate, then reserve-then-spend (C-RETRY-3). On success the next attempt
    /// has begun; otherwise why not.
    fn try_retry(
        &mut self,
        outcome: AttemptOutcome,
        now: Instant,
        rng: &mut dyn Rng,
    ) -> Result<Attempt, Stopped> {
        let facts = RetryFacts {
            method: self.method.as_str(),
            outcome,
            body: self.body,
            attempts: self.attempts,
            client_present: true,
        };
        if let RetryVerdict::NoRetry(reason) = self.policy.decide(&facts) {
            return Err(Stopped::new(reason, None));
        }
        let mut unavailable: Option<NoBackend> = None;
        let (pool, ctx, tried) = (&self.pool, &self.ctx, &self.tried);
        let reserved = reserve_then_spend(
            &self.budget,
            now,
            || match pool.select(ctx, tried, now, rng) {
                Selection::Selected { index, slot } => Some((index, slot)),
                Selection::Unavailable(why) => {
                    unavailable = Some(why);
                    None
                }
            },
            |(_, slot): (usize, Slot)| slot.cancel(),
        );
        match reserved {
            Ok((index, slot)) => {
                // C-RETRY-10: a full-jitter wait before retry k (k = attempts so far), drawn
                // after the reservation (a retry that cannot happen waits for nothing), and
                // none before an attempt of which nothing was sent (C-RETRY-9): it never
                // reached the backend, so it asked nothing of it.
                let delay = if outcome.nothing_sent() {
                    core::time::Duration::ZERO
                } else {
                    self.policy.backoff(self.attempts, rng)
                };
                Ok(self.begin(index, slot, now.saturating_add(delay)))
            }
            Err(reason) => Err(Stopped::new(reason, unavailable)),
        }
    }

    /// Release everything and end.
    fn finish(&mut self) {
        self.current = None;
        self.second = None;
        self.hedge_at = None;
        self.permit = None;
        self.phase = Phase::Finished;
    }
}

/// Why a retry did not happen, with the protection event it counts.
#[derive(Debug, Clone, Copy)]
struct Stopped {
    reason: NoRetryReason,
    protection: Option<ProtectionReason>,
}

impl Stopped {
    fn new(reason: NoRetryReason, unavailable: Option<NoBackend>) -> Stopped {
        let protection = match (reason, unavailable) {
            (NoRetryReason::BudgetExhausted, _) => Some(ProtectionReason::RetryBudgetExhausted),
            (
                NoRetryReason::NoOtherBackend,
                Some(NoBackend::AllSaturated | NoBackend::AdaptiveLimit),
            ) => Some(ProtectionReason::BackendSaturated),
            _ => None,
        };
        Stopped { reason, protection }
    }

    fn budget_exhausted(self) -> bool {
        self.reason == NoRetryReason::BudgetExhausted
    }
}

/// Feed `events` (each with its `now`) to `flow` in order and collect the action each returned:
/// the replay and fuzzing entry point (the first action is [`Flow::start`]'s).
pub fn drive(flow: &mut Flow, events: &[(Instant, FlowEvent)], rng: &mut dyn Rng) -> Vec<Action> {
    events
        .iter()
        .map(|&(now, event)| flow.handle(event, now, rng))
        .collect()
}
