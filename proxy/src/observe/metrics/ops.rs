//! Process-level state kept for the on-call families outside the request path's tables: start
//! time, last successful reload, the restart-required flag, retries and refused management
//! mutations (read by the management listener's scrape).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Unix time in milliseconds.
fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// State kept for these families outside the request path's tables.
#[derive(Debug)]
pub(crate) struct Ops {
    pub(crate) started_ms: u64,
    pub(crate) last_reload_ok_ms: AtomicU64,
    pub(crate) restart_required: AtomicBool,
    pub(crate) retries: AtomicU64,
    /// Refused management mutations, by endpoint (index in [`MUTATING`]).
    pub(crate) rejected: [AtomicU64; MUTATING.len()],
}

/// The mutating management endpoints (`mgmt::Endpoint::name`), plus `unknown` for a mutation
/// of a path that is no endpoint: the `endpoint` label's values.
pub(crate) const MUTATING: [&str; 6] = [
    "set_count",
    "set_enabled",
    "drain",
    "limit",
    "patch_config",
    "unknown",
];

impl Ops {
    pub(crate) fn new() -> Ops {
        let now = unix_ms();
        Ops {
            started_ms: now,
            // As Prometheus does for its own reloads: the start counts as a successful load.
            last_reload_ok_ms: AtomicU64::new(now),
            restart_required: AtomicBool::new(false),
            retries: AtomicU64::new(0),
            rejected: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    pub(crate) fn rejected_mutation(&self, name: &str) {
        let i = MUTATING
            .iter()
            .position(|n| *n == name)
            .unwrap_or(MUTATING.len() - 1);
        self.rejected[i].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn reload_succeeded(&self) {
        self.last_reload_ok_ms.store(unix_ms(), Ordering::Relaxed);
    }

    pub(crate) fn set_restart_required(&self, pending: bool) {
        self.restart_required.store(pending, Ordering::Relaxed);
    }

    pub(crate) fn retries(&self, attempts: u32) {
        if attempts > 1 {
            self.retries
                .fetch_add(u64::from(attempts - 1), Ordering::Relaxed);
        }
    }
}
