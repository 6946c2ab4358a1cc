//! The scenarios: each is a function of the seed that returns a [`Setup`] (the world's
//! configuration, load and fault script). Every parameter that is not the point of the scenario is
//! drawn from the seed too, so 500 seeds cover 500 configurations, and the selection policy
//! rotates with the seed (`seed % 5`) so each policy gets a fifth of them.

use weir_core::rng::WyRand;
use weir_core::select::PolicyKind;

mod setup;
mod setups;

pub(crate) use setup::{ConnTimers, Setup, StoreSetup, StoreState};
use setups::{
    all_down_then_back, backend_crash, bulkhead_isolation, connection_timers, dns_changes,
    dns_flapping, flapping_backend, h2_conn_lost, h2_refused_goaway, h2_stream_limit, hot_client,
    outlier_500, outlier_pair, outlier_six, overload_spike, pushback_503, reload_mid_request,
    reload_warmup, retry_storm, slow_start_recovery, small_pool, store_outage,
};

/// A scenario of the CI sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scenario {
    /// One backend crashes under load (in-flight attempts break), later recovers; sometimes a
    /// second backend misbehaves meanwhile (hanging bodies, slow headers, 503s, lying probes).
    BackendCrash,
    /// One or two backends flap: crash/recover, refuse/recover, probes fail/pass, traffic
    /// fails/succeeds, with random half-periods.
    FlappingBackend,
    /// A backend of a two-backend round-robin pool goes down and comes back: its share of
    /// traffic ramps up as slow start says (C-HEALTH-4).
    SlowStartRecovery,
    /// Most responses are `503` for a while: retries run into the budget (C-RETRY-7).
    RetryStorm,
    /// Every backend goes down, then every backend comes back.
    AllDownThenBack,
    /// An arrival spike against a small gate, a short queue and few slots per backend (C-LOAD-1,
    /// C-POOL-6).
    OverloadSpike,
    /// A hot client (and a hot IPv6 /64 rotating its interface ids) against the rate limiter
    /// (C-RATE-1, C-RATE-2).
    HotClient,
    /// Reloads: one that replaces every healthy backend (warm-up first, C-CONF-5), sometimes one
    /// whose warm-up fails and is rejected, one that keeps some backends (C-CONF-6).
    ReloadWarmup,
    /// Two or three backends whose circuits all open: panic routing keeps serving (C-POOL-5).
    SmallPool,
    /// A slow route saturates its bulkhead; the fast route is unaffected (C-LOAD-2).
    BulkheadIsolation,
    /// The shared rate-limit store fails (errors, hangs, answers late) and recovers, under each
    /// failure policy in turn (C-RATE-5).
    StoreOutage,
    /// Configuration reloads land while requests are in flight: each exchange keeps the one
    /// snapshot it was created from (C-CONF-4).
    ReloadMidRequest,
    /// The request's timers: slow request bodies against `read_timeout`, slow or hanging
    /// response bodies against `write_timeout`, slow headers against the merged per-try and
    /// `response_header_timeout` deadline (C-PATH-12, C-RETRY-5, C-PATH-7).
    ConnectionTimers,
    /// One backend answers `500` to everything (sometimes a second one to part of it): outlier
    /// detection ejects it, within its cap (C-OUT-1, C-OUT-2).
    Outlier500,
    /// One of six backends answers 30 % of its requests `500`: outlier detection's success
    /// rate sees it among the five others, within its cap (C-OUT-1, C-OUT-2).
    OutlierSix,
    /// Both backends of a pool of two answer `500`: one at most is ejected, the pool keeps
    /// serving (C-OUT-2).
    OutlierPair,
    /// Backends answer `503` with `Retry-After` (delta-seconds or a date): each is pushed back
    /// for as long as it asked, capped by `retry_after_max`, within the outlier cap, and gets no
    /// request meanwhile (C-RETRY-11).
    Pushback503,
    /// HTTP/2 backends with few streams per connection and `max_conns_per_host` under a load
    /// spike: streams multiplexed within the backends' limits, attempts waiting for a stream
    /// (C-GRPC-1).
    H2StreamLimit,
    /// HTTP/2 backends refuse streams and send `GOAWAY`: what was not processed is sent again
    /// for any method, what was is retried only when replayable (C-RETRY-9).
    H2RefusedGoaway,
    /// HTTP/2 connections lost with their streams, and a crash (C-RETRY-1, C-RETRY-9).
    H2ConnLost,
    /// A pool fed by DNS whose answer changes, fails and goes empty: changes apply like
    /// reloads, failures keep the last good set (C-DISC-1).
    DnsChanges,
    /// A pool fed by a flapping name: two sets swap every 0.5-1 s, with failures and empty
    /// answers between (C-DISC-1).
    DnsFlapping,
}

impl Scenario {
    /// Every scenario, in documentation order.
    pub const ALL: [Scenario; 22] = [
        Scenario::BackendCrash,
        Scenario::FlappingBackend,
        Scenario::SlowStartRecovery,
        Scenario::RetryStorm,
        Scenario::AllDownThenBack,
        Scenario::OverloadSpike,
        Scenario::HotClient,
        Scenario::ReloadWarmup,
        Scenario::SmallPool,
        Scenario::BulkheadIsolation,
        Scenario::StoreOutage,
        Scenario::ReloadMidRequest,
        Scenario::ConnectionTimers,
        Scenario::Outlier500,
        Scenario::OutlierSix,
        Scenario::OutlierPair,
        Scenario::Pushback503,
        Scenario::H2StreamLimit,
        Scenario::H2RefusedGoaway,
        Scenario::H2ConnLost,
        Scenario::DnsChanges,
        Scenario::DnsFlapping,
    ];

    /// The name used on the command line, in test names and in the replay command.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Scenario::BackendCrash => "backend_crash",
            Scenario::FlappingBackend => "flapping_backend",
            Scenario::SlowStartRecovery => "slow_start_recovery",
            Scenario::RetryStorm => "retry_storm",
            Scenario::AllDownThenBack => "all_down_then_back",
            Scenario::OverloadSpike => "overload_spike",
            Scenario::HotClient => "hot_client",
            Scenario::ReloadWarmup => "reload_warmup",
            Scenario::SmallPool => "small_pool",
            Scenario::BulkheadIsolation => "bulkhead_isolation",
            Scenario::StoreOutage => "store_outage",
            Scenario::ReloadMidRequest => "reload_mid_request",
            Scenario::ConnectionTimers => "connection_timers",
            Scenario::Outlier500 => "outlier_500",
            Scenario::OutlierSix => "outlier_six",
            Scenario::OutlierPair => "outlier_pair",
            Scenario::Pushback503 => "pushback_503",
            Scenario::H2StreamLimit => "h2_stream_limit",
            Scenario::H2RefusedGoaway => "h2_refused_goaway",
            Scenario::H2ConnLost => "h2_conn_lost",
            Scenario::DnsChanges => "dns_changes",
            Scenario::DnsFlapping => "dns_flapping",
        }
    }

    /// The scenario named `name`.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Build the setup for `seed`, drawing every choice from `rng`.
    pub(crate) fn setup(self, seed: u64, rng: &mut WyRand) -> Setup {
        let policy = PolicyKind::ALL[(seed % PolicyKind::ALL.len() as u64) as usize];
        match self {
            Scenario::BackendCrash => backend_crash(rng, policy),
            Scenario::FlappingBackend => flapping_backend(rng, policy),
            Scenario::SlowStartRecovery => slow_start_recovery(rng),
            Scenario::RetryStorm => retry_storm(rng, policy),
            Scenario::AllDownThenBack => all_down_then_back(rng, policy),
            Scenario::OverloadSpike => overload_spike(rng, policy),
            Scenario::HotClient => hot_client(rng, policy),
            Scenario::ReloadWarmup => reload_warmup(rng, policy),
            Scenario::SmallPool => small_pool(rng, policy),
            Scenario::BulkheadIsolation => bulkhead_isolation(rng, policy),
            Scenario::StoreOutage => store_outage(rng, policy, seed),
            Scenario::ReloadMidRequest => reload_mid_request(rng, policy),
            Scenario::ConnectionTimers => connection_timers(rng, policy),
            Scenario::Outlier500 => outlier_500(rng, policy),
            Scenario::OutlierSix => outlier_six(rng, policy),
            Scenario::OutlierPair => outlier_pair(rng, policy),
            Scenario::Pushback503 => pushback_503(rng, policy),
            Scenario::H2StreamLimit => h2_stream_limit(rng, policy),
            Scenario::H2RefusedGoaway => h2_refused_goaway(rng, policy),
            Scenario::H2ConnLost => h2_conn_lost(rng, policy),
            Scenario::DnsChanges => dns_changes(rng, policy),
            Scenario::DnsFlapping => dns_flapping(rng, policy),
        }
    }
}

impl core::fmt::Display for Scenario {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}
