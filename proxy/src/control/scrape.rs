//! The management listener's metrics scrape: the request-path metrics
//! ([`Metrics`](crate::observe::metrics::Metrics)) together
//! with the families read from the process's state at scrape time (gate, store, runtime and
//! backends, connection caps, listener TLS).

use prometheus_client::registry::Registry;

use crate::base::exposition::FamilySnapshot;
use crate::services::state::ProxyState;

mod gate;
mod oncall;
mod store;

/// Everything a scrape exposes, read at one moment (C-OBS-2). Owned: encoding it holds no
/// lock of the request path.
#[derive(Debug)]
pub struct Snapshot {
    families: Vec<FamilySnapshot>,
}

impl Snapshot {
    /// Read every metric of `proxy_state` now.
    #[must_use]
    pub fn take(proxy_state: &ProxyState) -> Snapshot {
        let m = &proxy_state.data_plane.metrics;
        let rt = proxy_state.data_plane.runtime();
        let now = proxy_state.data_plane.clock.now();
        let mut families = Vec::with_capacity(16);
        m.families(&rt, now, &mut families);
        gate::families(proxy_state, &rt, &m.queue_wait, &mut families);
        store::families(proxy_state, &m.store, &mut families);
        families.extend(crate::observe::conn_limits::families(
            &proxy_state.connections,
        ));
        families.extend(crate::observe::listener_tls::tls_metrics::families(
            &proxy_state.front.metrics,
        ));
        families.extend(oncall::families(proxy_state, &rt, now));
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

/// The exposition of `proxy_state` now (C-OBS-1, C-OBS-2).
#[must_use]
pub fn render(proxy_state: &ProxyState) -> String {
    Snapshot::take(proxy_state).encode()
}

impl prometheus_client::collector::Collector for Snapshot {
    fn encode(
        &self,
        encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        crate::base::exposition::encode(&self.families, encoder)
    }
}
