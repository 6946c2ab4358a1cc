//! weir's configuration: YAML text in, a [`ValidConfig`] of typed core parameters out, or every
//! error at once (C-CONF-0..3, C-CONF-7). See docs/configuration.md for every key.
//!
//! Parsing is strict (C-CONF-1) and runs in three phases so that one pass lists every error, each
//! with its field path and position, instead of stopping at the first like a serde derive does:
//!
//! 1. `tree`: serde-saphyr parses the text into a value tree whose nodes keep their line and
//!    column (`serde_saphyr::Spanned`). Budgets bound size, nodes, depth and alias expansion (a
//!    YAML bomb fails fast), booleans are strict (`yes` is not `true`), duplicate keys and unknown
//!    tags are rejected. Only a syntax error stops here.
//! 2. `schema` + `read`: the tree is read against the schema, field by field. A wrong type, an
//!    unparsable duration or an unknown field records an error and the field's default stands
//!    in, so reading goes on.
//! 3. `validate`: ranges and cross-field rules, checked by the core constructors themselves
//!    (`HealthParams::new`, `RetryPolicy::new`, ...) so no range is written twice, and secrets,
//!    resolved through a caller-supplied [`SecretSource`] (core does no IO, C-CONF-3).
//!
//! This is the approach of Envoy's and Kubernetes' config validators (collect, then report all)
//! rather than serde's fail-fast; the value tree with spans is serde-saphyr's `Spanned`, the
//! schema reader is hand-written because serde's derive cannot keep going after an error or name
//! every unknown field. Durations follow Go's `time.ParseDuration`, the reference balancer's
//! format (`50ms`, `5s`, `1m30s`).
//!
//! [`diff`] compares two valid configurations and says, per changed field, whether the reload
//! applies it or it needs a restart (C-CONF-7).

use core::fmt;
use std::collections::BTreeSet;

mod diff;
mod read;
mod schema;
mod secret;
mod tree;
mod validate;

#[cfg(all(test, not(loom)))]
mod examples;
#[cfg(test)]
mod tests;

pub use diff::{Apply, Change, ConfigDiff, classify, diff};
pub use read::parse_duration;
pub use schema::{
    BackendConfig, BalancingConfig, Config, DatabaseConfig, HealthCheckConfig, ManagementConfig,
    OverloadConfig, PoolConfig, ProbeMode, RateLimitConfig, RedisConfig, RouteConfig, ServerConfig,
    UpstreamConfig,
};
pub use secret::{MapSecrets, Secret, SecretSource};
pub use tree::{MAX_CONFIG_BYTES, Pos};
pub use validate::{
    DEFAULT_POOL, DatabaseSettings, HashKey, HealthCheck, HostPort, MAX_HEADER_BYTES_LIMIT,
    MIN_HEADER_BYTES, ManagementSettings, PoolSpec, RedisSettings, RouteSpec, ServerSettings,
    UpstreamSettings, ValidConfig,
};

use read::{Field, Path, Reader};

/// One problem in a configuration: where, and what (C-CONF-1). Never contains a secret value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Field path, e.g. `server.retry.max_attempts` or `backends[1].url`; empty for an error of
    /// the text as a whole (syntax, size).
    pub path: String,
    /// Line and column where the parser placed the value (or its nearest written parent).
    pub pos: Option<Pos>,
    /// What is wrong, lower case.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.path.is_empty(), self.pos) {
            (false, Some(pos)) => write!(f, "{} ({pos}): {}", self.path, self.message),
            (false, None) => write!(f, "{}: {}", self.path, self.message),
            (true, Some(pos)) => write!(f, "{pos}: {}", self.message),
            (true, None) => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Every error found in a configuration, in document order (C-CONF-1). Never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// The errors.
    #[must_use]
    pub fn errors(&self) -> &[ConfigError] {
        &self.0
    }

    /// Whether some error is at exactly `path`.
    #[must_use]
    pub fn has(&self, path: &str) -> bool {
        self.0.iter().any(|e| e.path == path)
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        writeln!(
            f,
            "invalid configuration: {n} error{}",
            if n == 1 { "" } else { "s" }
        )?;
        for e in &self.0 {
            writeln!(f, "  {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Parse, read and validate a configuration; resolve its secrets through `secrets`.
/// The one entry point for start, SIGHUP reload (C-CONF-4) and tests.
pub fn load(text: &str, secrets: &dyn SecretSource) -> Result<ValidConfig, ConfigErrors> {
    let root = tree::parse(text).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            path: String::new(),
            pos: e.pos,
            message: e.message,
        }])
    })?;
    let mut r = Reader::default();
    let cfg = schema::read_config(
        &mut r,
        &Field {
            node: Some(&root),
            path: Path::root(),
            pos: None,
        },
    );
    let valid = validate::validate(cfg, &mut r, secrets);
    match valid {
        Some(v) if r.errors.is_empty() => Ok(v),
        _ => {
            let mut errors = r.errors;
            // Document order; errors without a position (rare) last; stable otherwise.
            errors.sort_by_key(|e| e.pos.map_or((u32::MAX, u32::MAX), |p| (p.line, p.column)));
            if errors.is_empty() {
                errors.push(ConfigError {
                    path: String::new(),
                    pos: None,
                    message: "invalid configuration".to_owned(),
                });
            }
            Err(ConfigErrors(errors))
        }
    }
}

/// Every field path of the schema, with `[]` for list items and `<name>` for pool names
/// (`pools.<name>.backends[].url`). The documentation lists each (a test checks it).
#[must_use]
pub fn schema_paths() -> BTreeSet<String> {
    // One item of every list and one named pool, so that item fields are asked for too.
    let probe = "backends: [{}]\npools: {p: {backends: [{}]}}\nroutes: [{}]\n";
    let mut r = Reader::default();
    if let Ok(root) = tree::parse(probe) {
        let _ = schema::read_config(
            &mut r,
            &Field {
                node: Some(&root),
                path: Path::root(),
                pos: None,
            },
        );
    }
    r.schema_paths.remove("");
    r.schema_paths
}
