//! Per-backend metrics (C-OBS-1): the handles every request to a backend updates
//! (attempts by outcome, upstream duration, panic selections, health checks, circuit
//! transitions, upstream connections opened and reused), kept by id across reloads, and the
//! families read from them and from the runtime in force (availability, in-flight). One series
//! (or one per outcome / result) per configured backend: bounded by the configuration.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use foldhash::fast::FixedState;
use weir_core::Instant;
use weir_core::outlier::EjectReason;
use weir_core::pool::Availability;
use weir_core::runtime::Runtime;

use super::{AtomicHistogram, AttemptOutcome};
use crate::base::exposition::{FamilySnapshot, counter, gauge, labels};
use crate::base::exposition::{flag, seconds_histogram};

/// One backend's handles (C-OBS-1), shared by every request that attempts it. Kept across
/// reloads for the same id.
#[derive(Debug)]
pub struct BackendMetrics {
    id: Box<str>,
    attempts: [AtomicU64; AttemptOutcome::ALL.len()],
    duration: AtomicHistogram,
    panic: AtomicU64,
    /// `[success, failure]`.
    checks: [AtomicU64; 2],
    /// Circuit transitions `[opened, closed]` (`control/scrape/oncall.rs`).
    pub(crate) circuit: [AtomicU64; 2],
    /// Upstream requests sent on `[a new connection, a reused idle one]`.
    connections: [AtomicU64; 2],
    /// Outlier ejections, by reason in `EjectReason::ALL` order (C-OUT-2).
    ejections: [AtomicU64; EjectReason::ALL.len()],
}

impl BackendMetrics {
    pub(crate) fn new(id: &str) -> BackendMetrics {
        BackendMetrics {
            id: Box::from(id),
            attempts: std::array::from_fn(|_| AtomicU64::new(0)),
            duration: AtomicHistogram::default(),
            panic: AtomicU64::new(0),
            checks: [AtomicU64::new(0), AtomicU64::new(0)],
            circuit: [AtomicU64::new(0), AtomicU64::new(0)],
            connections: [AtomicU64::new(0), AtomicU64::new(0)],
            ejections: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Count one outlier ejection (C-OUT-2).
    pub fn ejection(&self, reason: EjectReason) {
        let i = EjectReason::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(0);
        self.ejections[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Count an upstream request sent on a new connection (`reused: false`, counted once the
    /// connection is up) or on a pooled idle one (`true`).
    pub fn upstream_connection(&self, reused: bool) {
        self.connections[usize::from(reused)].fetch_add(1, Ordering::Relaxed);
    }

    /// Count one circuit transition (C-HEALTH-3): opened, or closed.
    pub fn circuit_transition(&self, opened: bool) {
        self.circuit[usize::from(!opened)].fetch_add(1, Ordering::Relaxed);
    }

    /// The backend's id.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Count one attempt and the time until its outcome was known.
    pub fn attempt(&self, outcome: AttemptOutcome, elapsed: Duration) {
        self.attempts[outcome as usize].fetch_add(1, Ordering::Relaxed);
        self.duration.observe(elapsed);
    }

    /// Attempts with `outcome` counted so far.
    #[must_use]
    pub fn attempts(&self, outcome: AttemptOutcome) -> u64 {
        self.attempts[outcome as usize].load(Ordering::Relaxed)
    }

    /// Count a slot granted by panic routing (every eligible circuit open).
    pub fn panic_selection(&self) {
        self.panic.fetch_add(1, Ordering::Relaxed);
    }

    /// Count one active health check (not an upstream attempt, C-OBS-1).
    pub fn health_check(&self, success: bool) {
        self.checks[usize::from(!success)].fetch_add(1, Ordering::Relaxed);
    }
}

/// The per-backend handles of the runtime in force, by id (ids are unique across pools,
/// C-POOL-1), in runtime order.
#[derive(Debug, Default)]
pub(crate) struct BackendTable {
    pub(super) by_id: HashMap<Box<str>, Arc<BackendMetrics>, FixedState>,
    pub(crate) order: Vec<Arc<BackendMetrics>>,
}

impl BackendTable {
    /// A table over `ids`, reusing the handles of `previous` for ids it had.
    pub(super) fn build<'a>(
        ids: impl Iterator<Item = &'a str>,
        previous: &BackendTable,
    ) -> BackendTable {
        let mut table = BackendTable::default();
        for id in ids {
            if table.by_id.contains_key(id) {
                continue;
            }
            let m = previous
                .by_id
                .get(id)
                .cloned()
                .unwrap_or_else(|| Arc::new(BackendMetrics::new(id)));
            table.by_id.insert(Box::from(id), Arc::clone(&m));
            table.order.push(m);
        }
        table
    }
}

/// The per-backend families, read now.
pub(super) fn families(
    table: &BackendTable,
    rt: &Runtime,
    now: Instant,
    out: &mut Vec<FamilySnapshot>,
) {
    let mut attempts = Vec::new();
    let mut upstream = Vec::new();
    let mut panics = Vec::new();
    let mut checks = Vec::new();
    let mut connections = Vec::new();
    let mut ejections = Vec::new();
    for b in &table.order {
        for (i, reason) in EjectReason::ALL.into_iter().enumerate() {
            ejections.push((
                labels([("backend", b.id()), ("reason", reason.as_str())]),
                b.ejections[i].load(Ordering::Relaxed),
            ));
        }
        for o in AttemptOutcome::ALL {
            attempts.push((
                labels([("backend", b.id()), ("outcome", o.as_str())]),
                b.attempts[o as usize].load(Ordering::Relaxed),
            ));
        }
        upstream.push((labels([("backend", b.id())]), b.duration.snapshot()));
        panics.push((
            labels([("backend", b.id())]),
            b.panic.load(Ordering::Relaxed),
        ));
        for (i, result) in ["success", "failure"].into_iter().enumerate() {
            checks.push((
                labels([("backend", b.id()), ("result", result)]),
                b.checks[i].load(Ordering::Relaxed),
            ));
        }
        for (i, kind) in ["opened", "reused"].into_iter().enumerate() {
            connections.push((
                labels([("backend", b.id()), ("connection", kind)]),
                b.connections[i].load(Ordering::Relaxed),
            ));
        }
    }
    out.push(counter(
        "load_balancer_upstream_attempts",
        "Upstream attempts, by backend and outcome (health probes are not attempts).",
        attempts,
    ));
    out.push(seconds_histogram(
        "load_balancer_upstream_duration",
        "Time from sending an attempt to its response head or failure, by backend.",
        upstream,
    ));
    out.push(counter(
        "load_balancer_panic_selections",
        "Slots granted by panic routing (every eligible circuit open), by backend.",
        panics,
    ));
    out.push(counter(
        "load_balancer_health_checks",
        "Active health probes, by backend and result.",
        checks,
    ));
    out.push(counter(
        "load_balancer_upstream_connections",
        "Upstream requests by backend and connection: opened (a new connection was made for it) or reused (an idle pooled one).",
        connections,
    ));

    out.push(counter(
        "load_balancer_outlier_ejections",
        "Outlier-detection ejections, by backend and reason (failure_percentage, success_rate).",
        ejections,
    ));

    let mut available = Vec::new();
    let mut inflight = Vec::new();
    let mut ejected = Vec::new();
    let mut limits = Vec::new();
    let cfg = rt.config();
    for (pool_index, b) in rt.backends() {
        let pool_name = cfg.pools.get(pool_index).map_or("", |p| p.name.as_str());
        let up = rt.pool(pool_index).is_some_and(|p| {
            matches!(
                b.availability(p.params(), now),
                Availability::Available | Availability::Saturated
            )
        });
        available.push((labels([("backend", b.id()), ("pool", pool_name)]), flag(up)));
        let out = rt
            .pool(pool_index)
            .is_some_and(|p| b.is_ejected(p.params(), now));
        ejected.push((labels([("backend", b.id())]), flag(out)));
        inflight.push((labels([("backend", b.id())]), f64::from(b.in_flight())));
        if let Some(limit) = rt
            .pool(pool_index)
            .and_then(|p| b.concurrency_limit(p.params()))
        {
            limits.push((labels([("backend", b.id())]), f64::from(limit)));
        }
    }
    out.push(gauge(
        "load_balancer_backend_available",
        "1 when the backend can take requests (enabled, not draining, healthy, circuit not open, not ejected).",
        available,
    ));
    out.push(gauge(
        "load_balancer_backend_ejected",
        "1 while outlier detection has the backend ejected, else 0.",
        ejected,
    ));
    out.push(gauge(
        "load_balancer_backend_inflight_requests",
        "Requests holding a slot of the backend now.",
        inflight,
    ));
    out.push(gauge(
        "load_balancer_backend_concurrency_limit",
        "The backend's adaptive concurrency limit now (only while adaptive concurrency is on).",
        limits,
    ));
}
