//! `redis`: the topology (`mode`), the nodes to start from, the sentinel master's name, TLS,
//! the password secret (C-RATE-3, C-CONF-1, C-CONF-3).

use core::fmt;
use core::str::FromStr;

use super::super::schema::Config;
use super::{
    Check, HostPort, RedisSettings, SecretSource, env_name_ok, parse_host_port, secret_at,
};

/// `redis.mode`: how weir finds the server that holds a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RedisMode {
    /// One server at `redis.address`.
    #[default]
    Standalone,
    /// A Redis Cluster: `redis.addresses` are seed nodes; the client learns the slot map,
    /// follows MOVED/ASK and a failover by itself.
    Cluster,
    /// A master found through the sentinels at `redis.addresses`, asked again after a failover.
    Sentinel,
}

impl RedisMode {
    /// The configuration spelling.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            RedisMode::Standalone => "standalone",
            RedisMode::Cluster => "cluster",
            RedisMode::Sentinel => "sentinel",
        }
    }
}

impl fmt::Display for RedisMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RedisMode {
    type Err = String;
    fn from_str(s: &str) -> Result<RedisMode, String> {
        match s {
            "standalone" => Ok(RedisMode::Standalone),
            "cluster" => Ok(RedisMode::Cluster),
            "sentinel" => Ok(RedisMode::Sentinel),
            other => Err(format!(
                "must be one of standalone, cluster, sentinel, got {other:?}"
            )),
        }
    }
}

/// Parse `redis.addresses`, each at its own path; duplicates are an error.
fn check_addresses(list: &[String], c: &mut Check<'_>) -> Option<Vec<HostPort>> {
    let mut out: Vec<HostPort> = Vec::with_capacity(list.len());
    let mut ok = true;
    for (i, text) in list.iter().enumerate() {
        let path = format!("redis.addresses[{i}]");
        match parse_host_port(text, false) {
            Ok(hp) if out.contains(&hp) => {
                c.err(&path, format!("{text:?} is listed twice"));
                ok = false;
            }
            Ok(hp) => out.push(hp),
            Err(e) => {
                c.err(&path, e);
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

/// The rules each mode adds: which of `address`, `addresses`, `sentinel_master`, `database`
/// it takes. A field another mode uses is an error rather than silently ignored.
fn check_mode_fields(cfg: &Config, mode: RedisMode, c: &mut Check<'_>) {
    let r = &cfg.redis;
    match mode {
        RedisMode::Standalone => {
            if !r.addresses.is_empty() {
                c.err(
                    "redis.addresses",
                    "is for mode cluster or sentinel; standalone connects to redis.address",
                );
            }
        }
        RedisMode::Cluster | RedisMode::Sentinel => {
            if r.addresses.is_empty() {
                let what = if mode == RedisMode::Cluster {
                    "at least one seed node"
                } else {
                    "at least one sentinel"
                };
                c.err(
                    "redis.addresses",
                    format!("mode {mode} needs {what} (host:port)"),
                );
            }
        }
    }
    match (mode, r.sentinel_master.as_deref()) {
        (RedisMode::Sentinel, None) => c.err(
            "redis.sentinel_master",
            "required with mode sentinel: the master name the sentinels monitor",
        ),
        (RedisMode::Sentinel, Some(name)) if name.trim().is_empty() => {
            c.err("redis.sentinel_master", "must not be empty");
        }
        (RedisMode::Standalone | RedisMode::Cluster, Some(_)) => c.err(
            "redis.sentinel_master",
            format!("is for mode sentinel, not {mode}"),
        ),
        _ => {}
    }
    if mode == RedisMode::Cluster && r.database != 0 {
        c.err(
            "redis.database",
            format!("Redis Cluster has only database 0, got {}", r.database),
        );
    }
}

pub(super) fn check_redis(
    cfg: &Config,
    used: bool,
    secrets: &dyn SecretSource,
    c: &mut Check<'_>,
) -> Option<RedisSettings> {
    let r = &cfg.redis;
    let mode = r
        .mode
        .parse::<RedisMode>()
        .map_err(|e| c.err("redis.mode", e))
        .ok();
    if let Some(mode) = mode {
        check_mode_fields(cfg, mode, c);
    }
    let address = parse_host_port(&r.address, false)
        .map_err(|e| c.err("redis.address", e))
        .ok();
    let addresses = check_addresses(&r.addresses, c);
    let password = match (&r.password_env, used) {
        (Some(name), true) => secret_at(c, secrets, "redis.password_env", name, true),
        (Some(name), false) => {
            env_name_ok(c, "redis.password_env", name);
            None
        }
        _ => None,
    };
    let (mode, address, addresses) = (mode?, address?, addresses?);
    let (address, addresses) = match addresses.first() {
        Some(first) if mode != RedisMode::Standalone => (first.clone(), addresses),
        _ => (address.clone(), vec![address]),
    };
    Some(RedisSettings {
        mode,
        address,
        addresses,
        sentinel_master: r.sentinel_master.clone(),
        tls: r.tls,
        password,
        database: r.database,
        pool_size: r.pool_size,
        dial_timeout: r.dial_timeout,
        read_timeout: r.read_timeout,
        write_timeout: r.write_timeout,
    })
}

#[cfg(test)]
mod tests;
