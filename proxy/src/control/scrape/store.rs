//! The rate-limit store's families (C-OBS-1): its health and degraded gauges, the
//! local store's size, and the request path's store calls by store and result with their
//! latency (counted where the request engine decides them: `Metric::Store`). Labels: the store
//! kind (`local`, `redis`, `postgres`) and result: bounded.

use std::sync::atomic::Ordering;

use weir_core::exchange::StoreResult;
use weir_core::rate::StorageKind;

use crate::base::exposition::{FamilySnapshot, counter, gauge, labels};
use crate::base::exposition::{flag, seconds_histogram};
use crate::observe::metrics::store_calls::{STORES, StoreMetrics};
use crate::services::state::ProxyState;

/// The rate-limit store's gauges (C-OBS-1), from the limiter's own state
/// ([`DataPlane::rate_limit_status`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct RateGauges {
    storage: StorageKind,
    healthy: bool,
    degraded: bool,
    local_buckets: usize,
    local_evictions: u64,
}

impl RateGauges {
    fn read(proxy_state: &ProxyState) -> RateGauges {
        let status = proxy_state.data_plane.rate_limit_status();
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

/// The store families, read now. Only the store built at start (and the local store, which
/// serves `local-fallback`) get call series.
pub(super) fn families(proxy_state: &ProxyState, m: &StoreMetrics, out: &mut Vec<FamilySnapshot>) {
    let store = RateGauges::read(proxy_state);
    out.push(gauge(
        "load_balancer_rate_limit_storage_healthy",
        "1 when the configured rate-limit store answers (the local store always does).",
        vec![(
            labels([("storage", store.storage.label())]),
            flag(store.healthy),
        )],
    ));
    out.push(gauge(
        "load_balancer_rate_limit_degraded",
        "1 when rate-limit answers come from a degraded path (store failure policy).",
        vec![(Vec::new(), flag(store.degraded))],
    ));
    out.push(gauge(
        "load_balancer_rate_limit_local_buckets",
        "Buckets held by the local rate-limit store.",
        vec![(Vec::new(), store.local_buckets as f64)],
    ));
    out.push(counter(
        "load_balancer_rate_limit_local_evictions",
        "Buckets evicted from the full local rate-limit store.",
        vec![(Vec::new(), store.local_evictions)],
    ));
    let built = proxy_state.data_plane.limiter.storage();
    let mut calls = Vec::new();
    let mut latency = Vec::new();
    for (si, kind) in STORES.iter().enumerate() {
        if *kind != StorageKind::Local && *kind != built {
            continue;
        }
        for (ri, result) in StoreResult::ALL.iter().enumerate() {
            // The local store is in memory: its takes always answer.
            if !kind.is_shared() && *result != StoreResult::Ok {
                continue;
            }
            calls.push((
                labels([("storage", kind.label()), ("result", result.as_str())]),
                m.calls[si][ri].load(Ordering::Relaxed),
            ));
        }
        if kind.is_shared() {
            latency.push((
                labels([("storage", kind.label())]),
                m.duration[si].snapshot(),
            ));
        }
    }
    out.push(counter(
        "load_balancer_rate_limit_store_requests",
        "Rate-limit store calls made by requests, by store and result (ok, error, partial: one cluster node failed, timeout).",
        calls,
    ));
    out.push(seconds_histogram(
        "load_balancer_rate_limit_store_duration",
        "Time from a request's call to the shared rate-limit store to its answer or timeout, by store.",
        latency,
    ));
}
