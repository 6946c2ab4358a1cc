//! The proxy-side snapshot (C-POOL-2): weir-core's runtime snapshot and, for
//! each of its backends, the handles the data path uses for it — the parsed upstream
//! [`Target`] (where and how to connect; the key of its idle connections) and the backend's
//! [`BackendMetrics`]. Built once per publish ([`reload::install`](crate::control::reload::install) and
//! [`start`](crate::control::start::start)), stored whole in one `ArcSwap` (`DataPlane::snapshot`), loaded once per
//! request ([`Bound::new`]); every attempt then indexes it with the backend index the engine's
//! output carries (`Send::backend`, `Metric::*::backend`) within the exchange's pool
//! (`Exchange::pool_index`): no string or hash lookup per attempt.
//!
//! A backend whose id, URL, PROXY setting and protocol did not change keeps its `Target` across a
//! publish (so its idle connections keep being reused), and a backend whose id did not change
//! keeps its metrics (its counters continue): [`Snapshot::build`] takes them from the previous
//! snapshot and from the metrics registry.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use weir_core::exchange::{Exchange, Head, Services};
use weir_core::headers::HeaderLines;
use weir_core::runtime::Runtime;
use weir_core::{Instant, Rng};

use crate::observe::metrics::{BackendMetrics, Metrics};
use crate::services::upstream::Target;

/// What the data path holds for one backend of the snapshot.
#[derive(Debug)]
pub struct BackendHandles {
    /// The parsed upstream target; `None` when the URL cannot be connected to (every attempt to
    /// it is a connect failure).
    pub target: Option<Arc<Target>>,
    /// The backend's counters (C-OBS-1).
    pub metrics: Arc<BackendMetrics>,
}

/// weir-core's runtime snapshot and the handles of each of its backends. See the module doc.
#[derive(Debug)]
pub struct Snapshot {
    core: Arc<Runtime>,
    /// Per pool of `core` (its index), per backend of that pool (the engine's backend index).
    pools: Box<[Box<[BackendHandles]>]>,
}

impl Snapshot {
    /// The snapshot of `core`: handles of `previous` for backends with the same id, URL and
    /// PROXY setting, metrics from `metrics` (whose registry the caller pointed at `core`'s
    /// backends, [`Metrics::set_backends`]).
    #[must_use]
    pub fn build(core: Arc<Runtime>, metrics: &Metrics, previous: Option<&Snapshot>) -> Snapshot {
        let kept: HashMap<&str, &Arc<Target>> = previous
            .into_iter()
            .flat_map(|p| p.pools.iter().flat_map(|b| b.iter()))
            .filter_map(|h| h.target.as_ref().map(|t| (t.id(), t)))
            .collect();
        let pools = (0..)
            .map_while(|i| core.pool(i))
            .map(|pool| {
                pool.backends()
                    .iter()
                    .map(|b| {
                        let target = match kept.get(b.id()) {
                            Some(t)
                                if t.url() == b.url()
                                    && t.send_proxy() == b.send_proxy()
                                    && t.protocol() == b.protocol() =>
                            {
                                Some(Arc::clone(t))
                            }
                            _ => new_target(b),
                        };
                        BackendHandles {
                            target,
                            metrics: metrics.backend_or_new(b.id()),
                        }
                    })
                    .collect()
            })
            .collect();
        Snapshot { core, pools }
    }

    /// weir-core's runtime snapshot.
    #[must_use]
    pub fn core(&self) -> &Arc<Runtime> {
        &self.core
    }

    /// The handles of backend `index` of pool `pool`.
    #[must_use]
    pub fn backend(&self, pool: usize, index: usize) -> Option<&BackendHandles> {
        self.pools.get(pool)?.get(index)
    }
}

fn new_target(b: &weir_core::backend::Backend) -> Option<Arc<Target>> {
    match Target::new(b.id(), b.url()) {
        Ok(t) => Some(Arc::new(
            t.with_send_proxy(b.send_proxy())
                .with_protocol(b.protocol()),
        )),
        Err(e) => {
            tracing::error!(backend = b.id(), error = %e, "backend URL cannot be connected to");
            None
        }
    }
}

/// A request's exchange with the snapshot it was created from (one snapshot per request,
/// C-POOL-2): derefs to the [`Exchange`]; [`handles`](Self::handles) are the per-backend handles
/// of an index the engine outputs.
#[derive(Debug)]
pub struct Bound {
    x: Exchange,
    snap: Arc<Snapshot>,
}

impl Bound {
    /// The exchange of a request arriving at `now`, over `snap`'s core snapshot
    /// ([`Exchange::new`]).
    pub fn new<H: HeaderLines + ?Sized>(
        snap: Arc<Snapshot>,
        services: Arc<Services>,
        head: &Head<'_, H>,
        now: Instant,
        rng: &mut dyn Rng,
    ) -> Bound {
        let x = Exchange::new(Arc::clone(&snap.core), services, head, now, rng);
        Bound { x, snap }
    }

    /// [`Bound::new`] made in `place` (the request's slot) rather than returned, so that the
    /// exchange (about 1.5 KB) is not copied through return values.
    pub fn new_in<'p, H: HeaderLines + ?Sized>(
        place: &'p mut Option<Bound>,
        snap: Arc<Snapshot>,
        services: Arc<Services>,
        head: &Head<'_, H>,
        now: Instant,
        rng: &mut dyn Rng,
    ) -> &'p mut Bound {
        let core = Arc::clone(&snap.core);
        let b = place.insert(Bound {
            x: Exchange::arrive(core, services, head, now, rng),
            snap,
        });
        b.x.start(head, now, rng);
        b
    }

    /// The handles of backend `index` of the request's pool.
    #[must_use]
    pub fn handles(&self, index: usize) -> Option<&BackendHandles> {
        self.snap.backend(self.x.pool_index(), index)
    }

    /// The snapshot the request runs on.
    #[must_use]
    pub fn snapshot(&self) -> &Arc<Snapshot> {
        &self.snap
    }
}

impl Deref for Bound {
    type Target = Exchange;
    fn deref(&self) -> &Exchange {
        &self.x
    }
}

impl DerefMut for Bound {
    fn deref_mut(&mut self) -> &mut Exchange {
        &mut self.x
    }
}

#[cfg(test)]
mod tests;
