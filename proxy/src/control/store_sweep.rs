//! Expired rate-limit buckets leave the shared store: PostgreSQL keeps a row per client key
//! until something deletes it (Redis keys carry a TTL, the local store evicts), so every
//! replica deletes the rows that expired more than `rate_limit.retention` ago, every
//! `rate_limit.cleanup_interval`. Both are read from the configuration in force at each turn,
//! so a reload changes them. Replicas never wait for each other: the delete skips rows another
//! transaction holds.

use std::sync::Arc;

use crate::base::rt::{self, watch};
use crate::services::state::ProxyState;

/// The cleanup task: ends at shutdown; does nothing for stores that expire keys themselves.
/// A failed cleanup is logged once per run of failures and tried again at the next turn.
pub async fn run(proxy_state: Arc<ProxyState>, mut shutdown: watch::Receiver<bool>) {
    let limiter = Arc::clone(proxy_state.data_plane.limiter.inner());
    if limiter.storage() != weir_core::rate::StorageKind::Postgres {
        return;
    }
    let mut failing = false;
    loop {
        let every = proxy_state
            .data_plane
            .runtime()
            .config()
            .rate_housekeeping
            .0;
        if !rt::tick_unless_shutdown(proxy_state.data_plane.rt, every, &mut shutdown).await {
            return;
        }
        let (rate, retention) = {
            let runtime = proxy_state.data_plane.runtime();
            let cfg = runtime.config();
            (cfg.rate.clone(), cfg.rate_housekeeping.1)
        };
        match limiter.sweep_expired(&rate, retention).await {
            Ok(rows) => {
                failing = false;
                if rows > 0 {
                    tracing::debug!(rows, "expired rate-limit buckets deleted");
                }
            }
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(
                    error = %e,
                    "deleting expired rate-limit buckets failed; trying again at the next cleanup"
                );
            }
            Err(_) => {}
        }
    }
}
