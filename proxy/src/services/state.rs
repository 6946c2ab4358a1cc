//! The running proxy's state: what the data path uses ([`DataPlane`]), the whole process's state for
//! the control plane ([`ProxyState`]), the client-side limits ([`ServerLimits`]) and the control
//! block that serialises changes ([`Control`]). Built once by `control::start`; shared by every
//! worker through `Arc`.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use weir_core::exchange::Services;
use weir_core::runtime::Runtime;

use crate::base::clock::Clock;
use crate::base::rt::Rt;
use crate::observe::conn_limits;
use crate::observe::listener_tls;
use crate::observe::metrics;
use crate::services::admission::Admission;
use crate::services::probe::HealthReloader;
use crate::services::ratelimit::{Limiter, RateLimitStatus};
use crate::services::snapshot::Snapshot;
use crate::services::upstream::Upstream;

/// What the data path uses (the workers, the protocol loops, the exchange's side effects): the
/// snapshot in force, the gate, the limiter, the upstream client, the clock, the client-side
/// limits and the metrics it counts. Shared by every worker; the control plane reaches it
/// through [`ProxyState::data_plane`].
#[derive(Debug)]
pub struct DataPlane {
    /// The async runtime everything runs on.
    pub rt: Rt,
    /// The snapshot in force (C-POOL-2): weir-core's runtime and each backend's upstream target
    /// and metrics ([`snapshot`]), loaded once per request, swapped whole on publish.
    pub snapshot: ArcSwap<Snapshot>,
    /// The global overload gate (C-LOAD-1; restart-only).
    pub admission: Arc<Admission>,
    /// The rate limiter over the store `rate_limit.storage` selects (C-RATE-1..5).
    pub limiter: Limiter,
    /// What every request's engine uses: the gate, the local store, the shared store's circuit,
    /// the shutdown flag (`weir_core::exchange::Services`).
    pub services: Arc<Services>,
    /// Backend connections (one idle pool per worker).
    pub upstream: Arc<Upstream>,
    /// The process clock.
    pub clock: Clock,
    /// Client-side limits (restart-only).
    pub limits: ServerLimits,
    /// Prometheus metrics (C-OBS-1, C-OBS-2).
    pub metrics: Arc<metrics::Metrics>,
}

/// Process-wide state of a running proxy: the data path's [`DataPlane`] and what only the control
/// plane (reload, management, the acceptor's caps, the listener front) uses.
#[derive(Debug)]
pub struct ProxyState {
    /// What the data path uses.
    pub data_plane: Arc<DataPlane>,
    /// Reloads and management changes: their lock, the health driver, the instance id.
    pub control: Control,
    /// Both listeners' connection caps and counts (`conn_limits`).
    pub connections: conn_limits::Connections,
    /// The public listener's PROXY protocol and TLS (C-TLS-1..3; restart-only, certificates
    /// reload).
    pub front: listener_tls::Front,
}

impl DataPlane {
    /// weir-core's runtime snapshot in force (the control plane's reads; a request takes the
    /// whole [`Snapshot`] once instead).
    #[must_use]
    pub fn runtime(&self) -> Arc<Runtime> {
        Arc::clone(self.snapshot.load().core())
    }

    /// Readiness (C-OBS-4), as the request engine decides it for `/readyz`: not shutting down,
    /// the rate-limit store not down under `fail-closed` (C-RATE-5), and some backend available
    /// (enabled, not draining, healthy, circuit not open; saturated counts as up).
    #[must_use]
    pub fn ready(&self) -> bool {
        self.services
            .ready(self.snapshot.load().core(), self.clock.now())
    }

    /// The rate limiter's state under the settings in force: store, up, ready, degraded,
    /// failure/recovery counters, local buckets (for `/readyz`, the metrics
    /// `load_balancer_rate_limit_storage_healthy` / `_degraded` / `_local_buckets` /
    /// `_local_evictions_total`, and `/api/dashboard/status`; C-RATE-5, C-OBS-1, C-MGMT-4).
    #[must_use]
    pub fn rate_limit_status(&self) -> RateLimitStatus {
        self.limiter
            .status(&self.snapshot.load().core().config().rate)
    }

    /// Whether a graceful shutdown has begun (C-PATH-10).
    #[must_use]
    pub fn is_shutting_down(&self) -> bool {
        self.services.is_shutting_down()
    }
}

/// Client-side limits of `server.*` (restart-only, C-CONF-7).
#[derive(Debug, Clone)]
pub struct ServerLimits {
    /// `read_header_timeout`.
    pub read_header_timeout: Duration,
    /// `read_timeout`: the whole request, body included (`None`: none).
    pub read_timeout: Option<Duration>,
    /// `write_timeout`: the whole response (`None`: none, C-PATH-7).
    pub write_timeout: Option<Duration>,
    /// `idle_timeout`.
    pub idle_timeout: Duration,
    /// `shutdown_timeout`.
    pub shutdown_timeout: Duration,
    /// `max_header_bytes`.
    pub max_header_bytes: usize,
}

impl ServerLimits {
    /// The limits of `server`.
    #[must_use]
    pub fn from_settings(s: &weir_core::config::ServerSettings) -> ServerLimits {
        ServerLimits {
            read_header_timeout: s.read_header_timeout,
            read_timeout: s.read_timeout,
            write_timeout: s.write_timeout,
            idle_timeout: s.idle_timeout,
            shutdown_timeout: s.shutdown_timeout,
            max_header_bytes: usize::try_from(s.max_header_bytes).unwrap_or(usize::MAX),
        }
    }
}

/// Process state of the control plane: who serialises changes, how to reach the health
/// driver, and this process's id (shown by the status document).
#[derive(Debug)]
pub struct Control {
    instance_id: String,
    mutations: async_lock::Mutex<()>,
    pub(crate) health: OnceLock<HealthReloader>,
    /// The last ticket handed to a file reload (one per SIGHUP).
    pub(crate) reload_tickets: AtomicU64,
    /// The newest ticket that reached the lock; an older one is superseded.
    pub(crate) newest_reload: AtomicU64,
}

impl Default for Control {
    fn default() -> Self {
        Control::new()
    }
}

impl Control {
    /// A control block with a fresh instance id (`<hostname>-<pid>`).
    #[must_use]
    pub fn new() -> Control {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "weir".to_owned());
        Control {
            instance_id: format!("{host}-{}", std::process::id()),
            mutations: async_lock::Mutex::new(()),
            health: OnceLock::new(),
            reload_tickets: AtomicU64::new(0),
            newest_reload: AtomicU64::new(0),
        }
    }

    /// This process's id.
    #[must_use]
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// Hold this while building a new runtime from the one in force and publishing it: changes
    /// are applied one at a time (C-CONF-8; management mutations too, C-MGMT-5).
    pub async fn lock(&self) -> async_lock::MutexGuard<'_, ()> {
        self.mutations.lock().await
    }

    /// The health driver to reload (set once by `start`).
    pub fn set_health(&self, health: HealthReloader) {
        let _ = self.health.set(health);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn control_has_an_instance_id() {
        let c = super::Control::new();
        assert!(c.instance_id().contains('-'));
    }
}
