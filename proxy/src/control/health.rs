//! Health wiring (C-HEALTH-1..6): the probe driver (`probe.rs`) runs weir-core's
//! `ProbeSchedule` over every backend of every pool, disabled ones included (C-HEALTH-5), and
//! each flip it reports is applied to the shared backend with `Backend::set_healthy`, which
//! also starts the backend's slow-start ramp when it becomes available (C-HEALTH-4). Passive
//! health (the breaker, C-HEALTH-3) is fed by the flow from real traffic.

use std::sync::Arc;

use rustls::ClientConfig;
use weir_core::pool::Backend;
use weir_core::runtime::Runtime;

use crate::services::probe::{HealthDriver, ProbeTarget};
use crate::services::state::ProxyState;

/// The probe targets of `rt` (keyed by backend id, unique across pools, C-POOL-1) and the
/// backends they report on, index for index.
#[must_use]
pub fn targets(rt: &Runtime) -> (Vec<ProbeTarget>, Vec<Arc<Backend>>) {
    let hc = &rt.config().health;
    // `server.upstream.tls_server_name`: probes check the name real traffic checks (C-GRPC-5).
    let server_name = rt
        .config()
        .server
        .upstream
        .tls
        .server_name
        .as_ref()
        .and_then(|n| rustls::pki_types::ServerName::try_from(n.clone()).ok());
    let mut targets = Vec::new();
    let mut backends = Vec::new();
    for (_, backend) in rt.backends() {
        let target = ProbeTarget::new(backend.id(), backend.url(), hc.mode, &hc.path);
        let target = target.map(|t| {
            t.with_send_proxy(backend.send_proxy())
                .with_protocol(backend.protocol())
                .with_grpc_service(&hc.grpc_service)
                .with_server_name(server_name.clone())
        });
        match target {
            Ok(t) => {
                targets.push(t);
                backends.push(Arc::clone(backend));
            }
            Err(e) => {
                tracing::error!(backend = backend.id(), error = %e, "backend cannot be probed; it stays unhealthy");
            }
        }
    }
    (targets, backends)
}

/// The flip callback for `backends`: apply the verdict to the shared backend (C-HEALTH-2).
pub fn on_change(
    backends: Vec<Arc<Backend>>,
) -> impl FnMut(usize, bool, weir_core::Instant) + Send {
    move |index, healthy, now| {
        if let Some(b) = backends.get(index) {
            // Logged once, by the driver (`events::health_changed`).
            b.set_healthy(healthy, now);
        }
    }
}

/// Start probing the backends of the runtime in force.
#[must_use]
pub fn spawn(proxy_state: &Arc<ProxyState>, tls: Arc<ClientConfig>) -> HealthDriver {
    let rt = proxy_state.data_plane.runtime();
    let (targets, backends) = targets(&rt);
    let metrics = Arc::clone(&proxy_state.data_plane.metrics);
    HealthDriver::spawn_observed(
        targets,
        rt.config().health.params,
        tls,
        proxy_state.data_plane.clock,
        on_change(backends),
        move |target: &ProbeTarget, ok| {
            if let Some(m) = metrics.backend(target.key()) {
                m.health_check(ok);
            }
        },
    )
}

/// Point the driver at the backends of a new runtime (reload).
pub fn reload(
    driver: &HealthDriver,
    rt: &Runtime,
) -> Result<(), crate::services::probe::DriverStopped> {
    let (targets, backends) = targets(rt);
    driver.reload(targets, rt.config().health.params, on_change(backends))
}
