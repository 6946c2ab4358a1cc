//! Request-path calls of the rate-limit store, by store and result, with their latency
//! (counted where the request engine decides them: `Metric::Store`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use weir_core::exchange::StoreResult;
use weir_core::rate::StorageKind;

use super::AtomicHistogram;

/// The stores a request may call (`storage` label).
pub(crate) const STORES: [StorageKind; 3] = [
    StorageKind::Local,
    StorageKind::Redis,
    StorageKind::Postgres,
];

/// Request-path store calls by store and result, and shared-store latency by store.
#[derive(Debug, Default)]
pub(crate) struct StoreMetrics {
    pub(crate) calls: [[AtomicU64; StoreResult::ALL.len()]; STORES.len()],
    pub(crate) duration: [AtomicHistogram; STORES.len()],
}

impl StoreMetrics {
    /// Count one call of `storage` that ended with `result` after `duration` (`None`: the
    /// in-memory local store, not timed).
    pub(crate) fn call(
        &self,
        storage: StorageKind,
        result: StoreResult,
        duration: Option<Duration>,
    ) {
        let Some(s) = STORES.iter().position(|k| *k == storage) else {
            return;
        };
        let r = StoreResult::ALL
            .iter()
            .position(|k| *k == result)
            .unwrap_or(0);
        self.calls[s][r].fetch_add(1, Ordering::Relaxed);
        if let Some(d) = duration {
            self.duration[s].observe(d);
        }
    }
}
