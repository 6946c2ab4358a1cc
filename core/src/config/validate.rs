//! Phase 3: ranges, cross-field rules and secrets; the core parameters are built here with the
//! core constructors (`HealthParams::new`, `RetryPolicy::new`, `RateParams::new`,
//! `GateParams::new`, `BreakerParams::new`, `SlowStart::new`, `Bulkhead::new`, `RouteTable::new`,
//! `pool::carry_over`), whose errors become path-named config errors. A constructor reports
//! one error at a time, so each is called again with the offending field reset to its default
//! until it accepts: every bad field of a section is listed, and the range checks stay in one
//! place (the constructor). Before them, [`bounds`] checks the operating bounds of every runtime
//! value (what a sane deployment may set, narrower than what a machine can work with; issue 21).

use core::time::Duration;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

use ipnet::IpNet;

use super::read::Reader;
use super::schema::{
    BackendConfig, BalancingConfig, Config, HealthCheckConfig, ProbeMode, RateLimitConfig,
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
mod redis;

pub use redis::RedisMode;

/// Largest `server.max_header_bytes` (64 MiB): a typo must not let one request hold that much.
pub const MAX_HEADER_BYTES_LIMIT: u64 = 64 << 20;
/// Smallest `server.max_header_bytes` (the contract's floor).
pub const MIN_HEADER_BYTES: u64 = 1024;
/// Largest `server.max_connections`.
pub const MAX_CONNECTIONS_LIMIT: u32 = 1 << 24;
/// Name of the default pool in `routes[].pool`.
pub const DEFAULT_POOL: &str = "default";

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
    /// `rate_limit.cleanup_interval` and `retention` (accepted; not acted on yet).
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
    /// Accepted, not acted on yet.
    pub expect_continue_timeout: Duration,
    /// Idle pooled connections are closed after this; `None`: kept until the backend closes them.
    pub idle_conn_timeout: Option<Duration>,
    /// Idle pooled connections kept in total (0: none).
    pub max_idle_conns: u32,
    /// Idle pooled connections kept per backend (0: none).
    pub max_idle_conns_per_host: u32,
    /// Accepted, not acted on yet; `None`: unlimited.
    pub max_conns_per_host: Option<u32>,
}

/// `health_check` probe settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// http, https or tcp.
    pub mode: ProbeMode,
    /// Joined to each backend URL's path (http and https).
    pub path: String,
    /// Interval, jitter, timeout, thresholds, concurrency, expected statuses.
    pub params: HealthParams,
}

/// `host:port`; an empty host means every interface (listeners only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    /// Host name or address (IPv6 without brackets); may be empty for a listener.
    pub host: String,
    /// Port, 1..=65535.
    pub port: u16,
}

impl core::fmt::Display for HostPort {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

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
    /// Connect over TLS (`redis.tls`).
    pub tls: bool,
    /// Password (from `password_env`, C-CONF-3), when configured and storage is redis.
    pub password: Option<Secret>,
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

/// `management` listener settings (C-MGMT-1..3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagementSettings {
    /// Whether the management listener runs.
    pub enabled: bool,
    /// Its address.
    pub address: HostPort,
    /// The bearer token (from `auth_token_env`, C-CONF-3); always present when enabled without
    /// `allow_insecure`.
    pub auth_token: Option<Secret>,
    /// Serve without a token (the process logs a warning).
    pub allow_insecure: bool,
    /// Accepted, not acted on.
    pub enable_pprof: bool,
    /// Mutating endpoints allowed (C-MGMT-3).
    pub runtime_mutations: bool,
    /// Response deadline on the management listener.
    pub write_timeout: Duration,
}

/// Where `consistent_hash` reads the key of a request (C-POOL-4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashKey {
    /// `header:<Name>`: the value of this request header (absent: the client address).
    Header(http::HeaderName),
    /// `cookie:<name>`: the value of this cookie (absent: the client address).
    Cookie(String),
    /// `client_address`: the resolved client address (C-FWD-1).
    ClientAddress,
}

impl HashKey {
    /// Parse the config spelling.
    pub fn parse(text: &str) -> Result<HashKey, String> {
        if text == "client_address" {
            return Ok(HashKey::ClientAddress);
        }
        if let Some(name) = text.strip_prefix("header:") {
            return http::HeaderName::from_bytes(name.as_bytes())
                .map(HashKey::Header)
                .map_err(|_| format!("{name:?} is not a valid header name"));
        }
        if let Some(name) = text.strip_prefix("cookie:") {
            if !name.is_empty() && name.bytes().all(is_tchar) {
                return Ok(HashKey::Cookie(name.to_owned()));
            }
            return Err(format!("{name:?} is not a valid cookie name"));
        }
        Err(format!(
            "hash_key must be header:<Name>, cookie:<name> or client_address, got {text:?}"
        ))
    }
}

/// One pool: its name, policy and backends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSpec {
    /// `default` for the top-level pool, else the key under `pools`.
    pub name: String,
    /// `balancing.policy`.
    pub policy: PolicyKind,
    /// `balancing.hash_key` (set exactly when the policy is consistent_hash).
    pub hash_key: Option<HashKey>,
    /// Backends in config order.
    pub backends: Vec<BackendSpec>,
}

/// One route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteSpec {
    /// The prefix as written.
    pub prefix: String,
    /// Index into [`ValidConfig::pools`].
    pub pool: usize,
    /// The route's bulkhead limit (`None`: unlimited).
    pub max_concurrent_requests: Option<u32>,
}

/// RFC 7230 `tchar` (also the set of cookie-name characters of RFC 6265).
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Checks collect into the reader (which knows every path's position).
struct Check<'r> {
    r: &'r mut Reader,
}

impl Check<'_> {
    fn err(&mut self, path: &str, message: impl Into<String>) {
        self.r.error(path, None, message);
    }

    /// An error from a core constructor, unless the reader already rejected that field. The
    /// constructor's own field prefix (`health_check.interval must...`, `methods: ...`) is
    /// dropped: the path says it.
    fn core_err(&mut self, path: &str, message: impl Into<String>) {
        if self.r.errors.iter().any(|e| e.path == path) {
            return;
        }
        let message = message.into();
        let section = path.split('.').next().unwrap_or("");
        let field = path.rsplit('.').next().unwrap_or("");
        let mut m = message.as_str();
        m = m.strip_prefix(&format!("{path}: ")).unwrap_or(m);
        m = m.strip_prefix(&format!("{section}.")).unwrap_or(m);
        m = m.strip_prefix(&format!("{field}: ")).unwrap_or(m);
        let m = m.to_owned();
        self.err(path, m);
    }
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
        },
    })
}

/// A trusted proxy: a CIDR without host bits, or a bare address (a /32 or /128).
fn parse_proxy(text: &str) -> Result<IpNet, String> {
    if text.contains('/') {
        let net = IpNet::from_str(text)
            .map_err(|_| format!("{text:?} is not a CIDR such as 10.0.0.0/8 or fd00::/8"))?;
        if net.trunc() != net {
            return Err(format!(
                "{text:?} has host bits set; did you mean {}?",
                net.trunc()
            ));
        }
        Ok(net)
    } else {
        IpAddr::from_str(text)
            .map(IpNet::from)
            .map_err(|_| format!("{text:?} is not an IP address or a CIDR"))
    }
}

fn check_retry(p: &RetryParams, c: &mut Check<'_>) -> Option<RetryPolicy> {
    let defaults = RetryParams::default();
    let mut params = p.clone();
    // One round per field at most; each round resets the field the constructor named.
    for _ in 0..8 {
        match RetryPolicy::new(params.clone()) {
            Ok(policy) => return (params == *p).then_some(policy),
            Err(e) => {
                let field = e.field();
                c.core_err(&format!("server.retry.{field}"), e.to_string());
                match field {
                    "max_attempts" => params.max_attempts = defaults.max_attempts,
                    "per_try_timeout" => params.per_try_timeout = defaults.per_try_timeout,
                    "methods" => params.methods.clone_from(&defaults.methods),
                    "statuses" => params.statuses.clone_from(&defaults.statuses),
                    "budget_refill_per_second" => {
                        params.budget_refill_per_second = defaults.budget_refill_per_second;
                    }
                    _ => {
                        params.budget_capacity = defaults.budget_capacity;
                        params.budget_refill_per_second = defaults.budget_refill_per_second;
                    }
                }
            }
        }
    }
    None
}

fn check_health(h: &HealthCheckConfig, c: &mut Check<'_>) -> Option<HealthCheck> {
    if !h.path.starts_with('/')
        || h.path.contains('#')
        || http::uri::PathAndQuery::from_str(&h.path).is_err()
    {
        c.err(
            "health_check.path",
            format!(
                "must be an absolute path such as /health (no fragment), got {:?}",
                h.path
            ),
        );
    }
    let written = HealthSpec {
        interval: h.interval,
        jitter: h.jitter,
        timeout: h.timeout,
        failure_threshold: h.failure_threshold,
        success_threshold: h.success_threshold,
        max_concurrency: h.max_concurrency,
        expected_statuses: h.expected_statuses.clone(),
    };
    let defaults = HealthSpec::default();
    let mut spec = written.clone();
    for _ in 0..8 {
        match HealthParams::new(&spec) {
            Ok(params) => {
                return (spec == written).then_some(HealthCheck {
                    mode: h.mode,
                    path: h.path.clone(),
                    params,
                });
            }
            Err(e) => {
                let field = match e {
                    HealthError::ZeroInterval => "interval",
                    HealthError::ZeroTimeout => "timeout",
                    HealthError::ZeroFailureThreshold => "failure_threshold",
                    HealthError::ZeroSuccessThreshold => "success_threshold",
                    HealthError::ZeroMaxConcurrency => "max_concurrency",
                    HealthError::NoExpectedStatuses | HealthError::BadStatus(_) => {
                        "expected_statuses"
                    }
                };
                c.core_err(&format!("health_check.{field}"), e.to_string());
                match field {
                    "interval" => spec.interval = defaults.interval,
                    "timeout" => spec.timeout = defaults.timeout,
                    "failure_threshold" => spec.failure_threshold = defaults.failure_threshold,
                    "success_threshold" => spec.success_threshold = defaults.success_threshold,
                    "max_concurrency" => spec.max_concurrency = defaults.max_concurrency,
                    _ => spec
                        .expected_statuses
                        .clone_from(&defaults.expected_statuses),
                }
            }
        }
    }
    None
}

fn check_pool_params(cfg: &Config, c: &mut Check<'_>) -> Option<PoolParams> {
    let h = &cfg.health_check;
    let d = HealthCheckConfig::default();
    let written = (
        h.failure_threshold,
        h.half_open_requests,
        h.cooldown,
        h.max_cooldown,
    );
    let mut args = written;
    let mut breaker = None;
    for _ in 0..4 {
        match BreakerParams::new(args.0, args.1, args.2, args.3) {
            Ok(b) => {
                breaker = (args == written).then_some(b);
                break;
            }
            Err(e) => {
                let field = match e {
                    BreakerError::FailureThreshold(_) => {
                        args.0 = d.failure_threshold;
                        "failure_threshold"
                    }
                    BreakerError::HalfOpenRequests(_) => {
                        args.1 = d.half_open_requests;
                        "half_open_requests"
                    }
                    BreakerError::Cooldown if args.2.is_zero() => {
                        args.2 = d.cooldown;
                        "cooldown"
                    }
                    BreakerError::Cooldown => {
                        args.2 = d.cooldown;
                        args.3 = d.max_cooldown;
                        "max_cooldown"
                    }
                };
                c.core_err(&format!("health_check.{field}"), e.to_string());
            }
        }
    }
    let slow_start = match u8::try_from(h.slow_start_minimum_percent) {
        Ok(p) => SlowStart::new(h.slow_start, p)
            .map_err(|e| c.core_err("health_check.slow_start_minimum_percent", e.to_string()))
            .ok(),
        Err(_) => {
            c.err(
                "health_check.slow_start_minimum_percent",
                format!(
                    "must be within 1..=100, got {}",
                    h.slow_start_minimum_percent
                ),
            );
            None
        }
    };
    // The slot limit on its own (the pool's check), whatever became of the rest.
    let slots = PoolParams {
        max_concurrent_requests: cfg.server.upstream.max_concurrent_requests,
        ..PoolParams::default()
    };
    if let Err(e) = pool::carry_over(&[], &[], &slots, Instant::ZERO) {
        c.core_err("server.upstream.max_concurrent_requests", e.to_string());
        return None;
    }
    Some(PoolParams {
        max_concurrent_requests: cfg.server.upstream.max_concurrent_requests,
        breaker: breaker?,
        slow_start: slow_start?,
    })
}

fn check_rate(rl: &RateLimitConfig, c: &mut Check<'_>) -> Option<RateParams> {
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

/// Parse `host:port` (`[v6]:port` for IPv6). `listener`: the host may be empty (every interface).
fn parse_host_port(text: &str, listener: bool) -> Result<HostPort, String> {
    let bad = || {
        if listener {
            format!("expected [host]:port such as :9090 or 127.0.0.1:9090, got {text:?}")
        } else {
            format!("expected host:port such as redis:6379, got {text:?}")
        }
    };
    let (host, port) = text.rsplit_once(':').ok_or_else(bad)?;
    let port = port
        .parse::<u16>()
        .ok()
        .filter(|p| *p >= 1 && port.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(bad)?;
    let host = if let Some(inner) = host.strip_prefix('[') {
        let inner = inner.strip_suffix(']').ok_or_else(bad)?;
        Ipv6Addr::from_str(inner).map_err(|_| bad())?;
        inner
    } else {
        let ok = host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_');
        if !ok {
            return Err(bad());
        }
        host
    };
    if host.is_empty() && !listener {
        return Err(bad());
    }
    Ok(HostPort {
        host: host.to_owned(),
        port,
    })
}

/// Whether `name` looks like an environment variable name (`[A-Z_][A-Z0-9_]*`, at most 128
/// bytes). A `*_env` field names a variable; anything else is most likely the secret itself,
/// pasted into the wrong field, so the error never repeats it (issue 20).
pub(crate) fn is_env_name(name: &str) -> bool {
    let b = name.as_bytes();
    (1..=128).contains(&b.len())
        && (b[0].is_ascii_uppercase() || b[0] == b'_')
        && b.iter()
            .all(|&c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_')
}

/// The error for a `*_env` field that is not a variable name; `false` if so. The value is not
/// repeated: it may be the secret.
fn env_name_ok(c: &mut Check<'_>, path: &str, name: &str) -> bool {
    if name.is_empty() || is_env_name(name) {
        return true;
    }
    c.err(
        path,
        format!(
            "must name an environment variable ([A-Z_][A-Z0-9_]*, e.g. WEIR_ADMIN_TOKEN), \
             not hold the secret itself; the value ({} bytes) is not shown",
            name.len()
        ),
    );
    false
}

/// Whether `host` (of `management.address`) is a loopback address: `localhost`, `127.0.0.0/8`
/// or `::1`. An empty host means every interface.
pub(crate) fn is_loopback_host(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h.eq_ignore_ascii_case("localhost")
        || h.parse::<core::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Resolve the secret named by the field at `path` (value `name`).
fn secret_at(
    c: &mut Check<'_>,
    secrets: &dyn SecretSource,
    path: &str,
    name: &str,
    required: bool,
) -> Option<Secret> {
    if !env_name_ok(c, path, name) {
        return None;
    }
    match secret::resolve(secrets, name) {
        Resolved::Found(s) => Some(s),
        Resolved::Missing if required => {
            c.err(
                path,
                format!("secret not found: set {name} or {name}_FILE in the environment"),
            );
            None
        }
        Resolved::Missing => None,
        Resolved::Unreadable(msg) => {
            c.err(path, format!("secret {name}: {msg}"));
            None
        }
    }
}

const SSLMODES: &[&str] = &[
    "disable",
    "allow",
    "prefer",
    "require",
    "verify-ca",
    "verify-full",
];

fn check_database(
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

fn check_management(
    cfg: &Config,
    secrets: &dyn SecretSource,
    c: &mut Check<'_>,
) -> Option<ManagementSettings> {
    let m = &cfg.management;
    let address = parse_host_port(&m.address, true)
        .map_err(|e| c.err("management.address", e))
        .ok();
    if m.enabled
        && m.allow_insecure
        && let Some(a) = &address
        && !is_loopback_host(&a.host)
    {
        c.err(
            "management.allow_insecure",
            format!(
                "true only with a loopback management.address (127.0.0.1, ::1, localhost), \
                 got {:?}: without a token anyone who can reach it could change the backends",
                m.address
            ),
        );
    }
    let auth_token = if !m.enabled {
        env_name_ok(c, "management.auth_token_env", &m.auth_token_env);
        None
    } else if m.auth_token_env.is_empty() {
        if !m.allow_insecure {
            c.err(
                "management.auth_token_env",
                "required when management is enabled (or set allow_insecure: true)",
            );
        }
        None
    } else {
        secret_at(
            c,
            secrets,
            "management.auth_token_env",
            &m.auth_token_env,
            !m.allow_insecure,
        )
    };
    if let Some(t) = &auth_token
        && t.expose().is_empty()
        && !m.allow_insecure
    {
        c.err("management.auth_token_env", "the token is empty");
    }
    Some(ManagementSettings {
        enabled: m.enabled,
        address: address?,
        auth_token,
        allow_insecure: m.allow_insecure,
        enable_pprof: m.enable_pprof,
        runtime_mutations: m.runtime_mutations,
        write_timeout: m.write_timeout,
    })
}

fn valid_pool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn valid_id(id: &str) -> bool {
    (1..=128).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic())
}

/// A backend URL: http or https with a host; no userinfo, query or fragment (C-POOL-1).
fn check_url(url: &str) -> Result<(), String> {
    let uri = http::Uri::from_str(url).map_err(|_| format!("{url:?} is not a URL"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(format!("{url:?} must start with http:// or https://")),
    }
    let authority = uri
        .authority()
        .ok_or_else(|| format!("{url:?} has no host"))?;
    if authority.as_str().contains('@') {
        return Err(format!(
            "{url:?} must not contain user information (user@host)"
        ));
    }
    if authority.host().is_empty() {
        return Err(format!("{url:?} has no host"));
    }
    if uri.query().is_some() || url.contains('?') {
        return Err(format!("{url:?} must not contain a query"));
    }
    if url.contains('#') {
        return Err(format!("{url:?} must not contain a fragment"));
    }
    Ok(())
}

fn check_balancing(
    b: &BalancingConfig,
    base: &str,
    c: &mut Check<'_>,
) -> Option<(PolicyKind, Option<HashKey>)> {
    let policy = PolicyKind::from_name(&b.policy);
    if policy.is_none() {
        let known: Vec<&str> = PolicyKind::ALL.iter().map(|k| k.as_str()).collect();
        c.err(
            &format!("{base}.policy"),
            format!(
                "unknown policy {:?}, expected one of {}",
                b.policy,
                known.join(", ")
            ),
        );
    }
    let hashing = b.policy == "consistent_hash";
    let hash_key = match (&b.hash_key, hashing) {
        (Some(text), true) => match HashKey::parse(text) {
            Ok(k) => Some(k),
            Err(msg) => {
                c.err(&format!("{base}.hash_key"), msg);
                return None;
            }
        },
        (None, true) => {
            c.err(
                &format!("{base}.hash_key"),
                "consistent_hash needs a hash_key: header:<Name>, cookie:<name> or client_address",
            );
            return None;
        }
        (Some(_), false) => {
            c.err(
                &format!("{base}.hash_key"),
                format!("hash_key is used only by consistent_hash, not {}", b.policy),
            );
            return None;
        }
        (None, false) => None,
    };
    Some((policy?, hash_key))
}

fn check_backends(
    backends: &[BackendConfig],
    base: &str,
    params: &PoolParams,
    seen: &mut BTreeMap<String, String>,
    c: &mut Check<'_>,
) -> Vec<BackendSpec> {
    let mut urls: BTreeMap<&str, usize> = BTreeMap::new();
    let mut out = Vec::with_capacity(backends.len());
    for (i, b) in backends.iter().enumerate() {
        let path = format!("{base}[{i}]");
        let spec = BackendSpec {
            id: b.id.clone(),
            url: b.url.clone(),
            weight: b.weight,
            disabled: b.disabled,
        };
        // An empty id or url was already reported as missing by the reader.
        if !b.id.is_empty() {
            if !valid_id(&b.id) {
                c.err(
                    &format!("{path}.id"),
                    format!(
                        "{:?}: an id is 1..=128 visible ASCII characters, no spaces",
                        b.id
                    ),
                );
            } else if let Some(first) = seen.get(&b.id) {
                c.err(
                    &format!("{path}.id"),
                    format!("duplicate backend id {:?} (first at {first})", b.id),
                );
            } else {
                seen.insert(b.id.clone(), format!("{path}.id"));
            }
        }
        if !b.url.is_empty() {
            if let Err(msg) = check_url(&b.url) {
                c.err(&format!("{path}.url"), msg);
            } else if let Some(first) = urls.get(b.url.as_str()) {
                c.err(
                    &format!("{path}.url"),
                    format!("duplicate url {:?} (first at {base}[{first}])", b.url),
                );
            } else {
                urls.insert(&b.url, i);
            }
        }
        // The pool's own checks (weight range), one backend at a time so each is reported.
        if let Err(PoolError::Weight(_, w)) =
            pool::carry_over(core::slice::from_ref(&spec), &[], params, Instant::ZERO)
        {
            c.core_err(
                &format!("{path}.weight"),
                format!("weight must be within 1..=100, got {w}"),
            );
        }
        out.push(spec);
    }
    out
}

type Routing = (Vec<PoolSpec>, Vec<RouteSpec>, Option<RouteTable>);

fn check_pools_and_routes(cfg: &Config, c: &mut Check<'_>) -> Routing {
    // Weight and id checks do not depend on the pool parameters; the defaults stand in when the
    // configured ones are invalid (already reported).
    let params = PoolParams::default();
    let mut seen_ids = BTreeMap::new();
    let mut pools = Vec::with_capacity(cfg.pools.len() + 1);

    let default_backends = check_backends(&cfg.backends, "backends", &params, &mut seen_ids, c);
    let default_balancing = check_balancing(&cfg.balancing, "balancing", c);
    if let Some((policy, hash_key)) = default_balancing {
        pools.push(PoolSpec {
            name: DEFAULT_POOL.to_owned(),
            policy,
            hash_key,
            backends: default_backends,
        });
    }
    for p in &cfg.pools {
        let base = format!("pools.{}", p.name);
        if p.name == DEFAULT_POOL {
            c.err(
                &base,
                "`default` is the top-level pool (backends + balancing); choose another name",
            );
        } else if !valid_pool_name(&p.name) {
            c.err(
                &base,
                format!(
                    "pool name {:?}: 1..=64 characters of A-Z, a-z, 0-9, _ and -",
                    p.name
                ),
            );
        }
        let backends = check_backends(
            &p.backends,
            &format!("{base}.backends"),
            &params,
            &mut seen_ids,
            c,
        );
        if p.backends.is_empty() {
            c.err(
                &format!("{base}.backends"),
                "a pool needs at least one backend",
            );
        }
        if let Some((policy, hash_key)) =
            check_balancing(&p.balancing, &format!("{base}.balancing"), c)
        {
            pools.push(PoolSpec {
                name: p.name.clone(),
                policy,
                hash_key,
                backends,
            });
        }
    }

    // Routes: each prefix on its own first, then the table (duplicates) without the bad ones.
    let mut routes = Vec::with_capacity(cfg.routes.len());
    let mut candidates: Vec<(usize, &str, usize)> = Vec::new();
    let mut catch_all = false;
    for (i, route) in cfg.routes.iter().enumerate() {
        let path = format!("routes[{i}]");
        let pool = if route.pool == DEFAULT_POOL {
            Some(0)
        } else {
            cfg.pools
                .iter()
                .position(|p| p.name == route.pool)
                .map(|i| i + 1)
        };
        if pool.is_none() && !route.pool.is_empty() {
            let mut names: Vec<&str> = vec![DEFAULT_POOL];
            names.extend(cfg.pools.iter().map(|p| p.name.as_str()));
            c.err(
                &format!("{path}.pool"),
                format!(
                    "unknown pool {:?}, expected one of {}",
                    route.pool,
                    names.join(", ")
                ),
            );
        }
        if let Some(n) = route.max_concurrent_requests
            && let Err(e) = Bulkhead::new(Some(n))
        {
            c.err(&format!("{path}.max_concurrent_requests"), e.to_string());
        }
        let prefix_ok = !route.prefix.is_empty()
            && match RouteTable::new([(route.prefix.as_str(), 0)], 0) {
                Ok(_) => true,
                Err(e) => {
                    let msg = e.to_string();
                    let msg = msg.strip_prefix("route 0: ").unwrap_or(&msg).to_owned();
                    c.err(&format!("{path}.prefix"), msg);
                    false
                }
            };
        if prefix_ok && route.prefix == "/" {
            catch_all = true;
        }
        if let (true, Some(pool)) = (prefix_ok, pool) {
            candidates.push((i, route.prefix.as_str(), pool));
            routes.push(RouteSpec {
                prefix: route.prefix.clone(),
                pool,
                max_concurrent_requests: route.max_concurrent_requests,
            });
        }
    }
    let table = loop {
        match RouteTable::new(candidates.iter().map(|(_, p, pool)| (*p, *pool)), 0) {
            Ok(t) => break Some(t),
            Err(RouteError::Duplicate { route, first }) => {
                let (i, prefix, _) = candidates.remove(route);
                let (j, _, _) = candidates[first];
                c.err(
                    &format!("routes[{i}].prefix"),
                    format!("duplicate route prefix {prefix:?} (same as routes[{j}]; a trailing / is ignored)"),
                );
            }
            Err(e) => {
                // Each prefix passed on its own; only duplicates remain possible.
                c.err("routes", e.to_string());
                break None;
            }
        }
    };

    if cfg.backends.is_empty() && !catch_all {
        let msg = if cfg.routes.is_empty() {
            "no backends: list at least one backend (id and url)"
        } else {
            "the default pool serves paths no route matches: list at least one backend, or add a route with prefix /"
        };
        c.err("backends", msg);
    }
    (pools, routes, table)
}
