//! Pools fed by DNS (C-DISC-1): one task resolves every DNS pool's name when it is due and
//! applies a changed set through the reload path (`reload::install`, C-CONF-5), under the same
//! lock as SIGHUP reloads and management changes. What to do with an answer is core's
//! (`weir_core::discovery`); the DNS client is `services::dns`.
//!
//! At start, each DNS pool is resolved once before the first health-check cycle, so its
//! addresses are checked before the listeners open, like listed backends (C-HEALTH-1). The task
//! follows reloads: a pool added, removed or changed under `dns` is picked up within a second.
//!
//! A second task keeps the addresses of backend URLs' host names (C-DISC-2): resolved through
//! the same servers every `health_check.interval`, a failed or empty answer keeping the last
//! good set; new connections go to the current addresses (`services::dns::dial`) and pooled
//! connections made before a change are closed at their next checkout.

use std::sync::Arc;
use std::time::Duration;

use weir_core::backend::BackendSpec;
use weir_core::config::ValidConfig;
use weir_core::discovery::{Decision, Discovery};

use crate::base::rt::{self, Rt, watch};
use crate::base::worker;
use crate::control::reload::{self, Rejected};
use crate::observe::events;
use crate::observe::metrics::Metrics;
use crate::services::dns::Resolver;
use crate::services::state::ProxyState;

/// The longest the task sleeps without looking at the configuration in force (a reload may add
/// a DNS pool).
const FOLLOW: Duration = Duration::from_secs(1);

/// Resolve every DNS pool of `cfg` once and give each its addresses (start). Failures leave the
/// pool empty (logged); the task tries again at the pool's interval.
/// Their times are on the process clock, whose origin is set just after (close enough for the
/// next resolution's due time).
pub async fn first_resolution(
    rt: Rt,
    resolver: &Resolver,
    cfg: &mut ValidConfig,
) -> Vec<Discovery> {
    let now = weir_core::Instant::ZERO;
    let mut machines = Vec::new();
    for pool in &mut cfg.pools {
        let Some(spec) = &pool.dns else { continue };
        let mut m = Discovery::new(&pool.name, spec, &pool.backends, now);
        let answer = resolver.lookup(rt, &spec.name).await;
        let d = m.on_answer(answer, now);
        log(&m, &d);
        if let Some(set) = d.apply {
            pool.backends = set;
        }
        machines.push(m);
    }
    machines
}

/// Count the start's resolutions (the metrics exist once the state is built).
pub fn count_first(metrics: &Metrics, machines: &[Discovery]) {
    metrics.set_dns_pools(machines.iter().map(|m| (m.pool(), m.spec().name.as_str())));
    for m in machines {
        if let Some(last) = m.last() {
            metrics.dns_resolution(m.pool(), last.outcome, m.addresses().len());
        }
    }
}

/// The task: see the module doc. Ends at shutdown.
pub async fn run(
    proxy_state: Arc<ProxyState>,
    resolver: Resolver,
    mut machines: Vec<Discovery>,
    mut shutdown: watch::Receiver<bool>,
) {
    let rt = proxy_state.data_plane.rt;
    let clock = &proxy_state.data_plane.clock;
    loop {
        follow(&proxy_state, &mut machines, clock.now());
        let now = clock.now();
        let next = machines
            .iter()
            .map(Discovery::next_at)
            .min()
            .map_or(FOLLOW, |at| at.saturating_since(now).min(FOLLOW));
        if !next.is_zero() {
            if !rt::tick_unless_shutdown(rt, next, &mut shutdown).await {
                return;
            }
            continue;
        }
        for m in machines.iter_mut().filter(|m| m.due(now)) {
            let answer = resolver.lookup(rt, &m.spec().name).await;
            let d = m.on_answer(answer, clock.now());
            proxy_state
                .data_plane
                .metrics
                .dns_resolution(m.pool(), d.outcome, m.addresses().len());
            log(m, &d);
            if let Some(set) = d.apply
                && let Err(e) = apply(&proxy_state, m.pool(), set).await
            {
                reload::log_rejected("dns", None, &e);
                // The set in force is what the next answer is compared with.
                let running = proxy_state.data_plane.runtime();
                if let Some(spec) = running.config().pools.iter().find(|p| p.name == m.pool()) {
                    m.reset(&spec.backends);
                }
            }
            if shutdown.get() {
                return;
            }
        }
    }
}

fn log(m: &Discovery, d: &Decision) {
    let name = m.spec().name.as_str();
    if d.warn {
        events::dns_failed(m.pool(), name, d.outcome.as_str(), m.addresses().len());
    }
    if d.recovered {
        events::dns_recovered(m.pool(), name, m.addresses().len());
    }
    if d.apply.is_some() {
        events::dns_changed(m.pool(), name, &d.added, &d.removed);
    }
}

/// The machines follow the configuration in force: one per DNS pool, with its settings.
fn follow(proxy_state: &ProxyState, machines: &mut Vec<Discovery>, now: weir_core::Instant) {
    let running = proxy_state.data_plane.runtime();
    let pools = &running.config().pools;
    let before = machines.len();
    machines.retain(|m| pools.iter().any(|p| p.name == m.pool() && p.dns.is_some()));
    let mut changed = machines.len() != before;
    for p in pools {
        let Some(spec) = &p.dns else { continue };
        match machines.iter_mut().find(|m| m.pool() == p.name) {
            Some(m) => {
                if m.spec() != spec {
                    m.set_spec(spec, now);
                    changed = true;
                }
            }
            None => {
                machines.push(Discovery::new(&p.name, spec, &p.backends, now));
                changed = true;
            }
        }
    }
    if changed {
        proxy_state
            .data_plane
            .metrics
            .set_dns_pools(machines.iter().map(|m| (m.pool(), m.spec().name.as_str())));
    }
}

/// Publish `set` as pool `pool`'s backends: the runtime in force with that one change, through
/// the reload path (new backends warm up, removed ones drain, C-CONF-5).
async fn apply(
    proxy_state: &Arc<ProxyState>,
    pool: &str,
    set: Vec<BackendSpec>,
) -> Result<(), Rejected> {
    let _one_at_a_time = proxy_state.control.lock().await;
    let current = proxy_state.data_plane.runtime();
    let mut valid = current.config().clone();
    let Some(spec) = valid
        .pools
        .iter_mut()
        .find(|p| p.name == pool && p.dns.is_some())
    else {
        return Ok(());
    };
    spec.backends = set;
    let now = proxy_state.data_plane.clock.now();
    let reload = worker::with_rng(|rng| current.reload(valid, now, rng))?;
    reload::install(proxy_state, &current, reload.runtime).await
}

/// The host names of the backend URLs of `cfg` (address literals left out).
fn host_names(cfg: &ValidConfig) -> std::collections::BTreeSet<String> {
    cfg.pools
        .iter()
        .flat_map(|p| &p.backends)
        .filter_map(|b| b.url.parse::<http::Uri>().ok())
        .filter_map(|u| u.host().map(str::to_owned))
        .filter(|h| !h.starts_with('[') && h.parse::<std::net::IpAddr>().is_err())
        .collect()
}

/// Resolve `name` and keep its addresses for new connections (C-DISC-2); a failed or empty
/// answer keeps the last good set.
async fn refresh_host(rt: Rt, resolver: &Resolver, name: &str) {
    let weir_core::discovery::Answer::Addresses(addresses) = resolver.lookup(rt, name).await else {
        return;
    };
    let n = addresses.len();
    if crate::services::dns::set_host_addresses(name, addresses) {
        tracing::info!(
            target: "weir::dns",
            name,
            addresses = n,
            event = "backend_host_moved",
            "a backend host name's addresses changed: new connections go to the new ones, pooled ones to the old are closed"
        );
    }
}

/// At start, when `server.resolver` names the servers: the backend URLs' host names resolved
/// through them before the first health-check cycle (C-DISC-2). Without it the refresh task
/// resolves them in the background and the runtime's resolution stands in meanwhile.
pub async fn first_hosts(rt: Rt, resolver: &Resolver, cfg: &ValidConfig) {
    if cfg.server.resolver.is_empty() {
        return;
    }
    for name in host_names(cfg) {
        refresh_host(rt, resolver, &name).await;
    }
}

/// C-DISC-2: every `health_check.interval`, each backend URL's host name is resolved again.
/// Ends at shutdown.
pub async fn refresh_hosts(
    proxy_state: Arc<ProxyState>,
    resolver: Resolver,
    mut shutdown: watch::Receiver<bool>,
) {
    let rt = proxy_state.data_plane.rt;
    loop {
        let runtime = proxy_state.data_plane.runtime();
        let names = host_names(runtime.config());
        let every = runtime.config().config.health_check.interval;
        drop(runtime);
        for name in names {
            refresh_host(rt, &resolver, &name).await;
        }
        if !rt::tick_unless_shutdown(rt, every, &mut shutdown).await {
            return;
        }
    }
}
