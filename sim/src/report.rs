//! What a run reports: the invariants it checks, a violation with its replay command, and the
//! per-run summary that must be identical for two runs of the same seed.

use core::fmt;

use weir_core::Instant;

/// The invariants the world checks after every event (docs/simulation.md lists each with the
/// contract statement it stands for and the mutation that proves the check can fail).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invariant {
    /// No attempt reaches a backend whose circuit is open, except a half-open trial or a counted
    /// panic selection (C-HEALTH-3).
    CircuitOpenReached,
    /// Panic routing is used only when no backend is available, and only on an open circuit
    /// (C-POOL-3, C-POOL-5).
    PanicRouting,
    /// The breaker follows the recorded outcomes: a failure counts, `failure_threshold` in a row
    /// open the circuit, a success resets the count (C-HEALTH-3, C-RETRY-8).
    BreakerFollowsOutcomes,
    /// A retry never revisits a backend already tried for the request (C-RETRY-2).
    RetryRevisits,
    /// A request makes at most `max_attempts` attempts (C-RETRY-1).
    AttemptsExceedMax,
    /// The budget's tokens match an independent model, no retry is granted without a token, and
    /// retries ≤ capacity + refill × elapsed (C-RETRY-3, C-RETRY-7).
    RetryBudget,
    /// Per-backend in-flight ≤ `max_concurrent_requests`, and equal to the slots the world holds
    /// (C-POOL-6).
    BackendSlots,
    /// Rate-limit bucket tokens in [0, capacity] and grants per key ≤ capacity + refill ×
    /// elapsed (C-RATE-1, C-RATE-2).
    RateBucket,
    /// Every request gets exactly one response; only a client that went away gets none
    /// (C-RETRY-4, C-PATH-9).
    OneResponse,
    /// The gate holds at most `max_concurrent_requests` and exactly the slots the world holds
    /// (C-LOAD-1).
    GateSlots,
    /// The gate's queue never holds more than `max_queue` waiters (C-LOAD-1).
    QueueBound,
    /// No waiter waits past `queue_timeout` (C-LOAD-1).
    QueueTimeout,
    /// A route bulkhead holds at most its limit, and a saturated route does not spill onto
    /// another route (C-LOAD-2).
    Bulkhead,
    /// The slow-start share follows the formula, and the observed share of traffic stays within
    /// the stated tolerance of it (C-HEALTH-4).
    SlowStart,
    /// After the faults stop, every backend is healthy and its circuit recovers within the bound.
    Liveness,
    /// Passive ejection never turns a request away while a healthy backend with a free slot
    /// exists (C-POOL-5 panic routing; the small-pool scenario).
    PoolNeverEmptied,
    /// A reload that replaces every healthy backend never opens a window of "no healthy backend"
    /// (C-CONF-5 warm-up).
    ReloadNoGap,
    /// The shared store's failure policy: a store answer decides (not degraded), a failed,
    /// late or skipped call is decided by `failure_mode`; no call outlives `operation_timeout`;
    /// one recovery trial at a time; the store is used again after it recovers (C-RATE-5).
    StorePolicy,
    /// An exchange keeps the runtime snapshot it was created from, whatever a reload publishes
    /// meanwhile: its attempts, deadlines and pool are that snapshot's (C-CONF-4).
    OneSnapshot,
    /// The request's timers: a buffered body read within `read_timeout`, a response body within
    /// `write_timeout`, response headers within the earlier of `per_try_timeout` and
    /// `response_header_timeout`, each ending exactly at its deadline (C-PATH-12, C-PATH-7,
    /// C-RETRY-5).
    RequestTimers,
    /// The connection watchdog: a head closed exactly `read_header_timeout` after its first
    /// byte and never once complete, an idle connection parked exactly `park_after` and closed
    /// exactly `idle_timeout` after its last response, stuck parking closed within one
    /// `read_header_timeout`, nothing closed while serving, nothing past its deadline
    /// (C-PATH-12).
    ConnectionTimers,
    /// Outlier detection stays within its cap: at most `max_ejection_percent` of a pool (one
    /// in a pool of two or more) ejected at once, and never its last serving backend
    /// (C-OUT-2).
    OutlierCap,
    /// A backend that answered `503` with `Retry-After` gets no request (but a counted panic
    /// selection) while the world's own record says it is pushed back, and no pushback lasts
    /// beyond `retry_after_max` (C-RETRY-11).
    PushedBackReached,
    /// Never more streams on an HTTP/2 connection than the backend's
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`, nor more connections to a backend than
    /// `max_conns_per_host` (C-GRPC-1).
    StreamLimit,
    /// A call is sent again after bytes of an attempt left weir only when it is replayable
    /// (method allowed, body replayable), or when the backend processed none of that attempt
    /// and weir still holds all of it (C-RETRY-1, C-RETRY-9).
    ReplaySafe,
    /// Hedges and retries together never exceed the retry budget (each takes a token of an
    /// independent model) nor `max_attempts`, and never more than two attempts of a request
    /// are open at once (C-HEDGE-1, C-RETRY-7, C-RETRY-1).
    HedgeBudget,
    /// Only a safe, replayable request is hedged (a method of `retry.methods` among `GET`,
    /// `HEAD`, `OPTIONS`, no body or a buffered one; never `POST`), beside one attempt still
    /// waiting for its head, at once (C-HEDGE-1, C-RETRY-1).
    HedgeSafe,
    /// No response bytes of a losing attempt reach the client: the delivered attempt is open
    /// with the head the backend sent, every other attempt's connection is closed from then
    /// on, and the body read is the delivered attempt's (C-HEDGE-1, C-RETRY-4).
    LoserSilent,
    /// An attempt that lost the race or was cancelled is never a passive failure: each
    /// backend's passive failures equal the failed attempts reported for it (C-HEDGE-1,
    /// C-HEALTH-3, C-OUT-1).
    LoserNeutral,
    /// A first attempt and a hedge leave at once; retry `k` waits less than
    /// `min(backoff_max, backoff_base × 2^(k−1))` (C-RETRY-10).
    BackoffBounds,
}

impl Invariant {
    /// Every invariant, in documentation order.
    pub const ALL: [Invariant; 30] = [
        Invariant::CircuitOpenReached,
        Invariant::PanicRouting,
        Invariant::BreakerFollowsOutcomes,
        Invariant::RetryRevisits,
        Invariant::AttemptsExceedMax,
        Invariant::RetryBudget,
        Invariant::BackendSlots,
        Invariant::RateBucket,
        Invariant::OneResponse,
        Invariant::GateSlots,
        Invariant::QueueBound,
        Invariant::QueueTimeout,
        Invariant::Bulkhead,
        Invariant::SlowStart,
        Invariant::Liveness,
        Invariant::PoolNeverEmptied,
        Invariant::ReloadNoGap,
        Invariant::StorePolicy,
        Invariant::OneSnapshot,
        Invariant::RequestTimers,
        Invariant::ConnectionTimers,
        Invariant::OutlierCap,
        Invariant::PushedBackReached,
        Invariant::StreamLimit,
        Invariant::ReplaySafe,
        Invariant::HedgeBudget,
        Invariant::HedgeSafe,
        Invariant::LoserSilent,
        Invariant::LoserNeutral,
        Invariant::BackoffBounds,
    ];

    /// A stable snake_case name.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Invariant::CircuitOpenReached => "circuit_open_reached",
            Invariant::PanicRouting => "panic_routing",
            Invariant::BreakerFollowsOutcomes => "breaker_follows_outcomes",
            Invariant::RetryRevisits => "retry_revisits_backend",
            Invariant::AttemptsExceedMax => "attempts_exceed_max",
            Invariant::RetryBudget => "retry_budget",
            Invariant::BackendSlots => "backend_slots",
            Invariant::RateBucket => "rate_bucket",
            Invariant::OneResponse => "one_response",
            Invariant::GateSlots => "gate_slots",
            Invariant::QueueBound => "queue_bound",
            Invariant::QueueTimeout => "queue_timeout",
            Invariant::Bulkhead => "bulkhead",
            Invariant::SlowStart => "slow_start",
            Invariant::Liveness => "liveness",
            Invariant::PoolNeverEmptied => "pool_never_emptied",
            Invariant::ReloadNoGap => "reload_no_gap",
            Invariant::StorePolicy => "store_policy",
            Invariant::OneSnapshot => "one_snapshot",
            Invariant::RequestTimers => "request_timers",
            Invariant::ConnectionTimers => "conn_watchdog",
            Invariant::OutlierCap => "outlier_cap",
            Invariant::PushedBackReached => "pushed_back_reached",
            Invariant::StreamLimit => "stream_limit",
            Invariant::ReplaySafe => "replay_safe",
            Invariant::HedgeBudget => "hedge_budget",
            Invariant::HedgeSafe => "hedge_safe",
            Invariant::LoserSilent => "loser_silent",
            Invariant::LoserNeutral => "loser_neutral",
            Invariant::BackoffBounds => "backoff_bounds",
        }
    }

    /// The contract statements it checks.
    #[must_use]
    pub const fn contract(self) -> &'static str {
        match self {
            Invariant::CircuitOpenReached => "C-HEALTH-3",
            Invariant::PanicRouting => "C-POOL-3, C-POOL-5",
            Invariant::BreakerFollowsOutcomes => "C-HEALTH-3, C-RETRY-8",
            Invariant::RetryRevisits => "C-RETRY-2",
            Invariant::AttemptsExceedMax => "C-RETRY-1",
            Invariant::RetryBudget => "C-RETRY-3, C-RETRY-7",
            Invariant::BackendSlots => "C-POOL-6",
            Invariant::RateBucket => "C-RATE-1, C-RATE-2",
            Invariant::OneResponse => "C-RETRY-4, C-PATH-9",
            Invariant::GateSlots | Invariant::QueueBound | Invariant::QueueTimeout => "C-LOAD-1",
            Invariant::Bulkhead => "C-LOAD-2",
            Invariant::SlowStart => "C-HEALTH-4",
            Invariant::Liveness => "C-HEALTH-2, C-HEALTH-3",
            Invariant::PoolNeverEmptied => "C-POOL-5",
            Invariant::ReloadNoGap => "C-CONF-5",
            Invariant::StorePolicy => "C-RATE-5",
            Invariant::OneSnapshot => "C-CONF-4",
            Invariant::RequestTimers => "C-PATH-12, C-PATH-7, C-RETRY-5",
            Invariant::ConnectionTimers => "C-PATH-12",
            Invariant::OutlierCap => "C-OUT-2",
            Invariant::PushedBackReached => "C-RETRY-11",
            Invariant::StreamLimit => "C-GRPC-1",
            Invariant::ReplaySafe => "C-RETRY-1, C-RETRY-9",
            Invariant::HedgeBudget => "C-HEDGE-1, C-RETRY-7, C-RETRY-1",
            Invariant::HedgeSafe => "C-HEDGE-1, C-RETRY-1",
            Invariant::LoserSilent => "C-HEDGE-1, C-RETRY-4",
            Invariant::LoserNeutral => "C-HEDGE-1, C-HEALTH-3, C-OUT-1",
            Invariant::BackoffBounds => "C-RETRY-10",
        }
    }

    /// The invariant named `name`.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Invariant> {
        Invariant::ALL.into_iter().find(|i| i.name() == name)
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A broken invariant: where, when, and how to replay it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The scenario's name.
    pub scenario: &'static str,
    /// The seed of the run.
    pub seed: u64,
    /// What broke.
    pub invariant: Invariant,
    /// Virtual time of the event after which the check failed.
    pub at: Instant,
    /// The numbers that disagree.
    pub detail: String,
}

impl Violation {
    /// The command that replays this run.
    #[must_use]
    pub fn replay_command(&self) -> String {
        format!(
            "WEIR_SIM_SEED={} cargo test -p weir-sim {}",
            self.seed, self.scenario
        )
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "scenario {} seed {}: invariant {} ({}) violated at t={}: {}\n  replay: {}",
            self.scenario,
            self.seed,
            self.invariant,
            self.invariant.contract(),
            Millis(self.at),
            self.detail,
            self.replay_command()
        )
    }
}

impl std::error::Error for Violation {}

/// An instant printed as milliseconds with three decimals.
#[derive(Debug, Clone, Copy)]
pub struct Millis(pub Instant);

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0.as_nanos();
        write!(f, "{}.{:03}ms", ns / 1_000_000, (ns / 1000) % 1000)
    }
}

/// What the HTTP/2 backends of a run saw (all zero without them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct H2Counts {
    /// Streams opened.
    pub streams: u64,
    /// Connections opened.
    pub conns: u64,
    /// Streams refused (`REFUSED_STREAM`, or above a `GOAWAY`'s last stream id).
    pub refused: u64,
    /// Of those, above a `GOAWAY`'s last stream id.
    pub above_goaway: u64,
    /// `GOAWAY` faults.
    pub goaways: u64,
    /// Connections lost, and the streams that were on them.
    pub lost: u64,
    /// Streams on lost connections.
    pub lost_streams: u64,
    /// Attempts that waited for a stream (every connection full at `max_conns_per_host`).
    pub waits: u64,
    /// Of those, waits that reached the connect timeout.
    pub wait_timeouts: u64,
}

impl fmt::Display for H2Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.streams == 0 && self.conns == 0 {
            return Ok(());
        }
        write!(
            f,
            " h2=streams:{},conns:{},refused:{}(goaway:{}),goaways:{},lost:{}({} streams),\
             waits:{}(timeouts:{})",
            self.streams,
            self.conns,
            self.refused,
            self.above_goaway,
            self.goaways,
            self.lost,
            self.lost_streams,
            self.waits,
            self.wait_timeouts
        )
    }
}

/// What one run did. Two runs of the same scenario and seed produce equal summaries (the event
/// log hash included): that is the determinism check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The scenario's name.
    pub scenario: &'static str,
    /// The seed.
    pub seed: u64,
    /// The selection policy of the default pool.
    pub policy: &'static str,
    /// Requests that arrived.
    pub requests: u64,
    /// Responses with a status below 500 that came from a backend.
    pub succeeded: u64,
    /// Backend responses with a 5xx status, delivered as they were (C-RETRY-4).
    pub delivered_5xx: u64,
    /// Synthetic 502/504 after a failed last attempt.
    pub failed: u64,
    /// 503 from the overload gate.
    pub overloaded: u64,
    /// 429 from the rate limiter.
    pub rate_limited: u64,
    /// 503 before any attempt: bulkhead full or no backend.
    pub rejected: u64,
    /// Requests whose client went away first (no response).
    pub abandoned: u64,
    /// Retries sent (attempts beyond the first).
    pub retries: u64,
    /// Retries the budget refused.
    pub budget_refusals: u64,
    /// Circuits that opened (passive ejections).
    pub ejections: u64,
    /// Panic selections.
    pub panic_selections: u64,
    /// Active health flips.
    pub health_flips: u64,
    /// Reloads published (applied or after warm-up) and rejected.
    pub reloads_published: u64,
    /// Reloads whose warm-up failed.
    pub reloads_rejected: u64,
    /// Shared-store calls made, and requests the failure policy decided (C-RATE-5).
    pub store_calls: u64,
    /// Requests decided by the store's failure policy.
    pub policy_decisions: u64,
    /// Configuration reloads published, and requests that saw one while in flight.
    pub config_reloads: u64,
    /// Requests in flight while a configuration reload was published.
    pub reloaded_mid: u64,
    /// Requests ended by a timer: body read (408), response body (write), response headers.
    pub timer_expiries: u64,
    /// Client connections closed by the watchdog or after parking, and connections parked.
    pub conn_closes: u64,
    /// Idle connections parked.
    pub conn_parks: u64,
    /// What the HTTP/2 backends saw.
    pub h2: H2Counts,
    /// 99th percentile of the virtual time from arrival to the response head, in microseconds.
    pub p99_us: u64,
    /// Events processed.
    pub events: u64,
    /// Hash of the full event log.
    pub trace_hash: u64,
}

impl Summary {
    /// Successful responses in permille of requests.
    #[must_use]
    pub fn success_permille(&self) -> u64 {
        (self.succeeded * 1000)
            .checked_div(self.requests)
            .unwrap_or(0)
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.success_permille();
        write!(
            f,
            "{} seed={} policy={} requests={} success={}.{}% retries={} budget_refusals={} \
             ejections={} panic={} health_flips={} p99={}.{:03}ms \
             [ok={} 5xx={} failed={} overloaded={} rate_limited={} rejected={} abandoned={} \
             reloads={}/{}] store={}/{} config_reloads={}/{} timers={} conns={}/{}{} events={} hash={:016x}",
            self.scenario,
            self.seed,
            self.policy,
            self.requests,
            s / 10,
            s % 10,
            self.retries,
            self.budget_refusals,
            self.ejections,
            self.panic_selections,
            self.health_flips,
            self.p99_us / 1000,
            self.p99_us % 1000,
            self.succeeded,
            self.delivered_5xx,
            self.failed,
            self.overloaded,
            self.rate_limited,
            self.rejected,
            self.abandoned,
            self.reloads_published,
            self.reloads_rejected,
            self.store_calls,
            self.policy_decisions,
            self.config_reloads,
            self.reloaded_mid,
            self.timer_expiries,
            self.conn_closes,
            self.conn_parks,
            self.h2,
            self.events,
            self.trace_hash
        )
    }
}
