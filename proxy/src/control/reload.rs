//! Hot reload and the one path that publishes a new runtime (C-CONF-4..8).
//!
//! Two things ask for a new runtime: SIGHUP ([`reload_file`]: re-read the file, validate the
//! whole of it with `config::load`, plan it over the running configuration with
//! `Runtime::reload`) and the management API (`PATCH /api/dashboard/config`: weir-core's
//! `mgmt::handle` returns `Decision::Publish`). Both end in [`install`], under the same lock
//! ([`Control::lock`]), so changes are applied one at a time and a change is always built from
//! the runtime in force when it is published (C-CONF-8).
//!
//! The file is read, parsed and validated *before* the lock is taken, on a thread of its own
//! under `config_file::READ_TIMEOUT`, by `config_file::load_async` (only a regular file, opened
//! without blocking, at most 1 MiB read): a path that points at a FIFO, a device or a hung file
//! system is rejected with a named error and never holds the lock that mutations, later reloads
//! and the shutdown need. Each reload takes a ticket before it reads; one that reaches
//! the lock after a later ticket was applied is dropped (`superseded`), so overlapping reads
//! still end with the newest file in force.
//!
//! [`install`]:
//! 1. **Warm-up (C-CONF-5).** When `runtime::warmup_required` lists pools (the new backend list
//!    keeps none of the healthy ones), the health driver is pointed at the union of the
//!    running and the candidate backends: the running ones keep their state and keep being
//!    checked, the new ones start unhealthy (C-HEALTH-1) and are probed by the driver with its
//!    executor, thresholds and concurrency (`success_threshold` consecutive successes, as for
//!    any backend). [`install`] waits until every listed pool has a backend that can take
//!    requests (healthy, enabled, not draining, circuit not open), at most
//!    `(interval + jitter + timeout) × (success_threshold + 1)` (at least 1 s, at most 60 s).
//!    If the deadline passes first, the driver is pointed back at the running backends alone and the reload is
//!    rejected: nothing was published, the running backends never stopped being checked.
//! 2. **Publish** in one `ArcSwap` store: every request from then on loads the new runtime;
//!    requests in flight finish on the one they loaded.
//! 3. **Follow-up**: the health driver takes the new target list (kept id + url keep their state,
//!    the warmed-up ones included, so there is no flap) and the new health settings; the
//!    metrics' per-backend table follows the new backend list.
//!
//! A rejected reload changes nothing and logs one structured error event
//! (`target: weir::reload`, message `configuration reload rejected`, with `reason` and every
//! error in `errors`); an applied one logs `configuration reloaded` with the applied paths and,
//! as a warning, the changed paths that need a restart (C-CONF-7: they keep their running
//! values; `runtime::plan_reload`).

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use weir_core::pool::{Availability, Backend, Pool};
use weir_core::runtime::{ReloadError, Runtime, warmup_required};

use crate::base::error_chain::chain;
use crate::base::worker;
use crate::control::config_file::{self, LoadError};
use crate::observe::metrics::ReloadSource;
use crate::services::probe::ProbeTarget;
use crate::services::snapshot::Snapshot;
use crate::services::state::ProxyState;

/// Why a new runtime was not published (the old one keeps serving, C-CONF-4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejected {
    /// The file could not be read (not a regular file, too large, not UTF-8, timed out; the
    /// message names the path and why, `safe_read::FileError`).
    Read(String),
    /// A reload that started later had already read the file and was applied first; this older
    /// read is dropped so the newer file stays in force.
    Superseded,
    /// The configuration is invalid: every error, one per entry (path, line, message).
    Invalid(Vec<String>),
    /// The runtime could not be built.
    Build(String),
    /// Warm-up found no healthy backend in these pools (C-CONF-5).
    WarmUp(Vec<String>),
}

impl Rejected {
    /// A short machine-readable reason (`read`, `superseded`, `invalid`, `build`, `warm_up`).
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Rejected::Read(_) => "read",
            Rejected::Superseded => "superseded",
            Rejected::Invalid(_) => "invalid",
            Rejected::Build(_) => "build",
            Rejected::WarmUp(_) => "warm_up",
        }
    }

    /// Every error, one per entry.
    #[must_use]
    pub fn errors(&self) -> Vec<String> {
        match self {
            Rejected::Read(e) | Rejected::Build(e) => vec![e.clone()],
            Rejected::Superseded => {
                vec!["a later reload read the file and was applied first".to_owned()]
            }
            Rejected::Invalid(errors) => errors.clone(),
            Rejected::WarmUp(pools) => pools
                .iter()
                .map(|p| format!("pool {p}: no backend passed the warm-up health check"))
                .collect(),
        }
    }
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.reason(), self.errors().join("; "))
    }
}

impl From<ReloadError> for Rejected {
    fn from(e: ReloadError) -> Rejected {
        match e {
            ReloadError::Invalid(errors) => {
                Rejected::Invalid(errors.errors().iter().map(ToString::to_string).collect())
            }
            ReloadError::Build(b) => Rejected::Build(b.to_string()),
        }
    }
}

/// What an applied reload changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// Paths applied now (C-CONF-7 dynamic).
    pub applied: Vec<String>,
    /// Paths that changed but need a restart (kept at their running values).
    pub restart_required: Vec<String>,
    /// Pools that were warmed up before publishing.
    pub warmed_up: Vec<String>,
}

/// SIGHUP: re-read `path`, validate it whole, plan it over the running configuration, warm up
/// and publish (C-CONF-4..7). Logs the result (module doc) and counts it in
/// `load_balancer_config_reloads_total{source="signal"}`.
pub async fn reload_file(proxy_state: &Arc<ProxyState>, path: &Path) -> Result<Applied, Rejected> {
    // C-TLS-2: SIGHUP reloads the listener's certificates too, whatever the file's fate.
    let s = Arc::clone(proxy_state);
    let _ =
        crate::base::rt::unblock(proxy_state.data_plane.rt, move || s.front.reload("signal")).await;
    let result = reload_file_inner(proxy_state, path).await;
    proxy_state
        .data_plane
        .metrics
        .reload(ReloadSource::Signal, result.is_ok());
    match &result {
        Ok(a) => {
            proxy_state
                .data_plane
                .metrics
                .set_restart_required(!a.restart_required.is_empty());
            tracing::info!(
                target: "weir::reload",
                source = "signal",
                path = %path.display(),
                applied = %crate::base::log_json::list(&a.applied),
                warmed_up = %crate::base::log_json::list(&a.warmed_up),
                "configuration reloaded"
            );
            if !a.restart_required.is_empty() {
                tracing::warn!(
                    target: "weir::reload",
                    source = "signal",
                    path = %path.display(),
                    restart_required = %crate::base::log_json::list(&a.restart_required),
                    "configuration changes need a restart and were not applied"
                );
            }
        }
        Err(e) => log_rejected("signal", Some(path), e),
    }
    result
}

/// The structured error of a rejected change (C-CONF-4).
pub fn log_rejected(source: &str, path: Option<&Path>, e: &Rejected) {
    let errors = e.errors();
    tracing::error!(
        target: "weir::reload",
        source,
        path = path.map(|p| p.display().to_string()),
        reason = e.reason(),
        error_count = errors.len(),
        errors = %crate::base::log_json::list(&errors),
        "configuration reload rejected; the running configuration stays in force"
    );
}

async fn reload_file_inner(
    proxy_state: &Arc<ProxyState>,
    path: &Path,
) -> Result<Applied, Rejected> {
    // Numbered before reading, so that of two reloads whose reads overlap the later one wins.
    let ticket = proxy_state
        .control
        .reload_tickets
        .fetch_add(1, Ordering::AcqRel)
        + 1;
    // Read, parse and validate outside the lock, on a thread of its own under a deadline: a
    // FIFO, a device or a hung file system never holds up a mutation, another reload or the
    // shutdown (config_file).
    let valid =
        match config_file::load_async(proxy_state.data_plane.rt, path, config_file::READ_TIMEOUT)
            .await
        {
            Ok(valid) => valid,
            Err(LoadError::File(e)) => return Err(Rejected::Read(e.to_string())),
            Err(LoadError::Invalid(errors)) => {
                return Err(Rejected::Invalid(
                    errors.errors().iter().map(ToString::to_string).collect(),
                ));
            }
        };
    // C-GRPC-5: a bad upstream CA or client certificate rejects the reload as a whole, as it
    // stops a start (the keys themselves are restart-only).
    let upstream_tls = valid.server.upstream.tls.clone();
    let checked = crate::base::rt::unblock(proxy_state.data_plane.rt, move || {
        crate::services::upstream_tls::check(&upstream_tls)
            .map_err(|e| e.iter().map(|e| chain(e).to_string()).collect::<Vec<_>>())
    })
    .await;
    match checked {
        Some(Ok(())) => {}
        Some(Err(errors)) => return Err(Rejected::Invalid(errors)),
        None => {
            return Err(Rejected::Build(
                "checking the upstream TLS files panicked".into(),
            ));
        }
    }
    let _one_at_a_time = proxy_state.control.lock().await;
    // A reload that started later already read the file and got the lock first.
    let newest = proxy_state.control.newest_reload.load(Ordering::Acquire);
    if newest > ticket {
        return Err(Rejected::Superseded);
    }
    proxy_state
        .control
        .newest_reload
        .store(ticket, Ordering::Release);
    let current = proxy_state.data_plane.runtime();
    let now = proxy_state.data_plane.clock.now();
    let reload = worker::with_rng(|rng| current.reload(valid, now, rng))?;
    let warmed_up = reload
        .warmup
        .iter()
        .filter_map(|i| reload.runtime.config().pools.get(*i))
        .map(|p| p.name.clone())
        .collect();
    let applied = Applied {
        applied: reload.diff.dynamic_paths().map(str::to_owned).collect(),
        restart_required: reload.diff.restart_paths().map(str::to_owned).collect(),
        warmed_up,
    };
    install(proxy_state, &current, reload.runtime).await?;
    Ok(applied)
}

/// Warm up (when needed) and publish `next`, built from `current` (the runtime in force), then
/// point the health driver and the metrics at it. The caller holds [`Control::lock`]. See the
/// module doc.
pub async fn install(
    proxy_state: &Arc<ProxyState>,
    current: &Runtime,
    next: Runtime,
) -> Result<(), Rejected> {
    let warmup = warmup_required(current, &next);
    if !warmup.is_empty() {
        warm_up(proxy_state, current, &next, &warmup).await?;
    }
    let next = Arc::new(next);
    publish(proxy_state, Arc::clone(&next));
    point_health_at(proxy_state, &[&next]);
    Ok(())
}

/// Make `next` the runtime in force: the metrics registry at its backends, then the whole
/// proxy-side snapshot in one store (`snapshot::Snapshot`: the upstream targets and metrics of
/// kept backends carry over).
fn publish(proxy_state: &ProxyState, next: Arc<Runtime>) {
    proxy_state
        .data_plane
        .metrics
        .set_backends(next.backend_ids());
    let previous = proxy_state.data_plane.snapshot.load();
    let snapshot = Snapshot::build(next, &proxy_state.data_plane.metrics, Some(&previous));
    proxy_state.data_plane.snapshot.store(Arc::new(snapshot));
}

/// Probe targets and the backends each reports on, for the backends of `runtimes` (deduplicated
/// by id + url: one probe per backend even when two runtimes hold it, each flip applied to every
/// `Arc<Backend>` with that id + url).
fn targets(runtimes: &[&Runtime]) -> (Vec<ProbeTarget>, Vec<Vec<Arc<Backend>>>) {
    let mut targets: Vec<ProbeTarget> = Vec::new();
    let mut backends: Vec<Vec<Arc<Backend>>> = Vec::new();
    for rt in runtimes {
        let hc = &rt.config().health;
        for (_, b) in rt.backends() {
            let same = targets
                .iter()
                .position(|t| t.key() == b.id() && t.url() == b.url());
            if let Some(i) = same {
                if !backends[i].iter().any(|x| Arc::ptr_eq(x, b)) {
                    backends[i].push(Arc::clone(b));
                }
                continue;
            }
            match ProbeTarget::new(b.id(), b.url(), hc.mode, &hc.path) {
                Ok(t) => {
                    targets.push(t);
                    backends.push(vec![Arc::clone(b)]);
                }
                Err(e) => tracing::error!(
                    backend = b.id(),
                    error = %e,
                    "backend cannot be probed; it stays unhealthy"
                ),
            }
        }
    }
    (targets, backends)
}

/// Point the health driver at the backends of `runtimes` with the settings of the first one.
fn point_health_at(proxy_state: &ProxyState, runtimes: &[&Runtime]) {
    let (Some(health), Some(first)) = (proxy_state.control.health.get(), runtimes.first()) else {
        return;
    };
    let params = first.config().health.params;
    let (targets, backends) = targets(runtimes);
    let on_change = move |index: usize, healthy: bool, now: weir_core::Instant| {
        if let Some(list) = backends.get(index) {
            // A real flip is logged once, by the driver (`events::health_changed`).
            for b in list {
                b.set_healthy(healthy, now);
            }
        }
    };
    if health.reload(targets, params, on_change).is_err() {
        tracing::error!("the health driver has stopped; backend health is no longer updated");
    }
}

/// The longest a warm-up waits for `next`'s settings: a whole cycle plus `success_threshold`
/// probes, twice over, within 1..=60 s.
fn warmup_deadline(next: &Runtime) -> Duration {
    let hc = &next.config().config.health_check;
    let cycle = hc.interval + hc.jitter + hc.timeout;
    let rounds = hc.success_threshold.saturating_add(1);
    cycle
        .saturating_mul(rounds)
        .clamp(Duration::from_secs(1), Duration::from_secs(60))
}

/// Whether a candidate pool may be published (C-CONF-5): some backend can take a request
/// (healthy, enabled, not draining, circuit not open; saturated counts), so publishing opens no
/// window of `503`. A pool the file disables entirely only needs a healthy backend: no request
/// could reach it anyway, and that is the operator's declared intent.
fn pool_warm(pool: &Pool, now: weir_core::Instant) -> bool {
    let backends = pool.backends();
    let up = |b: &Arc<Backend>| {
        matches!(
            b.availability(pool.params(), now),
            Availability::Available | Availability::Saturated
        )
    };
    backends.iter().any(up)
        || (!backends.iter().any(|b| b.is_enabled()) && backends.iter().any(|b| b.is_healthy()))
}

/// C-CONF-5: see the module doc.
async fn warm_up(
    proxy_state: &Arc<ProxyState>,
    current: &Runtime,
    next: &Runtime,
    pools: &[usize],
) -> Result<(), Rejected> {
    let names: Vec<String> = pools
        .iter()
        .filter_map(|i| next.config().pools.get(*i))
        .map(|p| p.name.clone())
        .collect();
    tracing::info!(target: "weir::reload", pools = %crate::base::log_json::list(&names), "warming up pools before publishing");
    // Count the candidates' probes too (health checks of backends not yet in force).
    proxy_state
        .data_plane
        .metrics
        .set_backends(current.backend_ids().chain(next.backend_ids()));
    point_health_at(proxy_state, &[next, current]);
    let ready = |rt: &Runtime| {
        let now = proxy_state.data_plane.clock.now();
        pools
            .iter()
            .all(|i| rt.pool(*i).is_some_and(|p| pool_warm(p, now)))
    };
    let clock = proxy_state.data_plane.rt;
    let deadline = clock.now() + warmup_deadline(next);
    let mut warmed = ready(next);
    while !warmed && clock.now() < deadline {
        crate::base::rt::sleep(clock, Duration::from_millis(5)).await;
        warmed = ready(next);
    }
    if warmed {
        return Ok(());
    }
    // Back to the running backends only; they were checked all along.
    proxy_state
        .data_plane
        .metrics
        .set_backends(current.backend_ids());
    point_health_at(proxy_state, &[current]);
    let now = proxy_state.data_plane.clock.now();
    let failed = pools
        .iter()
        .filter(|i| next.pool(**i).is_some_and(|p| !pool_warm(p, now)))
        .filter_map(|i| next.config().pools.get(*i))
        .map(|p| p.name.clone())
        .collect();
    Err(Rejected::WarmUp(failed))
}
