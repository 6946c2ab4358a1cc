//! What a reload changes (C-CONF-7): every field whose value in force differs between two valid
//! configurations, named by path, each marked as applied at once ([`Apply::Dynamic`]) or only
//! after a restart ([`Apply::Restart`]). The adapter applies the dynamic ones atomically
//! (C-CONF-4) and logs the restart ones as "changed, needs a restart".
//!
//! Values are compared as read, defaults included, so writing a default explicitly is not a
//! change. Secret values are compared too and reported under the field that names them
//! (`redis.password_env`), never printed.

use super::validate::ValidConfig;

/// When a changed field takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Apply {
    /// Applied by the reload itself.
    Dynamic,
    /// Needs a restart; until then the old value stays in force.
    Restart,
}

impl Apply {
    /// `dynamic` or `restart`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Apply::Dynamic => "dynamic",
            Apply::Restart => "restart",
        }
    }
}

/// One changed field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Concrete path, e.g. `server.retry.max_attempts` or `backends[1].url`.
    pub path: String,
    /// When it takes effect.
    pub apply: Apply,
}

/// The fields that differ between two configurations, sorted by path.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigDiff {
    /// Every change.
    pub changes: Vec<Change>,
}

impl ConfigDiff {
    /// Nothing changed.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// Some change needs a restart.
    #[must_use]
    pub fn needs_restart(&self) -> bool {
        self.changes.iter().any(|c| c.apply == Apply::Restart)
    }

    /// Paths of the changes that need a restart.
    pub fn restart_paths(&self) -> impl Iterator<Item = &str> {
        self.changes
            .iter()
            .filter(|c| c.apply == Apply::Restart)
            .map(|c| c.path.as_str())
    }

    /// Paths of the changes applied by the reload.
    pub fn dynamic_paths(&self) -> impl Iterator<Item = &str> {
        self.changes
            .iter()
            .filter(|c| c.apply == Apply::Dynamic)
            .map(|c| c.path.as_str())
    }
}

/// Prefixes of the fields a reload applies (C-CONF-7 and docs/configuration.md). Everything else
/// needs a restart.
const DYNAMIC: &[&str] = &[
    "backends",
    "balancing",
    "pools",
    "routes",
    "health_check",
    "server.trusted_proxies",
    "server.retry",
    "server.access_log_sample_rate",
    "server.access_log_include_path",
    "server.allow_trace",
    "server.upstream.max_concurrent_requests",
    "server.upstream.mirror_max_in_flight",
    "server.upstream.adaptive_concurrency",
    "rate_limit.enabled",
    "rate_limit.failure_mode",
    "rate_limit.capacity",
    "rate_limit.refill_per_second",
    "rate_limit.operation_timeout",
    "rate_limit.ipv4_prefix_bits",
    "rate_limit.ipv6_prefix_bits",
];

/// How a change to the field at `path` (concrete or schema) takes effect.
#[must_use]
pub fn classify(path: &str) -> Apply {
    let dynamic = DYNAMIC.iter().any(|p| {
        path.strip_prefix(p)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
    });
    if dynamic {
        Apply::Dynamic
    } else {
        Apply::Restart
    }
}

/// The changes from `old` to `new` (C-CONF-7).
#[must_use]
pub fn diff(old: &ValidConfig, new: &ValidConfig) -> ConfigDiff {
    let mut paths: Vec<&str> = Vec::new();
    for (path, value) in &old.values {
        if new.values.get(path) != Some(value) {
            paths.push(path);
        }
    }
    for path in new.values.keys() {
        if !old.values.contains_key(path) {
            paths.push(path);
        }
    }
    // Secrets: the names are ordinary values above; a changed value behind the same name is a
    // change of that field too.
    if old.redis.password != new.redis.password {
        paths.push("redis.password_env");
    }
    if old.database.as_ref().map(|d| &d.password) != new.database.as_ref().map(|d| &d.password) {
        paths.push("database.password_env");
    }
    if old.management.auth_token != new.management.auth_token {
        paths.push("management.auth_token_env");
    }
    paths.sort_unstable();
    paths.dedup();
    ConfigDiff {
        changes: paths
            .into_iter()
            .map(|p| Change {
                path: p.to_owned(),
                apply: classify(p),
            })
            .collect(),
    }
}
