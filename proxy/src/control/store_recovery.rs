//! The shared rate-limit store's recovery: while it is down, a trial call every
//! `retry_interval` finds out when it is back (C-RATE-5); each change of its state is logged.

use std::sync::Arc;

use crate::base::rt::{self, watch};
use crate::services::state::ProxyState;

/// The recovery task (C-RATE-5): every [`RateLimiter::retry_interval`] it calls
/// [`RateLimiter::probe`] under the rate settings in force, which checks the shared store's
/// health when it is up or a trial is due; logs each change of the store's state. Ends at
/// shutdown. Does nothing for the local store.
pub async fn run(proxy_state: Arc<ProxyState>, mut shutdown: watch::Receiver<bool>) {
    let limiter = Arc::clone(proxy_state.data_plane.limiter.inner());
    if !limiter.storage().is_shared() {
        return;
    }
    let mut was_up = limiter.store_up();
    let every = limiter.retry_interval();
    loop {
        if !rt::tick_unless_shutdown(proxy_state.data_plane.rt, every, &mut shutdown).await {
            return;
        }
        let rate = proxy_state.data_plane.runtime().config().rate.clone();
        let up = if rate.enabled() {
            limiter
                .probe(&rate, proxy_state.data_plane.clock.now())
                .await
        } else {
            limiter.store_up()
        };
        if up != was_up {
            let h = limiter.health();
            if up {
                tracing::info!(
                    storage = h.storage.label(),
                    recoveries_total = h.recoveries_total,
                    "rate-limit store is back; decisions use it again"
                );
            } else {
                tracing::warn!(
                    storage = h.storage.label(),
                    error = h.last_error.as_ref().map(ToString::to_string),
                    failure_mode = rate.failure_mode().as_str(),
                    "rate-limit store is down; the failure policy applies"
                );
            }
            was_up = up;
        }
    }
}
