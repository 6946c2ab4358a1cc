//! Validation of the rate limit and its shared stores: `rate_limit`, `redis`, `database`
//! (C-RATE-1..6, C-CONF-3).

#[allow(clippy::wildcard_imports)]
use super::*;

/// `database` connection settings (PostgreSQL store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseSettings {
    /// Server host.
    pub host: String,
    /// Server port.
    pub port: u16,
    /// User name.
    pub user: String,
    /// Database name.
    pub name: String,
    /// libpq sslmode.
    pub sslmode: String,
    /// Password (from `password_env`, C-CONF-3).
    pub password: Secret,
    /// Connect deadline.
    pub connect_timeout: Duration,
    /// Connections in the pool.
    pub max_open_connections: u32,
}

pub(super) fn check_rate(rl: &RateLimitConfig, c: &mut Check<'_>) -> Option<RateParams> {
    let defaults = RateConfig::default();
    let mut failed = false;
    let storage = StorageKind::from_str(&rl.storage).unwrap_or_else(|e| {
        c.err("rate_limit.storage", e.to_string());
        failed = true;
        defaults.storage
    });
    let failure_mode = FailureMode::from_str(&rl.failure_mode).unwrap_or_else(|e| {
        c.err("rate_limit.failure_mode", e.to_string());
        failed = true;
        defaults.failure_mode
    });
    // Values beyond the target type are out of every range; the constructor then reports the
    // stand-in `u8::MAX` / `usize::MAX`, which the message below replaces by the written value.
    let ipv4 = u8::try_from(rl.ipv4_prefix_bits).unwrap_or(u8::MAX);
    let ipv6 = u8::try_from(rl.ipv6_prefix_bits).unwrap_or(u8::MAX);
    let shards = usize::try_from(rl.local_shards).unwrap_or(usize::MAX);
    let max_buckets = usize::try_from(rl.local_max_buckets).unwrap_or(usize::MAX);
    let written = RateConfig {
        enabled: rl.enabled,
        storage,
        failure_mode,
        capacity: rl.capacity,
        refill_per_second: rl.refill_per_second,
        operation_timeout: rl.operation_timeout,
        local_shards: shards,
        local_max_buckets: max_buckets,
        ipv4_prefix_bits: ipv4,
        ipv6_prefix_bits: ipv6,
        dry_run: rl.dry_run,
    };
    let defaults = RateConfig::default();
    let mut config = written.clone();
    for _ in 0..8 {
        match RateParams::new(&config) {
            Ok(params) => return (config == written && !failed).then_some(params),
            Err(e) => {
                let field = match &e {
                    RateError::Bucket(crate::bucket::BucketError::BadRefill(_)) => {
                        config.refill_per_second = defaults.refill_per_second;
                        "refill_per_second"
                    }
                    RateError::Bucket(_) => {
                        config.capacity = defaults.capacity;
                        config.refill_per_second = defaults.refill_per_second;
                        "capacity"
                    }
                    RateError::Key(KeyError::Ipv4PrefixBits(_)) => {
                        config.ipv4_prefix_bits = defaults.ipv4_prefix_bits;
                        "ipv4_prefix_bits"
                    }
                    RateError::Key(KeyError::Ipv6PrefixBits(_)) => {
                        config.ipv6_prefix_bits = defaults.ipv6_prefix_bits;
                        "ipv6_prefix_bits"
                    }
                    RateError::LocalStore(LocalStoreError::Shards(_)) => {
                        config.local_shards = defaults.local_shards;
                        "local_shards"
                    }
                    RateError::LocalStore(_) => {
                        config.local_max_buckets = defaults.local_max_buckets;
                        "local_max_buckets"
                    }
                    RateError::ZeroOperationTimeout => {
                        config.operation_timeout = defaults.operation_timeout;
                        "operation_timeout"
                    }
                };
                let written_value = match field {
                    "ipv4_prefix_bits" => Some(u64::from(rl.ipv4_prefix_bits)),
                    "ipv6_prefix_bits" => Some(u64::from(rl.ipv6_prefix_bits)),
                    "local_shards" => Some(rl.local_shards),
                    "local_max_buckets" => Some(rl.local_max_buckets),
                    _ => None,
                };
                // RateError's text starts with "rate_limit: "; the path says it already.
                let text = e.to_string();
                let mut text = text
                    .strip_prefix("rate_limit: ")
                    .unwrap_or(&text)
                    .to_owned();
                if let Some(v) = written_value
                    && let Some(cut) = text.rfind(", got ")
                {
                    text.truncate(cut);
                    text.push_str(&format!(", got {v}"));
                }
                c.core_err(&format!("rate_limit.{field}"), text);
            }
        }
    }
    None
}

pub(super) const SSLMODES: &[&str] = &[
    "disable",
    "allow",
    "prefer",
    "require",
    "verify-ca",
    "verify-full",
];

pub(super) fn check_database(
    cfg: &Config,
    used: bool,
    secrets: &dyn SecretSource,
    c: &mut Check<'_>,
) -> Option<DatabaseSettings> {
    let d = &cfg.database;
    if let Some(mode) = &d.sslmode
        && !SSLMODES.contains(&mode.as_str())
    {
        c.err(
            "database.sslmode",
            format!("must be one of {}, got {mode:?}", SSLMODES.join(", ")),
        );
    }
    if !used {
        if let Some(name) = &d.password_env {
            env_name_ok(c, "database.password_env", name);
        }
        return None;
    }
    let mut need = |field: &str, v: &Option<String>| -> Option<String> {
        match v {
            Some(s) if !s.is_empty() => Some(s.clone()),
            _ => {
                c.err(
                    &format!("database.{field}"),
                    "required when rate_limit.storage is postgres",
                );
                None
            }
        }
    };
    let host = need("host", &d.host);
    let user = need("user", &d.user);
    let name = need("name", &d.name);
    let sslmode = need("sslmode", &d.sslmode);
    let password_env = need("password_env", &d.password_env);
    if d.port.is_none() {
        c.err(
            "database.port",
            "required when rate_limit.storage is postgres",
        );
    }
    let password = match &password_env {
        Some(n) => secret_at(c, secrets, "database.password_env", n, true),
        None => None,
    };
    Some(DatabaseSettings {
        host: host?,
        port: d.port?,
        user: user?,
        name: name?,
        sslmode: sslmode?,
        password: password?,
        connect_timeout: d.connect_timeout,
        max_open_connections: d.max_open_connections,
    })
}
