//! The discrete-event world: a virtual clock that jumps to the next event, the real core
//! machines driven exactly as an adapter drives them, simulated clients and backends.
//!
//! One request, in the order of C-PATH-2: the overload gate (`Gate::enter`; a queued request
//! waits for a hand-off, its deadline or its client leaving, and settles its ticket with exactly
//! one `cancel`), the rate limiter (`LocalStore::take`), the route (`RouteTable::lookup`), then
//! the flow machine (`Flow::start`, which takes the route's bulkhead permit and selects a
//! backend) and every fact about its attempts (`handle_response_head`, `handle_error`,
//! `handle_timeout` at `poll_timeout`, `handle_body_end`). When the request is done the gate slot
//! is left, and a waiter it is handed to proceeds at once.
//!
//! Time: every future fact is an event in a `BTreeMap` keyed by `(instant, sequence)`, so ties
//! run in the order they were scheduled and nothing depends on hash order. Machines that wait
//! (the flow's header deadline, the gate's queue, each probe schedule) are asked for their
//! `poll_timeout` after every call, and a timer event is armed for it.
//!
//! Randomness: one seed. The world's master `WyRand` forks one child each for the setup,
//! arrivals, clients, backends and the core; nothing else draws.

mod check;
mod health;

use core::time::Duration;
use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use weir_core::Instant;
use weir_core::admission::{Cancel, Entry, Gate};
use weir_core::breaker::CircuitState;
use weir_core::bucket::{BucketParams, Take};
use weir_core::budget::RetryBudget;
use weir_core::bulkhead::Bulkhead;
use weir_core::flow::{Action, AttemptError, BodyEnd, Flow, FlowTarget, RequestMeta};
use weir_core::health::{HealthParams, ProbeToken};
use weir_core::pool::{Backend, PoolParams};
use weir_core::rate::{ClientKey, KeyParams, LocalStore, LocalStoreParams};
use weir_core::response::Reject;
use weir_core::retry::{BodyKind, NoRetryReason, RetryPolicy};
use weir_core::rng::{Rng, WyRand};
use weir_core::route::RouteTable;
use weir_core::select::{NoBackend, PickContext, hash_key};

use crate::backend::{Fault, Reply, SimBackend, uniform};
use crate::model::BucketModel;
use crate::report::{Invariant, Summary, Violation};
use crate::scenario::{Scenario, Setup};
use crate::trace::{Header, Rec, Trace};

use health::{PoolSlot, Runner};

/// Requests are spread over this many simulated workers (per-worker policy cursors).
const WORKERS: usize = 4;
/// A run that processes more events than this is stuck in a loop.
const MAX_EVENTS: u64 = 5_000_000;
/// A run whose requests are not all done this long after traffic stopped is stuck.
const SETTLE: Duration = Duration::from_secs(120);

type Arc<T> = std::sync::Arc<T>;

/// A future fact.
#[derive(Debug, Clone, Copy)]
enum Ev {
    /// The next arrival of a stream (`arrive: false` only re-reads the rate).
    Arrival { stream: usize, arrive: bool },
    /// The client of `req` goes away (early disconnect or patience exhausted).
    Disconnect { req: usize },
    /// A queued request's own deadline.
    QueueDeadline { req: usize },
    /// The gate's `poll_timeout` came.
    GateTimer { generation: u64 },
    /// An attempt's fate shows.
    Reply {
        req: usize,
        attempt: u32,
        reply: Reply,
    },
    /// A flow's `poll_timeout` came.
    FlowTimer { req: usize },
    /// A delivered body ended.
    BodyEnd { req: usize, attempt: u32 },
    /// A probe answered.
    ProbeReply {
        runner: u64,
        token: ProbeToken,
        backend: usize,
        ok: bool,
    },
    /// A probe schedule's `poll_timeout` came.
    HealthTimer { runner: u64, generation: u64 },
    /// A fault hits a backend.
    Fault { backend: usize, fault: Fault },
    /// A scheduled reload.
    Reload { index: usize },
    /// The operator drains a backend.
    Drain { backend: usize },
    /// The liveness deadline: the pool must have converged.
    Liveness,
    /// No more arrivals.
    StopTraffic,
}

impl Ev {
    fn tag(&self) -> u8 {
        match self {
            Ev::Arrival { .. } => 0,
            Ev::Disconnect { .. } => 1,
            Ev::QueueDeadline { .. } => 2,
            Ev::GateTimer { .. } => 3,
            Ev::Reply { .. } => 4,
            Ev::FlowTimer { .. } => 5,
            Ev::BodyEnd { .. } => 6,
            Ev::ProbeReply { .. } => 7,
            Ev::HealthTimer { .. } => 8,
            Ev::Fault { .. } => 9,
            Ev::Reload { .. } => 10,
            Ev::Drain { .. } => 13,
            Ev::Liveness => 11,
            Ev::StopTraffic => 12,
        }
    }
}

/// How a slot on a backend was granted (as observed right after the reservation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Permit {
    Normal,
    Trial,
    Panic,
}

/// The attempt a request has out (or whose body streams).
#[derive(Debug, Clone, Copy)]
struct Current {
    /// Attempt number.
    n: u32,
    /// Index into `World::tracked`.
    tracked: usize,
    /// Index into `World::backends`.
    sim: usize,
    permit: Permit,
    /// The planned body duration once a head arrived (`None`: it hangs).
    body: Option<Duration>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// In the gate's queue with this ticket.
    Queued { ticket: u64 },
    /// Holds a gate slot handed over by a leaving request; proceeds within the same event.
    Admitted,
    /// The flow awaits a response head.
    Waiting,
    /// A response was delivered; its body streams.
    Streaming,
    /// Finished: nothing held.
    Done,
}

#[derive(Debug)]
struct Request {
    key: ClientKey,
    hash: u64,
    arrival: Instant,
    method: http::Method,
    body: BodyKind,
    path: &'static str,
    stage: Stage,
    flow: Option<Flow>,
    snapshot: usize,
    route: Option<usize>,
    current: Option<Current>,
    tried: Vec<usize>,
    client_gone: bool,
    holds_gate: bool,
    holds_bulkhead: bool,
    responded: bool,
    abandoned: bool,
    /// Counted as finished (answered and holding nothing).
    settled: bool,
}

/// A core `Backend` the world has seen, with the world's own accounting of it.
#[derive(Debug)]
struct Tracked {
    arc: Arc<Backend>,
    sim: usize,
    /// Slots the world's requests hold on it.
    slots: u32,
    /// The circuit state after the previous event.
    state: CircuitState,
    /// Whether it was enabled, not draining and healthy after the previous event.
    eligible: bool,
    /// The model's start of the slow-start ramp (C-HEALTH-4).
    warm_since: Instant,
    /// Successful half-open trials after the faults ended (liveness).
    trial_successes: u64,
}

/// A pool snapshot and the tracked backend behind each of its indices.
#[derive(Debug)]
struct Snapshot {
    pool: Arc<weir_core::pool::Pool>,
    tracked: Vec<usize>,
}

/// Counters for the summary.
#[derive(Debug, Default)]
struct Stats {
    requests: u64,
    succeeded: u64,
    delivered_5xx: u64,
    failed: u64,
    overloaded: u64,
    rate_limited: u64,
    rejected: u64,
    abandoned: u64,
    retries: u64,
    budget_refusals: u64,
    ejections: u64,
    panic_selections: u64,
    health_flips: u64,
    reloads_published: u64,
    reloads_rejected: u64,
}

/// The slow-start share measurement of the watched backend (C-HEALTH-4).
#[derive(Debug, Default)]
struct ShareStats {
    samples: u64,
    observed: u64,
    expected: f64,
    variance: f64,
}

/// A fact about the current attempt, fed to the flow.
#[derive(Debug, Clone, Copy)]
enum Fact {
    Head(u16),
    Error(AttemptError),
    Timeout,
}

/// The world. See the module doc.
pub(crate) struct World<'w> {
    scenario: Scenario,
    seed: u64,
    s: Setup,
    now: Instant,
    queue: BTreeMap<(Instant, u64), Ev>,
    seq: u64,
    events: u64,

    rng_arrivals: WyRand,
    rng_clients: WyRand,
    rng_backends: WyRand,
    rng_core: WyRand,

    policy: Arc<RetryPolicy>,
    budget: Arc<RetryBudget>,
    gate: Gate,
    store: LocalStore,
    bucket: Option<BucketParams>,
    key_params: KeyParams,
    routes: RouteTable,
    bulkheads: Vec<Option<Arc<Bulkhead>>>,
    pool_params: PoolParams,
    health_params: HealthParams,
    pools: Vec<PoolSlot>,
    snapshots: Vec<Snapshot>,
    runners: BTreeMap<u64, Runner>,
    next_runner: u64,
    gate_timer: Option<Instant>,
    gate_timer_gen: u64,

    backends: Vec<SimBackend>,
    tracked: Vec<Tracked>,
    requests: Vec<Request>,
    tickets: BTreeMap<u64, usize>,
    handed: VecDeque<usize>,
    live_requests: u64,
    listening: bool,
    traffic_on: bool,
    traffic_end: Instant,
    liveness_at: Instant,
    liveness_checked: bool,

    budget_model: BucketModel,
    budget_grants: u64,
    rate_models: BTreeMap<ClientKey, (Instant, u64, BucketModel)>,
    gate_holders: u32,
    bulkhead_holders: Vec<u32>,
    share: ShareStats,
    stats: Stats,
    latencies_us: Vec<u64>,

    trace: Trace<'w>,
    violation: Option<Violation>,
}

impl<'w> World<'w> {
    /// Build the world of `scenario` for `seed`; with `sink`, the event log is also written to it.
    pub(crate) fn new(
        scenario: Scenario,
        seed: u64,
        sink: Option<&'w mut dyn std::io::Write>,
    ) -> Result<World<'w>, String> {
        let mut master = WyRand::new(seed ^ scenario_salt(scenario));
        let mut rng_setup = master.fork();
        let s = scenario.setup(seed, &mut rng_setup);
        let rng_arrivals = master.fork();
        let rng_clients = master.fork();
        let rng_backends = master.fork();
        let mut rng_core = master.fork();

        let policy = Arc::new(RetryPolicy::new(s.retry.clone()).map_err(|e| e.to_string())?);
        let budget = Arc::new(RetryBudget::new(policy.budget_params()));
        let budget_model = BucketModel::new(
            policy.budget_params().capacity(),
            policy.budget_params().interval(),
        );
        let gate = Gate::new(s.gate);
        let store = LocalStore::new(
            LocalStoreParams {
                shards: 4,
                max_buckets: 4096,
            },
            rng_core.next_u64(),
        )
        .map_err(|e| e.to_string())?;
        let bucket = match s.rate {
            Some((capacity, refill)) => {
                Some(BucketParams::new(capacity, refill).map_err(|e| e.to_string())?)
            }
            None => None,
        };
        let key_params = KeyParams::new(32, 64).map_err(|e| e.to_string())?;
        let routes = RouteTable::new(s.routes.iter().map(|r| (r.prefix, r.pool)), 0)
            .map_err(|e| e.to_string())?;
        let bulkheads = s
            .routes
            .iter()
            .map(|r| {
                r.limit
                    .map(|l| Bulkhead::new(Some(l)).map(Arc::new))
                    .transpose()
                    .map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, _>>()?;
        let health_params = HealthParams::new(&s.health).map_err(|e| e.to_string())?;
        let pool_params = s.pool_params();
        let backends = s.backends.clone();
        let header = Header {
            kind: "header",
            scenario: scenario.name(),
            seed,
            backends: backends.iter().map(|b| b.id.clone()).collect(),
            pools: s
                .pools
                .iter()
                .map(|p| (p.backends.clone(), p.policy.as_str()))
                .collect(),
            routes: s
                .routes
                .iter()
                .map(|r| (r.prefix, r.pool, r.limit))
                .collect(),
        };
        let trace = match sink {
            Some(sink) => Trace::writing(sink, &header),
            None => Trace::hashing(),
        };
        let liveness_at = s.fault_end + s.liveness_bound();
        let traffic_end = liveness_at + Duration::from_secs(1);
        let n_routes = s.routes.len();
        let mut world = World {
            scenario,
            seed,
            s,
            now: Instant::ZERO,
            queue: BTreeMap::new(),
            seq: 0,
            events: 0,
            rng_arrivals,
            rng_clients,
            rng_backends,
            rng_core,
            policy,
            budget,
            gate,
            store,
            bucket,
            key_params,
            routes,
            bulkheads,
            pool_params,
            health_params,
            pools: Vec::new(),
            snapshots: Vec::new(),
            runners: BTreeMap::new(),
            next_runner: 0,
            gate_timer: None,
            gate_timer_gen: 0,
            backends,
            tracked: Vec::new(),
            requests: Vec::new(),
            tickets: BTreeMap::new(),
            handed: VecDeque::new(),
            live_requests: 0,
            listening: false,
            traffic_on: false,
            traffic_end,
            liveness_at,
            liveness_checked: false,
            budget_model,
            budget_grants: 0,
            rate_models: BTreeMap::new(),
            gate_holders: 0,
            bulkhead_holders: vec![0; n_routes],
            share: ShareStats::default(),
            stats: Stats::default(),
            latencies_us: Vec::new(),
            trace,
            violation: None,
        };
        world.build_pools()?;
        Ok(world)
    }

    /// Run to the end: `Ok(summary)`, or the first invariant that broke.
    pub(crate) fn run(mut self) -> (Result<Summary, Violation>, Option<std::io::Error>) {
        let result = self.run_inner();
        let error = self.trace.take_error();
        (result, error)
    }

    fn run_inner(&mut self) -> Result<Summary, Violation> {
        self.start();
        self.check_all();
        if let Some(v) = self.violation.take() {
            return Err(v);
        }
        while let Some(((t, _), ev)) = self.queue.pop_first() {
            self.now = t;
            self.events += 1;
            self.trace.mix((t.as_nanos(), ev.tag()));
            self.handle(ev);
            self.drain_handed();
            self.check_all();
            if let Some(v) = self.violation.take() {
                return Err(v);
            }
            if self.is_finished() {
                break;
            }
            if self.events > MAX_EVENTS || self.now > self.traffic_end + SETTLE {
                self.fail(
                    Invariant::Liveness,
                    format!(
                        "the run did not settle: {} events, {} requests still live at t={}",
                        self.events,
                        self.live_requests,
                        crate::report::Millis(self.now)
                    ),
                );
                return Err(self
                    .violation
                    .take()
                    .unwrap_or_else(|| self.violation(Invariant::Liveness, String::new())));
            }
        }
        self.final_checks();
        if let Some(v) = self.violation.take() {
            return Err(v);
        }
        Ok(self.summary())
    }

    fn is_finished(&self) -> bool {
        !self.traffic_on
            && self.listening
            && self.liveness_checked
            && self.live_requests == 0
            && self.now >= self.traffic_end
    }

    fn start(&mut self) {
        let faults = self.s.faults.clone();
        for (at, backend, fault) in faults {
            self.schedule(at, Ev::Fault { backend, fault });
        }
        let drains = self.s.drains.clone();
        for (at, backend) in drains {
            self.schedule(at, Ev::Drain { backend });
        }
        for index in 0..self.s.reloads.len() {
            let at = self.s.reloads[index].at;
            self.schedule(at, Ev::Reload { index });
        }
        self.schedule(self.liveness_at, Ev::Liveness);
        self.schedule(self.traffic_end, Ev::StopTraffic);
        let runners: Vec<u64> = self.runners.keys().copied().collect();
        for rid in runners {
            self.drive_runner(rid);
        }
    }

    fn schedule(&mut self, at: Instant, ev: Ev) {
        let at = at.max(self.now);
        self.seq += 1;
        self.queue.insert((at, self.seq), ev);
    }

    fn record(&mut self, rec: Rec) {
        self.trace.record(self.now.as_nanos(), rec);
    }

    fn violation(&self, invariant: Invariant, detail: String) -> Violation {
        Violation {
            scenario: self.scenario.name(),
            seed: self.seed,
            invariant,
            at: self.now,
            detail,
        }
    }

    /// Note a broken invariant (the first one wins; the run stops after this event).
    fn fail(&mut self, invariant: Invariant, detail: String) {
        if self.violation.is_none() {
            self.violation = Some(self.violation(invariant, detail));
        }
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Arrival { stream, arrive } => self.arrival(stream, arrive),
            Ev::Disconnect { req } => self.disconnect(req),
            Ev::QueueDeadline { req } => self.queue_deadline(req),
            Ev::GateTimer { generation } => self.gate_timer_fired(generation),
            Ev::Reply {
                req,
                attempt,
                reply,
            } => self.reply(req, attempt, reply),
            Ev::FlowTimer { req } => {
                if matches!(self.requests[req].stage, Stage::Waiting) {
                    self.feed(req, Fact::Timeout);
                }
            }
            Ev::BodyEnd { req, attempt } => {
                let r = &self.requests[req];
                if r.stage == Stage::Streaming && r.current.is_some_and(|c| c.n == attempt) {
                    self.end_body(req, BodyEnd::Complete);
                }
            }
            Ev::ProbeReply {
                runner,
                token,
                backend,
                ok,
            } => self.probe_reply(runner, token, backend, ok),
            Ev::HealthTimer { runner, generation } => self.health_timer(runner, generation),
            Ev::Fault { backend, fault } => self.fault(backend, fault),
            Ev::Reload { index } => self.reload(index),
            Ev::Drain { backend } => self.drain(backend),
            Ev::Liveness => {
                self.liveness_checked = true;
                self.check_liveness();
            }
            Ev::StopTraffic => {
                self.traffic_on = false;
                self.record(Rec::Traffic { on: false });
            }
        }
    }

    // ---------------------------------------------------------------- clients and arrivals

    /// Open the listeners once every pool finished a check cycle (C-HEALTH-1).
    fn maybe_listen(&mut self) {
        if self.listening {
            return;
        }
        let ready = self.pools.iter().all(|p| {
            self.runners
                .get(&p.runner)
                .is_some_and(|r| r.schedule.cycles_completed() >= 1)
        });
        if !ready {
            return;
        }
        self.listening = true;
        self.traffic_on = self.now < self.traffic_end;
        self.record(Rec::Traffic { on: true });
        for stream in 0..self.s.streams.len() {
            self.schedule(
                self.now,
                Ev::Arrival {
                    stream,
                    arrive: false,
                },
            );
        }
    }

    fn arrival(&mut self, stream: usize, arrive: bool) {
        if !self.traffic_on {
            return;
        }
        let rate = self.s.streams[stream].rate_at(self.now);
        let change = self.s.streams[stream].next_change(self.now);
        if rate == 0 {
            if let Some(t) = change {
                self.schedule(
                    t,
                    Ev::Arrival {
                        stream,
                        arrive: false,
                    },
                );
            }
        } else {
            // Exponential gaps: a Poisson process at the current rate.
            let u = (self.rng_arrivals.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            let gap_ns = (-(1.0 - u).ln() * 1e9 / f64::from(rate)) as u64;
            let next = self.now + Duration::from_nanos(gap_ns.max(1));
            match change {
                Some(t) if t < next => self.schedule(
                    t,
                    Ev::Arrival {
                        stream,
                        arrive: false,
                    },
                ),
                _ => self.schedule(
                    next,
                    Ev::Arrival {
                        stream,
                        arrive: true,
                    },
                ),
            }
        }
        if arrive {
            self.new_request(stream);
        }
    }

    fn new_request(&mut self, stream: usize) {
        let st = &self.s.streams[stream];
        let span = u64::from(st.clients.end - st.clients.start);
        let client = st.clients.start + self.rng_clients.below(span) as u32;
        let path = st.paths[self.rng_clients.below(st.paths.len() as u64) as usize];
        let ip = if st.v6 {
            // One /64, a fresh interface id per request (privacy addresses, C-RATE-2).
            let iid = self.rng_clients.next_u64();
            IpAddr::V6(Ipv6Addr::from(
                (0x2001_0db8_0007_0001u128 << 64) | u128::from(iid),
            ))
        } else {
            let [_, b, c, d] = client.to_be_bytes();
            IpAddr::V4(Ipv4Addr::new(10, b, c, d))
        };
        let key = ClientKey::new(ip, &self.key_params);
        let hash = match ip {
            IpAddr::V4(v4) => hash_key(&v4.octets()),
            IpAddr::V6(v6) => hash_key(&v6.octets()),
        };
        let (method, body) = match self.rng_clients.below(100) {
            0..=69 => (http::Method::GET, BodyKind::None),
            70..=74 => (http::Method::HEAD, BodyKind::None),
            75..=76 => (http::Method::OPTIONS, BodyKind::None),
            77..=86 => (
                http::Method::POST,
                BodyKind::Sized(1 + self.rng_clients.below(4096)),
            ),
            87..=93 => (
                http::Method::PUT,
                BodyKind::Sized(100 + self.rng_clients.below(128 * 1024)),
            ),
            _ => (http::Method::PUT, BodyKind::Streaming),
        };
        let leave_after = if self.rng_clients.chance_permille(self.s.disconnect_permille) {
            Duration::from_millis(1) + uniform(&mut self.rng_clients, Duration::from_secs(3))
        } else {
            self.s.patience
        };
        let req = self.requests.len();
        self.requests.push(Request {
            key,
            hash,
            arrival: self.now,
            method: method.clone(),
            body,
            path,
            stage: Stage::Done,
            flow: None,
            snapshot: 0,
            route: None,
            current: None,
            tried: Vec::new(),
            client_gone: false,
            holds_gate: false,
            holds_bulkhead: false,
            responded: false,
            abandoned: false,
            settled: false,
        });
        self.stats.requests += 1;
        self.live_requests += 1;
        self.record(Rec::Arrive {
            req: req as u64,
            client,
            method: method_str(&method),
            path,
        });
        self.schedule(self.now + leave_after, Ev::Disconnect { req });
        // C-PATH-2: the gate first.
        match self.gate.enter(self.now) {
            Entry::Admitted => {
                self.requests[req].holds_gate = true;
                self.gate_holders += 1;
                self.proceed(req);
            }
            Entry::Queued(ticket) => {
                let limit = self.now + self.s.gate.queue_timeout();
                if ticket.deadline > limit {
                    self.fail(
                        Invariant::QueueTimeout,
                        format!(
                            "request {req} queued until {:?}, past now + queue_timeout = {:?}",
                            ticket.deadline, limit
                        ),
                    );
                }
                self.requests[req].stage = Stage::Queued { ticket: ticket.id };
                self.tickets.insert(ticket.id, req);
                self.schedule(ticket.deadline, Ev::QueueDeadline { req });
                self.record(Rec::Queued { req: req as u64 });
            }
            Entry::Rejected(_) => {
                self.respond(req, 503, "overload", 0, false);
                self.done(req);
            }
        }
        self.arm_gate_timer();
    }

    /// The request holds a gate slot: rate limit, route, flow (C-PATH-2).
    fn proceed(&mut self, req: usize) {
        if self.requests[req].client_gone {
            // Handed a slot after its client left: give it back at once.
            self.abandon(req);
            self.complete(req);
            return;
        }
        if let Some(bucket) = self.bucket
            && !self.rate_limit(req, bucket)
        {
            self.respond(req, 429, "rate_limited", 0, false);
            self.complete(req);
            return;
        }
        let found = self.routes.lookup(self.requests[req].path);
        let slot = &self.pools[found.pool];
        let snapshot = slot.snapshot;
        let bulkhead = found
            .route
            .and_then(|r| self.bulkheads.get(r).cloned().flatten());
        let target = FlowTarget {
            pool: Arc::clone(&self.snapshots[snapshot].pool),
            bulkhead,
        };
        let r = &self.requests[req];
        let meta = RequestMeta {
            method: r.method.clone(),
            body: r.body,
            ctx: PickContext {
                worker: req % WORKERS,
                hash: Some(r.hash),
            },
        };
        let watch = self.share_before(snapshot);
        let (flow, action) = Flow::start(
            target,
            &self.policy,
            &self.budget,
            meta,
            self.now,
            &mut self.rng_core,
        );
        let r = &mut self.requests[req];
        r.flow = Some(flow);
        r.snapshot = snapshot;
        r.route = found.route;
        r.stage = Stage::Waiting;
        if let Action::Attempt(a) = action {
            if let Some(route) = found.route
                && self.bulkheads.get(route).is_some_and(Option::is_some)
            {
                r.holds_bulkhead = true;
                self.bulkhead_holders[route] += 1;
            }
            self.share_after(watch, a.backend);
        }
        self.apply(req, action);
    }

    /// Take a rate-limit token for the request's client key; checks the bucket against the
    /// model (C-RATE-1, C-RATE-2). Returns whether it was allowed.
    fn rate_limit(&mut self, req: usize, bucket: BucketParams) -> bool {
        let key = self.requests[req].key;
        let now = self.now;
        let take = self.store.take(key, &bucket, now);
        let allowed = matches!(take, Take::Allowed { .. });
        let entry = self.rate_models.entry(key).or_insert_with(|| {
            (
                now,
                0,
                BucketModel::new(bucket.capacity(), bucket.interval()),
            )
        });
        let model_allows = entry.2.take(now);
        if allowed {
            entry.1 += 1;
        }
        let (first, grants, model) = *entry;
        let peek = self.store.peek(key, &bucket, now);
        let bound = model.max_grants(first, now);
        if grants > bound {
            self.fail(
                Invariant::RateBucket,
                format!(
                    "client {key}: {grants} grants since {:?}, more than capacity + refill x \
                     elapsed = {bound}",
                    first
                ),
            );
        }
        if allowed != model_allows {
            self.fail(
                Invariant::RateBucket,
                format!(
                    "client {key}: the store {} a take the model {}",
                    if allowed { "allowed" } else { "denied" },
                    if model_allows { "allows" } else { "denies" }
                ),
            );
        }
        if peek > bucket.capacity() * 1000 || peek != model.tokens_milli(now) {
            self.fail(
                Invariant::RateBucket,
                format!(
                    "client {key}: {peek} milli-tokens, model {} (capacity {})",
                    model.tokens_milli(now),
                    bucket.capacity()
                ),
            );
        }
        allowed
    }

    fn disconnect(&mut self, req: usize) {
        let stage = self.requests[req].stage;
        if stage == Stage::Done {
            return;
        }
        self.requests[req].client_gone = true;
        self.record(Rec::Disconnect { req: req as u64 });
        match stage {
            Stage::Queued { ticket } => {
                self.tickets.remove(&ticket);
                match self.gate.cancel(ticket, self.now) {
                    Cancel::Removed => {
                        self.abandon(req);
                        self.done(req);
                    }
                    Cancel::Expired => {
                        self.respond(req, 503, "overload", 0, false);
                        self.done(req);
                    }
                    Cancel::AlreadyAdmitted => {
                        self.requests[req].holds_gate = true;
                        self.gate_holders += 1;
                        self.abandon(req);
                        self.complete(req);
                    }
                    Cancel::Unknown => self.fail(
                        Invariant::QueueTimeout,
                        format!("request {req}: its ticket {ticket} is unknown to the gate"),
                    ),
                }
                self.arm_gate_timer();
            }
            Stage::Waiting => self.feed(req, Fact::Error(AttemptError::ClientGone)),
            Stage::Streaming => self.end_body(req, BodyEnd::ClientGone),
            Stage::Admitted | Stage::Done => {}
        }
    }

    fn queue_deadline(&mut self, req: usize) {
        let Stage::Queued { ticket } = self.requests[req].stage else {
            return;
        };
        self.tickets.remove(&ticket);
        match self.gate.cancel(ticket, self.now) {
            Cancel::Expired => {
                self.respond(req, 503, "overload", 0, false);
                self.done(req);
            }
            other => self.fail(
                Invariant::QueueTimeout,
                format!(
                    "request {req}: at its queue deadline the gate settles its ticket as \
                     {other:?}, not Expired (it waits past queue_timeout)"
                ),
            ),
        }
        self.arm_gate_timer();
    }

    fn gate_timer_fired(&mut self, generation: u64) {
        if generation != self.gate_timer_gen {
            return;
        }
        self.gate_timer = None;
        let mut woken = Vec::new();
        let _ = self.gate.expire(self.now, |id| woken.push(id));
        for id in woken {
            let Some(req) = self.tickets.remove(&id) else {
                continue;
            };
            match self.gate.cancel(id, self.now) {
                Cancel::Expired => {
                    self.respond(req, 503, "overload", 0, false);
                    self.done(req);
                }
                other => self.fail(
                    Invariant::QueueTimeout,
                    format!("request {req}: expire() woke it but cancel says {other:?}"),
                ),
            }
        }
        self.arm_gate_timer();
    }

    fn arm_gate_timer(&mut self) {
        let next = self.gate.poll_timeout();
        if next == self.gate_timer {
            return;
        }
        self.gate_timer = next;
        self.gate_timer_gen += 1;
        if let Some(t) = next {
            let generation = self.gate_timer_gen;
            self.schedule(t, Ev::GateTimer { generation });
        }
    }

    /// A waiter whose ticket `id` was handed a slot by a leaving request: settle it and go on.
    fn hand(&mut self, id: u64) {
        let Some(req) = self.tickets.remove(&id) else {
            self.fail(
                Invariant::GateSlots,
                format!("the gate handed a slot to ticket {id}, which nobody holds"),
            );
            return;
        };
        let deadline_ok = match self.gate.cancel(id, self.now) {
            Cancel::AlreadyAdmitted => true,
            other => {
                self.fail(
                    Invariant::QueueTimeout,
                    format!("request {req}: handed a slot, but cancel says {other:?}"),
                );
                false
            }
        };
        if deadline_ok {
            self.requests[req].holds_gate = true;
            self.gate_holders += 1;
            self.requests[req].stage = Stage::Admitted;
            self.record(Rec::Admitted { req: req as u64 });
            self.handed.push_back(req);
        }
    }

    fn drain_handed(&mut self) {
        while let Some(req) = self.handed.pop_front() {
            self.proceed(req);
        }
    }

    // ---------------------------------------------------------------- the flow

    fn reply(&mut self, req: usize, attempt: u32, reply: Reply) {
        let r = &self.requests[req];
        if r.stage != Stage::Waiting || r.current.is_none_or(|c| c.n != attempt) {
            return; // a closed connection's late answer
        }
        match reply {
            Reply::Refused => self.feed(req, Fact::Error(AttemptError::Connect)),
            Reply::Broken => self.feed(req, Fact::Error(AttemptError::Transport)),
            Reply::Head { status, body } => {
                if let Some(c) = self.requests[req].current.as_mut() {
                    c.body = body;
                }
                self.feed(req, Fact::Head(status));
            }
        }
    }

    /// Feed a fact about the current attempt to the flow, checking the breaker's response to the
    /// outcome it records (C-HEALTH-3).
    fn feed(&mut self, req: usize, fact: Fact) {
        let Some(cur) = self.requests[req].current else {
            return;
        };
        let arc = Arc::clone(&self.tracked[cur.tracked].arc);
        let before = (
            arc.circuit_state(self.now),
            arc.breaker().consecutive_failures(),
        );
        let now = self.now;
        let backend = cur.sim as u32;
        let action = {
            let r = &mut self.requests[req];
            let Some(flow) = r.flow.as_mut() else {
                return;
            };
            match fact {
                Fact::Head(status) => flow.handle_response_head(status, now, &mut self.rng_core),
                Fact::Error(e) => flow.handle_error(e, now, &mut self.rng_core),
                Fact::Timeout => flow.handle_timeout(now, &mut self.rng_core),
            }
        };
        let class = match fact {
            Fact::Timeout if action == Action::Nothing => return, // early: nothing recorded
            Fact::Head(status) => {
                self.record(Rec::Head {
                    req: req as u64,
                    backend,
                    status,
                });
                if self.s.retry.statuses.contains(&status) {
                    weir_core::breaker::Outcome::Failure
                } else {
                    weir_core::breaker::Outcome::Success
                }
            }
            Fact::Error(e) => {
                self.record(Rec::AttemptError {
                    req: req as u64,
                    backend,
                    error: e.as_str(),
                });
                if e == AttemptError::ClientGone {
                    weir_core::breaker::Outcome::Neutral
                } else {
                    weir_core::breaker::Outcome::Failure
                }
            }
            Fact::Timeout => {
                self.record(Rec::AttemptError {
                    req: req as u64,
                    backend,
                    error: AttemptError::PerTryTimeout.as_str(),
                });
                weir_core::breaker::Outcome::Failure
            }
        };
        let after = (
            arc.circuit_state(self.now),
            arc.breaker().consecutive_failures(),
        );
        self.check_breaker(req, cur, class, before, after);
        if cur.permit == Permit::Trial
            && class == weir_core::breaker::Outcome::Success
            && self.now >= self.s.fault_end
        {
            self.tracked[cur.tracked].trial_successes += 1;
        }
        self.apply(req, action);
    }

    fn end_body(&mut self, req: usize, end: BodyEnd) {
        let now = self.now;
        if let Some(flow) = self.requests[req].flow.as_mut() {
            let _ = flow.handle_body_end(end, now);
        }
        self.record(Rec::BodyEnd {
            req: req as u64,
            end: match end {
                BodyEnd::Complete => "complete",
                BodyEnd::Error => "error",
                BodyEnd::ClientGone => "client_gone",
            },
        });
        self.complete(req);
    }

    /// Carry out the flow's action, as an adapter does.
    fn apply(&mut self, req: usize, action: Action) {
        match action {
            Action::Attempt(a) | Action::Retry(a) => {
                let retry = matches!(action, Action::Retry(_));
                if retry {
                    self.release_current(req);
                    self.stats.retries += 1;
                    self.budget_grants += 1;
                    if !self.budget_model.take(self.now) {
                        self.fail(
                            Invariant::RetryBudget,
                            format!(
                                "request {req}: retry {} granted while the budget model holds \
                                 {} milli-tokens",
                                a.attempt,
                                self.budget_model.tokens_milli(self.now)
                            ),
                        );
                    }
                }
                self.send(req, a);
            }
            Action::Deliver(d) => {
                if d.budget_exhausted {
                    self.stats.budget_refusals += 1;
                }
                self.respond(req, d.status, "backend", d.attempt, d.budget_exhausted);
                let r = &mut self.requests[req];
                r.stage = Stage::Streaming;
                // A body that never ends (`None`) hangs until the client gives up.
                if let Some(cur) = r.current
                    && let Some(body) = cur.body
                {
                    let attempt = cur.n;
                    self.schedule(self.now + body, Ev::BodyEnd { req, attempt });
                }
            }
            Action::Fail(f) => {
                if f.budget_exhausted {
                    self.stats.budget_refusals += 1;
                }
                if f.no_retry == NoRetryReason::NoOtherBackend {
                    self.check_never_emptied(req, "a retry found no other backend");
                }
                self.respond(req, f.status, "failure", f.attempts, f.budget_exhausted);
                self.complete(req);
            }
            Action::Reject(reject) => {
                let what = match reject {
                    Reject::BulkheadFull(_) => "bulkhead_full",
                    Reject::NoBackend(why) => {
                        self.check_never_emptied(req, why.as_str());
                        // Before the first reload a pool may legitimately have no healthy
                        // backend yet (`success_threshold` > 1 after the first cycle).
                        let reloading = self.s.reloads.first().is_some_and(|r| self.now >= r.at);
                        if self.s.checks.reload_no_gap
                            && reloading
                            && matches!(why, NoBackend::NoHealthy | NoBackend::EmptyPool)
                        {
                            self.fail(
                                Invariant::ReloadNoGap,
                                format!(
                                    "request {req} found no healthy backend ({})",
                                    why.as_str()
                                ),
                            );
                        }
                        no_backend_label(why)
                    }
                    Reject::Overloaded(_) => "overload",
                    Reject::RateLimited(_) => "rate_limited",
                    Reject::StoreUnavailable => "store_unavailable",
                };
                self.respond(req, reject.status(), what, 0, false);
                self.complete(req);
            }
            Action::Abandon => {
                if !self.requests[req].client_gone {
                    self.fail(
                        Invariant::OneResponse,
                        format!("request {req} was abandoned while its client was still waiting"),
                    );
                }
                self.abandon(req);
                self.complete(req);
            }
            Action::Nothing => {}
        }
    }

    /// Send attempt `a` of the request to its backend: checks, then the simulated reply.
    fn send(&mut self, req: usize, a: weir_core::flow::Attempt) {
        let snapshot = self.requests[req].snapshot;
        let Some(&tracked) = self.snapshots[snapshot].tracked.get(a.backend) else {
            self.fail(
                Invariant::RetryRevisits,
                format!(
                    "request {req}: attempt on backend index {} outside its pool",
                    a.backend
                ),
            );
            return;
        };
        let sim = self.tracked[tracked].sim;
        let permit = self.check_attempt(req, &a, tracked);
        self.tracked[tracked].slots += 1;
        self.backends[sim].conns.insert((req, a.attempt));
        let plan =
            self.backends[sim].plan_attempt(self.s.retry.per_try_timeout, &mut self.rng_backends);
        let r = &mut self.requests[req];
        r.tried.push(a.backend);
        r.current = Some(Current {
            n: a.attempt,
            tracked,
            sim,
            permit,
            body: None,
        });
        let deadline = r.flow.as_ref().and_then(Flow::poll_timeout);
        self.record(Rec::Attempt {
            req: req as u64,
            attempt: a.attempt,
            backend: sim as u32,
            panic: a.panic,
            trial: permit == Permit::Trial,
        });
        self.schedule(
            self.now + plan.after,
            Ev::Reply {
                req,
                attempt: a.attempt,
                reply: plan.reply,
            },
        );
        if let Some(deadline) = deadline {
            self.schedule(deadline, Ev::FlowTimer { req });
        }
    }

    /// The current attempt's slot and connection are gone (retry, failure, end).
    fn release_current(&mut self, req: usize) {
        if let Some(cur) = self.requests[req].current.take() {
            let t = &mut self.tracked[cur.tracked];
            t.slots = t.slots.saturating_sub(1);
            self.backends[cur.sim].conns.remove(&(req, cur.n));
        }
    }

    /// The client gets its response (head). Exactly once (C-RETRY-4).
    fn respond(
        &mut self,
        req: usize,
        status: u16,
        what: &'static str,
        attempts: u32,
        budget_exhausted: bool,
    ) {
        let r = &mut self.requests[req];
        if r.responded || r.abandoned {
            self.fail(
                Invariant::OneResponse,
                format!("request {req} got a second response ({status} {what})"),
            );
            return;
        }
        r.responded = true;
        let latency = self.now.as_nanos().saturating_sub(r.arrival.as_nanos()) / 1000;
        self.latencies_us.push(latency);
        match what {
            "backend" if status < 500 => self.stats.succeeded += 1,
            "backend" => self.stats.delivered_5xx += 1,
            "failure" => self.stats.failed += 1,
            "overload" => self.stats.overloaded += 1,
            "rate_limited" => self.stats.rate_limited += 1,
            _ => self.stats.rejected += 1,
        }
        let path = r.path;
        if let Some(prefix) = self.s.checks.isolated_prefix
            && path.starts_with(prefix)
            && matches!(what, "bulkhead_full" | "overload")
        {
            self.fail(
                Invariant::Bulkhead,
                format!(
                    "request {req} on {path} was turned away ({what}) while another route is saturated"
                ),
            );
        }
        self.record(Rec::Respond {
            req: req as u64,
            status,
            what,
            attempts,
            budget_exhausted,
        });
    }

    fn abandon(&mut self, req: usize) {
        let r = &mut self.requests[req];
        if r.responded || r.abandoned {
            return;
        }
        r.abandoned = true;
        self.stats.abandoned += 1;
        self.record(Rec::Abandon { req: req as u64 });
    }

    /// The request is finished and holds nothing but maybe its gate slot: release all.
    fn complete(&mut self, req: usize) {
        self.release_current(req);
        let r = &mut self.requests[req];
        r.flow = None; // drops the slot and the bulkhead permit if anything still held them
        if r.holds_bulkhead {
            r.holds_bulkhead = false;
            if let Some(route) = r.route {
                self.bulkhead_holders[route] = self.bulkhead_holders[route].saturating_sub(1);
            }
        }
        let held = core::mem::take(&mut r.holds_gate);
        r.stage = Stage::Done;
        if held {
            self.gate_holders = self.gate_holders.saturating_sub(1);
            if let Some(id) = self.gate.leave(self.now) {
                self.hand(id);
            }
            self.arm_gate_timer();
        }
        self.settle(req);
    }

    /// The request is over without ever holding a gate slot (overload, or it left the queue).
    fn done(&mut self, req: usize) {
        self.requests[req].stage = Stage::Done;
        self.settle(req);
    }

    /// Count the request as finished, once, when it has its answer and holds nothing.
    fn settle(&mut self, req: usize) {
        let r = &mut self.requests[req];
        if !r.settled
            && r.stage == Stage::Done
            && (r.responded || r.abandoned)
            && !r.holds_gate
            && r.flow.is_none()
            && r.current.is_none()
        {
            r.settled = true;
            self.live_requests = self.live_requests.saturating_sub(1);
        }
    }

    // ---------------------------------------------------------------- summary

    fn summary(&mut self) -> Summary {
        let mut l = core::mem::take(&mut self.latencies_us);
        l.sort_unstable();
        let p99 = if l.is_empty() {
            0
        } else {
            l[(l.len() * 99).div_ceil(100).saturating_sub(1)]
        };
        let st = &self.stats;
        Summary {
            scenario: self.scenario.name(),
            seed: self.seed,
            policy: self.s.pools[0].policy.as_str(),
            requests: st.requests,
            succeeded: st.succeeded,
            delivered_5xx: st.delivered_5xx,
            failed: st.failed,
            overloaded: st.overloaded,
            rate_limited: st.rate_limited,
            rejected: st.rejected,
            abandoned: st.abandoned,
            retries: st.retries,
            budget_refusals: st.budget_refusals,
            ejections: st.ejections,
            panic_selections: st.panic_selections,
            health_flips: st.health_flips,
            reloads_published: st.reloads_published,
            reloads_rejected: st.reloads_rejected,
            p99_us: p99,
            events: self.events,
            trace_hash: self.trace.hash(),
        }
    }
}

/// Decorrelate the seeds of different scenarios.
fn scenario_salt(s: Scenario) -> u64 {
    weir_core::select::hash_key(s.name().as_bytes())
}

fn method_str(m: &http::Method) -> &'static str {
    match *m {
        http::Method::GET => "GET",
        http::Method::HEAD => "HEAD",
        http::Method::OPTIONS => "OPTIONS",
        http::Method::POST => "POST",
        http::Method::PUT => "PUT",
        _ => "OTHER",
    }
}

fn no_backend_label(why: NoBackend) -> &'static str {
    match why {
        NoBackend::EmptyPool => "no_backend:empty_pool",
        NoBackend::AllTried => "no_backend:all_tried",
        NoBackend::NoHealthy => "no_backend:no_healthy",
        NoBackend::AllOpen => "no_backend:all_open",
        NoBackend::AllSaturated => "no_backend:all_saturated",
    }
}
