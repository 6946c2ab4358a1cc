//! The configuration schema: every section and field with its default (C-CONF-0 and the contract
//! appendix), and the code that reads it from the tree. These structs are the file as written,
//! with defaults filled in and each value of the right type; [`validate`](super::validate) then
//! checks ranges and cross-field rules and builds the core parameters.
//!
//! Each `read` function asks for every field of its section, whether written or not, so the
//! reader's list of schema paths is the complete list of fields (the documentation test walks it).

use core::time::Duration;

use super::read::{Field, Reader};
use crate::retry::RetryParams;

/// The whole file: every top-level section (C-CONF-0).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Config {
    /// `server`: the data-plane listener and the request path.
    pub server: ServerConfig,
    /// `health_check`: active checks, the passive breaker and slow start.
    pub health_check: HealthCheckConfig,
    /// `rate_limit`.
    pub rate_limit: RateLimitConfig,
    /// `redis`: the Redis rate-limit store's connection.
    pub redis: RedisConfig,
    /// `database`: the PostgreSQL rate-limit store's connection.
    pub database: DatabaseConfig,
    /// `management`: the management listener.
    pub management: ManagementConfig,
    /// `backends`: the default pool.
    pub backends: Vec<BackendConfig>,
    /// `balancing`: the default pool's policy (weir).
    pub balancing: BalancingConfig,
    /// `pools`: named pools in document order (weir).
    pub pools: Vec<PoolConfig>,
    /// `routes`: path prefixes to pools (weir).
    pub routes: Vec<RouteConfig>,
}

/// `server`.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// `port` ["8080"]: the data-plane port, a string or a number, 1..=65535.
    pub port: u16,
    /// `trusted_proxies` [[]]: CIDRs or bare addresses whose forwarding headers are believed.
    pub trusted_proxies: Vec<String>,
    /// `access_log_sample_rate` [0.01]: share of successful requests logged, 0..=1.
    pub access_log_sample_rate: f64,
    /// `access_log_include_path` [false]: log the path instead of `[redacted]`.
    pub access_log_include_path: bool,
    /// `allow_trace` [false]: proxy `TRACE` requests instead of answering `405` (weir).
    pub allow_trace: bool,
    /// `read_header_timeout` [5s, > 0].
    pub read_header_timeout: Duration,
    /// `read_timeout` [15s, 0 = none].
    pub read_timeout: Duration,
    /// `write_timeout` [0s = none].
    pub write_timeout: Duration,
    /// `idle_timeout` [60s, > 0].
    pub idle_timeout: Duration,
    /// `shutdown_delay` [0s]: after SIGTERM, keep accepting this long with `/readyz` at `503`.
    pub shutdown_delay: Duration,
    /// `shutdown_timeout` [10s, 0 = do not wait].
    pub shutdown_timeout: Duration,
    /// `max_header_bytes` [1048576, 1024..=67108864].
    pub max_header_bytes: u64,
    /// `max_connections` [derived from the fd limit; 1..=16777216]: client connections held at
    /// most (weir, issue 21).
    pub max_connections: Option<u32>,
    /// `upstream`.
    pub upstream: UpstreamConfig,
    /// `retry` (the core settings type; defaults are the contract's).
    pub retry: RetryParams,
    /// `overload`.
    pub overload: OverloadConfig,
    /// `proxy_protocol` [off]: `off`, `v1`, `v2` or `any` (C-TLS-3).
    pub proxy_protocol: String,
    /// `proxy_protocol_trusted` [[]]: CIDRs or bare addresses allowed to send a PROXY header.
    pub proxy_protocol_trusted: Vec<String>,
    /// `tls`: TLS on the public listener (C-TLS-1); off while `certificates` is empty.
    pub tls: TlsConfig,
}

/// `server.tls` (C-TLS-1, C-TLS-2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// `certificates` [[]]: PEM pairs; the first is the default.
    pub certificates: Vec<CertPairConfig>,
    /// `min_version` ["1.2"]: `1.2` or `1.3`.
    pub min_version: String,
    /// `handshake_timeout` [5s, > 0].
    pub handshake_timeout: Duration,
    /// `client_ca_file`: PEM CA certificates; when set, clients must present a certificate
    /// they issued.
    pub client_ca_file: Option<String>,
}

impl Default for TlsConfig {
    fn default() -> TlsConfig {
        TlsConfig {
            certificates: Vec::new(),
            min_version: "1.2".to_owned(),
            handshake_timeout: Duration::from_secs(5),
            client_ca_file: None,
        }
    }
}

/// `server.tls.certificates[]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertPairConfig {
    /// `cert_file` (required): the certificate chain, leaf first (PEM).
    pub cert_file: String,
    /// `key_file` (required): the leaf's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: String,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            port: 8080,
            trusted_proxies: Vec::new(),
            access_log_sample_rate: 0.01,
            access_log_include_path: false,
            allow_trace: false,
            read_header_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(15),
            write_timeout: Duration::ZERO,
            idle_timeout: Duration::from_secs(60),
            shutdown_delay: Duration::ZERO,
            shutdown_timeout: Duration::from_secs(10),
            max_header_bytes: 1 << 20,
            max_connections: None,
            upstream: UpstreamConfig::default(),
            retry: RetryParams::default(),
            overload: OverloadConfig::default(),
            proxy_protocol: "off".to_owned(),
            proxy_protocol_trusted: Vec::new(),
            tls: TlsConfig::default(),
        }
    }
}

/// `server.upstream`: connections to backends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamConfig {
    /// `dial_timeout` [2s, > 0].
    pub dial_timeout: Duration,
    /// `tls_handshake_timeout` [3s, > 0].
    pub tls_handshake_timeout: Duration,
    /// `response_header_timeout` [10s, 0 = none].
    pub response_header_timeout: Duration,
    /// `expect_continue_timeout` [1s]: accepted, not acted on yet.
    pub expect_continue_timeout: Duration,
    /// `idle_conn_timeout` [90s, 0 = none].
    pub idle_conn_timeout: Duration,
    /// `max_idle_conns` [256, 0 = keep none].
    pub max_idle_conns: u32,
    /// `max_idle_conns_per_host` [64, 0 = keep none].
    pub max_idle_conns_per_host: u32,
    /// `max_conns_per_host` [0 = unlimited]: accepted, not acted on yet.
    pub max_conns_per_host: u32,
    /// `max_concurrent_requests` [512]: slots per backend (C-POOL-6).
    pub max_concurrent_requests: u32,
}

impl Default for UpstreamConfig {
    fn default() -> UpstreamConfig {
        UpstreamConfig {
            dial_timeout: Duration::from_secs(2),
            tls_handshake_timeout: Duration::from_secs(3),
            response_header_timeout: Duration::from_secs(10),
            expect_continue_timeout: Duration::from_secs(1),
            idle_conn_timeout: Duration::from_secs(90),
            max_idle_conns: 256,
            max_idle_conns_per_host: 64,
            max_conns_per_host: 0,
            max_concurrent_requests: 512,
        }
    }
}

/// `server.overload`: the global gate (C-LOAD-1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverloadConfig {
    /// `max_concurrent_requests` [2048].
    pub max_concurrent_requests: u32,
    /// `max_queue` [= max_concurrent_requests; 0 = no queue] (weir).
    pub max_queue: Option<u32>,
    /// `queue_timeout` [50ms, 0 = no wait].
    pub queue_timeout: Duration,
}

impl Default for OverloadConfig {
    fn default() -> OverloadConfig {
        OverloadConfig {
            max_concurrent_requests: 2048,
            max_queue: None,
            queue_timeout: Duration::from_millis(50),
        }
    }
}

/// `health_check.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProbeMode {
    /// `http` (the default): `GET` of the backend URL joined with `path`.
    #[default]
    Http,
    /// `https`: the same over TLS, certificates validated.
    Https,
    /// `tcp`: a connect.
    Tcp,
}

impl ProbeMode {
    /// The config spelling.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            ProbeMode::Http => "http",
            ProbeMode::Https => "https",
            ProbeMode::Tcp => "tcp",
        }
    }

    fn from_name(s: &str) -> Option<ProbeMode> {
        match s {
            "http" => Some(ProbeMode::Http),
            "https" => Some(ProbeMode::Https),
            "tcp" => Some(ProbeMode::Tcp),
            _ => None,
        }
    }
}

/// `health_check`: active checks (C-HEALTH-1, -2), the passive breaker (C-HEALTH-3) and slow
/// start (C-HEALTH-4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheckConfig {
    /// `mode` [http].
    pub mode: ProbeMode,
    /// `path` ["/health"].
    pub path: String,
    /// `interval` [5s, > 0].
    pub interval: Duration,
    /// `timeout` [2s, > 0].
    pub timeout: Duration,
    /// `failure_threshold` [2]: active checks and the breaker.
    pub failure_threshold: u32,
    /// `success_threshold` [1].
    pub success_threshold: u32,
    /// `max_concurrency` [16].
    pub max_concurrency: u32,
    /// `jitter` [500ms, 0 = none].
    pub jitter: Duration,
    /// `cooldown` [10s, > 0].
    pub cooldown: Duration,
    /// `max_cooldown` [5m, ≥ cooldown] (weir).
    pub max_cooldown: Duration,
    /// `half_open_requests` [1] (weir).
    pub half_open_requests: u32,
    /// `slow_start` [30s, 0 = off].
    pub slow_start: Duration,
    /// `slow_start_minimum_percent` [10, 1..=100].
    pub slow_start_minimum_percent: u32,
    /// `expected_statuses` [[200, 204]].
    pub expected_statuses: Vec<u16>,
}

impl Default for HealthCheckConfig {
    fn default() -> HealthCheckConfig {
        HealthCheckConfig {
            mode: ProbeMode::Http,
            path: "/health".to_owned(),
            interval: Duration::from_secs(5),
            timeout: Duration::from_secs(2),
            failure_threshold: 2,
            success_threshold: 1,
            max_concurrency: 16,
            jitter: Duration::from_millis(500),
            cooldown: Duration::from_secs(10),
            max_cooldown: Duration::from_secs(300),
            half_open_requests: 1,
            slow_start: Duration::from_secs(30),
            slow_start_minimum_percent: 10,
            expected_statuses: vec![200, 204],
        }
    }
}

/// `rate_limit` (C-RATE-1..5).
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimitConfig {
    /// `enabled` [false].
    pub enabled: bool,
    /// `storage` [local]: local, redis or postgres.
    pub storage: String,
    /// `failure_mode` [local-fallback]: fail-open, fail-closed or local-fallback.
    pub failure_mode: String,
    /// `capacity` [100].
    pub capacity: u64,
    /// `refill_per_second` [100].
    pub refill_per_second: f64,
    /// `operation_timeout` [50ms].
    pub operation_timeout: Duration,
    /// `local_shards` [64].
    pub local_shards: u64,
    /// `local_max_buckets` [100000].
    pub local_max_buckets: u64,
    /// `ipv4_prefix_bits` [32].
    pub ipv4_prefix_bits: u32,
    /// `ipv6_prefix_bits` [64].
    pub ipv6_prefix_bits: u32,
    /// `cleanup_interval` [6h]: accepted, not acted on yet.
    pub cleanup_interval: Duration,
    /// `retention` [24h]: accepted, not acted on yet.
    pub retention: Duration,
}

impl Default for RateLimitConfig {
    fn default() -> RateLimitConfig {
        RateLimitConfig {
            enabled: false,
            storage: "local".to_owned(),
            failure_mode: "local-fallback".to_owned(),
            capacity: 100,
            refill_per_second: 100.0,
            operation_timeout: Duration::from_millis(50),
            local_shards: 64,
            local_max_buckets: 100_000,
            ipv4_prefix_bits: 32,
            ipv6_prefix_bits: 64,
            cleanup_interval: Duration::from_secs(6 * 3600),
            retention: Duration::from_secs(24 * 3600),
        }
    }
}

/// `redis`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// `mode` [standalone]: standalone, cluster or sentinel.
    pub mode: String,
    /// `address` ["redis:6379"]: host:port (standalone).
    pub address: String,
    /// `addresses` [[]]: host:port of the seed nodes (cluster) or of the sentinels (sentinel).
    pub addresses: Vec<String>,
    /// `sentinel_master`: the master's name the sentinels monitor (sentinel, required there).
    pub sentinel_master: Option<String>,
    /// `tls` [false]: connect to Redis (and the sentinels) over TLS.
    pub tls: bool,
    /// `password_env`: name of the secret holding the password (none: no AUTH).
    pub password_env: Option<String>,
    /// `database` [0].
    pub database: u32,
    /// `pool_size` [64].
    pub pool_size: u32,
    /// `dial_timeout` [2s, > 0].
    pub dial_timeout: Duration,
    /// `read_timeout` [50ms, > 0].
    pub read_timeout: Duration,
    /// `write_timeout` [50ms, > 0].
    pub write_timeout: Duration,
}

impl Default for RedisConfig {
    fn default() -> RedisConfig {
        RedisConfig {
            mode: "standalone".to_owned(),
            address: "redis:6379".to_owned(),
            addresses: Vec::new(),
            sentinel_master: None,
            tls: false,
            password_env: None,
            database: 0,
            pool_size: 64,
            dial_timeout: Duration::from_secs(2),
            read_timeout: Duration::from_millis(50),
            write_timeout: Duration::from_millis(50),
        }
    }
}

/// `database`: every connection field is required when `rate_limit.storage` is postgres.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseConfig {
    /// `host`.
    pub host: Option<String>,
    /// `port` (a string, as the reference writes it, or a number).
    pub port: Option<u16>,
    /// `user`.
    pub user: Option<String>,
    /// `name`.
    pub name: Option<String>,
    /// `sslmode`: disable, allow, prefer, require, verify-ca or verify-full.
    pub sslmode: Option<String>,
    /// `password_env`: name of the secret holding the password.
    pub password_env: Option<String>,
    /// `connect_timeout` [5s, > 0].
    pub connect_timeout: Duration,
    /// `max_open_connections` [25].
    pub max_open_connections: u32,
}

impl Default for DatabaseConfig {
    fn default() -> DatabaseConfig {
        DatabaseConfig {
            host: None,
            port: None,
            user: None,
            name: None,
            sslmode: None,
            password_env: None,
            connect_timeout: Duration::from_secs(5),
            max_open_connections: 25,
        }
    }
}

/// `management` (C-MGMT-1..3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagementConfig {
    /// `enabled` [false].
    pub enabled: bool,
    /// `address` [":9090"].
    pub address: String,
    /// `auth_token_env` [BALANCER_ADMIN_TOKEN]: name of the secret holding the bearer token.
    pub auth_token_env: String,
    /// `allow_insecure` [false].
    pub allow_insecure: bool,
    /// `enable_pprof` [false]: accepted, not acted on.
    pub enable_pprof: bool,
    /// `runtime_mutations` [false].
    pub runtime_mutations: bool,
    /// `write_timeout` [30s, > 0].
    pub write_timeout: Duration,
}

impl Default for ManagementConfig {
    fn default() -> ManagementConfig {
        ManagementConfig {
            enabled: false,
            address: ":9090".to_owned(),
            auth_token_env: "BALANCER_ADMIN_TOKEN".to_owned(),
            allow_insecure: false,
            enable_pprof: false,
            runtime_mutations: false,
            write_timeout: Duration::from_secs(30),
        }
    }
}

/// One backend of a pool (C-POOL-1).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BackendConfig {
    /// `id` (required, unique across all pools).
    pub id: String,
    /// `url` (required): http or https with a host.
    pub url: String,
    /// `weight` [1, 1..=100] (weir).
    pub weight: u32,
    /// `disabled` [false].
    pub disabled: bool,
}

/// `balancing` of a pool (weir).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BalancingConfig {
    /// `policy` [round_robin].
    pub policy: String,
    /// `hash_key`: `header:<Name>`, `cookie:<name>` or `client_address` (consistent_hash only).
    pub hash_key: Option<String>,
}

impl Default for BalancingConfig {
    fn default() -> BalancingConfig {
        BalancingConfig {
            policy: "round_robin".to_owned(),
            hash_key: None,
        }
    }
}

/// A named pool (weir).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PoolConfig {
    /// The key under `pools`.
    pub name: String,
    /// `balancing`.
    pub balancing: BalancingConfig,
    /// `backends`.
    pub backends: Vec<BackendConfig>,
}

/// A route (weir; C-ROUTE-1, C-LOAD-2).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RouteConfig {
    /// `prefix` (required).
    pub prefix: String,
    /// `pool` (required): a name under `pools`, or `default`.
    pub pool: String,
    /// `max_concurrent_requests`: the route's bulkhead (none: unlimited).
    pub max_concurrent_requests: Option<u32>,
}

/// Read the whole file.
pub(crate) fn read_config(r: &mut Reader, root: &Field<'_>) -> Config {
    let d = Config::default();
    let mut o = r.obj(root);
    let server = read_server(r, &o.field("server"));
    let health_check = read_health(r, &o.field("health_check"));
    let rate_limit = read_rate(r, &o.field("rate_limit"));
    let redis = read_redis(r, &o.field("redis"));
    let database = read_database(r, &o.field("database"));
    let management = read_management(r, &o.field("management"));
    let backends = read_backends(r, &o.field("backends"));
    let balancing = read_balancing(r, &o.field("balancing"), &d.balancing);
    let pools = read_pools(r, &o.field("pools"));
    let routes = read_routes(r, &o.field("routes"));
    o.finish(r);
    Config {
        server,
        health_check,
        rate_limit,
        redis,
        database,
        management,
        backends,
        balancing,
        pools,
        routes,
    }
}

fn read_server(r: &mut Reader, f: &Field<'_>) -> ServerConfig {
    let d = ServerConfig::default();
    let mut o = r.obj(f);
    let port = r.port(&o.field("port"), Some(d.port)).unwrap_or(d.port);
    let trusted_proxies = r.strings(&o.field("trusted_proxies"), &[]);
    let access_log_sample_rate =
        r.f64(&o.field("access_log_sample_rate"), d.access_log_sample_rate);
    let access_log_include_path = r.bool(
        &o.field("access_log_include_path"),
        d.access_log_include_path,
    );
    let allow_trace = r.bool(&o.field("allow_trace"), d.allow_trace);
    let read_header_timeout = r.duration(&o.field("read_header_timeout"), d.read_header_timeout);
    let read_timeout = r.duration(&o.field("read_timeout"), d.read_timeout);
    let write_timeout = r.duration(&o.field("write_timeout"), d.write_timeout);
    let idle_timeout = r.duration(&o.field("idle_timeout"), d.idle_timeout);
    let shutdown_delay = r.duration(&o.field("shutdown_delay"), d.shutdown_delay);
    let shutdown_timeout = r.duration(&o.field("shutdown_timeout"), d.shutdown_timeout);
    let max_header_bytes = r.u64(&o.field("max_header_bytes"), d.max_header_bytes, 0);
    let max_connections = r.opt_u32(&o.field("max_connections"));
    let upstream = read_upstream(r, &o.field("upstream"));
    let retry = read_retry(r, &o.field("retry"));
    let overload = read_overload(r, &o.field("overload"));
    let proxy_protocol = r.string(&o.field("proxy_protocol"), &d.proxy_protocol);
    let proxy_protocol_trusted = r.strings(&o.field("proxy_protocol_trusted"), &[]);
    let tls = read_tls(r, &o.field("tls"));
    o.finish(r);
    ServerConfig {
        port,
        trusted_proxies,
        access_log_sample_rate,
        access_log_include_path,
        allow_trace,
        read_header_timeout,
        read_timeout,
        write_timeout,
        idle_timeout,
        shutdown_delay,
        shutdown_timeout,
        max_header_bytes,
        max_connections,
        upstream,
        retry,
        overload,
        proxy_protocol,
        proxy_protocol_trusted,
        tls,
    }
}

fn read_tls(r: &mut Reader, f: &Field<'_>) -> TlsConfig {
    let d = TlsConfig::default();
    let mut o = r.obj(f);
    let items = r.list(&o.field("certificates"));
    let mut certificates = Vec::with_capacity(items.len());
    for item in &items {
        let mut c = r.obj(item);
        certificates.push(CertPairConfig {
            cert_file: r.required_string(&c.field("cert_file")),
            key_file: r.required_string(&c.field("key_file")),
        });
        c.finish(r);
    }
    let v = TlsConfig {
        certificates,
        min_version: r.string(&o.field("min_version"), &d.min_version),
        handshake_timeout: r.duration(&o.field("handshake_timeout"), d.handshake_timeout),
        client_ca_file: r.opt_string(&o.field("client_ca_file")),
    };
    o.finish(r);
    v
}

fn read_upstream(r: &mut Reader, f: &Field<'_>) -> UpstreamConfig {
    let d = UpstreamConfig::default();
    let mut o = r.obj(f);
    let v = UpstreamConfig {
        dial_timeout: r.duration(&o.field("dial_timeout"), d.dial_timeout),
        tls_handshake_timeout: r
            .duration(&o.field("tls_handshake_timeout"), d.tls_handshake_timeout),
        response_header_timeout: r.duration(
            &o.field("response_header_timeout"),
            d.response_header_timeout,
        ),
        expect_continue_timeout: r.duration(
            &o.field("expect_continue_timeout"),
            d.expect_continue_timeout,
        ),
        idle_conn_timeout: r.duration(&o.field("idle_conn_timeout"), d.idle_conn_timeout),
        max_idle_conns: r.u32(&o.field("max_idle_conns"), d.max_idle_conns, 0),
        max_idle_conns_per_host: r.u32(
            &o.field("max_idle_conns_per_host"),
            d.max_idle_conns_per_host,
            0,
        ),
        max_conns_per_host: r.u32(&o.field("max_conns_per_host"), d.max_conns_per_host, 0),
        max_concurrent_requests: r.u32(
            &o.field("max_concurrent_requests"),
            d.max_concurrent_requests,
            0,
        ),
    };
    o.finish(r);
    v
}

fn read_retry(r: &mut Reader, f: &Field<'_>) -> RetryParams {
    let d = RetryParams::default();
    let mut o = r.obj(f);
    let methods: Vec<&str> = d.methods.iter().map(String::as_str).collect();
    let v = RetryParams {
        max_attempts: r.u32(&o.field("max_attempts"), d.max_attempts, 0),
        per_try_timeout: r.duration(&o.field("per_try_timeout"), d.per_try_timeout),
        body_limit: r.u64(&o.field("body_limit"), d.body_limit, 0),
        methods: r.strings(&o.field("methods"), &methods),
        statuses: r.statuses(&o.field("statuses"), &d.statuses),
        budget_capacity: r.u64(&o.field("budget_capacity"), d.budget_capacity, 0),
        budget_refill_per_second: r.f64(
            &o.field("budget_refill_per_second"),
            d.budget_refill_per_second,
        ),
    };
    o.finish(r);
    v
}

fn read_overload(r: &mut Reader, f: &Field<'_>) -> OverloadConfig {
    let d = OverloadConfig::default();
    let mut o = r.obj(f);
    let v = OverloadConfig {
        max_concurrent_requests: r.u32(
            &o.field("max_concurrent_requests"),
            d.max_concurrent_requests,
            0,
        ),
        max_queue: r.opt_u32(&o.field("max_queue")),
        queue_timeout: r.duration(&o.field("queue_timeout"), d.queue_timeout),
    };
    o.finish(r);
    v
}

fn read_health(r: &mut Reader, f: &Field<'_>) -> HealthCheckConfig {
    let d = HealthCheckConfig::default();
    let mut o = r.obj(f);
    let mode_field = o.field("mode");
    let mode_text = r.string(&mode_field, d.mode.as_str());
    let mode = ProbeMode::from_name(&mode_text).unwrap_or_else(|| {
        r.error(
            &mode_field.path.concrete,
            None,
            format!("mode must be http, https or tcp, got {mode_text:?}"),
        );
        d.mode
    });
    let v = HealthCheckConfig {
        mode,
        path: r.string(&o.field("path"), &d.path),
        interval: r.duration(&o.field("interval"), d.interval),
        timeout: r.duration(&o.field("timeout"), d.timeout),
        failure_threshold: r.u32(&o.field("failure_threshold"), d.failure_threshold, 0),
        success_threshold: r.u32(&o.field("success_threshold"), d.success_threshold, 0),
        max_concurrency: r.u32(&o.field("max_concurrency"), d.max_concurrency, 0),
        jitter: r.duration(&o.field("jitter"), d.jitter),
        cooldown: r.duration(&o.field("cooldown"), d.cooldown),
        max_cooldown: r.duration(&o.field("max_cooldown"), d.max_cooldown),
        half_open_requests: r.u32(&o.field("half_open_requests"), d.half_open_requests, 0),
        slow_start: r.duration(&o.field("slow_start"), d.slow_start),
        slow_start_minimum_percent: r.u32(
            &o.field("slow_start_minimum_percent"),
            d.slow_start_minimum_percent,
            0,
        ),
        expected_statuses: r.statuses(&o.field("expected_statuses"), &d.expected_statuses),
    };
    o.finish(r);
    v
}

fn read_rate(r: &mut Reader, f: &Field<'_>) -> RateLimitConfig {
    let d = RateLimitConfig::default();
    let mut o = r.obj(f);
    let v = RateLimitConfig {
        enabled: r.bool(&o.field("enabled"), d.enabled),
        storage: r.string(&o.field("storage"), &d.storage),
        failure_mode: r.string(&o.field("failure_mode"), &d.failure_mode),
        capacity: r.u64(&o.field("capacity"), d.capacity, 0),
        refill_per_second: r.f64(&o.field("refill_per_second"), d.refill_per_second),
        operation_timeout: r.duration(&o.field("operation_timeout"), d.operation_timeout),
        local_shards: r.u64(&o.field("local_shards"), d.local_shards, 0),
        local_max_buckets: r.u64(&o.field("local_max_buckets"), d.local_max_buckets, 0),
        ipv4_prefix_bits: r.u32(&o.field("ipv4_prefix_bits"), d.ipv4_prefix_bits, 0),
        ipv6_prefix_bits: r.u32(&o.field("ipv6_prefix_bits"), d.ipv6_prefix_bits, 0),
        cleanup_interval: r.duration(&o.field("cleanup_interval"), d.cleanup_interval),
        retention: r.duration(&o.field("retention"), d.retention),
    };
    o.finish(r);
    v
}

fn read_redis(r: &mut Reader, f: &Field<'_>) -> RedisConfig {
    let d = RedisConfig::default();
    let mut o = r.obj(f);
    let v = RedisConfig {
        mode: r.string(&o.field("mode"), &d.mode),
        address: r.string(&o.field("address"), &d.address),
        addresses: r.strings(&o.field("addresses"), &[]),
        sentinel_master: r.opt_string(&o.field("sentinel_master")),
        tls: r.bool(&o.field("tls"), d.tls),
        password_env: r.opt_string(&o.field("password_env")),
        database: r.u32(&o.field("database"), d.database, 0),
        pool_size: r.u32(&o.field("pool_size"), d.pool_size, 0),
        dial_timeout: r.duration(&o.field("dial_timeout"), d.dial_timeout),
        read_timeout: r.duration(&o.field("read_timeout"), d.read_timeout),
        write_timeout: r.duration(&o.field("write_timeout"), d.write_timeout),
    };
    o.finish(r);
    v
}

fn read_database(r: &mut Reader, f: &Field<'_>) -> DatabaseConfig {
    let d = DatabaseConfig::default();
    let mut o = r.obj(f);
    let v = DatabaseConfig {
        host: r.opt_string(&o.field("host")),
        port: r.port(&o.field("port"), None),
        user: r.opt_string(&o.field("user")),
        name: r.opt_string(&o.field("name")),
        sslmode: r.opt_string(&o.field("sslmode")),
        password_env: r.opt_string(&o.field("password_env")),
        connect_timeout: r.duration(&o.field("connect_timeout"), d.connect_timeout),
        max_open_connections: r.u32(&o.field("max_open_connections"), d.max_open_connections, 0),
    };
    o.finish(r);
    v
}

fn read_management(r: &mut Reader, f: &Field<'_>) -> ManagementConfig {
    let d = ManagementConfig::default();
    let mut o = r.obj(f);
    let v = ManagementConfig {
        enabled: r.bool(&o.field("enabled"), d.enabled),
        address: r.string(&o.field("address"), &d.address),
        auth_token_env: r.string(&o.field("auth_token_env"), &d.auth_token_env),
        allow_insecure: r.bool(&o.field("allow_insecure"), d.allow_insecure),
        enable_pprof: r.bool(&o.field("enable_pprof"), d.enable_pprof),
        runtime_mutations: r.bool(&o.field("runtime_mutations"), d.runtime_mutations),
        write_timeout: r.duration(&o.field("write_timeout"), d.write_timeout),
    };
    o.finish(r);
    v
}

fn read_backends(r: &mut Reader, f: &Field<'_>) -> Vec<BackendConfig> {
    let items = r.list(f);
    let mut out = Vec::with_capacity(items.len());
    for item in &items {
        let mut o = r.obj(item);
        let b = BackendConfig {
            id: r.required_string(&o.field("id")),
            url: r.required_string(&o.field("url")),
            weight: r.u32(&o.field("weight"), 1, 0),
            disabled: r.bool(&o.field("disabled"), false),
        };
        o.finish(r);
        out.push(b);
    }
    out
}

fn read_balancing(r: &mut Reader, f: &Field<'_>, d: &BalancingConfig) -> BalancingConfig {
    let mut o = r.obj(f);
    let v = BalancingConfig {
        policy: r.string(&o.field("policy"), &d.policy),
        hash_key: r.opt_string(&o.field("hash_key")),
    };
    o.finish(r);
    v
}

fn read_pools(r: &mut Reader, f: &Field<'_>) -> Vec<PoolConfig> {
    let entries = r.named(f);
    let mut out = Vec::with_capacity(entries.len());
    for (name, field) in &entries {
        let mut o = r.obj(field);
        let balancing = read_balancing(r, &o.field("balancing"), &BalancingConfig::default());
        let backends = read_backends(r, &o.field("backends"));
        o.finish(r);
        out.push(PoolConfig {
            name: name.clone(),
            balancing,
            backends,
        });
    }
    out
}

fn read_routes(r: &mut Reader, f: &Field<'_>) -> Vec<RouteConfig> {
    let items = r.list(f);
    let mut out = Vec::with_capacity(items.len());
    for item in &items {
        let mut o = r.obj(item);
        let route = RouteConfig {
            prefix: r.required_string(&o.field("prefix")),
            pool: r.required_string(&o.field("pool")),
            max_concurrent_requests: r.opt_u32(&o.field("max_concurrent_requests")),
        };
        o.finish(r);
        out.push(route);
    }
    out
}
