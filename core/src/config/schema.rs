//! The configuration schema: every section and field with its default (C-CONF-0 and the contract
//! appendix), and the code that reads it from the tree (`schema/from_tree.rs`). These structs are the file as written,
//! with defaults filled in and each value of the right type; [`validate`](super::validate) then
//! checks ranges and cross-field rules and builds the core parameters.
//!
//! Each `read` function asks for every field of its section, whether written or not, so the
//! reader's list of schema paths is the complete list of fields (the documentation test walks it).

use core::time::Duration;

use crate::retry::RetryParams;

pub(super) mod from_tree;

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
    /// most (weir).
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
    /// `resolver` [[] = the system's resolv.conf]: DNS servers (`address:port`) for DNS pools
    /// and backend host names (C-DISC-1, C-DISC-2).
    pub resolver: Vec<String>,
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
            resolver: Vec::new(),
        }
    }
}

/// `server.upstream`: connections to backends.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamConfig {
    /// `dial_timeout` [2s, > 0].
    pub dial_timeout: Duration,
    /// `tls_handshake_timeout` [3s, > 0].
    pub tls_handshake_timeout: Duration,
    /// `response_header_timeout` [10s, 0 = none].
    pub response_header_timeout: Duration,
    /// `expect_continue_timeout` [1s]: the wait for a backend's `100 Continue` (docs/proxy.md).
    pub expect_continue_timeout: Duration,
    /// `idle_conn_timeout` [90s, 0 = none].
    pub idle_conn_timeout: Duration,
    /// `max_idle_conns` [256, 0 = keep none].
    pub max_idle_conns: u32,
    /// `max_idle_conns_per_host` [64, 0 = keep none].
    pub max_idle_conns_per_host: u32,
    /// `max_conns_per_host` [0 = unlimited]: connections per backend, busy and idle, of every
    /// worker (HTTP/1), or HTTP/2 connections per backend (`stream_pick`).
    pub max_conns_per_host: u32,
    /// `max_concurrent_requests` [512]: slots per backend (C-POOL-6).
    pub max_concurrent_requests: u32,
    /// `mirror_max_in_flight` [64]: mirrored requests in flight at once, process-wide
    /// (C-MIRROR-1).
    pub mirror_max_in_flight: u32,
    /// `adaptive_concurrency`: per-backend limits that follow latency and failures (C-LOAD-4).
    pub adaptive_concurrency: AdaptiveConfig,
    /// `tls_ca_file`: PEM CA certificates that backend certificates must chain to, instead of
    /// the system's roots (C-GRPC-5).
    pub tls_ca_file: Option<String>,
    /// `tls_server_name`: the name backend certificates must carry (and the SNI), instead of
    /// each URL's host.
    pub tls_server_name: Option<String>,
    /// `tls_cert_file`: weir's client certificate chain for backends that ask (mutual TLS).
    pub tls_cert_file: Option<String>,
    /// `tls_key_file`: the private key of `tls_cert_file`.
    pub tls_key_file: Option<String>,
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
            mirror_max_in_flight: 64,
            adaptive_concurrency: AdaptiveConfig::default(),
            tls_ca_file: None,
            tls_server_name: None,
            tls_cert_file: None,
            tls_key_file: None,
        }
    }
}

/// `server.upstream.adaptive_concurrency` (C-LOAD-4), as written; checked into
/// [`crate::adaptive::AdaptiveParams`].
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveConfig {
    /// `enabled` [false].
    pub enabled: bool,
    /// `min_limit` [3].
    pub min_limit: u32,
    /// `max_limit` [= `server.upstream.max_concurrent_requests`].
    pub max_limit: Option<u32>,
    /// `window` [1s].
    pub window: Duration,
    /// `rtt_tolerance` [1.5].
    pub rtt_tolerance: f64,
    /// `backoff_ratio` [0.9].
    pub backoff_ratio: f64,
}

impl Default for AdaptiveConfig {
    fn default() -> AdaptiveConfig {
        AdaptiveConfig {
            enabled: false,
            min_limit: 3,
            max_limit: None,
            window: Duration::from_secs(1),
            rtt_tolerance: 1.5,
            backoff_ratio: 0.9,
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
    /// `grpc`: `grpc.health.v1.Health/Check` for `grpc_service` over the backend's HTTP/2
    /// (C-GRPC-4); only `SERVING` is healthy.
    Grpc,
}

impl ProbeMode {
    /// The config spelling.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            ProbeMode::Http => "http",
            ProbeMode::Https => "https",
            ProbeMode::Tcp => "tcp",
            ProbeMode::Grpc => "grpc",
        }
    }

    /// The mode of a config spelling, if it is one.
    #[must_use]
    pub fn from_name(s: &str) -> Option<ProbeMode> {
        match s {
            "http" => Some(ProbeMode::Http),
            "https" => Some(ProbeMode::Https),
            "tcp" => Some(ProbeMode::Tcp),
            "grpc" => Some(ProbeMode::Grpc),
            _ => None,
        }
    }

    /// The spellings, for error messages.
    pub const NAMES: &'static str = "http, https, tcp or grpc";
}

/// `health_check.outlier`: outlier detection (C-OUT-1, C-OUT-2); each field's default and
/// range are [`OutlierParams`](crate::outlier::OutlierParams)'s.
#[derive(Debug, Clone, PartialEq)]
pub struct OutlierConfig {
    /// `enabled` [true].
    pub enabled: bool,
    /// `interval` [10s, 100ms..=1h].
    pub interval: Duration,
    /// `base_ejection_time` [30s, > 0, ≤ max_ejection_time].
    pub base_ejection_time: Duration,
    /// `max_ejection_time` [5m, ≤ 1d].
    pub max_ejection_time: Duration,
    /// `max_ejection_percent` [50, 0..=100].
    pub max_ejection_percent: u32,
    /// `failure_percentage_threshold` [85, 0..=100].
    pub failure_percentage_threshold: u32,
    /// `failure_percentage_minimum_hosts` [2, ≥ 1].
    pub failure_percentage_minimum_hosts: u32,
    /// `failure_percentage_request_volume` [50, ≥ 1].
    pub failure_percentage_request_volume: u32,
    /// `success_rate_minimum_hosts` [5, ≥ 1].
    pub success_rate_minimum_hosts: u32,
    /// `success_rate_request_volume` [100, ≥ 1].
    pub success_rate_request_volume: u32,
    /// `success_rate_stdev_factor` [1.9, 0..=10].
    pub success_rate_stdev_factor: f64,
}

impl Default for OutlierConfig {
    fn default() -> OutlierConfig {
        let d = crate::outlier::OutlierParams::default();
        OutlierConfig {
            enabled: d.enabled,
            interval: d.interval,
            base_ejection_time: d.base_ejection_time,
            max_ejection_time: d.max_ejection_time,
            max_ejection_percent: d.max_ejection_percent,
            failure_percentage_threshold: d.failure_percentage_threshold,
            failure_percentage_minimum_hosts: d.failure_percentage_minimum_hosts,
            failure_percentage_request_volume: d.failure_percentage_request_volume,
            success_rate_minimum_hosts: d.success_rate_minimum_hosts,
            success_rate_request_volume: d.success_rate_request_volume,
            success_rate_stdev_factor: f64::from(d.success_rate_stdev_factor_milli) / 1000.0,
        }
    }
}

/// `health_check`: active checks (C-HEALTH-1, -2), the passive breaker (C-HEALTH-3), slow
/// start (C-HEALTH-4) and outlier detection (C-OUT-1, C-OUT-2).
#[derive(Debug, Clone, PartialEq)]
pub struct HealthCheckConfig {
    /// `mode` [http].
    pub mode: ProbeMode,
    /// `path` ["/health"].
    pub path: String,
    /// `grpc_service` [""]: the service a `grpc` probe asks about (`""`: the whole server).
    pub grpc_service: String,
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
    /// `outlier`: outlier detection.
    pub outlier: OutlierConfig,
    /// `retry_after_max` [30s, 0 = pushback off]: the longest a backend's `503` with
    /// `Retry-After` keeps it out of selection (C-RETRY-11).
    pub retry_after_max: Duration,
}

impl Default for HealthCheckConfig {
    fn default() -> HealthCheckConfig {
        HealthCheckConfig {
            mode: ProbeMode::Http,
            path: "/health".to_owned(),
            grpc_service: String::new(),
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
            outlier: OutlierConfig::default(),
            retry_after_max: crate::backend::DEFAULT_RETRY_AFTER_MAX,
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
    /// `cleanup_interval` [6h, 1s..=168h]: how often each replica deletes the expired buckets
    /// of the PostgreSQL store (Redis keys expire by their TTL; the local store evicts).
    pub cleanup_interval: Duration,
    /// `retention` [24h, 0s..=720h]: how long past its expiry a PostgreSQL bucket row is kept
    /// before a cleanup deletes it (an expired row reads as a full bucket either way).
    pub retention: Duration,
    /// `dry_run` [false]: decide and store as when enforced, let a request over the limit
    /// through (C-RATE-8).
    pub dry_run: bool,
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
            dry_run: false,
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
    /// `tls_ca_file`: PEM file of the CA certificates the servers' certificates are verified
    /// against (none: the system's roots). Only with `tls`.
    pub tls_ca_file: Option<String>,
    /// `tls_cert_file`: PEM client certificate chain, for servers that verify clients
    /// (`tls-auth-clients yes`). Only with `tls` and `tls_key_file`.
    pub tls_cert_file: Option<String>,
    /// `tls_key_file`: PEM private key of `tls_cert_file`.
    pub tls_key_file: Option<String>,
    /// `password_env`: name of the secret holding the password (none: no AUTH).
    pub password_env: Option<String>,
    /// `sentinel_password_env`: name of the secret holding the sentinels' own password
    /// (sentinel mode only; none: the sentinels are asked without AUTH).
    pub sentinel_password_env: Option<String>,
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
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            password_env: None,
            sentinel_password_env: None,
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
    /// `enable_pprof` [false]: only false loads (weir has no pprof endpoint).
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
    /// `send_proxy_protocol` [off]: `off`, `v1` or `v2` (None: not given, off).
    pub send_proxy_protocol: Option<String>,
    /// `protocol` [http1]: `http1`, `h2c` or `h2` (None: not given, http1; C-GRPC-1).
    pub protocol: Option<String>,
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
    /// `backends` (empty when the pool is fed by `dns`).
    pub backends: Vec<BackendConfig>,
    /// `dns`: the backends are the addresses of a name instead of a list (C-DISC-1).
    pub dns: Option<DnsConfig>,
}

/// `pools.<name>.dns` (C-DISC-1): every A/AAAA address of `name` is a backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsConfig {
    /// `name` (required): the name resolved.
    pub name: String,
    /// `port` (required): the backends' port.
    pub port: u16,
    /// `interval` [5s, 1s..=1h]: how often the name is resolved again.
    pub interval: Duration,
    /// `scheme` [http]: `http` or `https`.
    pub scheme: String,
    /// `protocol` [http1]: `http1`, `h2c` or `h2`, as `backends[].protocol`.
    pub protocol: String,
}

impl Default for DnsConfig {
    fn default() -> DnsConfig {
        DnsConfig {
            name: String::new(),
            port: 0,
            interval: DEFAULT_DNS_INTERVAL,
            scheme: "http".to_owned(),
            protocol: "http1".to_owned(),
        }
    }
}

/// `pools.<name>.dns.interval`'s default (C-DISC-1).
pub const DEFAULT_DNS_INTERVAL: Duration = Duration::from_secs(5);

/// A route (weir; C-ROUTE-1, C-LOAD-2).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RouteConfig {
    /// `prefix` (required).
    pub prefix: String,
    /// `pool` (required): a name under `pools`, or `default`.
    pub pool: String,
    /// `max_concurrent_requests`: the route's bulkhead (none: unlimited).
    pub max_concurrent_requests: Option<u32>,
    /// `mirror`: a share of the route's requests copied to another pool (C-MIRROR-1).
    pub mirror: Option<MirrorConfig>,
}

/// `routes[].mirror` (C-MIRROR-1).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MirrorConfig {
    /// `pool` (required): a name under `pools`, or `default`.
    pub pool: String,
    /// `percent` [100, 0..=100]: the share of the route's requests mirrored.
    pub percent: u32,
}
