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
mod health;

use core::time::Duration;
use std::collections::{BTreeMap, VecDeque};

use weir_core::Instant;
use weir_core::admission::Gate;
use weir_core::breaker::CircuitState;
use weir_core::bucket::BucketParams;
use weir_core::exchange::{AttemptResult, Exchange, Input, Services};
use weir_core::health::{HealthParams, ProbeToken};
use weir_core::pool::{Backend, PoolParams};
use weir_core::rate::{ClientKey, LocalStore, LocalStoreParams, StorageKind, StoreCircuit};
use weir_core::retry::RetryPolicy;
use weir_core::rng::{Rng, WyRand};
use weir_core::runtime::Runtime;
use weir_core::select::NoBackend;

use crate::backend::{Fault, Reply, SimBackend};
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

        let policy = RetryPolicy::new(s.retry.clone()).map_err(|e| e.to_string())?;
        let budget_model = BucketModel::new(
            policy.budget_params().capacity(),
            policy.budget_params().interval(),
        );
        let local = LocalStore::new(
            LocalStoreParams {
                shards: 4,
                max_buckets: 4096,
            },
            rng_core.next_u64(),
        )
        .map_err(|e| e.to_string())?;
        let services = Arc::new(Services::new(
            Arc::new(Gate::new(s.gate)),
            StorageKind::Local,
            Arc::new(local),
            Arc::new(StoreCircuit::default()),
        ));
        let base = Arc::new(config::runtime(&s, rng_core.next_u64())?);
        let bucket = s.rate.is_some().then(|| base.config().rate.bucket());
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
            Ev::Reply {
                req,
                attempt,
                reply,
            } => self.reply(req, attempt, reply),
            Ev::Timer { req } => self.timer(req),
            Ev::BodyEnd { req, attempt } => {
                let r = &self.requests[req];
                if r.stage == Stage::Streaming && r.current.is_some_and(|c| c.n == attempt) {
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
        NoBackend::NoneEnabled => "no_backend:none_enabled",
    }
}
