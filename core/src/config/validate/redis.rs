//! `redis`: the topology (`mode`), the nodes to start from, the sentinel master's name, TLS
//! and its files, the password secrets (C-RATE-3, C-CONF-1, C-CONF-3).

use core::fmt;
use core::str::FromStr;
use core::time::Duration;
use std::path::PathBuf;

use super::super::schema::Config;
use super::check::parse_host_port;
use super::{Check, HostPort, Secret, SecretSource, env_name_ok, secret_at};

/// `redis` connection settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisSettings {
    /// The topology (`redis.mode`).
    pub mode: RedisMode,
    /// Server address (standalone; the first of `addresses` otherwise).
    pub address: HostPort,
    /// Every node to start from: `[address]` (standalone), the seed nodes (cluster) or the
    /// sentinels (sentinel), in the order given.
    pub addresses: Vec<HostPort>,
    /// The master's name the sentinels monitor (sentinel mode only).
    pub sentinel_master: Option<String>,
    /// Connect over TLS (`redis.tls`), to the Redis nodes and to the sentinels.
    pub tls: bool,
    /// The CA certificates (PEM) the servers are verified against; `None`: the system's
    /// roots. Checked readable and holding a certificate.
    pub tls_ca_file: Option<std::path::PathBuf>,
    /// Client certificate chain and its key (PEM), both or neither.
    pub tls_client: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// Password (from `password_env`, C-CONF-3), when configured and storage is redis.
    pub password: Option<Secret>,
    /// The sentinels' own password (from `sentinel_password_env`), sentinel mode only.
    pub sentinel_password: Option<Secret>,
    /// Database number.
    pub database: u32,
    /// Connections in the pool.
    pub pool_size: u32,
    /// Connect deadline.
    pub dial_timeout: Duration,
    /// Read deadline.
    pub read_timeout: Duration,
    /// Write deadline.
    pub write_timeout: Duration,
}

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

/// The path in the field at `path` (value `name`): not empty. The file is read, and its PEM
/// checked, by the store when it is built at start (core does no file IO).
fn check_file(c: &mut Check<'_>, path: &str, name: &str) -> Option<PathBuf> {
    if name.trim().is_empty() {
        c.err(path, "must not be empty (leave the field out instead)");
        return None;
    }
    Some(PathBuf::from(name))
}

/// The CA file and the client certificate and key files.
type TlsFiles = (Option<PathBuf>, Option<(PathBuf, PathBuf)>);

/// `redis.tls_ca_file`, `tls_cert_file`, `tls_key_file`: each only with `tls: true`, the
/// certificate and its key together.
fn check_tls_files(cfg: &Config, c: &mut Check<'_>) -> Option<TlsFiles> {
    let r = &cfg.redis;
    let fields = [
        ("redis.tls_ca_file", &r.tls_ca_file),
        ("redis.tls_cert_file", &r.tls_cert_file),
        ("redis.tls_key_file", &r.tls_key_file),
    ];
    if !r.tls {
        let mut ok = true;
        for (path, v) in fields {
            if v.is_some() {
                c.err(path, "only with redis.tls: true (nothing would use it)");
                ok = false;
            }
        }
        return ok.then_some((None, None));
    }
    let ca = r
        .tls_ca_file
        .as_deref()
        .map(|f| check_file(c, "redis.tls_ca_file", f));
    let client = match (r.tls_cert_file.as_deref(), r.tls_key_file.as_deref()) {
        (None, None) => None,
        (Some(_), None) => {
            c.err(
                "redis.tls_key_file",
                "required with redis.tls_cert_file: the client certificate's private key",
            );
            Some(None)
        }
        (None, Some(_)) => {
            c.err(
                "redis.tls_cert_file",
                "required with redis.tls_key_file: the client certificate chain",
            );
            Some(None)
        }
        (Some(cert), Some(key)) => {
            let cert = check_file(c, "redis.tls_cert_file", cert);
            let key = check_file(c, "redis.tls_key_file", key);
            Some(cert.zip(key))
        }
    };
    let ca = match ca {
        None => None,
        Some(f) => Some(f?),
    };
    let client = match client {
        None => None,
        Some(pair) => Some(pair?),
    };
    Some((ca, client))
}

/// A `*_env` secret field: resolved (required) when the store is used, else only checked to
/// name a variable.
fn store_secret(
    c: &mut Check<'_>,
    secrets: &dyn SecretSource,
    path: &str,
    name: Option<&String>,
    used: bool,
) -> Option<Secret> {
    match (name, used) {
        (Some(name), true) => secret_at(c, secrets, path, name, true),
        (Some(name), false) => {
            env_name_ok(c, path, name);
            None
        }
        _ => None,
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
    let password = store_secret(
        c,
        secrets,
        "redis.password_env",
        r.password_env.as_ref(),
        used,
    );
    if mode.is_some_and(|m| m != RedisMode::Sentinel) && r.sentinel_password_env.is_some() {
        c.err(
            "redis.sentinel_password_env",
            "is for mode sentinel (the sentinels' own password)",
        );
    }
    let sentinel_password = store_secret(
        c,
        secrets,
        "redis.sentinel_password_env",
        r.sentinel_password_env.as_ref(),
        used && mode == Some(RedisMode::Sentinel),
    );
    let tls_files = check_tls_files(cfg, c);
    let (mode, address, addresses) = (mode?, address?, addresses?);
    let (tls_ca_file, tls_client) = tls_files?;
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
        tls_ca_file,
        tls_client,
        password,
        sentinel_password,
        database: r.database,
        pool_size: r.pool_size,
        dial_timeout: r.dial_timeout,
        read_timeout: r.read_timeout,
        write_timeout: r.write_timeout,
    })
}

#[cfg(test)]
mod tests;
