//! Reload planning (C-CONF-4, C-CONF-5, C-CONF-7): what of a new configuration applies now, what
//! waits for a restart, and which pools must be warmed up before the new runtime is published.
//!
//! Restart-only changes (listener addresses, overload limits, HTTP timeouts, upstream connection
//! limits, store connection settings, the management listener: everything
//! [`config::classify`] calls [`Apply::Restart`](crate::config::Apply::Restart)) are *not*
//! applied: the planned configuration takes those fields from the running one, so the new
//! runtime keeps the running gate, listeners and store settings, and the status API shows what
//! is actually in force. The plan lists them so the adapter can log "changed, needs a restart".
//! Because the planned configuration still carries the running values, the next reload of the
//! same file reports them again until the process restarts.
//!
//! The planned configuration is re-validated by [`config::validate_config`] (the same checks as
//! a file), with the running secrets, so it is consistent field by field and its values are what
//! the next [`config::diff`] compares against.

use core::fmt;

use super::{BuildError, Runtime};
use crate::config::{self, Config, ConfigDiff, ConfigErrors, Secret, SecretSource, ValidConfig};
use crate::rng::Rng;
use crate::time::Instant;

impl Runtime {
    /// Reload: plan `next` against this runtime (restart-only changes are kept as running,
    /// C-CONF-7), build the next runtime (C-CONF-6) and say which pools must be warmed up before
    /// it is published (C-CONF-5).
    pub fn reload(
        &self,
        next: ValidConfig,
        now: Instant,
        rng: &mut dyn Rng,
    ) -> Result<Reload, ReloadError> {
        reload(self, next, now, rng)
    }

    /// The secrets of this runtime's configuration, as a [`SecretSource`](crate::config::SecretSource) under the names the
    /// configuration gives them (for re-validating an edited configuration without reading the
    /// environment again).
    #[must_use]
    pub fn secrets(&self) -> RunningSecrets<'_> {
        running_secrets(self.config())
    }
}

/// What a reload of `next` over the running configuration does (C-CONF-7).
#[derive(Debug, Clone)]
pub struct ReloadPlan {
    /// Every change from the running configuration to the file, each marked dynamic or restart.
    pub diff: ConfigDiff,
    /// The configuration to build: the file's dynamic fields, the running restart-only ones.
    pub config: ValidConfig,
}

impl ReloadPlan {
    /// Paths of changes that need a restart and were not applied.
    pub fn restart_required(&self) -> impl Iterator<Item = &str> {
        self.diff.restart_paths()
    }

    /// Paths of changes the reload applies.
    pub fn applied(&self) -> impl Iterator<Item = &str> {
        self.diff.dynamic_paths()
    }
}

/// Plan a reload of `next` over `previous` (C-CONF-7): see the module doc. Fails only if the
/// planned configuration does not validate, which would be a weir bug (each field it combines
/// was valid on its own side); the reload is then rejected like an invalid file.
pub fn plan_reload(previous: &Runtime, next: ValidConfig) -> Result<ReloadPlan, ConfigErrors> {
    let running = previous.config();
    let diff = config::diff(running, &next);
    if !diff.needs_restart() {
        return Ok(ReloadPlan { diff, config: next });
    }
    let merged = keep_restart_only(&running.config, next.config);
    let config = config::validate_config(merged, &running_secrets(running))?;
    Ok(ReloadPlan { diff, config })
}

/// `next` with every restart-only field (C-CONF-7, [`config::classify`]) taken from `running`.
/// Starts from the running file and copies the dynamic fields, so a field added to the schema
/// later is restart-only here until it is named, as it is in `classify`.
fn keep_restart_only(running: &Config, next: Config) -> Config {
    let mut c = running.clone();
    // Pools and routes: backends, balancing, pools, routes.
    c.backends = next.backends;
    c.balancing = next.balancing;
    c.pools = next.pools;
    c.routes = next.routes;
    // health_check: every field.
    c.health_check = next.health_check;
    // server: trusted proxies, access log, retry, per-backend slots.
    c.server.trusted_proxies = next.server.trusted_proxies;
    c.server.access_log_sample_rate = next.server.access_log_sample_rate;
    c.server.access_log_include_path = next.server.access_log_include_path;
    c.server.allow_trace = next.server.allow_trace;
    c.server.retry = next.server.retry;
    c.server.upstream.max_concurrent_requests = next.server.upstream.max_concurrent_requests;
    c.server.upstream.mirror_max_in_flight = next.server.upstream.mirror_max_in_flight;
    c.server.upstream.adaptive_concurrency = next.server.upstream.adaptive_concurrency;
    // rate_limit: the policy, not the store.
    let (r, n) = (&mut c.rate_limit, next.rate_limit);
    r.enabled = n.enabled;
    r.failure_mode = n.failure_mode;
    r.capacity = n.capacity;
    r.refill_per_second = n.refill_per_second;
    r.operation_timeout = n.operation_timeout;
    r.ipv4_prefix_bits = n.ipv4_prefix_bits;
    r.ipv6_prefix_bits = n.ipv6_prefix_bits;
    r.cleanup_interval = n.cleanup_interval;
    r.retention = n.retention;
    c
}

/// The secrets of a valid configuration, served under the names its fields give them
/// (`management.auth_token_env`, `redis.password_env`, `database.password_env`), so that an
/// edited copy re-validates with the secrets in force and without reading the environment.
/// Files are never read (every secret is served as the variable itself).
#[must_use]
pub fn running_secrets(cfg: &ValidConfig) -> RunningSecrets<'_> {
    let mut named: Vec<(&str, &Secret)> = Vec::with_capacity(3);
    if let Some(t) = &cfg.management.auth_token {
        named.push((cfg.config.management.auth_token_env.as_str(), t));
    }
    if let (Some(p), Some(name)) = (&cfg.redis.password, &cfg.config.redis.password_env) {
        named.push((name.as_str(), p));
    }
    if let (Some(d), Some(name)) = (&cfg.database, &cfg.config.database.password_env) {
        named.push((name.as_str(), &d.password));
    }
    RunningSecrets { named }
}

/// See [`running_secrets`]. Debug prints names only.
pub struct RunningSecrets<'a> {
    named: Vec<(&'a str, &'a Secret)>,
}

impl fmt::Debug for RunningSecrets<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.named.iter().map(|(n, _)| n))
            .finish()
    }
}

impl SecretSource for RunningSecrets<'_> {
    fn env(&self, name: &str) -> Option<String> {
        self.named
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| s.expose().to_owned())
    }

    fn read_file(&self, path: &str) -> Result<String, String> {
        Err(format!(
            "cannot read {path:?}: only running secrets are available"
        ))
    }
}

/// Pools of `next` that must pass a health check before `next` is published (C-CONF-5): those
/// whose same-named pool in `previous` has a backend healthy now, while the pool in `next` has
/// none (it kept none of them: kept backends carry their health, new ones start unhealthy,
/// C-HEALTH-1). The adapter probes those pools' backends on the candidate runtime (its backends
/// are the new `Arc`s) and publishes only when each listed pool has a healthy backend; when
/// warm-up fails the reload is rejected and the old runtime keeps serving.
///
/// Not listed (a refinement of C-CONF-5): a pool whose predecessor had no healthy backend
/// (nothing healthy is lost, and rejecting would block the fix of an outage), and a pool with a
/// new name (it starts cold, as at process start; the adapter may warm it but its failure does
/// not reject the reload).
#[must_use]
pub fn warmup_required(previous: &Runtime, next: &Runtime) -> Vec<usize> {
    next.config
        .pools
        .iter()
        .zip(next.pools())
        .enumerate()
        .filter(|(_, (spec, pool))| {
            let had_healthy = previous
                .pool_named(&spec.name)
                .is_some_and(|(_, p)| p.backends().iter().any(|b| b.is_healthy()));
            had_healthy && !pool.backends().iter().any(|b| b.is_healthy())
        })
        .map(|(i, _)| i)
        .collect()
}

/// A reload, planned and built but not published.
#[derive(Debug)]
pub struct Reload {
    /// What changed, and what needs a restart (not applied).
    pub diff: ConfigDiff,
    /// The runtime to publish (after warm-up).
    pub runtime: Runtime,
    /// Pools of `runtime` to warm up first ([`warmup_required`]); empty: publish at once.
    pub warmup: Vec<usize>,
}

/// Why a reload was rejected (the old runtime keeps serving, C-CONF-4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadError {
    /// the planned configuration did not validate
    Invalid(ConfigErrors),
    /// the runtime could not be built
    Build(BuildError),
}

impl fmt::Display for ReloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReloadError::Invalid(e) => write!(f, "{e}"),
            ReloadError::Build(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ReloadError {}

pub(super) fn reload(
    previous: &Runtime,
    next: ValidConfig,
    now: Instant,
    rng: &mut dyn Rng,
) -> Result<Reload, ReloadError> {
    let plan = plan_reload(previous, next).map_err(ReloadError::Invalid)?;
    let runtime =
        Runtime::build(plan.config, Some(previous), now, rng).map_err(ReloadError::Build)?;
    let warmup = warmup_required(previous, &runtime);
    Ok(Reload {
        diff: plan.diff,
        runtime,
        warmup,
    })
}
