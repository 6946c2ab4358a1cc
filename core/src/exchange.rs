//! The request engine: one request's whole exchange, from the parsed head to the last body byte,
//! as one sans-IO machine that the proxy and the simulator both drive (docs/architecture.md, "One
//! request, one engine").
//!
//! An [`Exchange`] is created per request from one `Arc` of the runtime snapshot, which it keeps
//! for its whole life (a reload gives *new* requests a new snapshot; this one never sees two),
//! the process-wide [`Services`] (gate, rate-limit stores, shutdown flag), the parsed [`Head`],
//! `now` and an rng. It then takes facts through [`Exchange::handle_input`], asks the adapter
//! for actions through [`Exchange::poll_output`] and reports its only deadline through
//! [`Exchange::poll_timeout`]. The adapter performs IO and copies values; it decides nothing.
//! The shape is str0m's `Rtc` and quinn-proto's `Connection`: inputs and outputs are plain-data
//! enums ([`Input`], [`Output`]), so a run can be recorded, replayed, fuzzed and simulated.
//!
//! It sequences, in the order of C-PATH-2:
//!
//! ```text
//!  request id (C-PATH-3) → method (TRACE) → /healthz, /readyz (C-OBS-4)
//!   → global gate, FIFO wait with its deadline (C-LOAD-1)            GateWait ⇄ GateHandoff
//!   → client address, forwarding facts (C-FWD-1..3)
//!   → rate limit: local store, or the shared store with its timeout
//!     and failure policy (C-RATE-1..5)                              StoreTake ⇄ StoreAnswer
//!   → target check → route and bulkhead (C-ROUTE-1, C-LOAD-2)
//!   → body policy: buffer for replay or stream (C-RETRY-1)          BufferBody ⇄ BodyBuffered
//!   → attempts through the flow machine (selection, per-try and
//!     response-header deadlines merged here, outcome classified here) Send ⇄ ResponseHead/SendFailed
//!   → response mapping (`response.rs`)                              Answer | Deliver ⇄ BodyEnd
//! ```
//!
//! Every action that needs IO is an [`Output`]; its answer is an [`Input`]. Protection events,
//! attempt metrics and the access-log record are outputs too ([`Metric`], [`Record`]).
//!
//! Resources: the gate slot, the store's recovery-trial place, the route bulkhead permit and the
//! backend slot are released exactly once, when the exchange ends (the body ended, a final
//! answer, the client left) — and by `Drop` if the adapter drops the exchange early. Only a
//! gate hand-off made by `Drop` cannot be announced ([`Output::GateWake`] has nobody to go to);
//! the waiter then proceeds at its own deadline. So an adapter that can, feeds
//! [`Input::ClientGone`] and drains the outputs before dropping (weir-proxy does, in the drop
//! guard of its request future).
//!
//! Time that goes backwards is clamped to the latest `now` seen.

mod input;
mod output;
mod steps;

#[cfg(all(test, not(loom)))]
mod hedging;
#[cfg(all(test, not(loom)))]
mod mirror_tests;
#[cfg(all(test, not(loom)))]
mod proptests;
#[cfg(all(test, not(loom)))]
pub(crate) mod tests;

use core::time::Duration;
use std::net::IpAddr;

pub use input::{AttemptFact, BodyInfo, Head, Input, SendFailure, StoreFailure};
pub use output::{
    Answer, AttemptResult, Delivery, HedgeResult, Metric, MirrorSend, Output, Record, Send,
    SendBody, StoreResult, sampled, should_log,
};

use crate::admission::Gate;
use crate::flow::{Flow, FlowTarget};
use crate::forward::{Proto, forwarded_proto, resolve_client, wants_upgrade};
use crate::headers::HeaderLines;
use crate::pool::{Availability, Backend};
use crate::rate::{Call, ClientKey, LocalStore, RateOutcome, StorageKind, StoreCircuit};
use crate::request_id::{RequestId, request_id_in_force};
use crate::response::{ClientError, NotReady, SyntheticResponse, Text, delivered_headers};
use crate::retry::BodyKind;
use crate::rng::Rng;
use crate::runtime::Runtime;
use crate::select::PickContext;
use crate::sync::{Arc, AtomicBool, Ordering};
use crate::time::Instant;
use crate::upstream::{BackendBase, UpstreamUriError};
use output::Outbox;

/// The process-wide machines every exchange uses, which outlive reloads: the global gate
/// (C-LOAD-1, restart-only), the rate-limit stores built at start (the local one and the shared
/// store's circuit, C-RATE-3..5) and the shutdown flag (C-PATH-10).
#[derive(Debug)]
pub struct Services {
    gate: Arc<Gate>,
    storage: StorageKind,
    local: Arc<LocalStore>,
    circuit: Arc<StoreCircuit>,
    shutting_down: AtomicBool,
    /// The mirrors in flight (C-MIRROR-1's `mirror_max_in_flight`).
    mirrors: Arc<crate::mirror::InFlight>,
}

impl Services {
    /// The services over `gate`, the store `storage` (restart-only), the local store (primary
    /// for `local`, fallback for `local-fallback`) and the shared store's `circuit`.
    #[must_use]
    pub fn new(
        gate: Arc<Gate>,
        storage: StorageKind,
        local: Arc<LocalStore>,
        circuit: Arc<StoreCircuit>,
    ) -> Services {
        Services {
            gate,
            storage,
            local,
            circuit,
            shutting_down: AtomicBool::new(false),
            mirrors: Arc::new(crate::mirror::InFlight::new()),
        }
    }

    /// The mirrors in flight in the process (C-MIRROR-1).
    #[must_use]
    pub fn mirrors(&self) -> &Arc<crate::mirror::InFlight> {
        &self.mirrors
    }

    /// The global gate.
    #[must_use]
    pub fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }

    /// The store built at start.
    #[must_use]
    pub fn storage(&self) -> StorageKind {
        self.storage
    }

    /// The local rate-limit store.
    #[must_use]
    pub fn local(&self) -> &Arc<LocalStore> {
        &self.local
    }

    /// The shared store's circuit.
    #[must_use]
    pub fn circuit(&self) -> &Arc<StoreCircuit> {
        &self.circuit
    }

    /// A graceful shutdown began: `/readyz` answers `503` from now on (C-PATH-10).
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
    }

    /// Whether a graceful shutdown has begun.
    #[must_use]
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Relaxed)
    }

    /// Readiness under `rt` at `now` (C-OBS-4): not shutting down, the shared store not down
    /// under `fail-closed` (C-RATE-5), and some backend available (saturated counts as up).
    #[must_use]
    pub fn ready(&self, rt: &Runtime, now: Instant) -> bool {
        self.not_ready_reason(rt, now).is_none()
    }

    /// Which of the three causes keeps weir from being ready (C-OBS-4): `None` when
    /// ready; else the first that holds, in [`NotReady`]'s order.
    #[must_use]
    pub fn not_ready_reason(&self, rt: &Runtime, now: Instant) -> Option<NotReady> {
        if self.is_shutting_down() {
            return Some(NotReady::ShuttingDown);
        }
        if !self.rate_ready(rt) {
            return Some(NotReady::RateLimitStoreDown);
        }
        let any = rt.pools().iter().any(|pool| {
            pool.backends().iter().any(|b| {
                matches!(
                    b.availability(pool.params(), now),
                    Availability::Available | Availability::Saturated
                )
            })
        });
        (!any).then_some(NotReady::NoBackendAvailable)
    }

    /// The limiter's part of readiness: false only while rate limiting is on, the shared store
    /// is down and the mode is `fail-closed`.
    #[must_use]
    pub fn rate_ready(&self, rt: &Runtime) -> bool {
        let rate = &rt.config().rate;
        !rate.enabled() || !self.storage.is_shared() || self.circuit.ready(rate.failure_mode())
    }
}

/// Where an exchange is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// In the gate's queue with this ticket until `deadline` (C-LOAD-1).
    Queued {
        /// The gate ticket.
        ticket: u64,
        /// When the wait ends.
        deadline: Instant,
    },
    /// Waiting for the shared store's answer until `deadline` (C-RATE-5).
    Store {
        /// The circuit's permission for this call.
        call: Call,
        /// `operation_timeout` after the call began.
        deadline: Instant,
    },
    /// Reading the request body for replay, until `deadline` (`read_timeout`).
    Buffering {
        /// When reading must be done.
        deadline: Option<Instant>,
    },
    /// An attempt is out, sent at `sent` (its deadline: [`Exchange::poll_timeout`]); with a
    /// hedge (C-HEDGE-1), two are, and `sent` is the earlier's.
    Awaiting {
        /// When the (earlier) attempt was sent.
        sent: Instant,
    },
    /// A response was delivered; its body streams until `deadline` (`write_timeout`).
    Streaming {
        /// When the body must be done.
        deadline: Option<Instant>,
    },
    /// Over: nothing is held.
    Done,
}

/// One request's exchange. See the module doc.
///
/// Kinds of methods:
/// - constructor: [`Exchange::new`] (runs every step up to the first wait);
/// - facts in: [`Exchange::handle_input`];
/// - actions out: [`Exchange::poll_output`], [`Exchange::poll_timeout`];
/// - getters: [`Exchange::stage`], [`Exchange::request_id`], [`Exchange::client`],
///   [`Exchange::backend`], [`Exchange::synthetic`], [`Exchange::response_headers`], …
#[derive(Debug)]
pub struct Exchange {
    rt: Arc<Runtime>,
    services: Arc<Services>,
    method: http::Method,
    request_id: RequestId,
    id_kept: bool,
    client: IpAddr,
    proto: Proto,
    upgrade: bool,
    /// A gRPC call (`content-type: application/grpc…`): weir's own answers take the gRPC form
    /// (C-GRPC-3).
    grpc: bool,
    /// The call's own deadline, its `grpc-timeout` counted from arrival (C-GRPC-2).
    grpc_deadline: Option<Instant>,
    /// The route's pool snapshot and bulkhead (C-ROUTE-1), taken from `rt` at creation.
    target: FlowTarget,
    /// The route that matched (`None`: the default pool).
    route: Option<usize>,
    /// The index in `rt` of the pool `target` holds ([`Runtime::pool`]).
    pool_index: usize,
    pick: PickContext,
    /// Why the target cannot be proxied, if it cannot (authority-form, `*` without OPTIONS).
    target_error: Option<ClientError>,
    body: BodyInfo,
    body_kind: BodyKind,
    send_body: SendBody,
    started: Instant,
    now: Instant,
    stage: Stage,
    /// When the current wait (the gate's queue, a store call) began (metrics).
    waiting_since: Instant,
    gate_held: bool,
    flow: Option<Flow>,
    /// The allowed rate outcome whose headers every later response carries (C-RATE-1).
    rate: Option<RateOutcome>,
    /// Dry run let this request through over the limit (C-RATE-8): its record says so.
    rate_dry_run: bool,
    /// The final answer weir made itself, if it made one.
    answer: Option<Answer>,
    recorded: bool,
    /// Attempts sent and the backend of the latest.
    attempts: u32,
    /// The hedge's attempt number, once one was sent (C-HEDGE-1).
    hedge: Option<u32>,
    backend: Option<usize>,
    /// How the latest attempt ended, and the status of the latest response head (access log,
    /// circuit transitions).
    last_result: Option<AttemptResult>,
    upstream_status: Option<u16>,
    /// The mirror pool's selection context, when the route mirrors (C-MIRROR-1).
    mirror_pick: Option<PickContext>,
    /// The mirror decided for this request, until the adapter takes it
    /// ([`Exchange::take_mirror`]); and whether its [`Output::Mirror`] went out.
    mirror: Option<crate::mirror::Mirror>,
    mirror_out: bool,
    outbox: Outbox,
}

impl Exchange {
    /// Create the exchange of one request arriving at `now` and run it up to its first wait:
    /// the request id in force (C-PATH-3), then the steps of the module doc. Drain
    /// [`Exchange::poll_output`] afterwards.
    pub fn new<H: HeaderLines + ?Sized>(
        rt: Arc<Runtime>,
        services: Arc<Services>,
        head: &Head<'_, H>,
        now: Instant,
        rng: &mut dyn Rng,
    ) -> Exchange {
        let mut x = Exchange::arrive(rt, services, head, now, rng);
        x.start(head, now, rng);
        x
    }

    /// The first half of [`Exchange::new`]: the exchange of a request arriving at `now`, before
    /// any step. Call [`Exchange::start`] with the same `head` and `now` before anything else.
    /// The two halves let an adapter build the exchange (about 1.5 KB) where it keeps it, rather
    /// than move it out of `new`.
    #[inline]
    pub fn arrive<H: HeaderLines + ?Sized>(
        rt: Arc<Runtime>,
        services: Arc<Services>,
        head: &Head<'_, H>,
        now: Instant,
        rng: &mut dyn Rng,
    ) -> Exchange {
        let (request_id, origin) = request_id_in_force(head.headers, rng);
        let resolution = resolve_client(head.peer, head.headers, rt.trusted_proxies());
        let (target, m) = rt.target(head.path);
        let pick = rt.pick_context(m.pool, resolution.client, head.headers);
        let mirror_pick = m
            .route
            .and_then(|r| rt.config().routes.get(r))
            .and_then(|r| r.mirror)
            .map(|spec| rt.pick_context(spec.pool, resolution.client, head.headers));
        let grpc = crate::grpc::is_grpc(head.headers);
        let (grpc_deadline, grpc_error) = grpc_deadline(grpc, head.headers, now);
        Exchange {
            method: head.method.clone(),
            request_id,
            id_kept: origin.is_kept(),
            client: resolution.client,
            proto: if head.tls {
                Proto::Https
            } else {
                forwarded_proto(resolution.peer_trusted, head.headers)
            },
            upgrade: wants_upgrade(head.headers),
            grpc,
            grpc_deadline,
            target,
            route: m.route,
            pool_index: m.pool,
            pick,
            target_error: target_error(head.method, head.target).or(grpc_error),
            body: head.body,
            body_kind: BodyKind::None,
            send_body: SendBody::Empty,
            started: now,
            now,
            stage: Stage::Done,
            waiting_since: now,
            gate_held: false,
            flow: None,
            rate: None,
            rate_dry_run: false,
            answer: None,
            recorded: false,
            attempts: 0,
            hedge: None,
            backend: None,
            last_result: None,
            upstream_status: None,
            mirror_pick,
            mirror: None,
            mirror_out: false,
            outbox: Outbox::new(),
            rt,
            services,
        }
    }

    /// The second half of [`Exchange::new`] (after [`Exchange::arrive`], once): run the steps
    /// up to the first wait. Drain [`Exchange::poll_output`] afterwards.
    pub fn start<H: HeaderLines + ?Sized>(
        &mut self,
        head: &Head<'_, H>,
        now: Instant,
        rng: &mut dyn Rng,
    ) {
        self.begin(head, now, rng);
        self.flow_reports();
    }

    /// Feed one fact at `now`. Facts that do not apply where the exchange is are ignored.
    pub fn handle_input(&mut self, input: Input, now: Instant, rng: &mut dyn Rng) {
        let now = self.clamp(now);
        self.step(input, now, rng);
        self.flow_reports();
    }

    /// Queue what the flow has to report about the pool: a circuit transition (C-HEALTH-3) and
    /// the outlier ejections and returns judged at its start (C-OUT-2).
    fn flow_reports(&mut self) {
        let Some(flow) = self.flow.as_mut() else {
            return;
        };
        if let Some(events) = flow.take_outlier_events() {
            self.outbox.push(Output::Outliers(events.into()));
        }
        if let Some((backend, transition)) = self.flow.as_mut().and_then(Flow::take_transition) {
            self.outbox.push(Output::Metric(Metric::Circuit {
                backend,
                transition,
                cause: self.last_result.unwrap_or(AttemptResult::Success),
            }));
        }
    }

    /// The next action for the adapter, in order; `None` when there is nothing to do.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outbox.pop()
    }

    /// The exchange's next deadline, if it has one: the queue deadline, the store call's
    /// `operation_timeout`, the body's `read_timeout`, the attempt's header deadline (the
    /// earlier of `per_try_timeout` and `response_header_timeout`, merged here), or the response
    /// body's `write_timeout`. At or after it, feed [`Input::Timeout`].
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let stage = match self.stage {
            // The mutation breaks the queue's expiry wherever it is decided (docs/simulation.md).
            Stage::Queued { deadline, .. } => (!mutated!(GATE_NEVER_EXPIRES)).then_some(deadline),
            Stage::Store { deadline, .. } => Some(deadline),
            Stage::Buffering { deadline } | Stage::Streaming { deadline } => deadline,
            Stage::Awaiting { .. } => self.awaiting_deadline(),
            Stage::Done => return None,
        };
        // A gRPC call's own deadline bounds every stage (C-GRPC-2); a delivered response's
        // deadline already includes it.
        match (stage, self.grpc_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Where the exchange is.
    #[must_use]
    pub fn stage(&self) -> Stage {
        self.stage
    }

    /// Whether the exchange is over (nothing held, nothing more to do).
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.stage == Stage::Done
    }

    /// The runtime snapshot this request runs on, for its whole life.
    #[must_use]
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.rt
    }

    /// The request id in force (C-PATH-3).
    #[must_use]
    pub fn request_id(&self) -> &RequestId {
        &self.request_id
    }

    /// Whether the id in force is the client's own `X-Request-ID` (so its header value can be
    /// reused as it is).
    #[must_use]
    pub fn request_id_kept(&self) -> bool {
        self.id_kept
    }

    /// The resolved client address (C-FWD-1).
    #[must_use]
    pub fn client(&self) -> IpAddr {
        self.client
    }

    /// The scheme to tell the backend (C-FWD-2).
    #[must_use]
    pub fn proto(&self) -> Proto {
        self.proto
    }

    /// The client asked for an upgrade (C-PATH-8): keep its upgrade handle.
    #[must_use]
    pub fn upgrade_requested(&self) -> bool {
        self.upgrade
    }

    /// The client key of the rate limiter (C-RATE-2).
    #[must_use]
    pub fn client_key(&self) -> ClientKey {
        self.rt.config().rate.key().key(self.client)
    }

    /// Backend `index` of this request's pool snapshot (the index of [`Send`] and [`Delivery`]).
    #[must_use]
    pub fn backend(&self, index: usize) -> Option<&Arc<Backend>> {
        self.target.pool.backends().get(index)
    }

    /// The pool snapshot this request selects from (its route's, at creation).
    #[must_use]
    pub fn pool(&self) -> &Arc<crate::pool::Pool> {
        &self.target.pool
    }

    /// The index of [`pool`](Self::pool) in [`runtime`](Self::runtime) ([`Runtime::pool`]): with
    /// the index of a [`Send`] or [`Delivery`], where a data path keeps per-backend handles of
    /// its own.
    #[must_use]
    pub fn pool_index(&self) -> usize {
        self.pool_index
    }

    /// The route that matched (C-ROUTE-1), `None` for the default pool without a route.
    #[must_use]
    pub fn route(&self) -> Option<usize> {
        self.route
    }

    /// The mirror announced by [`Output::Mirror`], once (C-MIRROR-1): the adapter sends it on its
    /// own, never waited for, and finishes it ([`crate::mirror::Mirror::finish`]) with its
    /// outcome. A mirror never taken is given back when the exchange ends, neutral.
    pub fn take_mirror(&mut self) -> Option<crate::mirror::Mirror> {
        if self.mirror_out {
            self.mirror.take()
        } else {
            None
        }
    }

    /// When a hedge is due (C-HEDGE-1), while one may still be sent: the data path runs the
    /// attempt so that a hedge can go beside it (every data path can run any two attempts).
    #[must_use]
    pub fn hedge_at(&self) -> Option<Instant> {
        self.flow.as_ref().and_then(Flow::hedge_at)
    }

    /// Attempts sent so far.
    #[must_use]
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Whether this request holds a gate slot now.
    #[must_use]
    pub fn holds_gate(&self) -> bool {
        self.gate_held
    }

    /// The allowed rate outcome, once the limiter allowed the request.
    #[must_use]
    pub fn rate_outcome(&self) -> Option<&RateOutcome> {
        self.rate.as_ref()
    }

    /// Whether the request is a gRPC call (C-GRPC-3: its content type starts with
    /// `application/grpc`).
    #[must_use]
    pub fn is_grpc(&self) -> bool {
        self.grpc
    }

    /// The call's deadline from its `grpc-timeout` (C-GRPC-2), counted from arrival.
    #[must_use]
    pub fn grpc_deadline(&self) -> Option<Instant> {
        self.grpc_deadline
    }

    /// The `grpc-timeout` to send upstream with an attempt sent `at` ([`Send::at`]): what
    /// remains of the call's deadline, never more (C-GRPC-2). `None` when the call has no
    /// deadline of its own (the header is then not sent, as the client sent none).
    #[must_use]
    pub fn upstream_grpc_timeout(&self, at: Instant) -> Option<crate::grpc::timeout::Timeout> {
        self.grpc_deadline
            .map(|d| crate::grpc::timeout::encode(d.saturating_since(at)))
    }

    /// The synthetic response of `answer` (C-PATH-11): status, headers, JSON body; for a gRPC
    /// call its gRPC form (C-GRPC-3, [`SyntheticResponse::for_grpc`]). `None` for the health
    /// answers (see [`Answer::health_body`]). Write its [`status`](SyntheticResponse::status):
    /// [`Answer::status`] is the outcome's, which the access log and metrics keep.
    #[must_use]
    pub fn synthetic(&self, answer: &Answer) -> Option<SyntheticResponse<'_>> {
        let rid = self.request_id.as_str();
        let s = match answer {
            Answer::Live | Answer::Ready => return None,
            Answer::Client(e) => SyntheticResponse::client_error(e, rid),
            Answer::Reject(r) => SyntheticResponse::reject(r, rid),
            Answer::Failure(f) => SyntheticResponse::failure(f, rid),
        };
        Some(s.for_grpc(self.grpc))
    }

    /// The headers weir sets (with `insert`) on a response of status `status`, besides the
    /// synthetic response's own: for a delivered response the C-PATH-4 headers, and on every
    /// response but a `429` the rate headers of an allowed request (C-RATE-1).
    pub fn response_headers(
        &self,
        delivery: Option<&Delivery>,
        status: u16,
    ) -> impl Iterator<Item = (&'static str, Text<'_>)> + '_ {
        let backend_id = delivery
            .and_then(|d| self.backend(d.deliver.backend))
            .map_or("", |b| b.id());
        let delivered = delivery
            .copied()
            .into_iter()
            .flat_map(move |d| delivered_headers(&d.deliver, backend_id, &self.request_id));
        let rate = self
            .rate
            .filter(|_| status != 429)
            .into_iter()
            .flat_map(|o| o.headers().map(|(n, v)| (n, Text::from(v))));
        delivered.chain(rate)
    }

    fn clamp(&mut self, now: Instant) -> Instant {
        self.now = self.now.max(now);
        self.now
    }

    /// The merged header deadline of attempt `p`: the flow's `per_try_timeout` deadline and
    /// `response_header_timeout` after its sending, whichever is earlier.
    fn attempt_deadline(&self, p: &crate::flow::Pending) -> Instant {
        let transport = self
            .rt
            .config()
            .server
            .upstream
            .response_header_timeout
            .map(|t| p.sent.saturating_add(t));
        transport.map_or(p.header_deadline, |t| t.min(p.header_deadline))
    }

    /// The earliest header deadline of the attempts awaiting their heads, or the hedge's time
    /// (C-HEDGE-1), whichever comes first.
    fn awaiting_deadline(&self) -> Option<Instant> {
        let flow = self.flow.as_ref()?;
        flow.pending()
            .map(|p| self.attempt_deadline(&p))
            .chain(flow.hedge_at())
            .min()
    }

    /// `server.read_timeout` / `write_timeout` counted from the request's arrival.
    fn since_arrival(&self, limit: Option<Duration>) -> Option<Instant> {
        limit.map(|t| self.started.saturating_add(t))
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        // The flow's own Drop releases its slot and bulkhead permit.
        self.release(self.now);
    }
}

/// A gRPC call's deadline: its `grpc-timeout` counted from `now` (C-GRPC-2), or the
/// `INTERNAL` answer to a malformed one (docs/request-flow.md, "Deadlines of gRPC calls").
fn grpc_deadline<H: HeaderLines + ?Sized>(
    grpc: bool,
    headers: &H,
    now: Instant,
) -> (Option<Instant>, Option<ClientError>) {
    if !grpc {
        return (None, None);
    }
    let name = http::HeaderName::from_static(crate::grpc::timeout::NAME);
    match headers.first_line(&name).map(crate::grpc::timeout::parse) {
        None => (None, None),
        Some(Ok(t)) => (Some(now.saturating_add(t)), None),
        Some(Err(_)) => (None, Some(ClientError::MalformedGrpcTimeout)),
    }
}

/// Why a target that is not origin-form cannot be proxied, if it cannot.
fn target_error(method: &http::Method, target: &str) -> Option<ClientError> {
    if target.starts_with('/') {
        return None;
    }
    // "http://validation.invalid" always parses; a base is needed only to ask core's URI rules.
    let base = BackendBase::parse("http://validation.invalid").ok()?;
    match base.upstream_uri(method, target) {
        Ok(_) => None,
        Err(UpstreamUriError::AsteriskWithoutOptions) => Some(ClientError::AsteriskWithoutOptions),
        Err(_) => Some(ClientError::UnsupportedTarget),
    }
}
