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

#[cfg(all(test, not(loom)))]
pub(crate) mod tests;

use crate::breaker::Transition;
use crate::budget::RetryBudget;
use crate::bulkhead::{Bulkhead, BulkheadPermit};
use crate::outcome::{ProtectionReason, Reject};
use crate::pool::{Backend, Pool, Slot, Tried};
use crate::retry::{
    AttemptClass, AttemptOutcome, BodyKind, NoRetryReason, RetryFacts, RetryPolicy, RetryVerdict,
    reserve_then_spend,
};
use crate::rng::Rng;
use crate::select::{NoBackend, PickContext, Selection};
use crate::sync::Arc;
use crate::time::Instant;

/// Where a request goes: the pool snapshot its route maps to (kept for all its attempts, so
/// backend indices stay valid across a reload) and the route's bulkhead, if the route has one.
#[derive(Debug, Clone)]
pub struct FlowTarget {
    /// The pool snapshot of the matched route (C-ROUTE-1).
    pub pool: Arc<Pool>,
    /// The route's bulkhead (C-LOAD-2); `None` when the route sets no limit and nobody counts.
    pub bulkhead: Option<Arc<Bulkhead>>,
}

/// What the flow needs to know about the request itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestMeta {
    /// The request method (checked against `retry.methods`, C-RETRY-1).
    pub method: http::Method,
    /// The request body as far as replaying it is concerned (C-RETRY-1).
    pub body: BodyKind,
    /// The worker and affinity hash handed to the selection policy.
    pub ctx: PickContext,
}

/// How an attempt failed before a response head arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttemptError {
    /// The connection could not be established (refused, dial timeout, TLS handshake).
    Connect,
    /// The connection broke after it was established, before response headers.
    Transport,
    /// No response headers within `per_try_timeout` (C-RETRY-5).
    PerTryTimeout,
    /// The client went away; the attempt is cancelled (C-PATH-9).
    ClientGone,
    /// The backend's response head was unusable: a status outside 100..=599
    /// ([`valid_upstream_status`]). A failure of the backend like a broken connection.
    InvalidResponse,
}

impl AttemptError {
    /// Every kind, for generators and tables.
    pub const ALL: [AttemptError; 5] = [
        AttemptError::Connect,
        AttemptError::Transport,
        AttemptError::PerTryTimeout,
        AttemptError::ClientGone,
        AttemptError::InvalidResponse,
    ];

    /// The same fact in the retry policy's terms.
    #[must_use]
    pub const fn outcome(self) -> AttemptOutcome {
        match self {
            AttemptError::Connect => AttemptOutcome::Connect,
            // An unusable response is a protocol failure of the backend: retried and counted
            // against it exactly as a connection that broke before a response (C-RETRY-1,
            // C-HEALTH-3).
            AttemptError::Transport | AttemptError::InvalidResponse => AttemptOutcome::Transport,
            AttemptError::PerTryTimeout => AttemptOutcome::PerTryTimeout,
            AttemptError::ClientGone => AttemptOutcome::ClientGone,
        }
    }

    /// A stable snake_case label for logs.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            AttemptError::Connect => "connect",
            AttemptError::Transport => "transport",
            AttemptError::PerTryTimeout => "per_try_timeout",
            AttemptError::ClientGone => "client_gone",
            AttemptError::InvalidResponse => "invalid_response",
        }
    }
}

/// Whether a backend's response status may be passed on: 100..=599, the five classes RFC 9110
/// §15 defines. hyper's HTTP/1 client reads any three digits (it keeps 100..=999), so a backend
/// that answers `HTTP/1.1 999 Odd` or `600` reaches the flow with that status; such a response
/// means nothing a client or a cache can act on, and nginx answers it with `502` ("upstream sent
/// invalid status"). [`Flow::handle_response_head`] turns it into
/// [`AttemptError::InvalidResponse`]: `502` (or a retry) and a passive failure of the backend.
#[must_use]
pub const fn valid_upstream_status(status: u16) -> bool {
    matches!(status, 100..=599)
}

/// How a delivered response's body (or upgraded connection, C-PATH-8) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BodyEnd {
    /// The body was passed on completely (or the upgraded connection closed normally).
    Complete,
    /// The backend's body broke off (reset, EOF inside a chunk, write timeout).
    Error,
    /// The client went away while the body was streaming.
    ClientGone,
}

/// Send one attempt upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// The backend's index in the flow's pool snapshot ([`Flow::backend`] gives id and url).
    pub backend: usize,
    /// The attempt number, 1-based (`X-Balancer-Attempts` if this attempt's response is delivered).
    pub attempt: u32,
    /// The wait for response headers ends here (`per_try_timeout` after sending, C-RETRY-5); the
    /// flow reports it through [`Flow::poll_timeout`] too.
    pub header_deadline: Instant,
    /// The slot was granted by panic routing (every eligible circuit open; see `select.rs`).
    pub panic: bool,
}

/// Pass the current backend response to the client as it was (C-RETRY-4), with the C-PATH-4
/// headers (`response::delivered_headers`). The slot stays held until [`Flow::handle_body_end`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deliver {
    /// The index of the backend that produced the response.
    pub backend: usize,
    /// The attempt that produced it (`X-Balancer-Attempts`).
    pub attempt: u32,
    /// Its status.
    pub status: u16,
    /// The retry budget stopped a retry: add `X-Balancer-Retry-Budget: exhausted` (C-PATH-4).
    pub budget_exhausted: bool,
    /// The protection event this outcome counts, if any (C-LOAD-3).
    pub protection: Option<ProtectionReason>,
}

/// The last attempt failed without a response and no retry follows: answer with a synthetic
/// `502` (connect or transport error) or `504` (per-try timeout), C-RETRY-4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failure {
    /// `502` or `504`.
    pub status: u16,
    /// What went wrong with the last attempt (never [`AttemptError::ClientGone`]).
    pub cause: AttemptError,
    /// Why no further attempt was made.
    pub no_retry: NoRetryReason,
    /// The index of the backend of the last attempt (for logs, not for `X-Balancer-Backend`: no
    /// backend produced this response).
    pub backend: usize,
    /// Attempts made (`X-Balancer-Attempts`).
    pub attempts: u32,
    /// The retry budget stopped a retry: add `X-Balancer-Retry-Budget: exhausted`.
    pub budget_exhausted: bool,
    /// The protection event this outcome counts, if any (C-LOAD-3).
    pub protection: Option<ProtectionReason>,
}

/// What the adapter does next. `Deliver`, `Fail`, `Reject` and `Abandon` are final: exactly one
/// of them ends every flow that runs to completion, and nothing but `Nothing` follows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    /// Send the first attempt.
    Attempt(Attempt),
    /// Close the current attempt's connection without reading its body (C-RETRY-6) and send this
    /// attempt instead. The previous slot is already released.
    Retry(Attempt),
    /// Pass the response on; call [`Flow::handle_body_end`] when its body ends.
    Deliver(Deliver),
    /// Answer with a synthetic error (`response::SyntheticResponse::failure`). Everything is
    /// released.
    Fail(Failure),
    /// Turn the request away before any attempt (`response::SyntheticResponse::reject`).
    Reject(Reject),
    /// The client is gone: answer nobody, drop the attempt (C-PATH-9). Everything is released.
    Abandon,
    /// Nothing to do: an early timeout, or an event that does not apply in the current phase
    /// (ignored, with no effect).
    Nothing,
}

impl Action {
    /// Whether this action ends the request's decision (Deliver, Fail, Reject, Abandon).
    #[must_use]
    pub const fn is_final(&self) -> bool {
        matches!(
            self,
            Action::Deliver(_) | Action::Fail(_) | Action::Reject(_) | Action::Abandon
        )
    }

    /// The protection event to count for this action (C-LOAD-3). Each action is returned once, so
    /// counting every action's reason counts every event exactly once.
    #[must_use]
    pub fn protection_reason(&self) -> Option<ProtectionReason> {
        match self {
            Action::Deliver(d) => d.protection,
            Action::Fail(f) => f.protection,
            Action::Reject(r) => r.protection_reason(),
            Action::Attempt(_) | Action::Retry(_) | Action::Abandon | Action::Nothing => None,
        }
    }
}

/// Where a flow is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// An attempt is out; waiting for its response head (the header deadline is armed).
    AwaitingHead,
    /// A response was delivered; its body is streaming and the slot is held (C-POOL-6).
    Streaming,
    /// Done: nothing is held.
    Finished,
}

/// One input of a flow, as plain data (for [`Flow::handle`], recording, replay and fuzzing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlowEvent {
    /// [`Flow::handle_response_head`].
    ResponseHead(u16),
    /// [`Flow::handle_error`].
    Error(AttemptError),
    /// [`Flow::handle_timeout`].
    Timeout,
    /// [`Flow::handle_body_end`].
    BodyEnd(BodyEnd),
}

/// The attempt in progress.
#[derive(Debug)]
struct Current {
    slot: Slot,
    header_deadline: Instant,
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
    /// The slot of the attempt in progress or of the response being delivered.
    current: Option<Current>,
    /// Index of the backend of the latest attempt.
    backend: Option<usize>,
    tried: Tried,
    attempts: u32,
    phase: Phase,
    now: Instant,
    /// The breaker transition the latest recorded outcome caused, until taken (logs, metrics).
    transition: Option<(usize, Transition)>,
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
        let FlowTarget { pool, bulkhead } = target;
        let RequestMeta { method, body, ctx } = meta;
        let mut flow = Flow {
            pool,
            policy: Arc::clone(policy),
            budget: Arc::clone(budget),
            method,
            body,
            ctx,
            permit: None,
            current: None,
            backend: None,
            tried: Tried::new(),
            attempts: 0,
            phase: Phase::Finished,
            now,
            transition: None,
        };
        if let Some(bulkhead) = &bulkhead {
            match Bulkhead::try_acquire(bulkhead) {
                Ok(permit) => flow.permit = Some(permit),
                Err(full) => return (flow, Action::Reject(Reject::BulkheadFull(full))),
            }
        }
        let action = match flow.pool.select(&flow.ctx, &flow.tried, now, rng) {
            Selection::Selected { index, slot } => Action::Attempt(flow.begin(index, slot, now)),
            Selection::Unavailable(why) => {
                flow.finish();
                Action::Reject(Reject::NoBackend(why))
            }
        };
        (flow, action)
    }

    /// A response head with `status` arrived for the current attempt. Records passive health by
    /// the status (C-HEALTH-3), then retries on another backend when C-RETRY-1 allows it
    /// ([`Action::Retry`]) or delivers this response as it was ([`Action::Deliver`], C-RETRY-4).
    /// A status outside 100..=599 is no response at all: it is handled as
    /// [`AttemptError::InvalidResponse`] ([`valid_upstream_status`]; the adapter drops the
    /// response and its connection unread). Ignored ([`Action::Nothing`]) unless awaiting a head.
    pub fn handle_response_head(&mut self, status: u16, now: Instant, rng: &mut dyn Rng) -> Action {
        if !valid_upstream_status(status) {
            return self.handle_error(AttemptError::InvalidResponse, now, rng);
        }
        let now = self.clamp(now);
        if self.phase != Phase::AwaitingHead {
            return Action::Nothing;
        }
        let outcome = AttemptOutcome::Status(status);
        self.record(outcome, now);
        let stopped = match self.try_retry(outcome, now, rng) {
            Ok(attempt) => return Action::Retry(attempt),
            Err(stopped) => stopped,
        };
        self.phase = Phase::Streaming;
        if let Some(current) = &mut self.current {
            // The header deadline no longer applies: a started body is never cut (C-RETRY-5).
            current.header_deadline = Instant::MAX;
        }
        Action::Deliver(Deliver {
            backend: self.backend.unwrap_or(0), // always Some while awaiting a head
            attempt: self.attempts,
            status,
            budget_exhausted: stopped.budget_exhausted(),
            protection: stopped.protection,
        })
    }

    /// The current attempt failed before a response head. Records passive health (a failure, or
    /// neutral for a client that went away: C-RETRY-8, C-PATH-9), then retries when C-RETRY-1
    /// allows it, or fails with `502`/`504` (C-RETRY-4), or abandons the request when the client
    /// is gone. Ignored unless awaiting a head.
    pub fn handle_error(&mut self, error: AttemptError, now: Instant, rng: &mut dyn Rng) -> Action {
        let now = self.clamp(now);
        if self.phase != Phase::AwaitingHead {
            return Action::Nothing;
        }
        let outcome = error.outcome();
        self.record(outcome, now);
        if error == AttemptError::ClientGone
            || (error == AttemptError::PerTryTimeout && mutated!(FLOW_TIMEOUT_ABANDONS))
        {
            self.finish();
            return Action::Abandon;
        }
        let stopped = match self.try_retry(outcome, now, rng) {
            Ok(attempt) => return Action::Retry(attempt),
            Err(stopped) => stopped,
        };
        let backend = self.backend.unwrap_or(0); // always Some while awaiting a head
        self.finish();
        Action::Fail(Failure {
            status: if error == AttemptError::PerTryTimeout {
                504
            } else {
                502
            },
            cause: error,
            no_retry: stopped.reason,
            backend,
            attempts: self.attempts,
            budget_exhausted: stopped.budget_exhausted(),
            protection: stopped.protection,
        })
    }

    /// The header deadline of the current attempt, if one is armed (C-RETRY-5: it bounds the wait
    /// for response headers only, so there is none while a body streams).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (&self.current, self.phase) {
            (Some(current), Phase::AwaitingHead) => Some(current.header_deadline),
            _ => None,
        }
    }

    /// Time passed: at or after the header deadline this is
    /// `handle_error(AttemptError::PerTryTimeout)`; earlier (or with no deadline) it is a no-op.
    pub fn handle_timeout(&mut self, now: Instant, rng: &mut dyn Rng) -> Action {
        let now = self.clamp(now);
        match self.poll_timeout() {
            Some(deadline) if now >= deadline => {
                self.handle_error(AttemptError::PerTryTimeout, now, rng)
            }
            _ => Action::Nothing,
        }
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

    /// Take `slot` on backend `index` as the next attempt.
    fn begin(&mut self, index: usize, slot: Slot, now: Instant) -> Attempt {
        // At most `max_attempts` (<= 5) distinct indices: the set (8) never fills.
        let _ = self.tried.insert(index);
        self.attempts += 1;
        self.backend = Some(index);
        let header_deadline = self.policy.header_deadline(now);
        let panic = slot.is_panic();
        // Replacing the previous attempt drops its slot: released as the flow moves on.
        self.current = Some(Current {
            slot,
            header_deadline,
        });
        self.phase = Phase::AwaitingHead;
        Attempt {
            backend: index,
            attempt: self.attempts,
            header_deadline,
            panic,
        }
    }

    /// Record the current attempt's outcome for passive health (once per slot).
    fn record(&mut self, outcome: AttemptOutcome, now: Instant) {
        let class: AttemptClass = self.policy.classify(outcome);
        if let Some(current) = &mut self.current
            && let Some(t) = current.slot.record(class, self.pool.params(), now)
            && let Some(b) = self.backend
        {
            self.transition = Some((b, t));
        }
    }

    /// The circuit transition (C-HEALTH-3) the latest outcome caused, with its backend's
    /// index, once: for the adapter's log line and transition counter (issue 20).
    pub fn take_transition(&mut self) -> Option<(usize, Transition)> {
        self.transition.take()
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
            Ok((index, slot)) => Ok(self.begin(index, slot, now)),
            Err(reason) => Err(Stopped::new(reason, unavailable)),
        }
    }

    /// Release everything and end.
    fn finish(&mut self) {
        self.current = None;
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
            (NoRetryReason::NoOtherBackend, Some(NoBackend::AllSaturated)) => {
                Some(ProtectionReason::BackendSaturated)
            }
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
