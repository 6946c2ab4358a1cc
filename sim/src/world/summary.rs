//! The run's counters and its summary (identical for two runs of one seed), and the labels the
//! trace uses.

mod counters;

pub(super) use counters::{Stats, header, method_str, no_backend_label};

use super::World;
use crate::report::Summary;

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
            h2: st.h2,
            conn_closes: self.conns.as_ref().map_or(0, |c| c.closes),
            conn_parks: self.conns.as_ref().map_or(0, |c| c.parks),
            p99_us: p99,
            events: self.events,
            trace_hash: self.trace.hash(),
        }
    }
}
