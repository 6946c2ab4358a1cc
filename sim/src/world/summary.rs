//! The run's counters and its summary (identical for two runs of one seed), and the labels the
//! trace uses.

use weir_core::select::NoBackend;

use super::World;
use crate::report::Summary;
use crate::scenario::{Scenario, Setup};
use crate::trace::Header;

/// The trace's first line: the scenario's backends, pools and routes.
pub(super) fn header(scenario: Scenario, seed: u64, s: &Setup) -> Header {
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
pub(super) struct Stats {
    pub(super) requests: u64,
    pub(super) succeeded: u64,
    pub(super) delivered_5xx: u64,
    pub(super) failed: u64,
    pub(super) overloaded: u64,
    pub(super) rate_limited: u64,
    pub(super) rejected: u64,
    pub(super) abandoned: u64,
    pub(super) retries: u64,
    pub(super) budget_refusals: u64,
    pub(super) ejections: u64,
    pub(super) panic_selections: u64,
    pub(super) health_flips: u64,
    pub(super) reloads_published: u64,
    pub(super) reloads_rejected: u64,
    pub(super) store_calls: u64,
    pub(super) policy_decisions: u64,
    pub(super) config_reloads: u64,
    pub(super) reloaded_mid: u64,
    pub(super) timer_expiries: u64,
}

impl World<'_> {
    pub(super) fn summary(&mut self) -> Summary {
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
            store_calls: st.store_calls,
            policy_decisions: st.policy_decisions,
            config_reloads: st.config_reloads,
            reloaded_mid: st.reloaded_mid,
            timer_expiries: st.timer_expiries,
            conn_closes: self.conns.as_ref().map_or(0, |c| c.closes),
            conn_parks: self.conns.as_ref().map_or(0, |c| c.parks),
            p99_us: p99,
            events: self.events,
            trace_hash: self.trace.hash(),
        }
    }
}

pub(super) fn method_str(m: &http::Method) -> &'static str {
    match *m {
        http::Method::GET => "GET",
        http::Method::HEAD => "HEAD",
        http::Method::OPTIONS => "OPTIONS",
        http::Method::POST => "POST",
        http::Method::PUT => "PUT",
        _ => "OTHER",
    }
}

pub(super) fn no_backend_label(why: NoBackend) -> &'static str {
    match why {
        NoBackend::EmptyPool => "no_backend:empty_pool",
        NoBackend::AllTried => "no_backend:all_tried",
        NoBackend::NoHealthy => "no_backend:no_healthy",
        NoBackend::AllOpen => "no_backend:all_open",
        NoBackend::AllSaturated => "no_backend:all_saturated",
        NoBackend::NoneEnabled => "no_backend:none_enabled",
    }
}
