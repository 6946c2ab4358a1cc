//! The run's counters ([`Stats`]), the trace's header line ([`header`]) and the labels the trace
//! uses ([`method_str`], [`no_backend_label`]): what the world and its parts name; the parent
//! module turns them into the run's summary.

use weir_core::select::NoBackend;

use crate::scenario::{Scenario, Setup};
use crate::trace::Header;

/// The trace's first line: the scenario's backends, pools and routes.
pub(in crate::world) fn header(scenario: Scenario, seed: u64, s: &Setup) -> Header {
    Header {
        kind: "header",
        scenario: scenario.name(),
        seed,
        backends: s.backends.iter().map(|b| b.id.clone()).collect(),
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
    }
}

/// Counters for the summary.
#[derive(Debug, Default)]
pub(in crate::world) struct Stats {
    pub(in crate::world) requests: u64,
    pub(in crate::world) succeeded: u64,
    pub(in crate::world) delivered_5xx: u64,
    pub(in crate::world) failed: u64,
    pub(in crate::world) overloaded: u64,
    pub(in crate::world) rate_limited: u64,
    pub(in crate::world) rejected: u64,
    pub(in crate::world) abandoned: u64,
    pub(in crate::world) retries: u64,
    pub(in crate::world) budget_refusals: u64,
    pub(in crate::world) ejections: u64,
    pub(in crate::world) panic_selections: u64,
    pub(in crate::world) health_flips: u64,
    pub(in crate::world) reloads_published: u64,
    pub(in crate::world) reloads_rejected: u64,
    pub(in crate::world) store_calls: u64,
    pub(in crate::world) policy_decisions: u64,
    pub(in crate::world) config_reloads: u64,
    pub(in crate::world) reloaded_mid: u64,
    pub(in crate::world) timer_expiries: u64,
    pub(in crate::world) h2: crate::report::H2Counts,
}

pub(in crate::world) fn method_str(m: &http::Method) -> &'static str {
    match *m {
        http::Method::GET => "GET",
        http::Method::HEAD => "HEAD",
        http::Method::OPTIONS => "OPTIONS",
        http::Method::POST => "POST",
        http::Method::PUT => "PUT",
        _ => "OTHER",
    }
}

pub(in crate::world) fn no_backend_label(why: NoBackend) -> &'static str {
    match why {
        NoBackend::EmptyPool => "no_backend:empty_pool",
        NoBackend::AllTried => "no_backend:all_tried",
        NoBackend::NoHealthy => "no_backend:no_healthy",
        NoBackend::AllOpen => "no_backend:all_open",
        NoBackend::AllSaturated => "no_backend:all_saturated",
        NoBackend::AdaptiveLimit => "no_backend:adaptive_limit",
        NoBackend::NoneEnabled => "no_backend:none_enabled",
    }
}
