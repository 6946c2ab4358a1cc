//! The steps of an exchange, in C-PATH-2 order, and how each fact moves it on.

use crate::admission::{Cancel, Entry};
use crate::flow::{Action, AttemptError, BodyEnd, Flow, Pending, RequestMeta};
use crate::grpc::StatusSource;
use crate::mirror::{Decision, MirrorBody, MirrorResult};
use crate::rate::{DecisionResult, FailureDecision, RateOutcome, StorageKind, on_store_failure};
use crate::response::{ClientError, Reject};
use crate::retry::BodyKind;
use crate::rng::Rng;
use crate::time::Instant;

use super::{
    Answer, AttemptFact, AttemptResult, BodyInfo, Delivery, Exchange, Head, HedgeResult, Input,
    Metric, MirrorSend, Output, Record, Send, SendBody, SendFailure, Stage, StoreFailure,
    StoreResult, should_log,
};
use crate::admission::Overloaded;
use crate::bucket::Take;

impl Exchange {
    /// From the head to the first wait: the method, health endpoints, the gate. (The framing
    /// rules of C-PATH-12 are the HTTP/1 codec's, `h1::parse_request`: a head that breaks one
    /// never makes an exchange.)
    pub(super) fn begin<H: crate::headers::HeaderLines + ?Sized>(
        &mut self,
        head: &Head<'_, H>,
        now: Instant,
        rng: &mut dyn Rng,
    ) {
        // RFC 9113 §8.3.1: `host` and `:authority` naming two entities is a malformed request,
        // refused first, as the HTTP/1 codec refuses a bad `Host` (docs/proxy.md, "HTTP/2
        // requests"): routing and `X-Forwarded-Host` would follow `host`, the client's stack
        // and any tier before weir `:authority`.
        if let Some(authority) = head.authority
            && !crate::h2::host_agrees(head.headers, authority)
        {
            return self.answer(Answer::Client(ClientError::HostMismatch), now, rng);
        }
        // TRACE → 405 unless `server.allow_trace`, before `/healthz`, the gate and
        // the limiter (docs/proxy.md, "Methods").
        let allow_trace = self.rt.config().server.allow_trace;
        if let Err(refused) = crate::method::check(head.method, allow_trace) {
            return self.answer(Answer::Client(refused.into()), now, rng);
        }
        // C-PATH-1, C-OBS-4: served here, past neither the gate nor the limiter (C-PATH-2).
        match head.path {
            "/healthz" => return self.answer(Answer::Live, now, rng),
            "/readyz" => {
                let a = match self.services.not_ready_reason(&self.rt, now) {
                    None => Answer::Ready,
                    Some(cause) => Answer::Client(ClientError::NotReady(cause)),
                };
                return self.answer(a, now, rng);
            }
            _ => {}
        }
        // C-LOAD-1: the global gate, before anything that costs (the store call included).
        match self.services.gate.enter(now) {
            Entry::Admitted => {
                self.gate_held = true;
                self.rate_limit(now, rng);
            }
            Entry::Queued(ticket) => {
                self.waiting_since = now;
                self.stage = Stage::Queued {
                    ticket: ticket.id,
                    deadline: ticket.deadline,
                };
                self.outbox.push(Output::GateWait { ticket: ticket.id });
            }
            Entry::Rejected(why) => self.reject(Reject::Overloaded(why), now, rng),
        }
    }

    /// One fact at (clamped) `now`.
    pub(super) fn step(&mut self, input: Input, now: Instant, rng: &mut dyn Rng) {
        let due = |deadline: Option<Instant>| deadline.is_some_and(|d| now >= d);
        match (self.stage, input) {
            (Stage::Done, _) => {}
            (_, Input::ClientGone) => self.client_gone(now, rng),
            // C-GRPC-2: the call's own deadline, wherever the exchange waits before a response
            // head (a delivered response's body is bounded by its write deadline, which
            // includes it).
            (stage, Input::Timeout)
                if self.grpc_due(now) && !matches!(stage, Stage::Streaming { .. }) =>
            {
                self.deadline_exceeded(now, rng);
            }
            (Stage::Queued { ticket, .. }, Input::GateHandoff) => self.settle(ticket, now, rng),
            (Stage::Queued { ticket, deadline }, Input::Timeout)
                if now >= deadline && !mutated!(GATE_NEVER_EXPIRES) =>
            {
                self.settle(ticket, now, rng);
            }
            (Stage::Store { call, .. }, Input::StoreAnswer(Ok(take))) => {
                self.store_metric(StoreResult::Ok, now);
                self.services.circuit.on_success(call);
                self.stage = Stage::Done;
                let storage = self.services.storage;
                self.rate_decided(self.outcome(take, storage, false), now, rng);
            }
            (Stage::Store { call, .. }, Input::StoreAnswer(Err(StoreFailure::Partial))) => {
                // Nothing learnt about the store as a whole: the circuit keeps its state.
                self.store_metric(StoreResult::Partial, now);
                self.services.circuit.abandon(call);
                self.stage = Stage::Done;
                self.store_failed(now, rng);
            }
            (Stage::Store { call, .. }, Input::StoreAnswer(Err(_))) => {
                self.store_metric(StoreResult::Error, now);
                self.services.circuit.on_failure(call, now);
                self.stage = Stage::Done;
                self.store_failed(now, rng);
            }
            (Stage::Store { call, deadline }, Input::Timeout) if now >= deadline => {
                self.store_metric(StoreResult::Timeout, now);
                self.services.circuit.on_failure(call, now);
                self.stage = Stage::Done;
                self.store_failed(now, rng);
            }
            (Stage::Buffering { .. }, Input::BodyBuffered) => self.start_flow(now, rng),
            (Stage::Buffering { .. }, Input::BodyUnreadable) => {
                self.answer(Answer::Client(ClientError::BodyUnreadable), now, rng);
            }
            (Stage::Buffering { deadline }, Input::Timeout) if due(deadline) => {
                self.answer(Answer::Client(ClientError::BodyTimeout), now, rng);
            }
            (Stage::Awaiting { .. }, Input::Attempt { attempt, fact }) => {
                self.on_fact(attempt, fact, now, rng);
            }
            (Stage::Awaiting { .. }, input) if AttemptFact::of(input).is_some() => {
                // The facts without a number are about the earlier attempt awaiting its head.
                if let (Some(p), Some(fact)) = (self.primary(), AttemptFact::of(input)) {
                    self.on_fact(p.attempt, fact, now, rng);
                }
            }
            (Stage::Awaiting { .. }, Input::BodyUnreadable) => {
                // The streamed request body broke its framing (a malformed chunk): the
                // client's error, answered `400`.
                self.client_body_fault(ClientError::BodyUnreadable, now, rng);
            }
            (Stage::Awaiting { .. }, Input::BodyTimeout) => {
                // The client stopped sending the body it announced: its fault, `408`.
                self.client_body_fault(ClientError::BodyTimeout, now, rng);
            }
            (Stage::Awaiting { .. }, Input::Timeout) => self.awaiting_timeout(now, rng),
            (Stage::Awaiting { .. }, Input::TargetTooLong) => {
                // Nothing reached the backend: the flow's slot is released unrecorded.
                self.flow = None;
                self.answer(Answer::Client(ClientError::TargetTooLong), now, rng);
            }
            (Stage::Streaming { .. }, Input::BodyEnd(end)) => self.body_ended(end, now),
            (Stage::Streaming { .. }, Input::GrpcStatus(code)) => {
                if let Some(flow) = self.flow.as_mut() {
                    flow.handle_grpc_status(code);
                }
            }
            (Stage::Streaming { deadline }, Input::Timeout) if due(deadline) => {
                self.outbox.push(Output::AbortBody);
                self.body_ended(BodyEnd::Error, now);
            }
            _ => {}
        }
    }

    /// Whether the call's own deadline (C-GRPC-2) has come at `now`.
    fn grpc_due(&self, now: Instant) -> bool {
        self.grpc_deadline.is_some_and(|d| now >= d)
    }

    /// The call's deadline passed before a response head (C-GRPC-2): whatever the exchange
    /// waited for is left (the gate's queue, a store call, the body, the attempt, which is
    /// cancelled: neutral for the backend's health, as the client's own choice of deadline is
    /// no fault of the backend's, and never retried), and the client is answered `504`,
    /// `DEADLINE_EXCEEDED` in the gRPC form (C-GRPC-3).
    fn deadline_exceeded(&mut self, now: Instant, rng: &mut dyn Rng) {
        self.stop_waiting(now, rng);
        self.answer(Answer::Client(ClientError::DeadlineExceeded), now, rng);
    }

    /// The client's streamed request body failed while the attempt `sent` then was out: the
    /// attempt is cancelled, neutral for the backend's health and breaker (C-PATH-9's
    /// classification), not retried, and the client is answered `error`.
    fn client_body_fault(&mut self, error: ClientError, now: Instant, rng: &mut dyn Rng) {
        // A streamed body is never hedged: one attempt is out.
        if let Some(p) = self.primary() {
            self.attempt_ended(p, AttemptResult::Cancelled, None, now);
        }
        if let Some(flow) = self.flow.as_mut() {
            let _ = flow.handle_error(AttemptError::ClientGone, now, rng);
        }
        self.answer(Answer::Client(error), now, rng);
    }

    /// Settle the gate ticket (a hand-off or the deadline): its answer is its fate (C-LOAD-1).
    fn settle(&mut self, ticket: u64, now: Instant, rng: &mut dyn Rng) {
        self.queue_left(now);
        self.stage = Stage::Done;
        match self.services.gate.cancel(ticket, now) {
            Cancel::AlreadyAdmitted => {
                self.gate_held = true;
                self.rate_limit(now, rng);
            }
            Cancel::Expired | Cancel::Removed | Cancel::Unknown => {
                self.reject(Reject::Overloaded(Overloaded::QueueFull), now, rng);
            }
        }
    }

    /// C-RATE-1, C-RATE-2: one token, after the gate so an overload `503` costs none.
    fn rate_limit(&mut self, now: Instant, rng: &mut dyn Rng) {
        let rate = &self.rt.config().rate;
        if !rate.enabled() {
            return self.after_rate(now, rng);
        }
        let (key, bucket) = (rate.key().key(self.client), rate.bucket());
        let storage = self.services.storage;
        if !storage.is_shared() {
            self.local_store_metric();
            let take = self.services.local.take(key, &bucket, now);
            return self.rate_decided(self.outcome(take, StorageKind::Local, false), now, rng);
        }
        match self.services.circuit.may_call(now) {
            Some(call) => {
                let deadline = now.saturating_add(rate.operation_timeout());
                self.waiting_since = now;
                self.stage = Stage::Store { call, deadline };
                self.outbox.push(Output::StoreTake { key, bucket });
            }
            // Down, no trial due: the policy decides without waiting (C-RATE-5).
            None => self.store_failed(now, rng),
        }
    }

    /// The shared store failed, timed out or is known down: the failure policy (C-RATE-5).
    fn store_failed(&mut self, now: Instant, rng: &mut dyn Rng) {
        self.services.circuit.on_policy_decision();
        let rate = &self.rt.config().rate;
        let (bucket, refill) = (rate.bucket(), rate.refill_per_second());
        match on_store_failure(rate.failure_mode()) {
            FailureDecision::AllowDegraded => {
                let o = RateOutcome::fail_open(&bucket, refill, self.services.storage);
                self.rate_decided(o, now, rng);
            }
            FailureDecision::Reject => self.reject(Reject::StoreUnavailable, now, rng),
            FailureDecision::DecideLocally => {
                self.local_store_metric();
                let take = self.services.local.take(self.client_key(), &bucket, now);
                self.rate_decided(self.outcome(take, StorageKind::Local, true), now, rng);
            }
        }
    }

    /// The queue wait that ends now (C-LOAD-1).
    fn queue_left(&mut self, now: Instant) {
        let waited = now.saturating_since(self.waiting_since);
        self.outbox.push(Output::Metric(Metric::QueueWait(waited)));
    }

    /// The shared-store call that ends now, and how.
    fn store_metric(&mut self, result: StoreResult, now: Instant) {
        self.outbox.push(Output::Metric(Metric::Store {
            storage: self.services.storage,
            result,
            duration: Some(now.saturating_since(self.waiting_since)),
        }));
    }

    /// A take from the local store (primary, or the `local-fallback` policy's).
    fn local_store_metric(&mut self) {
        self.outbox.push(Output::Metric(Metric::Store {
            storage: StorageKind::Local,
            result: StoreResult::Ok,
            duration: None,
        }));
    }

    fn outcome(&self, take: Take, storage: StorageKind, degraded: bool) -> RateOutcome {
        let rate = &self.rt.config().rate;
        RateOutcome::from_take(
            take,
            &rate.bucket(),
            rate.refill_per_second(),
            storage,
            degraded,
        )
    }

    fn rate_decided(&mut self, outcome: RateOutcome, now: Instant, rng: &mut dyn Rng) {
        let result = if outcome.is_allowed() {
            DecisionResult::Allowed
        } else if self.rt.config().rate.dry_run() {
            DecisionResult::DryRunLimited
        } else {
            DecisionResult::Limited
        };
        self.outbox
            .push(Output::Metric(Metric::RateDecision(result)));
        match result {
            DecisionResult::Limited => self.reject(Reject::RateLimited(outcome), now, rng),
            DecisionResult::Allowed | DecisionResult::DryRunLimited => {
                // Dry run (C-RATE-8): the token was taken as when enforced; the request goes
                // on, and its access-log line says what enforcement would have done.
                self.rate_dry_run = result == DecisionResult::DryRunLimited;
                self.rate = Some(outcome.let_through());
                self.after_rate(now, rng);
            }
        }
    }

    /// Target check, then the body policy (C-RETRY-1): a body with a `Content-Length` within
    /// `body_limit` is buffered (replayable) when the method may be retried; others stream.
    fn after_rate(&mut self, now: Instant, rng: &mut dyn Rng) {
        if let Some(error) = self.target_error {
            return self.answer(Answer::Client(error), now, rng);
        }
        self.decide_mirror(now, rng);
        let retry = self.rt.retry();
        let read_deadline = self.since_arrival(self.rt.config().server.read_timeout);
        // A mirrored request's body is buffered as a replayable one is, whatever its method
        // (C-MIRROR-1): the mirror gets the same bytes. Buffering does not make it retryable:
        // that is still the method's and the body's (C-RETRY-1, `Send::replayable`).
        let mirrored = self.mirror.is_some();
        let (kind, send) = match self.body {
            BodyInfo::Empty | BodyInfo::Sized(0) => (BodyKind::None, SendBody::Empty),
            BodyInfo::Sized(n)
                if n <= retry.body_limit()
                    && (retry.allows_method(self.method.as_str()) || mirrored) =>
            {
                (BodyKind::Sized(n), SendBody::Buffered)
            }
            BodyInfo::Sized(n) => (BodyKind::Sized(n), SendBody::Stream { read_deadline }),
            BodyInfo::Unsized => (BodyKind::Streaming, SendBody::Stream { read_deadline }),
        };
        self.body_kind = kind;
        self.send_body = send;
        if let (SendBody::Buffered, BodyKind::Sized(len)) = (send, kind) {
            self.stage = Stage::Buffering {
                deadline: read_deadline,
            };
            self.outbox.push(Output::BufferBody { len });
            return;
        }
        self.start_flow(now, rng);
    }

    /// C-MIRROR-1: whether this request of a mirroring route is mirrored, and where
    /// ([`crate::mirror::decide`]); a mirror not sent is counted now, a reserved one when it goes
    /// out with the first attempt.
    fn decide_mirror(&mut self, now: Instant, rng: &mut dyn Rng) {
        let (Some(ctx), Some(spec)) = (
            self.mirror_pick,
            self.route
                .and_then(|r| self.rt.config().routes.get(r))
                .and_then(|r| r.mirror),
        ) else {
            return;
        };
        let Some(pool) = self.rt.pool(spec.pool) else {
            return;
        };
        let limit = self.rt.retry().body_limit();
        let body = match self.body {
            _ if self.upgrade => MirrorBody::NotReplayable,
            BodyInfo::Empty => MirrorBody::Replayable,
            BodyInfo::Sized(n) if n <= limit => MirrorBody::Replayable,
            BodyInfo::Sized(_) | BodyInfo::Unsized => MirrorBody::NotReplayable,
        };
        let route = crate::mirror::Route {
            pool,
            pool_index: spec.pool,
            percent: spec.percent,
            max_in_flight: self.rt.config().server.upstream.mirror_max_in_flight,
        };
        match crate::mirror::decide(&route, self.services.mirrors(), body, &ctx, now, rng) {
            Decision::No => {}
            Decision::NotSent(result) => self.outbox.push(Output::Metric(Metric::Mirror(result))),
            Decision::Send(m) => self.mirror = Some(m),
        }
    }

    /// The mirror goes out with the first attempt, sent at `at` (C-MIRROR-1), before it.
    fn send_mirror(&mut self, at: Instant) {
        if self.mirror_out {
            return;
        }
        let Some(m) = self.mirror.as_mut() else {
            return;
        };
        self.mirror_out = true;
        m.send_at(at);
        let send = MirrorSend {
            pool: m.pool_index(),
            backend: m.backend(),
            body: match self.send_body {
                SendBody::Buffered => SendBody::Buffered,
                _ => SendBody::Empty,
            },
        };
        self.outbox
            .push(Output::Metric(Metric::Mirror(MirrorResult::Sent)));
        self.outbox.push(Output::Mirror(send));
    }

    /// C-ROUTE-1, C-LOAD-2, C-POOL-5: the flow takes the route's bulkhead permit and selects.
    /// The first attempt's `per_try_timeout` counts from its sending, `now`, like every later
    /// attempt's and like `response_header_timeout` (C-RETRY-5): time spent in the gate's queue,
    /// on the store call or reading a buffered body is not taken from it (those waits have
    /// their own deadlines). Found by the simulator's `request_timers` check.
    fn start_flow(&mut self, now: Instant, rng: &mut dyn Rng) {
        let meta = RequestMeta {
            method: self.method.clone(),
            body: self.body_kind,
            ctx: self.pick,
        };
        let action = Flow::start_in(
            &mut self.flow,
            self.target.clone(),
            self.rt.retry(),
            self.rt.budget(),
            meta,
            now,
            rng,
        );
        self.apply(action, now, rng);
    }

    /// The earlier attempt awaiting its head, if one is.
    fn primary(&self) -> Option<Pending> {
        self.flow.as_ref().and_then(|f| f.pending().next())
    }

    /// A fact about attempt `attempt`, one of those awaiting their heads (else ignored: an
    /// attempt already cancelled, C-HEDGE-1).
    fn on_fact(&mut self, attempt: u32, fact: AttemptFact, now: Instant, rng: &mut dyn Rng) {
        let Some(p) = self
            .flow
            .as_ref()
            .and_then(|f| f.pending().find(|p| p.attempt == attempt))
        else {
            return;
        };
        match fact {
            AttemptFact::Head { status } => self.on_head(p, status, status, now, rng),
            AttemptFact::PushbackHead { status, after } => {
                // Out of selection first, so that a retry of this request (and every request
                // from now on) goes elsewhere (C-RETRY-11).
                self.push_back(p.backend, after, now);
                self.on_head(p, status, status, now, rng);
            }
            // A gRPC UNAVAILABLE is judged as the `503` it stands for (C-GRPC-3).
            AttemptFact::UnavailableHead { status } => self.on_head(p, status, 503, now, rng),
            AttemptFact::Failed(failure) => {
                let (error, result) = classify(failure);
                self.attempt_ended(p, result, None, now);
                self.flow_error(p.attempt, error, now, rng);
            }
        }
    }

    /// Time passed while attempts await their heads: the first whose header deadline came ends
    /// (`504` or a retry, C-RETRY-5); else a hedge that is due goes out (C-HEDGE-1).
    fn awaiting_timeout(&mut self, now: Instant, rng: &mut dyn Rng) {
        let Some(flow) = self.flow.as_ref() else {
            return;
        };
        let timed_out = flow.pending().find(|p| now >= self.attempt_deadline(p));
        if let Some(p) = timed_out {
            self.attempt_ended(p, AttemptResult::Timeout, None, now);
            return self.flow_error(p.attempt, AttemptError::PerTryTimeout, now, rng);
        }
        if flow.hedge_at().is_some_and(|at| now >= at) {
            let action = self
                .flow
                .as_mut()
                .map_or(Action::Nothing, |f| f.hedge(now, rng));
            self.apply(action, now, rng);
        }
    }

    /// A response head of `status`, judged for retries and health as `judged` (the status
    /// itself, or `503` for a gRPC UNAVAILABLE); a delivered response keeps its own status.
    fn on_head(&mut self, p: Pending, status: u16, judged: u16, now: Instant, rng: &mut dyn Rng) {
        // A status outside 100..=599 is an invalid response: the flow fails the attempt like a
        // broken connection, and the metric says so (docs/proxy.md, "Upstream status validity").
        let result = if !crate::flow::valid_upstream_status(status) {
            AttemptResult::TransportError
        } else if self.rt.retry().is_retryable_status(judged) {
            AttemptResult::FailureStatus
        } else {
            AttemptResult::Success
        };
        self.upstream_status = Some(status);
        self.attempt_ended(p, result, Some(status), now);
        let Some(flow) = self.flow.as_mut() else {
            return;
        };
        let judged = if crate::flow::valid_upstream_status(status) {
            judged
        } else {
            status
        };
        let mut action = flow.handle_response_head_of(p.attempt, judged, now, rng);
        if let Action::Deliver(d) = &mut action {
            d.status = status;
        }
        self.apply(action, now, rng);
    }

    /// The attempt's `backend` asked for `after` without traffic (C-RETRY-11).
    fn push_back(&mut self, backend: usize, after: core::time::Duration, now: Instant) {
        let Some(flow) = self.flow.as_ref() else {
            return;
        };
        if let Some(event) = flow.pool().push_back(backend, after, now) {
            self.outbox.push(Output::Outliers([event].into()));
        }
    }

    fn flow_error(&mut self, attempt: u32, error: AttemptError, now: Instant, rng: &mut dyn Rng) {
        let Some(flow) = self.flow.as_mut() else {
            return;
        };
        match flow.handle_error_of(attempt, error, now, rng) {
            // The other attempt of a hedged request goes on (C-HEDGE-1).
            Action::Nothing if flow.pending().next().is_some() => {
                self.apply(Action::Nothing, now, rng);
            }
            // Cannot happen while an attempt is out; answer rather than hang.
            Action::Nothing => self.answer(Answer::Client(ClientError::Incomplete), now, rng),
            action => self.apply(action, now, rng),
        }
    }

    /// An attempt the flow gave up while the other went on (C-HEDGE-1): counted cancelled when
    /// it lost the race (its own failure was counted already), and its IO ended.
    fn cancelled(&mut self, now: Instant) {
        let Some(c) = self.flow.as_mut().and_then(Flow::take_cancelled) else {
            return;
        };
        if c.lost {
            self.outbox.push(Output::Metric(Metric::Attempt {
                backend: c.backend,
                result: AttemptResult::Cancelled,
                status: None,
                duration: now.saturating_since(c.sent),
            }));
        }
        if !(c.lost && mutated!(HEDGE_LOSER_NOT_CANCELLED)) {
            self.outbox.push(Output::Cancel { attempt: c.attempt });
        }
        if let Some(p) = self.primary() {
            self.stage = Stage::Awaiting { sent: p.sent };
        }
    }

    /// Carry the flow's action into outputs.
    fn apply(&mut self, action: Action, now: Instant, rng: &mut dyn Rng) {
        self.cancelled(now);
        if let Some(reason) = action.protection_reason() {
            self.outbox.push(Output::Metric(Metric::Protection(reason)));
        }
        match action {
            Action::Attempt(_) | Action::Retry(_) if self.grpc_due(now) => {
                // No attempt is sent past the call's deadline (C-GRPC-2): the slot just reserved
                // is given back unused.
                if let Some(flow) = self.flow.as_mut() {
                    let _ = flow.handle_error(AttemptError::ClientGone, now, rng);
                }
                self.answer(Answer::Client(ClientError::DeadlineExceeded), now, rng);
            }
            Action::Attempt(a) | Action::Retry(a) => {
                self.attempts = a.attempt;
                self.backend = Some(a.backend);
                // A retry after its backoff (C-RETRY-10) is sent at `a.at`: the adapter waits
                // for it (ending the wait if the client leaves); its deadlines count from it.
                self.stage = Stage::Awaiting { sent: a.at };
                if a.panic {
                    let m = Metric::PanicSelection { backend: a.backend };
                    self.outbox.push(Output::Metric(m));
                }
                if matches!(action, Action::Attempt(_)) {
                    self.send_mirror(a.at);
                }
                let retry = self.rt.retry();
                let replayable = retry.allows_method(self.method.as_str())
                    && retry.body_replayable(self.body_kind);
                self.outbox.push(Output::Send(Send {
                    backend: a.backend,
                    attempt: a.attempt,
                    retry: matches!(action, Action::Retry(_)),
                    hedge: false,
                    // Even a request that is not replayable is sent again when nothing of it
                    // was sent (C-RETRY-9): only the last attempt may give its request away.
                    last: a.attempt >= retry.max_attempts(),
                    replayable,
                    body: self.send_body,
                    at: a.at,
                }));
            }
            Action::Hedge(a) => {
                // C-HEDGE-1: the first attempt goes on; this one runs beside it.
                self.attempts = a.attempt;
                self.hedge = Some(a.attempt);
                self.outbox
                    .push(Output::Metric(Metric::Hedge(HedgeResult::Sent)));
                if a.panic {
                    let m = Metric::PanicSelection { backend: a.backend };
                    self.outbox.push(Output::Metric(m));
                }
                let retry = self.rt.retry();
                self.outbox.push(Output::Send(Send {
                    backend: a.backend,
                    attempt: a.attempt,
                    retry: false,
                    hedge: true,
                    last: a.attempt >= retry.max_attempts(),
                    replayable: true,
                    body: self.send_body,
                    at: a.at,
                }));
            }
            Action::Deliver(d) if d.status == 101 && !self.upgrade => {
                // A 101 the client did not ask for cannot be passed on.
                self.flow = None;
                self.answer(Answer::Client(ClientError::UnrequestedUpgrade), now, rng);
            }
            Action::Deliver(d) => {
                self.backend = Some(d.backend);
                if self.hedge == Some(d.attempt) {
                    self.outbox
                        .push(Output::Metric(Metric::Hedge(HedgeResult::Won)));
                }
                // `write_timeout` bounds a response body; a tunnel (C-PATH-8) lives as long as
                // its two connections, as it always did in weir-proxy.
                let deadline = if d.status == 101 || mutated!(WRITE_TIMEOUT_IGNORED) {
                    None
                } else {
                    // A gRPC call's deadline bounds its whole response (C-GRPC-2).
                    let write = self.since_arrival(self.rt.config().server.write_timeout);
                    match (write, self.grpc_deadline) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    }
                };
                self.stage = Stage::Streaming { deadline };
                self.outbox.push(Output::Deliver(Delivery {
                    deliver: d,
                    upgrade: d.status == 101,
                    write_deadline: deadline,
                }));
                self.record(d.status, now, rng);
            }
            Action::Fail(f) => {
                self.backend = Some(f.backend);
                self.answer(Answer::Failure(f), now, rng);
            }
            Action::Reject(r) => self.answer(Answer::Reject(r), now, rng),
            Action::Abandon => self.abandon(now, rng),
            Action::Nothing => {}
        }
    }

    fn attempt_ended(
        &mut self,
        p: Pending,
        result: AttemptResult,
        status: Option<u16>,
        now: Instant,
    ) {
        self.last_result = Some(result);
        self.outbox.push(Output::Metric(Metric::Attempt {
            backend: p.backend,
            result,
            status,
            duration: now.saturating_since(p.sent),
        }));
    }

    fn body_ended(&mut self, end: BodyEnd, now: Instant) {
        if let Some(flow) = self.flow.as_mut() {
            let _ = flow.handle_body_end(end, now);
        }
        self.release(now);
    }

    /// A rejection weir makes before any attempt, with its protection event (C-LOAD-3).
    fn reject(&mut self, reject: Reject, now: Instant, rng: &mut dyn Rng) {
        if let Some(reason) = reject.protection_reason() {
            self.outbox.push(Output::Metric(Metric::Protection(reason)));
        }
        self.answer(Answer::Reject(reject), now, rng);
    }

    /// The final answer weir makes itself: answer, record, release everything.
    fn answer(&mut self, answer: Answer, now: Instant, rng: &mut dyn Rng) {
        self.answer = Some(answer);
        self.outbox.push(Output::Answer(answer));
        self.record(answer.status(), now, rng);
        self.release(now);
    }

    /// The record, once (C-OBS-1..3).
    fn record(&mut self, status: u16, now: Instant, rng: &mut dyn Rng) {
        if self.recorded {
            return;
        }
        self.recorded = true;
        let server = &self.rt.config().server;
        // A request dry run let through over the limit is always logged, as an error is: the
        // line is what an operator trying a limit out reads (C-RATE-8).
        let log =
            should_log(status, false, server.access_log_sample_rate, rng) || self.rate_dry_run;
        self.outbox.push(Output::Record(Record {
            status,
            duration: now.saturating_since(self.started),
            client: self.client,
            backend: self.backend,
            attempts: self.attempts,
            log,
            include_path: server.access_log_include_path,
            reason: self.reason(status),
            upstream_status: self.upstream_status,
            grpc_status: self.grpc_status_source(status),
        }));
    }

    /// Where the record's gRPC status comes from: weir's own answer's code (C-GRPC-3),
    /// `CANCELLED` for a client that left (`499`), the backend's response for a delivery.
    fn grpc_status_source(&self, status: u16) -> StatusSource {
        if !self.grpc {
            return StatusSource::NotGrpc;
        }
        if status == 499 {
            return StatusSource::Known(crate::grpc::CANCELLED);
        }
        match self.answer {
            None => StatusSource::Response,
            Some(Answer::Live | Answer::Ready) => StatusSource::NotGrpc,
            Some(a) => StatusSource::Known(crate::grpc::code_for(a.status()).as_u8()),
        }
    }

    /// Why weir answered itself, for the access log: `None` for a backend's
    /// response and for `/healthz` / `/readyz` while ready.
    fn reason(&self, status: u16) -> Option<&'static str> {
        if status == 499 {
            return Some("client_closed");
        }
        let Some(answer) = self.answer else {
            // A backend's response: marked only when dry run let an over-limit request through.
            return self
                .rate_dry_run
                .then_some(DecisionResult::DryRunLimited.as_str());
        };
        Some(match answer {
            Answer::Live | Answer::Ready => return None,
            Answer::Reject(r) => match r {
                Reject::Overloaded(_) => "overload",
                Reject::RateLimited(_) => "rate_limited",
                Reject::StoreUnavailable => "store_unavailable",
                Reject::BulkheadFull(_) => "bulkhead_full",
                Reject::NoBackend(why) => why.as_str(),
            },
            Answer::Failure(f) => match f.cause {
                AttemptError::PerTryTimeout => "upstream_timeout",
                AttemptError::Connect => "upstream_connect_error",
                AttemptError::Refused => "upstream_refused",
                AttemptError::Saturated => "upstream_saturated",
                AttemptError::InvalidResponse => "upstream_invalid_response",
                AttemptError::Transport | AttemptError::ClientGone => "upstream_transport_error",
            },
            Answer::Client(e) => e.reason(),
        })
    }

    /// The client went away (C-PATH-9): the attempt is cancelled (neutral for health), a queued
    /// request leaves the queue at once (C-LOAD-1), and the record says `499` if no response
    /// head was ready.
    fn client_gone(&mut self, now: Instant, rng: &mut dyn Rng) {
        if let Stage::Streaming { .. } = self.stage {
            if let Some(flow) = self.flow.as_mut() {
                let _ = flow.handle_body_end(BodyEnd::ClientGone, now);
            }
        } else {
            self.stop_waiting(now, rng);
        }
        self.abandon(now, rng);
    }

    /// Stop waiting for a place or a head: a queued request leaves the queue (C-LOAD-1); an
    /// attempt awaiting its head is cancelled, neutral for the backend's health, and never
    /// retried. Nothing else is waited for in a way that needs undoing.
    fn stop_waiting(&mut self, now: Instant, rng: &mut dyn Rng) {
        match self.stage {
            Stage::Queued { .. } => self.queue_left(now),
            Stage::Awaiting { .. } => {
                // Both attempts of a hedged request are cancelled (C-HEDGE-1).
                let mut pending = [None, None];
                if let Some(flow) = self.flow.as_ref() {
                    for (slot, p) in pending.iter_mut().zip(flow.pending()) {
                        *slot = Some(p);
                    }
                }
                for p in pending.into_iter().flatten() {
                    self.attempt_ended(p, AttemptResult::Cancelled, None, now);
                }
                if let Some(flow) = self.flow.as_mut() {
                    let _ = flow.handle_error(AttemptError::ClientGone, now, rng);
                }
            }
            _ => {}
        }
    }

    /// Nobody is there to answer: record `499` unless a response head was ready, release all.
    fn abandon(&mut self, now: Instant, rng: &mut dyn Rng) {
        self.record(499, now, rng);
        self.release(now);
    }

    /// Release everything still held, once: the flow (slot, bulkhead permit), a store trial's
    /// place, a queued ticket, the gate slot (waking the waiter it is handed to).
    pub(super) fn release(&mut self, now: Instant) {
        self.flow = None;
        // A mirror the adapter did not take (the request ended before its first attempt, or the
        // adapter does not mirror) gives its slot and place back, neutral.
        self.mirror = None;
        match self.stage {
            Stage::Store { call, .. } => self.services.circuit.abandon(call),
            Stage::Queued { ticket, .. }
                if self.services.gate.cancel(ticket, now) == Cancel::AlreadyAdmitted =>
            {
                self.gate_held = true;
            }
            _ => {}
        }
        self.stage = Stage::Done;
        if core::mem::take(&mut self.gate_held)
            && let Some(ticket) = self.services.gate.leave(now)
        {
            self.outbox.push(Output::GateWake { ticket });
        }
    }
}

/// How a failed send counts: the flow's error and the attempt metric's result, in one place.
fn classify(failure: SendFailure) -> (AttemptError, AttemptResult) {
    match failure {
        SendFailure::Connect => (AttemptError::Connect, AttemptResult::ConnectError),
        // No connection could be had: the attempt metric counts it with connect errors.
        SendFailure::Saturated => (AttemptError::Saturated, AttemptResult::ConnectError),
        // The attempt metric has no label of its own for a refused stream: the backend's
        // transport turned it away (docs/retries.md, "Nothing sent").
        SendFailure::Refused { held: true } => {
            (AttemptError::Refused, AttemptResult::TransportError)
        }
        SendFailure::Refused { held: false } => {
            (AttemptError::Transport, AttemptResult::TransportError)
        }
        SendFailure::Transport {
            client_body_failed: true,
        } => (AttemptError::ClientGone, AttemptResult::Cancelled),
        SendFailure::Transport {
            client_body_failed: false,
        } => (AttemptError::Transport, AttemptResult::TransportError),
    }
}
