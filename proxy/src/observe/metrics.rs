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
//! docs/architecture.md's rule for `prometheus-client`'s `Family` ("never hold two guards; keep
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
//! Labels are bounded: listener, status code, a gRPC call's status code (0-16), backend id,
//! pool name, outcome, reason, result, storage kind, reload source. Never a path or a client
//! address.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use weir_core::discovery::Outcome;
use weir_core::exchange::{HedgeResult, StoreResult};
use weir_core::mirror::MirrorResult;
use weir_core::rate::DecisionResult;
use weir_core::rate::StorageKind;
use weir_core::response::ProtectionReason;

pub(crate) mod backends;
mod grpc_codes;
mod histogram;
pub mod ops;
pub mod store_calls;

pub use backends::BackendMetrics;
pub use histogram::AtomicHistogram;

use crate::base::exposition::{
    FamilySnapshot, Listener, counter, gauge, labels, seconds_histogram,
};
use backends::BackendTable;

/// The `Content-Type` of the exposition (OpenMetrics text 1.0.0).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

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
    /// gRPC calls with a known gRPC status, by status code and gRPC code (the public listener).
    grpc: grpc_codes::GrpcCodes,
    duration: AtomicHistogram,
}

impl RequestMetrics {
    fn new() -> RequestMetrics {
        RequestMetrics {
            codes: (0..1000).map(|_| AtomicU64::new(0)).collect(),
            grpc: grpc_codes::GrpcCodes::new(),
            duration: AtomicHistogram::default(),
        }
    }
}

/// The process's metrics. See the module doc.
#[derive(Debug)]
pub struct Metrics {
    requests: [RequestMetrics; 2],
    protection: [AtomicU64; ProtectionReason::ALL.len()],
    /// Rate-limit decisions, by result in `DecisionResult::ALL` order (C-RATE-8).
    rate_decisions: [AtomicU64; DecisionResult::ALL.len()],
    /// Mirrors, by result in `MirrorResult::ALL` order (C-MIRROR-1).
    mirrors: [AtomicU64; MirrorResult::ALL.len()],
    /// Hedges, by result in `HedgeResult::ALL` order (C-HEDGE-1).
    hedges: [AtomicU64; HedgeResult::ALL.len()],
    pub(crate) backends: ArcSwap<BackendTable>,
    /// `[signal applied, signal rejected, management applied, management rejected]`.
    reloads: [AtomicU64; 4],
    /// Process-level gauges and counters added for on-call (`control/scrape/oncall.rs`).
    pub(crate) ops: ops::Ops,
    /// Time spent in the global gate's queue (`control/scrape/gate.rs`).
    pub(crate) queue_wait: AtomicHistogram,
    /// Request-path rate-limit store calls (`metrics/store_calls.rs`).
    pub(crate) store: store_calls::StoreMetrics,
    /// DNS pools' resolutions (C-DISC-1): counted by the resolver task only, off the request
    /// path, so a lock is fine here.
    dns: std::sync::Mutex<std::collections::BTreeMap<String, DnsPool>>,
}

/// One DNS pool's resolutions: counts by outcome (`Outcome::ALL` order) and the last one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DnsPool {
    /// Resolutions by outcome.
    pub counts: [u64; Outcome::ALL.len()],
    /// The last resolution: when (wall clock) and how.
    pub last: Option<(std::time::SystemTime, Outcome)>,
    /// The name resolved.
    pub name: String,
    /// Addresses in the last good answer.
    pub addresses: usize,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// The request-path families (requests, their durations, backends, protection events, the
    /// retry budget, reloads), read now, appended to `out`.
    pub(crate) fn families(
        &self,
        rt: &weir_core::runtime::Runtime,
        now: weir_core::Instant,
        out: &mut Vec<FamilySnapshot>,
    ) {
        let table = self.backends.load();

        // Requests per listener and status; `code="200"` always, so the family has series from
        // the start.
        let mut requests = Vec::new();
        let mut durations = Vec::new();
        for listener in [Listener::Public, Listener::Management] {
            let r = &self.requests[listener.index()];
            for (code, c) in r.codes.iter().enumerate() {
                let n = c.load(Ordering::Relaxed);
                if n > 0 || code == 200 {
                    requests.push((
                        labels([("listener", listener.as_str()), ("code", &code.to_string())]),
                        n,
                    ));
                }
            }
            for (code, grpc, n) in r.grpc.series() {
                requests.push((
                    labels([
                        ("listener", listener.as_str()),
                        ("code", &code.to_string()),
                        ("grpc_status", &grpc.to_string()),
                    ]),
                    n,
                ));
            }
            durations.push((
                labels([("listener", listener.as_str())]),
                r.duration.snapshot(),
            ));
        }
        out.push(counter(
            "load_balancer_http_requests",
            "Requests answered, by listener and status code (/healthz and /readyz included); gRPC calls with a gRPC status also by grpc_status (0-16).",
            requests,
        ));
        out.push(seconds_histogram(
            "load_balancer_http_request_duration",
            "Time from a request's head to its response head, by listener.",
            durations,
        ));

        backends::families(&table, rt, now, out);
        let reasons = ProtectionReason::ALL
            .iter()
            .zip(&self.protection)
            .map(|(r, c)| (labels([("reason", r.as_str())]), c.load(Ordering::Relaxed)))
            .collect();
        out.push(counter(
            "load_balancer_protection_events",
            "Requests turned away or retries refused to protect weir or the backends (overload, bulkhead full, backends saturated, retry budget exhausted, rate limited), by reason.",
            reasons,
        ));
        let decisions = DecisionResult::ALL
            .iter()
            .zip(&self.rate_decisions)
            .map(|(r, c)| (labels([("result", r.as_str())]), c.load(Ordering::Relaxed)))
            .collect();
        out.push(counter(
            "load_balancer_rate_limit_decisions",
            "Rate-limit decisions, by result: allowed, limited (answered 429), dry_run_limited (over the limit, passed on in dry run).",
            decisions,
        ));
        let mirrors = MirrorResult::ALL
            .iter()
            .zip(&self.mirrors)
            .map(|(r, c)| (labels([("result", r.as_str())]), c.load(Ordering::Relaxed)))
            .collect();
        out.push(counter(
            "load_balancer_mirror_requests",
            "Mirrored requests (routes[].mirror), by result: sent, dropped (mirror_max_in_flight reached or no mirror backend available), skipped (body over retry.body_limit or of unannounced length).",
            mirrors,
        ));
        let hedges = HedgeResult::ALL
            .iter()
            .zip(&self.hedges)
            .map(|(r, c)| (labels([("result", r.as_str())]), c.load(Ordering::Relaxed)))
            .collect();
        out.push(counter(
            "load_balancer_hedges",
            "Hedged attempts (server.retry.hedge_delay), by result: sent (beside an attempt with no response head after hedge_delay), won (its response was the one delivered).",
            hedges,
        ));
        out.push(gauge(
            "load_balancer_retry_budget_tokens",
            "Tokens in the process-wide retry budget now.",
            vec![(Vec::new(), rt.budget().tokens_milli(now) as f64 / 1000.0)],
        ));

        let mut reloads = Vec::new();
        for (si, source) in [ReloadSource::Signal, ReloadSource::Management]
            .into_iter()
            .enumerate()
        {
            for (ri, result) in ["applied", "rejected"].into_iter().enumerate() {
                reloads.push((
                    labels([("source", source.as_str()), ("result", result)]),
                    self.reloads[si * 2 + ri].load(Ordering::Relaxed),
                ));
            }
        }
        out.push(counter(
            "load_balancer_config_reloads",
            "New runtimes asked for (SIGHUP reloads, management changes), by source and result.",
            reloads,
        ));

        let mut dns = Vec::new();
        for (pool, d) in self.dns_pools() {
            for (outcome, n) in Outcome::ALL.iter().zip(d.counts) {
                dns.push((
                    labels([("pool", pool.as_str()), ("result", outcome.as_str())]),
                    n,
                ));
            }
        }
        out.push(counter(
            "load_balancer_dns_resolutions",
            "Resolutions of DNS pools' names, by pool and result (ok, nxdomain, no_records, servfail, timeout, error); a failed or empty one keeps the last good set.",
            dns,
        ));
    }

    /// Empty metrics (no backends yet: see [`Metrics::set_backends`]).
    #[must_use]
    pub fn new() -> Metrics {
        Metrics {
            requests: [RequestMetrics::new(), RequestMetrics::new()],
            protection: std::array::from_fn(|_| AtomicU64::new(0)),
            rate_decisions: std::array::from_fn(|_| AtomicU64::new(0)),
            mirrors: std::array::from_fn(|_| AtomicU64::new(0)),
            hedges: std::array::from_fn(|_| AtomicU64::new(0)),
            backends: ArcSwap::from_pointee(BackendTable::default()),
            reloads: std::array::from_fn(|_| AtomicU64::new(0)),
            ops: ops::Ops::new(),
            queue_wait: AtomicHistogram::default(),
            store: store_calls::StoreMetrics::default(),
            dns: std::sync::Mutex::new(std::collections::BTreeMap::new()),
        }
    }

    /// The DNS pools are exactly `pools` (name of the pool, name resolved): their series exist
    /// from now on, with zeros (C-OBS-1); others are no longer exposed.
    pub fn set_dns_pools<'a>(&self, pools: impl Iterator<Item = (&'a str, &'a str)>) {
        let mut dns = self
            .dns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut next = std::collections::BTreeMap::new();
        for (pool, name) in pools {
            let mut entry = dns.remove(pool).unwrap_or_default();
            name.clone_into(&mut entry.name);
            next.insert(pool.to_owned(), entry);
        }
        *dns = next;
    }

    /// Count one resolution of DNS pool `pool` (C-DISC-1), whose last good answer now has
    /// `addresses` addresses.
    pub fn dns_resolution(&self, pool: &str, outcome: Outcome, addresses: usize) {
        let mut dns = self
            .dns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = dns.entry(pool.to_owned()).or_default();
        if let Some(i) = Outcome::ALL.iter().position(|o| *o == outcome) {
            entry.counts[i] += 1;
        }
        entry.last = Some((std::time::SystemTime::now(), outcome));
        entry.addresses = addresses;
    }

    /// The DNS pools' resolutions now, by pool name.
    #[must_use]
    pub fn dns_pools(&self) -> std::collections::BTreeMap<String, DnsPool> {
        self.dns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Count one wait in the global gate's queue (`Metric::QueueWait`).
    pub fn queue_wait(&self, waited: Duration) {
        self.queue_wait.observe(waited);
    }

    /// Count one request-path call of a rate-limit store (`Metric::Store`).
    pub fn store_call(
        &self,
        storage: StorageKind,
        result: StoreResult,
        duration: Option<Duration>,
    ) {
        self.store.call(storage, result, duration);
    }

    /// Count one answered request of `listener` (C-OBS-1, C-OBS-2: every request, sampled for
    /// the log or not).
    pub fn request(&self, listener: Listener, status: u16, elapsed: Duration, grpc: Option<u8>) {
        let m = &self.requests[listener.index()];
        // A gRPC call with a known status goes to its `grpc_status` series instead; any other
        // request (most traffic) costs one comparison more.
        let counted = grpc.is_some_and(|code| m.grpc.add(status, code));
        if !counted && let Some(c) = m.codes.get(usize::from(status)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        m.duration.observe(elapsed);
    }

    /// Count a rate-limit decision (C-RATE-8).
    pub fn rate_decision(&self, result: DecisionResult) {
        if let Some(i) = DecisionResult::ALL.iter().position(|r| *r == result) {
            self.rate_decisions[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Count a mirror decision (C-MIRROR-1).
    pub fn mirror(&self, result: MirrorResult) {
        if let Some(i) = MirrorResult::ALL.iter().position(|r| *r == result) {
            self.mirrors[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Count a hedge sent or won (C-HEDGE-1).
    pub fn hedge(&self, result: HedgeResult) {
        let i = match result {
            HedgeResult::Sent => 0,
            HedgeResult::Won => 1,
        };
        self.hedges[i].fetch_add(1, Ordering::Relaxed);
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

    /// The handles of backend `id` for a snapshot (`snapshot::Snapshot::build`): the
    /// registry's, or new ones (not exposed) for an id it does not have.
    #[must_use]
    pub fn backend_or_new(&self, id: &str) -> Arc<BackendMetrics> {
        self.backend(id)
            .unwrap_or_else(|| Arc::new(BackendMetrics::new(id)))
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

#[cfg(test)]
mod tests;
