//! The management listener's metrics scrape: the request-path metrics
//! ([`Metrics`](crate::observe::metrics::Metrics)) together
//! with the families read from the process's state at scrape time (gate, store, runtime and
//! backends, connection caps, listener TLS).

use prometheus_client::registry::Registry;

use crate::base::exposition::FamilySnapshot;
use crate::services::state::Shared;

mod admission;
mod state;
mod store;

/// Everything a scrape exposes, read at one moment (C-OBS-2). Owned: encoding it holds no
/// lock of the request path.
#[derive(Debug)]
pub struct Snapshot {
    families: Vec<FamilySnapshot>,
}

impl Snapshot {
    /// Read every metric of `shared` now.
    #[must_use]
    pub fn take(shared: &Shared) -> Snapshot {
        let m = &shared.data.metrics;
        let rt = shared.data.runtime();
        let now = shared.data.clock.now();
        let mut families = Vec::with_capacity(16);
        m.families(&rt, now, &mut families);
        admission::families(shared, &rt, &m.queue_wait, &mut families);
        store::families(shared, &m.store, &mut families);
        families.extend(crate::observe::limits::families(&shared.connections));
        families.extend(crate::observe::listener_tls::metrics::families(
            &shared.front.metrics,
        ));
        families.extend(state::families(shared, &rt, now));
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

/// The exposition of `shared` now (C-OBS-1, C-OBS-2).
#[must_use]
pub fn render(shared: &Shared) -> String {
    Snapshot::take(shared).encode()
}

impl prometheus_client::collector::Collector for Snapshot {
    fn encode(
        &self,
        encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        crate::base::exposition::encode(&self.families, encoder)
    }
}
