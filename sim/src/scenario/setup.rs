//! The [`Setup`] a scenario returns: the world's configuration (pools, routes, timers, store),
//! its load (streams, generations) and its fault script, and what the run checks.

use core::ops::Range;
use core::time::Duration;

use weir_core::Instant;
use weir_core::admission::GateParams;
use weir_core::breaker::BreakerParams;
use weir_core::health::HealthSpec;
use weir_core::outlier::OutlierParams;
use weir_core::pool::PoolParams;
use weir_core::rate::FailureMode;
use weir_core::retry::RetryParams;
use weir_core::select::PolicyKind;
use weir_core::slow_start::SlowStart;

use crate::backend::{Fault, SimBackend};

/// One pool: its backends (indices into [`Setup::backends`]) and policy.
#[derive(Debug, Clone)]
pub(crate) struct PoolSetup {
    pub backends: Vec<usize>,
    pub policy: PolicyKind,
}

/// One route: prefix, pool, optional bulkhead limit.
#[derive(Debug, Clone)]
pub(crate) struct RouteSetup {
    pub prefix: &'static str,
    pub pool: usize,
    pub limit: Option<u32>,
}

/// An open-loop arrival stream.
#[derive(Debug, Clone)]
pub(crate) struct Stream {
    /// Client numbers the stream draws from.
    pub clients: Range<u32>,
    /// IPv6 clients of one /64 (interface ids rotate) instead of IPv4 ones.
    pub v6: bool,
    /// `(from, requests per second)`, sorted by `from`.
    pub rate: Vec<(Instant, u32)>,
    /// Paths, drawn uniformly.
    pub paths: &'static [&'static str],
}

impl Stream {
    /// The arrival rate at `t`.
    pub fn rate_at(&self, t: Instant) -> u32 {
        self.rate
            .iter()
            .rev()
            .find(|(from, _)| *from <= t)
            .map_or(0, |(_, r)| *r)
    }

    /// The next instant after `t` at which the rate changes.
    pub fn next_change(&self, t: Instant) -> Option<Instant> {
        self.rate
            .iter()
            .map(|(from, _)| *from)
            .find(|from| *from > t)
    }
}

/// A scheduled reload of one pool.
#[derive(Debug, Clone)]
pub(crate) struct ReloadSetup {
    pub at: Instant,
    pub pool: usize,
    pub backends: Vec<usize>,
    /// After a publish, the backends dropped by it are stopped this much later.
    pub decommission_after: Option<Duration>,
}

/// Scenario-specific checks on top of the general invariants.
#[derive(Debug, Clone, Default)]
pub(crate) struct Checks {
    /// Measure this backend's share of first attempts against the slow-start formula.
    pub slow_start_watch: Option<usize>,
    /// Requests on paths with this prefix must never be turned away by a bulkhead or the gate.
    pub isolated_prefix: Option<&'static str>,
    /// No request may find no healthy backend (the reload scenario).
    pub reload_no_gap: bool,
}

/// Everything a run needs.
#[derive(Debug, Clone)]
pub(crate) struct Setup {
    pub backends: Vec<SimBackend>,
    pub pools: Vec<PoolSetup>,
    pub routes: Vec<RouteSetup>,
    pub max_concurrent_requests: u32,
    pub breaker: BreakerParams,
    pub breaker_threshold: u32,
    pub slow_start_window: Duration,
    pub slow_start_minimum_percent: u8,
    pub health: HealthSpec,
    pub retry: RetryParams,
    pub gate: GateParams,
    /// `(capacity, refill per second)` of the rate limiter, if on.
    pub rate: Option<(u64, f64)>,
    pub streams: Vec<Stream>,
    /// `(at, backend, fault)`.
    pub faults: Vec<(Instant, usize, Fault)>,
    pub reloads: Vec<ReloadSetup>,
    /// `(at, backend)`: the operator starts draining the backend in its current pool.
    pub drains: Vec<(Instant, usize)>,
    /// When the last fault ends (the liveness phase starts).
    pub fault_end: Instant,
    /// A client gives up on its request after this long.
    pub patience: Duration,
    /// Chance (permille) that a client disconnects early, at a random point.
    pub disconnect_permille: u32,
    pub checks: Checks,
    /// Outlier detection (off but in the outlier scenarios, whose intervals are short).
    pub outlier: OutlierParams,
    /// `health_check.retry_after_max` (C-RETRY-11).
    pub retry_after_max: Duration,
    /// A shared rate-limit store (the world plays it), instead of the local one.
    pub store: Option<StoreSetup>,
    /// Configuration reloads (`(at, generation)`): generation `g` runs `generations[g]`.
    pub config_reloads: Vec<(Instant, usize)>,
    /// The retry settings of each configuration generation (0: the one at start, `retry`).
    pub generations: Vec<Generation>,
    /// The request timers of the configuration and how slowly clients send bodies.
    pub timers: Option<Timers>,
    /// Client connections under the connection watchdog (C-PATH-12), when simulated.
    pub conn_timers: Option<ConnTimers>,
    /// How weir's HTTP/2 upstream pool is configured, when some backends speak HTTP/2.
    pub h2: Option<H2Setup>,
}

/// weir's HTTP/2 upstream settings in the HTTP/2 scenarios (the backends' own
/// `SETTINGS_MAX_CONCURRENT_STREAMS` are in their [`crate::backend::H2Model`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct H2Setup {
    /// `server.upstream.max_conns_per_host` (`None`: 0, unlimited).
    pub max_conns_per_host: Option<u32>,
    /// `server.upstream.connect_timeout`: how long an attempt waits for a stream when every
    /// connection is full at the bound, as a dial would take.
    pub connect_timeout: Duration,
    /// How long a new connection takes to learn the backend's SETTINGS.
    pub settings_after: Duration,
}

/// What a configuration generation changes (the budget stays, so its tokens carry over).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Generation {
    pub max_attempts: u32,
    pub per_try_timeout: Duration,
}

/// The virtual shared store (C-RATE-3..5).
#[derive(Debug, Clone)]
pub(crate) struct StoreSetup {
    pub failure_mode: FailureMode,
    pub operation_timeout: Duration,
    /// An answer while up takes `base + uniform(spread)`, always within `operation_timeout`.
    pub latency: (Duration, Duration),
    /// `(from, state)`, sorted; up before the first.
    pub faults: Vec<(Instant, StoreState)>,
}

impl StoreSetup {
    /// When the last outage ends.
    pub fn recovered_at(&self) -> Instant {
        self.faults.last().map_or(Instant::ZERO, |(t, _)| *t)
    }
}

/// How the virtual store behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreState {
    /// Answers within `operation_timeout`.
    Up,
    /// Answers with an error at once (connection refused, `maxmemory`).
    Errors,
    /// Never answers (a partition): each call ends at `operation_timeout`.
    Hang,
    /// Answers, but after `operation_timeout` (the token is taken; the answer comes too late).
    Slow,
}

impl StoreState {
    pub fn as_str(self) -> &'static str {
        match self {
            StoreState::Up => "store_up",
            StoreState::Errors => "store_errors",
            StoreState::Hang => "store_hangs",
            StoreState::Slow => "store_slow",
        }
    }
}

/// The request timers of the `connection_timers` scenario.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timers {
    /// `server.read_timeout`: the whole request (its body) read within it, from arrival.
    pub read_timeout: Duration,
    /// `server.write_timeout`: the whole response written within it, from arrival.
    pub write_timeout: Duration,
    /// `server.upstream.response_header_timeout`.
    pub response_header_timeout: Duration,
    /// A client sends a buffered body within `uniform(upload)`.
    pub upload: Duration,
}

/// The connection limits of the `connection_timers` scenario and how many client connections
/// it plays (world/conns.rs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnTimers {
    /// `server.read_header_timeout`.
    pub read_header_timeout: Duration,
    /// `server.idle_timeout`.
    pub idle_timeout: Duration,
    /// How long an idle HTTP/1 connection waits before it is parked (weir-proxy's `PARK_AFTER`,
    /// one second, not configurable).
    pub park_after: Duration,
    /// Client connections opened in the first three seconds.
    pub connections: u32,
}

impl Setup {
    /// The pool parameters (the breaker threshold is shared with active checks in config, but
    /// the simulator varies it on its own).
    pub fn pool_params(&self) -> PoolParams {
        PoolParams {
            max_concurrent_requests: self.max_concurrent_requests,
            breaker: self.breaker,
            slow_start: self.slow_start(),
            outlier: self.outlier,
            retry_after_max: self.retry_after_max,
            adaptive: weir_core::adaptive::AdaptiveParams::default(),
        }
    }

    /// The slow-start ramp.
    pub fn slow_start(&self) -> SlowStart {
        SlowStart::new(self.slow_start_window, self.slow_start_minimum_percent)
            .unwrap_or(SlowStart::off())
    }

    /// How long after the faults stop the pool must have converged: two full check cycles per
    /// success needed, the longest cooldown, two per-try timeouts, and two seconds of traffic.
    pub fn liveness_bound(&self) -> Duration {
        let cycle = self.health.interval + self.health.jitter + self.health.timeout;
        let max_cooldown = self.breaker.cooldown_at(31);
        cycle * 2 * self.health.success_threshold.max(1)
            + max_cooldown
            + self.retry.per_try_timeout * 2
            + Duration::from_secs(2)
    }
}
