//! Phase 3: ranges, cross-field rules and secrets; the core parameters are built here with the
//! core constructors (`HealthParams::new`, `RetryPolicy::new`, `RateParams::new`,
//! `GateParams::new`, `BreakerParams::new`, `SlowStart::new`, `Bulkhead::new`, `RouteTable::new`,
//! `pool::carry_over`), whose errors become path-named config errors. A constructor reports
//! one error at a time, so each is called again with the offending field reset to its default
//! until it accepts: every bad field of a section is listed, and the range checks stay in one
//! place (the constructor). Before them, [`bounds`] checks the operating bounds of every runtime
//! value (what a sane deployment may set, narrower than what a machine can work with).

use core::time::Duration;
use std::collections::BTreeMap;
use std::str::FromStr;

use ipnet::IpNet;

use super::read::Reader;
use super::schema::{
    BackendConfig, BalancingConfig, Config, DnsConfig, HealthCheckConfig, ProbeMode,
    RateLimitConfig,
};
use super::secret::{self, Resolved, Secret, SecretSource};
use crate::admission::GateParams;
use crate::breaker::{BreakerError, BreakerParams};
use crate::bulkhead::Bulkhead;
use crate::health::{HealthError, HealthParams, HealthSpec};
use crate::pool::{self, BackendSpec, PoolError, PoolParams};
use crate::rate::{
    FailureMode, KeyError, LocalStoreError, RateConfig, RateError, RateParams, StorageKind,
};
use crate::retry::{RetryParams, RetryPolicy};
use crate::route::{RouteError, RouteTable};
use crate::select::PolicyKind;
use crate::slow_start::SlowStart;
use crate::time::Instant;

mod bounds;
mod check;
mod listener;
mod pools;
mod redis;
mod secrets;
mod stores;

pub use check::HostPort;
use check::{Check, parse_proxy};
pub use listener::{CertPair, ListenerTls, ProxyProtocol, TlsVersion};
use listener::{check_proxy_protocol, check_tls};
pub use pools::{DEFAULT_POOL, DnsSpec, HashKey, HealthCheck, MirrorSpec, PoolSpec, RouteSpec};
use pools::{check_health, check_pool_params, check_pools_and_routes, check_retry};
pub use redis::{RedisMode, RedisSettings};
pub use secrets::ManagementSettings;
#[cfg(test)]
pub(crate) use secrets::is_env_name;
use secrets::{check_management, env_name_ok, secret_at};
pub use stores::DatabaseSettings;
use stores::{check_database, check_rate};

/// Largest `server.max_header_bytes` (64 MiB): a typo must not let one request hold that much.
pub const MAX_HEADER_BYTES_LIMIT: u64 = 64 << 20;
/// Smallest `server.max_header_bytes` (the contract's floor).
pub const MIN_HEADER_BYTES: u64 = 1024;
/// Largest `server.max_connections`.
pub const MAX_CONNECTIONS_LIMIT: u32 = 1 << 24;

/// A validated configuration: the typed core parameters, ready to hand to the machines, and the
/// file as read (with defaults) for the status API.
#[derive(Debug, Clone)]
pub struct ValidConfig {
    /// The data-plane listener, client side limits and upstream connections.
    pub server: ServerSettings,
    /// `server.retry` (C-RETRY-1..8); `retry.budget_params()` sizes the retry budget.
    pub retry: RetryPolicy,
    /// `server.overload` (C-LOAD-1).
    pub gate: GateParams,
    /// `health_check`: active probes (C-HEALTH-1, -2).
    pub health: HealthCheck,
    /// Per-backend slots, breaker and slow start, shared by every pool (C-POOL-6, C-HEALTH-3, -4).
    pub pool_params: PoolParams,
    /// `rate_limit` (C-RATE-1..5).
    pub rate: RateParams,
    /// `rate_limit.cleanup_interval` and `retention`: the PostgreSQL store's cleanup.
    pub rate_housekeeping: (Duration, Duration),
    /// `redis`; `password` is resolved only when `rate_limit.storage` is redis.
    pub redis: RedisSettings,
    /// `database`, present when `rate_limit.storage` is postgres.
    pub database: Option<DatabaseSettings>,
    /// `management`.
    pub management: ManagementSettings,
    /// Pools; index 0 is the default pool (`backends` + `balancing`), then `pools` in order.
    pub pools: Vec<PoolSpec>,
    /// `routes` in document order; `pool` indexes [`ValidConfig::pools`].
    pub routes: Vec<RouteSpec>,
    /// The route table over `routes` (default pool 0).
    pub route_table: RouteTable,
    /// The file as read, defaults filled in.
    pub config: Config,
    /// Every field's value in force, as text, by concrete path (for [`diff`](super::diff)).
    pub(crate) values: BTreeMap<String, String>,
}

/// `server` without `retry` and `overload`.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSettings {
    /// Data-plane port.
    pub port: u16,
    /// Peers whose forwarding headers are believed (C-FWD-1); bare addresses are /32 or /128.
    pub trusted_proxies: Vec<IpNet>,
    /// Share of successful requests logged (C-OBS-3).
    pub access_log_sample_rate: f64,
    /// Log paths instead of `[redacted]` (C-OBS-3).
    pub access_log_include_path: bool,
    /// Proxy `TRACE` instead of answering `405` (`server.allow_trace`).
    pub allow_trace: bool,
    /// Deadline for a request's headers (C-PATH-12).
    pub read_header_timeout: Duration,
    /// Deadline for a whole request; `None`: none.
    pub read_timeout: Option<Duration>,
    /// Deadline for a whole response; `None`: none (C-PATH-7).
    pub write_timeout: Option<Duration>,
    /// Idle keep-alive connections are closed after this (C-PATH-12).
    pub idle_timeout: Duration,
    /// After SIGTERM, how long the listeners keep accepting with `/readyz` at `503`, so an
    /// orchestrator removes the endpoint before connections are refused (C-PATH-10).
    pub shutdown_delay: Duration,
    /// Grace period for in-flight requests at shutdown; zero: none (C-PATH-10).
    pub shutdown_timeout: Duration,
    /// Header bytes beyond which a request gets `431` (C-PATH-12).
    pub max_header_bytes: u64,
    /// Client connections held at most; `None`: derived from the fd limit
    /// ([`crate::conn_limit::budget`]).
    pub max_connections: Option<u32>,
    /// Upstream connections.
    pub upstream: UpstreamSettings,
    /// The PROXY protocol on the public listener; `None`: off (C-TLS-3).
    pub proxy_protocol: Option<ProxyProtocol>,
    /// TLS on the public listener; `None`: plain HTTP (C-TLS-1).
    pub tls: Option<ListenerTls>,
    /// `server.resolver`: the DNS servers to ask (empty: the system's, C-DISC-1).
    pub resolver: Vec<std::net::SocketAddr>,
}

/// `server.upstream` connection settings (`max_concurrent_requests` is in [`PoolParams`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamSettings {
    /// TCP connect deadline.
    pub dial_timeout: Duration,
    /// TLS handshake deadline.
    pub tls_handshake_timeout: Duration,
    /// Transport-level wait for response headers; `None`: none (`per_try_timeout` still applies).
    pub response_header_timeout: Option<Duration>,
    /// How long a streamed body waits for the backend's `100 Continue` (docs/proxy.md).
    pub expect_continue_timeout: Duration,
    /// Idle pooled connections are closed after this; `None`: kept until the backend closes them.
    pub idle_conn_timeout: Option<Duration>,
    /// Idle pooled connections kept in total (0: none).
    pub max_idle_conns: u32,
    /// Idle pooled connections kept per backend (0: none).
    pub max_idle_conns_per_host: u32,
    /// Always `None` (unlimited): a non-zero value is refused.
    pub max_conns_per_host: Option<u32>,
    /// Mirrored requests in flight at once, process-wide; beyond it a mirror is dropped and
    /// counted (C-MIRROR-1). Read per request, so a reload changes it.
    pub mirror_max_in_flight: u32,
    /// How backend certificates are verified and which client certificate weir shows
    /// (C-GRPC-5). The files are read by the proxy, not here.
    pub tls: UpstreamTls,
}

/// `server.upstream.tls_*` (C-GRPC-5): paths as written; core does no IO, the proxy loads and
/// checks the files (at start, `check-config` and reload).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UpstreamTls {
    /// CA certificates (PEM) instead of the system's roots.
    pub ca_file: Option<String>,
    /// The name certificates must carry (and the SNI) instead of each URL's host.
    pub server_name: Option<String>,
    /// Client certificate chain and its key (mutual TLS); both or neither.
    pub client_cert: Option<(String, String)>,
}

/// Zero means none.
fn none_if_zero(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

/// Validate `cfg` (read by `r`) and resolve its secrets through `secrets`.
pub(crate) fn validate(
    cfg: Config,
    r: &mut Reader,
    secrets: &dyn SecretSource,
) -> Option<ValidConfig> {
    let mut c = Check { r };
    // The operating bounds first: a constructor's error for the same field is then dropped.
    bounds::check(&cfg, &mut c);
    let server = check_server(&cfg, &mut c);
    let retry = check_retry(&cfg.server.retry, &mut c);
    let o = &cfg.server.overload;
    let gate = GateParams::new(o.max_concurrent_requests, o.max_queue, o.queue_timeout)
        .map_err(|e| {
            let field = match e {
                crate::admission::GateError::ZeroConcurrency => "max_concurrent_requests",
                crate::admission::GateError::QueueTooLarge(_) => "max_queue",
            };
            c.core_err(&format!("server.overload.{field}"), e.to_string());
        })
        .ok();
    let health = check_health(&cfg.health_check, &mut c);
    let pool_params = check_pool_params(&cfg, &mut c);
    let rate = check_rate(&cfg.rate_limit, &mut c);
    let storage = rate.as_ref().map(|_| cfg.rate_limit.storage.as_str());
    let redis = redis::check_redis(&cfg, storage == Some("redis"), secrets, &mut c);
    let database = check_database(&cfg, storage == Some("postgres"), secrets, &mut c);
    let management = check_management(&cfg, secrets, &mut c);
    let (pools, routes, route_table) = check_pools_and_routes(&cfg, &mut c);

    if !c.r.errors.is_empty() {
        return None;
    }
    // Every `None` above recorded an error, so all are `Some` here.
    Some(ValidConfig {
        server: server?,
        retry: retry?,
        gate: gate?,
        health: health?,
        pool_params: pool_params?,
        rate: rate?,
        rate_housekeeping: (cfg.rate_limit.cleanup_interval, cfg.rate_limit.retention),
        redis: redis?,
        database,
        management: management?,
        pools,
        routes,
        route_table: route_table?,
        values: core::mem::take(&mut c.r.values),
        config: cfg,
    })
}

/// `server.upstream.tls_*`: certificate and key come together; a server name is a DNS name or
/// an IP address; a path is not empty.
fn check_upstream_tls(u: &crate::config::UpstreamConfig, c: &mut Check<'_>) -> UpstreamTls {
    for (key, value) in [
        ("tls_ca_file", &u.tls_ca_file),
        ("tls_cert_file", &u.tls_cert_file),
        ("tls_key_file", &u.tls_key_file),
    ] {
        if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
            c.err(
                &format!("server.upstream.{key}"),
                "must be a file path (leave the key out for none)",
            );
        }
    }
    let client_cert = match (&u.tls_cert_file, &u.tls_key_file) {
        (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
        (None, None) => None,
        (Some(_), None) => {
            c.err(
                "server.upstream.tls_key_file",
                "tls_cert_file is set: give its private key in tls_key_file too",
            );
            None
        }
        (None, Some(_)) => {
            c.err(
                "server.upstream.tls_cert_file",
                "tls_key_file is set: give the certificate in tls_cert_file too",
            );
            None
        }
    };
    if let Some(name) = &u.tls_server_name
        && !valid_server_name(name)
    {
        c.err(
            "server.upstream.tls_server_name",
            format!("{name:?} is not a DNS name or an IP address"),
        );
    }
    UpstreamTls {
        ca_file: u.tls_ca_file.clone(),
        server_name: u.tls_server_name.clone(),
        client_cert,
    }
}

/// A DNS name (labels of letters, digits, `-` and `_`, 1..=63 bytes, 253 in all) or an IP
/// address: what a certificate can be checked against.
fn valid_server_name(name: &str) -> bool {
    if name.parse::<core::net::IpAddr>().is_ok() {
        return true;
    }
    let name = name.strip_suffix('.').unwrap_or(name);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

fn check_server(cfg: &Config, c: &mut Check<'_>) -> Option<ServerSettings> {
    let s = &cfg.server;
    let mut trusted_proxies = Vec::with_capacity(s.trusted_proxies.len());
    for (i, text) in s.trusted_proxies.iter().enumerate() {
        let path = format!("server.trusted_proxies[{i}]");
        match parse_proxy(text) {
            Ok(net) => trusted_proxies.push(net),
            Err(msg) => c.err(&path, msg),
        }
    }
    if !(0.0..=1.0).contains(&s.access_log_sample_rate) {
        c.err(
            "server.access_log_sample_rate",
            format!("must be within 0..=1, got {}", s.access_log_sample_rate),
        );
    }
    if !(MIN_HEADER_BYTES..=MAX_HEADER_BYTES_LIMIT).contains(&s.max_header_bytes) {
        c.err(
            "server.max_header_bytes",
            format!(
                "must be within {MIN_HEADER_BYTES}..={MAX_HEADER_BYTES_LIMIT}, got {}",
                s.max_header_bytes
            ),
        );
    }
    if let Some(n) = s.max_connections
        && !(1..=MAX_CONNECTIONS_LIMIT).contains(&n)
    {
        c.err(
            "server.max_connections",
            format!(
                "must be within 1..={MAX_CONNECTIONS_LIMIT}, got {n} (leave it out for the \
                 default derived from the file-descriptor limit)"
            ),
        );
    }
    let u = &s.upstream;
    let proxy_protocol = check_proxy_protocol(s, c);
    let tls = check_tls(s, c);
    Some(ServerSettings {
        port: s.port,
        trusted_proxies,
        access_log_sample_rate: s.access_log_sample_rate,
        access_log_include_path: s.access_log_include_path,
        allow_trace: s.allow_trace,
        read_header_timeout: s.read_header_timeout,
        read_timeout: none_if_zero(s.read_timeout),
        write_timeout: none_if_zero(s.write_timeout),
        idle_timeout: s.idle_timeout,
        shutdown_delay: s.shutdown_delay,
        shutdown_timeout: s.shutdown_timeout,
        max_header_bytes: s.max_header_bytes,
        max_connections: s.max_connections,
        upstream: UpstreamSettings {
            dial_timeout: u.dial_timeout,
            tls_handshake_timeout: u.tls_handshake_timeout,
            response_header_timeout: none_if_zero(u.response_header_timeout),
            expect_continue_timeout: u.expect_continue_timeout,
            idle_conn_timeout: none_if_zero(u.idle_conn_timeout),
            max_idle_conns: u.max_idle_conns,
            max_idle_conns_per_host: u.max_idle_conns_per_host,
            max_conns_per_host: (u.max_conns_per_host != 0).then_some(u.max_conns_per_host),
            mirror_max_in_flight: u.mirror_max_in_flight,
            tls: check_upstream_tls(u, c),
        },
        proxy_protocol,
        tls,
        resolver: check_resolver(&s.resolver, c),
    })
}

/// `server.resolver[]`: each an address with its port (`10.0.0.10:53`, `[fd00::a]:53`); a
/// name would need a resolver to find the resolver.
fn check_resolver(servers: &[String], c: &mut Check<'_>) -> Vec<std::net::SocketAddr> {
    let mut out = Vec::with_capacity(servers.len());
    for (i, text) in servers.iter().enumerate() {
        match text.parse::<std::net::SocketAddr>() {
            Ok(a) if a.port() != 0 => out.push(a),
            _ => c.err(
                &format!("server.resolver[{i}]"),
                format!(
                    "a DNS server is an IP address with its port, such as 10.0.0.10:53 or                      [fd00::a]:53; got {text:?}"
                ),
            ),
        }
    }
    out
}
