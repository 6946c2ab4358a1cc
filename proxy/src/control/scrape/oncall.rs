//! The families an on-call pages on, added to every scrape after the C-OBS-1 ones:
//! build and process facts, per-backend state (healthy, circuit, enabled, draining, slow-start
//! share), circuit transitions, retries, refused management mutations, reload success time and
//! the restart-required flag (the gate's families are in `gate.rs`). Every label set is
//! bounded by the configuration: one series per backend (times three circuit states), none per
//! request (docs/operations.md, "Metrics").

use std::sync::atomic::Ordering;

use weir_core::Instant;
use weir_core::breaker::CircuitState;
use weir_core::runtime::Runtime;

use crate::base::exposition::flag;
use crate::base::exposition::{FamilySnapshot, counter, gauge, labels};
use crate::observe::metrics::ops::MUTATING;
use crate::services::state::ProxyState;

/// Resident set size and open descriptors of this process, from `/proc/self` (Linux); `None`
/// elsewhere or when unreadable.
fn process_usage() -> (Option<f64>, Option<f64>, Option<f64>) {
    let rss = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            let pages: f64 = s.split_whitespace().nth(1)?.parse().ok()?;
            Some(pages * 4096.0)
        });
    let fds = std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|d| d.count() as f64);
    let max = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("Max open files"))?;
            line.split_whitespace().nth(3)?.parse().ok()
        });
    (rss, fds, max)
}

fn one(v: f64) -> Vec<(crate::base::exposition::Labels, f64)> {
    vec![(Vec::new(), v)]
}

fn build_and_process(proxy_state: &ProxyState, out: &mut Vec<FamilySnapshot>) {
    let ops = &proxy_state.data_plane.metrics.ops;
    out.push(gauge(
        "weir_build_info",
        "Always 1; the labels say which weir build and runtime is running.",
        vec![(
            labels([
                ("version", env!("CARGO_PKG_VERSION")),
                ("runtime", proxy_state.data_plane.rt.name()),
            ]),
            1.0,
        )],
    ));
    out.push(gauge(
        "process_start_time_seconds",
        "When the process started, in seconds since the Unix epoch.",
        one(ops.started_ms as f64 / 1000.0),
    ));
    let (rss, fds, max) = process_usage();
    if let Some(v) = rss {
        out.push(gauge(
            "process_resident_memory_bytes",
            "Resident memory of the process, in bytes.",
            one(v),
        ));
    }
    if let Some(v) = fds {
        out.push(gauge(
            "process_open_fds",
            "File descriptors the process has open.",
            one(v),
        ));
    }
    if let Some(v) = max {
        out.push(gauge(
            "process_max_fds",
            "The process's soft limit on open file descriptors.",
            one(v),
        ));
    }
}

fn backends(proxy_state: &ProxyState, rt: &Runtime, now: Instant, out: &mut Vec<FamilySnapshot>) {
    let cfg = rt.config();
    let (mut healthy, mut enabled, mut draining) = (Vec::new(), Vec::new(), Vec::new());
    let (mut circuit, mut share) = (Vec::new(), Vec::new());
    for (pool_index, b) in rt.backends() {
        let pool = cfg.pools.get(pool_index).map_or("", |p| p.name.as_str());
        let l = || labels([("backend", b.id()), ("pool", pool)]);
        healthy.push((l(), flag(b.is_healthy())));
        enabled.push((l(), flag(b.is_enabled())));
        draining.push((l(), flag(b.is_draining())));
        let state = b.circuit_state(now);
        for s in [
            CircuitState::Closed,
            CircuitState::Open,
            CircuitState::HalfOpen,
        ] {
            circuit.push((
                labels([("backend", b.id()), ("pool", pool), ("state", s.as_str())]),
                flag(state == s),
            ));
        }
        if let Some(p) = rt.pool(pool_index) {
            let permille = b.slow_start_permille(&p.params().slow_start, now);
            share.push((l(), f64::from(permille) / 1000.0));
        }
    }
    out.push(gauge(
        "load_balancer_backend_healthy",
        "1 when the backend passes its active health checks.",
        healthy,
    ));
    out.push(gauge(
        "load_balancer_backend_enabled",
        "1 when the backend is enabled (0: disabled through the management API).",
        enabled,
    ));
    out.push(gauge(
        "load_balancer_backend_draining",
        "1 while the backend is draining: it takes no new requests.",
        draining,
    ));
    out.push(gauge(
        "load_balancer_backend_circuit_state",
        "1 for the backend's current circuit-breaker state (closed, open or half_open), 0 for the others.",
        circuit,
    ));
    out.push(gauge(
        "load_balancer_backend_slow_start_ratio",
        "Share of its full weight the backend gets now: below 1 while the slow-start ramp runs.",
        share,
    ));
    let table = proxy_state.data_plane.metrics.backends.load();
    let mut transitions = Vec::new();
    for b in &table.order {
        for (i, to) in ["open", "closed"].into_iter().enumerate() {
            transitions.push((
                labels([("backend", b.id()), ("to", to)]),
                b.circuit[i].load(Ordering::Relaxed),
            ));
        }
    }
    out.push(counter(
        "load_balancer_circuit_transitions",
        "Circuit-breaker transitions, by backend and new state (open: ejected; closed: back).",
        transitions,
    ));
}

/// The families of this module, read now.
pub(crate) fn families(
    proxy_state: &ProxyState,
    rt: &Runtime,
    now: Instant,
) -> Vec<FamilySnapshot> {
    let mut out = Vec::with_capacity(20);
    build_and_process(proxy_state, &mut out);
    backends(proxy_state, rt, now, &mut out);
    let ops = &proxy_state.data_plane.metrics.ops;
    out.push(counter(
        "load_balancer_retries",
        "Retries sent: attempts beyond the first of each data-plane request.",
        vec![(Vec::new(), ops.retries.load(Ordering::Relaxed))],
    ));
    out.push(counter(
        "load_balancer_management_rejected_mutations",
        "Management mutations refused (bad token, CSRF guard, bad body, unknown id, invalid change), by endpoint.",
        MUTATING
            .iter()
            .zip(&ops.rejected)
            .map(|(n, c)| (labels([("endpoint", n)]), c.load(Ordering::Relaxed)))
            .collect(),
    ));
    out.push(gauge(
        "load_balancer_config_last_reload_success_timestamp_seconds",
        "When the configuration in force was last loaded or changed successfully (start included), in seconds since the Unix epoch.",
        one(ops.last_reload_ok_ms.load(Ordering::Relaxed) as f64 / 1000.0),
    ));
    out.push(gauge(
        "load_balancer_config_restart_required",
        "1 when the latest reload of the file had changes that need a restart and were not applied.",
        one(flag(ops.restart_required.load(Ordering::Relaxed))),
    ));
    out
}
