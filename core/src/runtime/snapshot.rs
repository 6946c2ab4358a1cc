//! The runtime snapshot itself ([`Runtime`]) and how it is built from a valid configuration and
//! the one in force (see the parent module for what survives a rebuild); planning a reload is
//! the sibling `reload`.

use core::fmt;
use std::net::IpAddr;

use crate::headers::HeaderLines;

use crate::bulkhead::{Bulkhead, BulkheadError};
use crate::config::{HashKey, ValidConfig};
use crate::flow::FlowTarget;
use crate::forward::TrustedProxies;
use crate::pool::{Backend, Pool, PoolError};
use crate::retry::RetryPolicy;
use crate::rng::Rng;
use crate::route::RouteMatch;
use crate::select::{AnyPolicy, PickContext, hash_key};
use crate::sync::Arc;
use crate::time::Instant;

use crate::budget::RetryBudget;

/// Why a runtime could not be built from a valid configuration. With a [`ValidConfig`] none of
/// these happens (validation ran the same constructors); they are reported, never unwrapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildError {
    /// a pool could not be built
    Pool {
        /// The pool's name.
        pool: String,
        /// The pool's own error.
        error: PoolError,
    },
    /// the configuration has no pool (not even the default one)
    NoPools,
    /// a route bulkhead could not be built
    Bulkhead {
        /// The route's prefix.
        prefix: String,
        /// The bulkhead's own error.
        error: BulkheadError,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Pool { pool, error } => write!(f, "pool {pool}: {error}"),
            BuildError::NoPools => f.write_str("the configuration has no pool"),
            BuildError::Bulkhead { prefix, error } => write!(f, "route {prefix}: {error}"),
        }
    }
}

impl std::error::Error for BuildError {}

/// What a rebuild does with the enabled and drain flags of backends it keeps (C-CONF-6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminState {
    /// A reload: the declarative `disabled` of each kept backend replaces its runtime state and
    /// cancels an administrative drain (C-CONF-6).
    Declarative,
    /// A management change, which cannot change backend lists: kept backends keep their runtime
    /// enabled and drain flags untouched (an operator's runtime disable survives a rate-limit
    /// `PATCH`). Pools whose specs changed anyway are rebuilt as for a reload.
    Keep,
}

/// One immutable runtime snapshot. See the module doc.
///
/// Kinds: getters only (`config`, `pools`, `pool`, `target`, `pick_context`, `find_backend`,
/// `backend_ids`, `retry`, `budget`, `trusted_proxies`, `bulkhead`); it is built, never changed.
/// Per-backend state lives in the shared `Arc<Backend>`s, whose own commands (`set_enabled`,
/// `start_drain`, `set_healthy`) the management API and the health checker use.
#[derive(Debug)]
pub struct Runtime {
    pub(super) config: ValidConfig,
    pools: Vec<Arc<Pool>>,
    /// Per route (config order): the route's bulkhead when it sets a limit.
    bulkheads: Vec<Option<Arc<Bulkhead>>>,
    retry: Arc<RetryPolicy>,
    budget: Arc<RetryBudget>,
    trusted: TrustedProxies,
}

impl Runtime {
    /// Build the runtime of `cfg` as a reload does: state carried over from `previous` as the
    /// module doc says, with the declarative `disabled` re-applied ([`AdminState::Declarative`]).
    /// `rng` seeds the pools' policies (round-robin start, C-POOL-4).
    pub fn build(
        cfg: ValidConfig,
        previous: Option<&Runtime>,
        now: Instant,
        rng: &mut dyn Rng,
    ) -> Result<Runtime, BuildError> {
        Runtime::build_with(cfg, previous, AdminState::Declarative, now, rng)
    }

    /// Build the runtime of `cfg` from `previous`, treating kept backends' enabled and drain
    /// flags as `admin` says.
    ///
    /// With [`AdminState::Keep`], a pool whose spec (name, policy, hash key, backends) and
    /// parameters are unchanged is the same `Arc<Pool>`; one whose parameters changed is a new
    /// snapshot over the very same `Arc<Backend>`s, built without touching their flags; one
    /// whose spec changed is built by [`Pool::new`] as for a reload.
    pub fn build_with(
        cfg: ValidConfig,
        previous: Option<&Runtime>,
        admin: AdminState,
        now: Instant,
        rng: &mut dyn Rng,
    ) -> Result<Runtime, BuildError> {
        let mut cfg = cfg;
        if let Some(p) = previous {
            // A DNS pool keeps its discovered backends over a reload or a PATCH (C-DISC-1).
            crate::discovery::carry_over(&p.config, &mut cfg);
        }
        if cfg.pools.is_empty() {
            return Err(BuildError::NoPools);
        }
        let mut pools = Vec::with_capacity(cfg.pools.len());
        for spec in &cfg.pools {
            let before = previous.and_then(|p| p.pool_named(&spec.name));
            let pool = match (admin, before) {
                (AdminState::Keep, Some((prev_spec, prev_pool)))
                    if prev_spec.policy == spec.policy
                        && prev_spec.hash_key == spec.hash_key
                        && prev_spec.backends == spec.backends =>
                {
                    if *prev_pool.params() == cfg.pool_params {
                        Arc::clone(prev_pool)
                    } else {
                        Arc::new(prev_pool.with_params(
                            cfg.pool_params,
                            AnyPolicy::new(spec.policy, &prev_pool.backends, rng),
                        ))
                    }
                }
                _ => Arc::new(
                    Pool::new(
                        &spec.backends,
                        spec.policy,
                        cfg.pool_params,
                        before.map(|(_, p)| &**p),
                        now,
                        rng,
                    )
                    .map_err(|error| BuildError::Pool {
                        pool: spec.name.clone(),
                        error,
                    })?,
                ),
            };
            pools.push(pool);
        }

        let mut bulkheads = Vec::with_capacity(cfg.routes.len());
        for route in &cfg.routes {
            let Some(limit) = route.max_concurrent_requests else {
                bulkheads.push(None);
                continue;
            };
            let kept = previous.and_then(|p| {
                p.config
                    .routes
                    .iter()
                    .zip(&p.bulkheads)
                    .find(|(r, _)| r.prefix == route.prefix)
                    .and_then(|(_, b)| b.as_ref())
                    .filter(|b| b.limit() == Some(limit))
                    .map(Arc::clone)
            });
            let bulkhead =
                match kept {
                    Some(b) => b,
                    None => Arc::new(Bulkhead::new(Some(limit)).map_err(|error| {
                        BuildError::Bulkhead {
                            prefix: route.prefix.clone(),
                            error,
                        }
                    })?),
                };
            bulkheads.push(Some(bulkhead));
        }

        let params = cfg.retry.budget_params();
        let budget = match previous {
            Some(p) if p.budget.params() == params => Arc::clone(&p.budget),
            Some(p) => p.budget.reload(params, now),
            None => Arc::new(RetryBudget::new(params)),
        };
        let retry = match previous {
            Some(p) if p.config.retry.to_params() == cfg.retry.to_params() => Arc::clone(&p.retry),
            _ => Arc::new(cfg.retry.clone()),
        };
        let trusted = TrustedProxies::new(cfg.server.trusted_proxies.clone());
        Ok(Runtime {
            config: cfg,
            pools,
            bulkheads,
            retry,
            budget,
            trusted,
        })
    }

    /// This runtime with pool `index` replaced by `pool`, everything else shared (bulkheads,
    /// retry policy and budget, trusted proxies, configuration): how a caller that warms up and
    /// publishes pools one at a time (the simulator's per-pool reloads) publishes one. `None`
    /// when there is no pool `index`.
    #[must_use]
    pub fn with_pool(&self, index: usize, pool: Arc<Pool>) -> Option<Runtime> {
        let mut pools = self.pools.clone();
        *pools.get_mut(index)? = pool;
        Some(Runtime {
            config: self.config.clone(),
            pools,
            bulkheads: self.bulkheads.clone(),
            retry: Arc::clone(&self.retry),
            budget: Arc::clone(&self.budget),
            trusted: self.trusted.clone(),
        })
    }

    /// The configuration in force (restart-only fields as running, see [`plan_reload`]).
    #[must_use]
    pub fn config(&self) -> &ValidConfig {
        &self.config
    }

    /// The pools; index 0 is the default pool.
    #[must_use]
    pub fn pools(&self) -> &[Arc<Pool>] {
        &self.pools
    }

    /// Pool `index`.
    #[must_use]
    pub fn pool(&self, index: usize) -> Option<&Arc<Pool>> {
        self.pools.get(index)
    }

    pub(super) fn pool_named(&self, name: &str) -> Option<(&crate::config::PoolSpec, &Arc<Pool>)> {
        self.config
            .pools
            .iter()
            .zip(&self.pools)
            .find(|(spec, _)| spec.name == name)
    }

    /// The bulkhead of route `index` (config order), when that route sets a limit.
    #[must_use]
    pub fn bulkhead(&self, route: usize) -> Option<&Arc<Bulkhead>> {
        self.bulkheads.get(route).and_then(Option::as_ref)
    }

    /// The retry policy (C-RETRY-1..6).
    #[must_use]
    pub fn retry(&self) -> &Arc<RetryPolicy> {
        &self.retry
    }

    /// The process-wide retry budget (C-RETRY-7).
    #[must_use]
    pub fn budget(&self) -> &Arc<RetryBudget> {
        &self.budget
    }

    /// Peers whose forwarding headers are believed (C-FWD-1).
    #[must_use]
    pub fn trusted_proxies(&self) -> &TrustedProxies {
        &self.trusted
    }

    /// Where a request for `raw_path` goes (C-ROUTE-1): its pool snapshot and its route's
    /// bulkhead, and the match itself (for logs and [`Runtime::pick_context`]). Clones two
    /// `Arc`s; allocates nothing.
    #[must_use]
    pub fn target(&self, raw_path: &str) -> (FlowTarget, RouteMatch) {
        let mut m = self.config.route_table.lookup(raw_path);
        // `pool` indexes `cfg.pools`, which `pools` mirrors one to one; `build` refuses a
        // configuration without pools, so index 0 exists. The match names the pool used.
        if m.pool >= self.pools.len() {
            m.pool = 0;
        }
        let pool = &self.pools[m.pool];
        let bulkhead = m.route.and_then(|r| self.bulkhead(r)).map(Arc::clone);
        (
            FlowTarget {
                pool: Arc::clone(pool),
                bulkhead,
            },
            m,
        )
    }

    /// The selection context of a request to pool `pool` (from [`Runtime::target`]): for a
    /// `consistent_hash` pool the hash of its affinity key
    /// (C-POOL-4) through [`hash_key`]:
    /// - `header:<Name>`: the bytes of the first value of that header;
    /// - `cookie:<name>`: the value of the first cookie of that name in any `Cookie` header
    ///   (surrounding double quotes removed, RFC 6265);
    /// - `client_address`: the address's octets (4 for IPv4, 16 for IPv6).
    ///
    /// A missing or empty header or cookie falls back to the client address, so requests without
    /// the key still spread across backends and one client stays on one backend. Allocates
    /// nothing.
    #[must_use]
    pub fn pick_context<H: HeaderLines + ?Sized>(
        &self,
        pool: usize,
        client: IpAddr,
        headers: &H,
    ) -> PickContext {
        let key = self
            .config
            .pools
            .get(pool)
            .and_then(|p| p.hash_key.as_ref());
        let hash = key.map(|key| {
            let bytes = match key {
                HashKey::Header(name) => headers.first_line(name).filter(|v| !v.is_empty()),
                HashKey::Cookie(name) => cookie_value(headers, name.as_bytes()),
                HashKey::ClientAddress => None,
            };
            match bytes {
                Some(b) => hash_key(b),
                None => address_hash(client),
            }
        });
        PickContext { hash }
    }

    /// The backend with this id, and the index of its pool (ids are unique across pools,
    /// C-POOL-1).
    #[must_use]
    pub fn find_backend(&self, id: &str) -> Option<(usize, &Arc<Backend>)> {
        self.pools
            .iter()
            .enumerate()
            .find_map(|(i, p)| p.find(id).map(|(_, b)| (i, b)))
    }

    /// Every backend id, pools in order and backends in config order (for the health
    /// [`ProbeSchedule`](crate::health::ProbeSchedule), which checks disabled backends too,
    /// C-HEALTH-5).
    pub fn backend_ids(&self) -> impl Iterator<Item = &str> + '_ {
        self.pools
            .iter()
            .flat_map(|p| p.backends().iter().map(|b| b.id()))
    }

    /// Every backend with its pool index, in [`Runtime::backend_ids`] order.
    pub fn backends(&self) -> impl Iterator<Item = (usize, &Arc<Backend>)> + '_ {
        self.pools
            .iter()
            .enumerate()
            .flat_map(|(i, p)| p.backends().iter().map(move |b| (i, b)))
    }
}

/// The hash of a client address's octets.
fn address_hash(ip: IpAddr) -> u64 {
    match ip {
        IpAddr::V4(a) => hash_key(&a.octets()),
        IpAddr::V6(a) => hash_key(&a.octets()),
    }
}

/// The value of the first cookie named `name` in the `Cookie` headers, without surrounding
/// double quotes; `None` when absent or empty.
fn cookie_value<'h, H: HeaderLines + ?Sized>(headers: &'h H, name: &[u8]) -> Option<&'h [u8]> {
    for value in headers.lines(&http::header::COOKIE) {
        for pair in value.split(|b| *b == b';') {
            let pair = trim(pair);
            let Some(eq) = pair.iter().position(|b| *b == b'=') else {
                continue;
            };
            if trim(&pair[..eq]) != name {
                continue;
            }
            let mut v = trim(&pair[eq + 1..]);
            if v.len() >= 2 && v[0] == b'"' && v[v.len() - 1] == b'"' {
                v = &v[1..v.len() - 1];
            }
            return (!v.is_empty()).then_some(v);
        }
    }
    None
}

fn trim(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| *c != b' ' && *c != b'\t')
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| *c != b' ' && *c != b'\t')
        .map_or(start, |e| e + 1);
    &b[start..end.max(start)]
}
