//! The discrete-event world: a virtual clock that jumps to the next event, the real core
//! machines driven exactly as an adapter drives them, simulated clients and backends.
//!
//! One request is one `weir_core::exchange::Exchange`, the request engine the proxy drives: the
//! world creates it at arrival from the runtime snapshot in force and plays its IO. It carries out
//! each output (a gate wait, a wake-up of the waiter a leaving request handed its slot to, an
//! attempt to a simulated backend, a response) and feeds back each fact (a hand-off, a response
//! head, a refused or broken connection, a timeout at `poll_timeout`, a body end, a client that
//! left). The world never calls the gate, the limiter, the route table or the flow machine
//! itself; it reads their counters for the invariants.
//!
//! Time: every future fact is an event in a `BTreeMap` keyed by `(instant, sequence)`, so ties
//! run in the order they were scheduled and nothing depends on hash order. Machines that wait
//! (each exchange, each probe schedule) are asked for their `poll_timeout` after every call, and
//! a timer event is armed for it.
//!
//! Randomness: one seed. The world's master `WyRand` forks one child each for the setup,
//! arrivals, clients, backends and the core; nothing else draws.

mod attempts;
mod check;
mod clients;
mod config;
mod conns;
mod h2;
mod health;
mod snapshot;
mod store;
mod summary;

use core::time::Duration;
use std::collections::{BTreeMap, VecDeque};

use weir_core::Instant;
use weir_core::breaker::CircuitState;
use weir_core::bucket::BucketParams;
use weir_core::exchange::{AttemptResult, Exchange, Input, Services};
use weir_core::health::{HealthParams, ProbeToken};
use weir_core::pool::{Backend, PoolParams};
use weir_core::rate::ClientKey;
use weir_core::retry::RetryPolicy;
use weir_core::rng::{Rng, WyRand};
use weir_core::runtime::Runtime;

use crate::backend::{Fault, Reply, SimBackend};
use crate::model::BucketModel;
use crate::report::{Invariant, Summary, Violation};
use crate::scenario::{Scenario, Setup};
use crate::trace::{Rec, Trace};

use health::{PoolSlot, Runner};
use summary::{Stats, method_str, no_backend_label};

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
    /// An attempt's fate shows.
    Reply {
        req: usize,
        attempt: u32,
        reply: Reply,
    },
    /// An exchange's `poll_timeout` came.
    Timer { req: usize },
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
    /// The virtual shared store answers a call (or fails it).
    StoreReply {
        req: usize,
        reply: store::StoreReply,
    },
    /// The virtual store changes state.
    StoreFault { state: crate::scenario::StoreState },
    /// Long enough after the store's last outage: it must be in use again.
    StoreRecovered,
    /// A configuration reload publishes generation `generation`.
    ConfigReload { generation: usize },
    /// A slow client finished sending its (buffered) body.
    Uploaded { req: usize },
    /// A connection's client takes its next step.
    ConnStep { conn: usize, step: conns::Step },
    /// A connection watchdog's `poll_timeout` came.
    ConnTimer { conn: usize, generation: u64 },
    /// A parked connection's wait for its next request ended.
    ConnParkedExpiry { conn: usize, generation: u64 },
    /// An attempt to an HTTP/2 backend is sent (after its backoff): its stream is placed.
    StreamOpen { req: usize, attempt: u32 },
    /// A new HTTP/2 connection learns the backend's SETTINGS.
    H2Settings { backend: usize, conn: u32 },
    /// An attempt waiting for a stream reached the connect timeout.
    StreamWaitEnd { req: usize, attempt: u32 },
}

impl Ev {
    fn tag(&self) -> u8 {
        match self {
            Ev::Arrival { .. } => 0,
            Ev::Disconnect { .. } => 1,
            Ev::Reply { .. } => 4,
            Ev::Timer { .. } => 5,
            Ev::BodyEnd { .. } => 6,
            Ev::ProbeReply { .. } => 7,
            Ev::HealthTimer { .. } => 8,
            Ev::Fault { .. } => 9,
            Ev::Reload { .. } => 10,
            Ev::Drain { .. } => 13,
            Ev::Liveness => 11,
            Ev::StopTraffic => 12,
            Ev::StoreReply { .. } => 14,
            Ev::StoreFault { .. } => 15,
            Ev::StoreRecovered => 16,
            Ev::ConfigReload { .. } => 17,
            Ev::Uploaded { .. } => 18,
            Ev::ConnStep { .. } => 19,
            Ev::ConnTimer { .. } => 20,
            Ev::ConnParkedExpiry { .. } => 21,
            Ev::StreamOpen { .. } => 22,
            Ev::H2Settings { .. } => 23,
            Ev::StreamWaitEnd { .. } => 24,
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
    /// Bytes of the attempt left weir: a connection to an HTTP/1 backend was made, or a stream
    /// to an HTTP/2 backend was opened.
    sent: bool,
    /// The backend processed none of it (a refused stream, or above a `GOAWAY`'s last id).
    unprocessed: bool,
    /// Its HTTP/2 stream: (connection id, stream id).
    stream: Option<(u32, u32)>,
    /// It waits for a stream (every connection full at the bound).
    waiting: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Created; not waiting on an attempt (admission, rate limit).
    Admitted,
    /// In the gate's queue with this ticket, which may wait until `deadline` at most.
    Queued { ticket: u64, deadline: Instant },
    /// An attempt awaits its response head.
    Waiting,
    /// A response was delivered; its body streams.
    Streaming,
    /// Finished: nothing held.
    Done,
}

#[derive(Debug)]
struct Request {
    key: ClientKey,
    arrival: Instant,
    method: http::Method,
    path: &'static str,
    /// The request body (what the adapter holds of it decides a refused stream's resend).
    body: weir_core::retry::BodyKind,
    stage: Stage,
    x: Option<Exchange>,
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
    /// The rate decision was checked against the model.
    rate_checked: bool,
    /// The limiter denied the request.
    rate_denied: bool,
    /// The next attempt's slot came from panic routing.
    panic_next: bool,
    /// How the last finished attempt ended (from the exchange's attempt metric).
    last_result: Option<AttemptResult>,
    /// The exchange deadline a timer is armed for.
    timer: Option<Instant>,
    /// The rate decision under a shared store.
    store: store::StoreView,
    /// The snapshot, generation and reload count in force when it was created.
    made: snapshot::Made,
}

impl Request {
    fn new(
        key: ClientKey,
        arrival: Instant,
        method: http::Method,
        path: &'static str,
        store: store::StoreView,
        made: snapshot::Made,
    ) -> Request {
        Request {
            key,
            arrival,
            method,
            path,
            body: weir_core::retry::BodyKind::None,
            stage: Stage::Admitted,
            x: None,
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
            rate_checked: false,
            rate_denied: false,
            panic_next: false,
            last_result: None,
            timer: None,
            store,
            made,
        }
    }
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
    /// Until when the world saw it pushed back by its own `Retry-After` (C-RETRY-11).
    pushed_until: Instant,
}

/// A pool snapshot and the tracked backend behind each of its indices.
#[derive(Debug)]
struct Snapshot {
    pool: Arc<weir_core::pool::Pool>,
    tracked: Vec<usize>,
}

/// The slow-start share measurement of the watched backend (C-HEALTH-4).
#[derive(Debug, Default)]
struct ShareStats {
    samples: u64,
    observed: u64,
    expected: f64,
    variance: f64,
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
    rng_conns: WyRand,

    /// The runtime built from the scenario's configuration, before the world's pools.
    base: Arc<Runtime>,
    /// The snapshot in force: `base` with each pool's current snapshot; new exchanges get it.
    runtime: Arc<Runtime>,
    services: Arc<Services>,
    bucket: Option<BucketParams>,
    pool_params: PoolParams,
    health_params: HealthParams,
    pools: Vec<PoolSlot>,
    snapshots: Vec<Snapshot>,
    runners: BTreeMap<u64, Runner>,
    next_runner: u64,

    backends: Vec<SimBackend>,
    tracked: Vec<Tracked>,
    requests: Vec<Request>,
    tickets: BTreeMap<u64, usize>,
    /// Inputs due now (gate hand-offs, buffered bodies), fed after the current event.
    handed: VecDeque<(usize, Input)>,
    no_headers: http::HeaderMap,
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

    /// The virtual shared store, when the scenario has one.
    store: Option<store::VirtualStore>,
    /// The configuration generation in force and the reloads published so far.
    generation: usize,
    /// The client connections and their watchdog, when the scenario has them.
    conns: Option<conns::Conns>,

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
        let rng_conns = master.fork();

        let policy = RetryPolicy::new(s.retry.clone()).map_err(|e| e.to_string())?;
        let budget_model = BucketModel::new(
            policy.budget_params().capacity(),
            policy.budget_params().interval(),
        );
        let (services, store) = store::services(&s, &mut rng_core)?;
        let base = Arc::new(config::runtime(&s, rng_core.next_u64())?);
        let bucket = s.rate.is_some().then(|| base.config().rate.bucket());
        let health_params = HealthParams::new(&s.health).map_err(|e| e.to_string())?;
        let pool_params = s.pool_params();
        let backends = s.backends.clone();
        let header = summary::header(scenario, seed, &s);
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
            rng_conns,
            runtime: Arc::clone(&base),
            base,
            services,
            bucket,
            pool_params,
            health_params,
            pools: Vec::new(),
            snapshots: Vec::new(),
            runners: BTreeMap::new(),
            next_runner: 0,
            backends,
            tracked: Vec::new(),
            requests: Vec::new(),
            tickets: BTreeMap::new(),
            handed: VecDeque::new(),
            no_headers: http::HeaderMap::new(),
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
            store,
            generation: 0,
            conns: None,
            trace,
            violation: None,
        };
        world.build_pools()?;
        world.publish();
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
            self.check_queue_waits();
            self.check_store();
            self.check_conns();
            self.check_all();
            if let Some(v) = self.violation.take() {
                return Err(v);
            }
            if self.is_finished() {
                break;
            }
            if self.events > MAX_EVENTS || self.now > self.traffic_end + SETTLE {
                let detail = format!(
                    "the run did not settle: {} events, {} requests still live",
                    self.events, self.live_requests
                );
                return Err(self.violation(Invariant::Liveness, detail));
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
            && self.conns.as_ref().is_none_or(|c| c.open == 0)
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
        self.start_store();
        self.start_conns();
        for (at, generation) in self.s.config_reloads.clone() {
            self.schedule(at, Ev::ConfigReload { generation });
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

    /// The world's wall clock (a `Retry-After` date is read against it): a fixed epoch
    /// (2027-01-15) plus virtual time, so a run replays whatever day it runs on.
    fn wall(&self) -> core::time::Duration {
        core::time::Duration::from_secs(1_800_000_000)
            + core::time::Duration::from_nanos(self.now.as_nanos())
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
            Ev::Reply {
                req,
                attempt,
                reply,
            } => self.reply(req, attempt, reply),
            Ev::Timer { req } => self.timer(req),
            Ev::BodyEnd { req, attempt } => {
                let r = &self.requests[req];
                if r.stage == Stage::Streaming && r.current.is_some_and(|c| c.n == attempt) {
                    self.check_still_writing(req);
                    self.end_body(req, weir_core::flow::BodyEnd::Complete);
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
            Ev::StoreReply { req, reply } => self.store_reply(req, reply),
            Ev::StoreFault { state } => self.store_fault(state),
            Ev::StoreRecovered => self.check_store_recovered(),
            Ev::ConfigReload { generation } => self.config_reload(generation),
            Ev::Uploaded { req } => self.uploaded(req),
            Ev::ConnStep { conn, step } => self.conn_step(conn, step),
            Ev::ConnTimer { conn, generation } => self.conn_timer(conn, generation),
            Ev::ConnParkedExpiry { conn, generation } => {
                self.conn_parked_expiry(conn, generation);
            }
            Ev::StreamOpen { req, attempt } => self.stream_open(req, attempt),
            Ev::H2Settings { backend, conn } => self.h2_settings(backend, conn),
            Ev::StreamWaitEnd { req, attempt } => self.stream_wait_end(req, attempt),
        }
    }
}

/// Decorrelate the seeds of different scenarios.
fn scenario_salt(s: Scenario) -> u64 {
    weir_core::select::hash_key(s.name().as_bytes())
}
