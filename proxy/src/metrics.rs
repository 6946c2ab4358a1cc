//! Prometheus metrics (C-OBS-1, C-OBS-2, C-LOAD-3), exposed on the management listener's
//! `/metrics` in the OpenMetrics text format by the official `prometheus-client` crate.
//!
//! **The request path touches atomics only.** Every counter and histogram the data plane
//! updates is a plain `AtomicU64` (`Relaxed` adds) in a structure built ahead of time:
//! per listener an array indexed by status code and a fixed-bucket histogram; per reason of
//! `response::ProtectionReason` one counter; per backend a [`BackendMetrics`] (attempts by
//! outcome, upstream duration, panic selections, health checks) kept in a table that is
//! rebuilt on reload and published with an [`ArcSwap`], exactly like the runtime snapshot. No
//! label set is hashed into a shared map on the request path and no lock is taken; a request
//! finds its backend's handles with one lock-free `ArcSwap` load and one lookup by id. This is
//! what DESIGN.md asks of `prometheus-client`'s `Family` ("never hold two guards; keep
//! per-backend handles in the snapshot"), taken one step further: `Family` and `Histogram` take
//! a lock per update and per encode, so the hot path does not use them at all.
//!
//! **A scrape never blocks the request path (C-OBS-2).** A scrape first takes a [`Snapshot`]:
//! it reads the atomics and computes the gauges from the runtime in force (backend
//! availability, in-flight counts, retry-budget tokens, local buckets; the local store's shards
//! are locked one at a time, briefly, as on any request). The snapshot is owned data; it is
//! handed to a fresh `prometheus_client::registry::Registry` as a `Collector` and encoded into a
//! `String` in memory. Only then is the body written to the scraper, so a slow or stalled
//! scraper holds nothing that a request needs (the reference balancer's rule: "scrape takes a
//! snapshot first and does not hold the request path while writing to a slow client").
//!
//! **Every family is exposed from start (C-OBS-1)**, with zero values: both listeners'
//! `code="200"` series, every protection reason, every backend's attempt outcomes and health
//! check results, every reload source and result.
//!
//! Labels are bounded: listener, status code, backend id, pool name, outcome, reason, result,
//! storage kind, reload source. Never a path or a client address.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use foldhash::fast::FixedState;
use prometheus_client::registry::Registry;
use weir_core::pool::Availability;
use weir_core::rate::StorageKind;
use weir_core::response::ProtectionReason;
use weir_core::runtime::Runtime;

use crate::Shared;

mod encode;
mod histogram;
mod state;

pub use histogram::AtomicHistogram;

pub(crate) use encode::{FamilySnapshot, Labels, counter, gauge, labels};
use encode::{flag, seconds_histogram};

pub use state::upstream_connection;

/// The `Content-Type` of the exposition (OpenMetrics text 1.0.0).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds (seconds) of the duration histograms: 1 ms to 30 s, Prometheus-style steps.
const DURATION_BOUNDS: [f64; 15] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Which listener answered (`listener` label, C-OBS-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// The data plane.
    Public,
    /// The management plane.
    Management,
}

impl Listener {
    /// The label value.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Listener::Public => "public",
            Listener::Management => "management",
        }
    }

    const fn index(self) -> usize {
        match self {
            Listener::Public => 0,
            Listener::Management => 1,
        }
    }
}

/// How one upstream attempt ended (`outcome` label of `load_balancer_upstream_attempts_total`):
/// core's classification, as the request engine reports it.
pub use weir_core::exchange::AttemptResult as AttemptOutcome;

/// Who asked for a new runtime (`source` label of `load_balancer_config_reloads_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadSource {
    /// SIGHUP: the file was re-read (C-CONF-4).
    Signal,
    /// `PATCH /api/dashboard/config` (C-CONF-8).
    Management,
}

impl ReloadSource {
    /// The label value.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            ReloadSource::Signal => "signal",
            ReloadSource::Management => "management",
        }
    }
}

/// Per-listener request metrics.
#[derive(Debug)]
struct RequestMetrics {
    /// Indexed by status code (hyper's `StatusCode` is 100..=999).
    codes: Box<[AtomicU64]>,
    duration: AtomicHistogram,
}

impl RequestMetrics {
    fn new() -> RequestMetrics {
        RequestMetrics {
            codes: (0..1000).map(|_| AtomicU64::new(0)).collect(),
            duration: AtomicHistogram::default(),
        }
    }
}

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
    /// Circuit transitions `[opened, closed]` (issue 20; `metrics/state.rs`).
    pub(crate) circuit: [AtomicU64; 2],
}

impl BackendMetrics {
    fn new(id: &str) -> BackendMetrics {
        BackendMetrics {
            id: Box::from(id),
            attempts: std::array::from_fn(|_| AtomicU64::new(0)),
            duration: AtomicHistogram::default(),
            panic: AtomicU64::new(0),
            checks: [AtomicU64::new(0), AtomicU64::new(0)],
            circuit: [AtomicU64::new(0), AtomicU64::new(0)],
        }
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

    /// Count a slot granted by panic routing (every eligible circuit open).
    pub fn panic_selection(&self) {
        self.panic.fetch_add(1, Ordering::Relaxed);
    }

    /// Count one active health check (not an upstream attempt, C-OBS-1).
    pub fn health_check(&self, success: bool) {
        self.checks[usize::from(!success)].fetch_add(1, Ordering::Relaxed);
    }
}

/// Times one upstream attempt and counts it exactly once: with its outcome when
/// [`finish`](Self::finish) is called, or as [`AttemptOutcome::Cancelled`] when dropped first
/// (hyper dropped the request because the client went away, C-PATH-9).
#[derive(Debug)]
pub struct AttemptTimer {
    backend: Option<Arc<BackendMetrics>>,
    rt: crate::rt::Rt,
    started: std::time::Instant,
}

impl AttemptTimer {
    /// Start timing an attempt to `backend` (no-op when `None`) that started at `started` (a
    /// clock reading the caller already has).
    #[must_use]
    pub fn start(
        rt: crate::rt::Rt,
        backend: Option<Arc<BackendMetrics>>,
        started: std::time::Instant,
    ) -> AttemptTimer {
        AttemptTimer {
            backend,
            rt,
            started,
        }
    }

    fn elapsed(&self) -> std::time::Duration {
        self.rt.now().saturating_duration_since(self.started)
    }

    /// Count the attempt with `outcome`, ended at `now`.
    pub fn finish(mut self, outcome: AttemptOutcome, now: std::time::Instant) {
        if let Some(b) = self.backend.take() {
            b.attempt(outcome, now.saturating_duration_since(self.started));
        }
    }
}

impl Drop for AttemptTimer {
    fn drop(&mut self) {
        if let Some(b) = self.backend.take() {
            b.attempt(AttemptOutcome::Cancelled, self.elapsed());
        }
    }
}

/// The per-backend handles of the runtime in force, by id (ids are unique across pools,
/// C-POOL-1), in runtime order.
#[derive(Debug, Default)]
struct BackendTable {
    by_id: HashMap<Box<str>, Arc<BackendMetrics>, FixedState>,
    order: Vec<Arc<BackendMetrics>>,
}

impl BackendTable {
    /// A table over `ids`, reusing the handles of `previous` for ids it had.
    fn build<'a>(ids: impl Iterator<Item = &'a str>, previous: &BackendTable) -> BackendTable {
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

/// The process's metrics. See the module doc.
#[derive(Debug)]
pub struct Metrics {
    requests: [RequestMetrics; 2],
    protection: [AtomicU64; ProtectionReason::ALL.len()],
    backends: ArcSwap<BackendTable>,
    /// `[signal applied, signal rejected, management applied, management rejected]`.
    reloads: [AtomicU64; 4],
    /// Process-level gauges and counters added for on-call (issue 20; `metrics/state.rs`).
    pub(crate) ops: state::Ops,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Empty metrics (no backends yet: see [`Metrics::set_backends`]).
    #[must_use]
    pub fn new() -> Metrics {
        Metrics {
            requests: [RequestMetrics::new(), RequestMetrics::new()],
            protection: std::array::from_fn(|_| AtomicU64::new(0)),
            backends: ArcSwap::from_pointee(BackendTable::default()),
            reloads: std::array::from_fn(|_| AtomicU64::new(0)),
            ops: state::Ops::new(),
        }
    }

    /// Count one answered request of `listener` (C-OBS-1, C-OBS-2: every request, sampled for
    /// the log or not).
    pub fn request(&self, listener: Listener, status: u16, elapsed: Duration) {
        let m = &self.requests[listener.index()];
        if let Some(c) = m.codes.get(usize::from(status)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        m.duration.observe(elapsed);
    }

    /// Count a protection event (C-LOAD-3).
    pub fn protection(&self, reason: ProtectionReason) {
        if let Some(i) = ProtectionReason::ALL.iter().position(|r| *r == reason) {
            self.protection[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The handles of backend `id`, when it is in the runtime in force (or being warmed up).
    #[must_use]
    pub fn backend(&self, id: &str) -> Option<Arc<BackendMetrics>> {
        self.backends.load().by_id.get(id).cloned()
    }

    /// Make the per-backend handles those of `ids` (a reload or a warm-up): kept ids keep their
    /// counters, new ones start at zero, others are no longer exposed.
    pub fn set_backends<'a>(&self, ids: impl Iterator<Item = &'a str>) {
        let previous = self.backends.load();
        self.backends
            .store(Arc::new(BackendTable::build(ids, &previous)));
    }

    /// Count a reload or management change that was published (`applied`) or not.
    pub fn reload(&self, source: ReloadSource, applied: bool) {
        let i = match source {
            ReloadSource::Signal => 0,
            ReloadSource::Management => 2,
        } + usize::from(!applied);
        self.reloads[i].fetch_add(1, Ordering::Relaxed);
        if applied {
            self.ops.reload_succeeded();
        }
    }

    /// Whether the latest reload of the file left changes that need a restart unapplied.
    pub fn set_restart_required(&self, pending: bool) {
        self.ops.set_restart_required(pending);
    }

    /// Count a refused management mutation of endpoint `name` (`mgmt::Endpoint::name`).
    pub fn rejected_mutation(&self, name: &str) {
        self.ops.rejected_mutation(name);
    }

    /// Count the retries of one finished request (`attempts - 1`).
    pub fn retries(&self, attempts: u32) {
        self.ops.retries(attempts);
    }

    /// Requests of `listener` answered with `status` so far.
    #[must_use]
    pub fn requests(&self, listener: Listener, status: u16) -> u64 {
        self.requests[listener.index()]
            .codes
            .get(usize::from(status))
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

/// The rate-limit store's gauges (C-OBS-1), from the limiter's own state
/// ([`Shared::rate_limit_status`]).
#[derive(Debug, Clone, Copy)]
struct RateGauges {
    storage: StorageKind,
    healthy: bool,
    degraded: bool,
    local_buckets: usize,
    local_evictions: u64,
}

impl RateGauges {
    fn read(shared: &Shared, _rt: &Runtime) -> RateGauges {
        let status = shared.rate_limit_status();
        RateGauges {
            storage: if status.enabled {
                status.storage
            } else {
                StorageKind::Disabled
            },
            healthy: status.storage_healthy(),
            degraded: status.degraded,
            local_buckets: status.local_buckets,
            local_evictions: status.local_evictions,
        }
    }
}

/// Everything a scrape exposes, read at one moment (C-OBS-2). Owned: encoding it holds no
/// lock of the request path.
#[derive(Debug)]
pub struct Snapshot {
    families: Vec<FamilySnapshot>,
}

impl Snapshot {
    /// Read every metric of `shared` now.
    #[must_use]
    pub fn take(shared: &Shared) -> Snapshot {
        let m = &shared.metrics;
        let rt = shared.runtime.load();
        let now = shared.clock.now();
        let table = m.backends.load();
        let mut families = Vec::with_capacity(16);

        // Requests per listener and status; `code="200"` always, so the family has series from
        // the start.
        let mut requests = Vec::new();
        let mut durations = Vec::new();
        for listener in [Listener::Public, Listener::Management] {
            let r = &m.requests[listener.index()];
            for (code, c) in r.codes.iter().enumerate() {
                let n = c.load(Ordering::Relaxed);
                if n > 0 || code == 200 {
                    requests.push((
                        labels([("listener", listener.as_str()), ("code", &code.to_string())]),
                        n,
                    ));
                }
            }
            durations.push((
                labels([("listener", listener.as_str())]),
                r.duration.snapshot(),
            ));
        }
        families.push(counter(
            "load_balancer_http_requests",
            "Requests answered, by listener and status code (/healthz and /readyz included).",
            requests,
        ));
        families.push(seconds_histogram(
            "load_balancer_http_request_duration",
            "Time from a request's head to its response head, by listener.",
            durations,
        ));

        let mut attempts = Vec::new();
        let mut upstream = Vec::new();
        let mut panics = Vec::new();
        let mut checks = Vec::new();
        for b in &table.order {
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
        }
        families.push(counter(
            "load_balancer_upstream_attempts",
            "Upstream attempts, by backend and outcome (health probes are not attempts).",
            attempts,
        ));
        families.push(seconds_histogram(
            "load_balancer_upstream_duration",
            "Time from sending an attempt to its response head or failure, by backend.",
            upstream,
        ));
        families.push(counter(
            "load_balancer_panic_selections",
            "Slots granted by panic routing (every eligible circuit open), by backend.",
            panics,
        ));
        families.push(counter(
            "load_balancer_health_checks",
            "Active health probes, by backend and result.",
            checks,
        ));

        let mut available = Vec::new();
        let mut inflight = Vec::new();
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
            inflight.push((labels([("backend", b.id())]), f64::from(b.in_flight())));
        }
        families.push(gauge(
            "load_balancer_backend_available",
            "1 when the backend can take requests (enabled, not draining, healthy, circuit not open).",
            available,
        ));
        families.push(gauge(
            "load_balancer_backend_inflight_requests",
            "Requests holding a slot of the backend now.",
            inflight,
        ));
        let gate = shared.admission.gate();
        families.push(gauge(
            "load_balancer_inflight_requests",
            "Data-plane requests inside the global overload gate now.",
            vec![(Vec::new(), f64::from(gate.in_flight()))],
        ));
        families.push(gauge(
            "load_balancer_queued_requests",
            "Data-plane requests waiting at the global overload gate now.",
            vec![(Vec::new(), f64::from(gate.queued()))],
        ));

        let reasons = ProtectionReason::ALL
            .iter()
            .zip(&m.protection)
            .map(|(r, c)| (labels([("reason", r.as_str())]), c.load(Ordering::Relaxed)))
            .collect();
        families.push(counter(
            "load_balancer_protection_events",
            "Requests turned away or retries refused to protect weir or the backends (overload, bulkhead full, backends saturated, retry budget exhausted, rate limited), by reason.",
            reasons,
        ));
        families.push(gauge(
            "load_balancer_retry_budget_tokens",
            "Tokens in the process-wide retry budget now.",
            vec![(Vec::new(), rt.budget().tokens_milli(now) as f64 / 1000.0)],
        ));

        let store = RateGauges::read(shared, &rt);
        families.push(gauge(
            "load_balancer_rate_limit_storage_healthy",
            "1 when the configured rate-limit store answers (the local store always does).",
            vec![(
                labels([("storage", store.storage.label())]),
                flag(store.healthy),
            )],
        ));
        families.push(gauge(
            "load_balancer_rate_limit_degraded",
            "1 when rate-limit answers come from a degraded path (store failure policy).",
            vec![(Vec::new(), flag(store.degraded))],
        ));
        families.push(gauge(
            "load_balancer_rate_limit_local_buckets",
            "Buckets held by the local rate-limit store.",
            vec![(Vec::new(), store.local_buckets as f64)],
        ));
        families.push(counter(
            "load_balancer_rate_limit_local_evictions",
            "Buckets evicted from the full local rate-limit store.",
            vec![(Vec::new(), store.local_evictions)],
        ));

        let mut reloads = Vec::new();
        for (si, source) in [ReloadSource::Signal, ReloadSource::Management]
            .into_iter()
            .enumerate()
        {
            for (ri, result) in ["applied", "rejected"].into_iter().enumerate() {
                reloads.push((
                    labels([("source", source.as_str()), ("result", result)]),
                    m.reloads[si * 2 + ri].load(Ordering::Relaxed),
                ));
            }
        }
        families.push(counter(
            "load_balancer_config_reloads",
            "New runtimes asked for (SIGHUP reloads, management changes), by source and result.",
            reloads,
        ));
        families.extend(crate::limits::families(&shared.connections));
        families.extend(crate::tls::metrics::families(&shared.front.metrics));
        families.extend(state::families(shared, &rt, now));
        Snapshot { families }
    }

    /// The OpenMetrics text of this snapshot, encoded by `prometheus-client`.
    #[must_use]
    pub fn encode(self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self));
        let mut out = String::with_capacity(16 * 1024);
        // Writing into a String cannot fail; an encoder error would leave a partial body,
        // which the scraper rejects.
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
            tracing::error!(error = %e, "cannot encode the metrics");
        }
        out
    }
}

/// The exposition of `shared` now (C-OBS-1, C-OBS-2).
#[must_use]
pub fn render(shared: &Shared) -> String {
    Snapshot::take(shared).encode()
}

#[cfg(test)]
mod tests;
