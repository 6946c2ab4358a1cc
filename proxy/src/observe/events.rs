//! Operational events an on-call reads, each one line at one level under one target:
//!
//! - `weir::health`: a backend down (`WARN`, with the probe's error) or up (`INFO`), from the
//!   health driver (`probe/driver.rs`); a circuit opened (`WARN`, with the attempt result that
//!   tripped it, the threshold and the cooldown) or closed (`INFO`); an outlier ejected or
//!   returned (`WARN`); at start, one `WARN` when no backend passed its first check.
//! - `weir::protection`: a protection event (overload, bulkhead full, every backend saturated,
//!   retry budget exhausted) at `WARN`, at most once per [`PROTECTION_LOG_INTERVAL`] per reason,
//!   with how many happened since the previous line (the metric counts every one).
//!
//! - `weir::upstream`: a failed TLS handshake with a backend (`WARN`, throttled like protection
//!   events).
//! - `weir::dns`: a DNS pool's resolution failed or came back empty (`WARN`, once per change of
//!   result: the machine in `weir_core::discovery` says when), resolves again (`INFO`), or its
//!   addresses changed (`INFO`, with the backends added and removed).
//!
//! Level and wording are documented in docs/operations.md, "Log events".

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use weir_core::breaker::Transition;
use weir_core::exchange::{AttemptResult, Exchange};
use weir_core::outlier::{EjectReason, OutlierChange};
use weir_core::response::ProtectionReason;

use crate::observe::metrics::BackendMetrics;

/// At most one `weir::protection` line per reason in this interval.
pub const PROTECTION_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// A circuit transition (C-HEALTH-3): log it and count it.
pub fn circuit(x: &Exchange, m: &BackendMetrics, transition: Transition, cause: AttemptResult) {
    m.circuit_transition(matches!(transition, Transition::Opened { .. }));
    let backend = m.id();
    match transition {
        Transition::Opened { cooldown } => {
            let breaker = &x.pool().params().breaker;
            tracing::warn!(
                target: "weir::health",
                backend,
                event = "circuit_open",
                cause = cause.as_str(),
                failure_threshold = breaker.failure_threshold(),
                cooldown_ms = u64::try_from(cooldown.as_millis()).unwrap_or(u64::MAX),
                "circuit opened: backend ejected after consecutive failures"
            );
        }
        Transition::Closed => tracing::info!(
            target: "weir::health",
            backend,
            event = "circuit_closed",
            "circuit closed: half-open trial succeeded, backend back"
        ),
    }
}

/// Outlier detection ejected a backend or let it back (C-OUT-2): `WARN` either way, and an
/// ejection is counted.
pub fn outlier(m: &BackendMetrics, change: OutlierChange) {
    let backend = m.id();
    match change {
        OutlierChange::Ejected { reason, duration } => {
            m.ejection(reason);
            let ejection_ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
            if reason == EjectReason::RetryAfter {
                tracing::warn!(
                    target: "weir::health",
                    backend,
                    event = "outlier_ejected",
                    reason = reason.as_str(),
                    ejection_ms,
                    "backend pushed back: it answered 503 with Retry-After, out of selection"
                );
            } else {
                tracing::warn!(
                    target: "weir::health",
                    backend,
                    event = "outlier_ejected",
                    reason = reason.as_str(),
                    ejection_ms,
                    "outlier ejected: backend much worse than its pool, out of selection"
                );
            }
        }
        OutlierChange::Returned => tracing::warn!(
            target: "weir::health",
            backend,
            event = "outlier_returned",
            "outlier returned: ejection over, backend back in selection"
        ),
    }
}

/// A backend's active health flipped (C-HEALTH-2): `WARN` down with the probe's error, `INFO`
/// up. The only place a health change is logged.
pub fn health_changed(backend: &str, url: &str, healthy: bool, error: Option<&str>) {
    if healthy {
        tracing::info!(
            target: "weir::health",
            backend,
            url,
            event = "backend_up",
            "backend up: active health checks pass"
        );
    } else {
        tracing::warn!(
            target: "weir::health",
            backend,
            url,
            event = "backend_down",
            error = error.unwrap_or("unknown"),
            "backend down: active health checks fail"
        );
    }
}

/// A DNS pool's resolution failed or was empty (C-DISC-1): once per change of result.
pub fn dns_failed(pool: &str, name: &str, result: &str, kept: usize) {
    tracing::warn!(
        target: "weir::dns",
        pool,
        name,
        result,
        kept,
        event = "dns_failed",
        "DNS resolution of a pool's name failed or was empty; the pool keeps its last good set"
    );
}

/// A DNS pool's name resolves again after a failure.
pub fn dns_recovered(pool: &str, name: &str, addresses: usize) {
    tracing::info!(
        target: "weir::dns",
        pool,
        name,
        addresses,
        event = "dns_recovered",
        "DNS resolution of a pool's name succeeds again"
    );
}

/// A DNS pool's addresses changed: the new set is applied like a reload (C-CONF-5).
pub fn dns_changed(pool: &str, name: &str, added: &[String], removed: &[String]) {
    tracing::info!(
        target: "weir::dns",
        pool,
        name,
        added = %crate::base::log_json::list(added),
        removed = %crate::base::log_json::list(removed),
        event = "dns_changed",
        "a DNS pool's addresses changed; new ones warm up through health checks, removed ones drain"
    );
}

/// At start, after the first check cycle: a `WARN` when no backend is healthy.
pub fn first_cycle_done(rt: &weir_core::runtime::Runtime) {
    let mut total = 0usize;
    let mut down = Vec::new();
    for (_, b) in rt.backends() {
        total += 1;
        if !b.is_healthy() {
            down.push(b.id().to_owned());
        }
    }
    if total > 0 && down.len() == total {
        tracing::warn!(
            target: "weir::health",
            event = "no_healthy_backend",
            backends = total,
            unhealthy = %crate::base::log_json::list(&down),
            "no backend passed its first health check; requests get 503 until one does"
        );
    }
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

struct Throttle {
    /// Milliseconds since [`epoch`] of the last line, plus one (0: never).
    last: AtomicU64,
    /// Events since the last line.
    since: AtomicU64,
}

impl Throttle {
    /// Count one event; `Some(events since the last line)` when a line is due (none in the
    /// last `interval`, and this caller won the race to write it), `None` otherwise.
    fn pass(&self, interval: Duration) -> Option<u64> {
        let since = self.since.fetch_add(1, Ordering::Relaxed) + 1;
        let now = u64::try_from(epoch().elapsed().as_millis()).unwrap_or(u64::MAX) + 1;
        let last = self.last.load(Ordering::Relaxed);
        let interval = interval.as_millis() as u64;
        if last != 0 && now.saturating_sub(last) < interval {
            return None;
        }
        self.last
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .ok()?;
        self.since.fetch_sub(since, Ordering::Relaxed);
        Some(since)
    }
}

static THROTTLES: [Throttle; ProtectionReason::ALL.len()] = [const {
    Throttle {
        last: AtomicU64::new(0),
        since: AtomicU64::new(0),
    }
}; ProtectionReason::ALL.len()];

/// A protection event (C-LOAD-3): a throttled `WARN` (module doc). Rate-limit denials are the
/// limiter doing its job for one client and are not logged here (the access log has them).
pub fn protection(reason: ProtectionReason) {
    if reason == ProtectionReason::RateLimited {
        return;
    }
    let Some(i) = ProtectionReason::ALL.iter().position(|r| *r == reason) else {
        return;
    };
    let Some(since) = THROTTLES[i].pass(PROTECTION_LOG_INTERVAL) else {
        return;
    };
    tracing::warn!(
        target: "weir::protection",
        reason = reason.as_str(),
        events = since,
        interval_s = PROTECTION_LOG_INTERVAL.as_secs(),
        "protection: requests turned away or retries refused (counted in load_balancer_protection_events_total)"
    );
}

/// At most one `weir::upstream` TLS line in this interval (a misconfigured CA fails every
/// connection; the access log and metrics count each one).
pub const UPSTREAM_TLS_LOG_INTERVAL: Duration = Duration::from_secs(10);

static UPSTREAM_TLS: Throttle = Throttle {
    last: AtomicU64::new(0),
    since: AtomicU64::new(0),
};

/// A TLS handshake with a backend failed (C-GRPC-5: an untrusted or misnamed certificate, a
/// refused client certificate, no ALPN `h2` for an `h2` backend): a `WARN` with the backend and
/// the reason, at most once per [`UPSTREAM_TLS_LOG_INTERVAL`], with how many failed since the
/// previous line. The client gets `502` (`upstream_connect_error`).
pub fn upstream_tls_failed(backend: &str, error: &(dyn std::error::Error + 'static)) {
    let Some(since) = UPSTREAM_TLS.pass(UPSTREAM_TLS_LOG_INTERVAL) else {
        return;
    };
    tracing::warn!(
        target: "weir::upstream",
        event = "upstream_tls_failed",
        backend,
        error = %crate::base::error_chain::chain(error),
        events = since,
        interval_s = UPSTREAM_TLS_LOG_INTERVAL.as_secs(),
        "TLS handshake with a backend failed"
    );
}

/// The access log's `reason` for a management error status.
#[must_use]
pub fn management_reason(status: u16) -> &'static str {
    match status {
        400 => "bad_request",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        405 => "method_not_allowed",
        409 => "conflict",
        413 => "payload_too_large",
        415 => "unsupported_media_type",
        422 => "invalid_change",
        s if s >= 500 => "server_error",
        _ => "client_error",
    }
}
