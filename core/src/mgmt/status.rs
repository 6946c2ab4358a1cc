//! The status document of `GET /api/dashboard/status` (C-MGMT-4): the runtime in force plus the
//! facts only the adapter knows (instance id, readiness, the gate's in-flight count, the
//! caller's bucket read without taking a token). Built field by field from typed values, never
//! by dumping a configuration struct, so no secret can reach it (C-CONF-3): the management and
//! store sections, which hold or name secrets, are not part of it.
//!
//! Durations are written as the YAML file writes them (`"5s"`, `"250ms"`, `"1m30s"`, see
//! [`format_duration`]), so the console can send a value back in a `PATCH` unchanged.

use std::net::IpAddr;

use serde::Serialize;

use crate::config::{HealthCheckConfig, ValidConfig, format_duration};
use crate::pool::Availability;
use crate::rate::StorageKind;
use crate::runtime::Runtime;
use crate::time::Instant;

/// Facts about the caller's rate-limit bucket, read by the adapter from the store in force
/// without taking a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BucketFacts {
    /// Whole tokens the caller's bucket holds now.
    pub tokens: u64,
    /// The answer came from a degraded path (store failure policy, C-RATE-5).
    pub degraded: bool,
}

/// What the adapter contributes to the status document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusFacts<'a> {
    /// This process's id (shown so a console pinned to one replica can say which).
    pub instance_id: &'a str,
    /// Readiness as `/readyz` reports it.
    pub ready: bool,
    /// The caller's address (the request's `client`).
    pub client: IpAddr,
    /// The caller's bucket.
    pub bucket: BucketFacts,
    /// Requests inside the global gate now (C-LOAD-1).
    pub gate_in_flight: u32,
    /// Requests queued at the gate now.
    pub gate_queued: u32,
    /// The last resolution of each DNS pool (C-DISC-1), by pool name.
    pub dns: &'a [DnsFacts],
}

/// The last resolution of a DNS pool, as the adapter's resolver task saw it (C-DISC-1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsFacts {
    /// The pool's name.
    pub pool: String,
    /// When it ended, in milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    /// How it ended.
    pub result: crate::discovery::Outcome,
}

/// `GET /api/dashboard/status` (C-MGMT-4).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusDocument {
    /// This process's id.
    pub instance_id: String,
    /// Ready to serve.
    pub ready: bool,
    /// `management.runtime_mutations`.
    pub runtime_mutations_enabled: bool,
    /// The caller's address.
    pub client_ip: String,
    /// The default pool's policy.
    pub strategy: &'static str,
    /// Every pool (weir): name, policy, backend ids.
    pub pools: Vec<PoolStatus>,
    /// Every backend, pools in order, backends in config order.
    pub backends: Vec<BackendStatus>,
    /// The caller's bucket.
    pub bucket: BucketStatus,
    /// `rate_limit` in force.
    pub rate_limit: RateLimitStatus,
    /// `health_check` in force.
    pub health_check: HealthCheckStatus,
    /// `server.retry` in force, with the budget's state.
    pub retry: RetryStatus,
    /// Overload gate and route bulkheads.
    pub protection: ProtectionStatus,
}

/// One pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolStatus {
    /// `default` or the name under `pools`.
    pub name: String,
    /// Its policy.
    pub strategy: &'static str,
    /// Its backends' ids in config order.
    pub backends: Vec<String>,
    /// For a pool fed by DNS (C-DISC-1): the name, and its last resolution.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns: Option<DnsStatus>,
}

/// A DNS pool's name and last resolution (C-DISC-1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DnsStatus {
    /// The name resolved.
    pub name: String,
    /// The backends' port.
    pub port: u16,
    /// `interval`, as written (`5s`).
    pub interval: String,
    /// When the last resolution ended, in milliseconds since the Unix epoch (none yet: null).
    pub last_resolution_unix_ms: Option<u64>,
    /// How it ended: `ok`, `nxdomain`, `no_records`, `servfail`, `timeout` or `error` (a
    /// failure keeps the last good set).
    pub last_result: Option<&'static str>,
}

/// One backend (C-MGMT-4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackendStatus {
    /// Its id.
    pub id: String,
    /// Its base URL.
    pub url: String,
    /// Its pool's name (weir).
    pub pool: String,
    /// How weir speaks to it: `http1`, `h2c` or `h2` (C-GRPC-1).
    pub protocol: &'static str,
    /// Healthy by active checks.
    pub healthy: bool,
    /// Enabled.
    pub enabled: bool,
    /// Draining.
    pub draining: bool,
    /// Available for a new request now (C-POOL-3).
    pub available: bool,
    /// `closed`, `open` or `half_open`.
    pub circuit_state: &'static str,
    /// Ejected by outlier detection now (C-OUT-1, C-OUT-2).
    pub ejected: bool,
    /// Requests in flight.
    pub inflight: u32,
    /// Attempts sent since it was created.
    pub requests: u64,
    /// Attempts that counted as passive failures.
    pub passive_failures: u64,
    /// Share of traffic it receives now under slow start, 0..=100 (C-HEALTH-4).
    pub slow_start_percent: u32,
    /// Its adaptive concurrency limit now (C-LOAD-4); `null` while adaptive concurrency is off.
    pub concurrency_limit: Option<u32>,
}

/// The caller's bucket (C-MGMT-4).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BucketStatus {
    /// Capacity in tokens.
    pub capacity: u64,
    /// Whole tokens held now.
    pub tokens: u64,
    /// Tokens per second.
    pub refill_per_second: f64,
    /// `local`, `redis`, `postgres` or `disabled`.
    pub storage: &'static str,
    /// Served by a degraded path.
    pub degraded: bool,
}

/// `rate_limit` in force.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RateLimitStatus {
    /// Rate limiting on.
    pub enabled: bool,
    /// Decisions made and counted but not enforced (C-RATE-8).
    pub dry_run: bool,
    /// The configured store.
    pub storage: &'static str,
    /// What a store failure means.
    pub failure_mode: &'static str,
    /// Capacity in tokens.
    pub capacity: u64,
    /// Tokens per second.
    pub refill_per_second: f64,
    /// Bound on each store call.
    pub operation_timeout: String,
    /// IPv4 key prefix.
    pub ipv4_prefix_bits: u8,
    /// IPv6 key prefix.
    pub ipv6_prefix_bits: u8,
}

/// `health_check` in force (every field a `PATCH` can set).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HealthCheckStatus {
    /// http, https, tcp or grpc.
    pub mode: &'static str,
    /// Probe path.
    pub path: String,
    /// The service a grpc probe asks about (`""`: the whole server).
    pub grpc_service: String,
    /// Between cycles.
    pub interval: String,
    /// Per probe.
    pub timeout: String,
    /// Random extra delay per cycle.
    pub jitter: String,
    /// Consecutive failures to become unhealthy (and to open the circuit).
    pub failure_threshold: u32,
    /// Consecutive successes to become healthy.
    pub success_threshold: u32,
    /// Probes at once.
    pub max_concurrency: u32,
    /// Statuses that pass.
    pub expected_statuses: Vec<u16>,
    /// First open period of the circuit.
    pub cooldown: String,
    /// Longest open period.
    pub max_cooldown: String,
    /// Trial requests at once when half-open.
    pub half_open_requests: u32,
    /// Slow-start window (`0s`: off).
    pub slow_start: String,
    /// Share at the start of the window.
    pub slow_start_minimum_percent: u32,
}

/// `server.retry` in force and the budget.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetryStatus {
    /// Attempts per request, the first included.
    pub max_attempts: u32,
    /// Wait for headers per attempt.
    pub per_try_timeout: String,
    /// Largest replayable body.
    pub body_limit: u64,
    /// Retried methods.
    pub methods: Vec<String>,
    /// Retried statuses.
    pub statuses: Vec<u16>,
    /// The process-wide budget (C-RETRY-7).
    pub budget: BudgetStatus,
}

/// The retry budget now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BudgetStatus {
    /// Capacity in tokens.
    pub capacity: u64,
    /// Whole tokens held now.
    pub tokens: u64,
    /// Tokens per second.
    pub refill_per_second: f64,
}

/// Protection: the overload gate and the route bulkheads (C-LOAD-1, C-LOAD-2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProtectionStatus {
    /// The global gate.
    pub overload: OverloadStatus,
    /// Routes in config order.
    pub routes: Vec<RouteStatus>,
    /// Slots per backend (C-POOL-6).
    pub backend_max_concurrent_requests: u32,
}

/// The global gate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OverloadStatus {
    /// Requests inside now.
    pub in_flight: u32,
    /// Requests queued now.
    pub queued: u32,
    /// The limit.
    pub max_concurrent_requests: u32,
    /// Queue bound.
    pub max_queue: u32,
    /// Longest wait in the queue.
    pub queue_timeout: String,
}

/// One route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RouteStatus {
    /// Its prefix.
    pub prefix: String,
    /// Its pool's name.
    pub pool: String,
    /// Requests in flight through its bulkhead (`null` without a limit: nobody counts).
    pub in_flight: Option<u32>,
    /// Its bulkhead limit (`null`: none).
    pub max_concurrent_requests: Option<u32>,
}

/// Build the status document of `runtime` at `now`, with the adapter's `facts` (C-MGMT-4).
#[must_use]
pub fn status_document(runtime: &Runtime, facts: &StatusFacts<'_>, now: Instant) -> StatusDocument {
    let cfg = runtime.config();
    let params = &cfg.pool_params;
    let pool_name = |i: usize| cfg.pools.get(i).map_or("", |p| p.name.as_str());
    let backends = runtime
        .backends()
        .map(|(pool, b)| BackendStatus {
            id: b.id().to_owned(),
            url: b.url().to_owned(),
            pool: pool_name(pool).to_owned(),
            protocol: b.protocol().as_str(),
            healthy: b.is_healthy(),
            enabled: b.is_enabled(),
            draining: b.is_draining(),
            available: b.availability(params, now) == Availability::Available,
            circuit_state: b.circuit_state(now).as_str(),
            ejected: b.is_ejected(params, now),
            inflight: b.in_flight(),
            requests: b.requests(),
            passive_failures: b.passive_failures(),
            slow_start_percent: b.slow_start_permille(&params.slow_start, now) / 10,
            concurrency_limit: b.concurrency_limit(params),
        })
        .collect();
    let pools = cfg
        .pools
        .iter()
        .map(|p| PoolStatus {
            name: p.name.clone(),
            strategy: p.policy.as_str(),
            backends: p.backends.iter().map(|b| b.id.clone()).collect(),
            dns: p.dns.as_ref().map(|d| {
                let last = facts.dns.iter().find(|f| f.pool == p.name);
                DnsStatus {
                    name: d.name.clone(),
                    port: d.port,
                    interval: format_duration(d.interval),
                    last_resolution_unix_ms: last.map(|f| f.at_unix_ms),
                    last_result: last.map(|f| f.result.as_str()),
                }
            }),
        })
        .collect();
    let rate = &cfg.rate;
    let routes = cfg
        .routes
        .iter()
        .enumerate()
        .map(|(i, r)| RouteStatus {
            prefix: r.prefix.clone(),
            pool: pool_name(r.pool).to_owned(),
            in_flight: runtime.bulkhead(i).map(|b| b.in_flight()),
            max_concurrent_requests: r.max_concurrent_requests,
        })
        .collect();
    StatusDocument {
        instance_id: facts.instance_id.to_owned(),
        ready: facts.ready,
        runtime_mutations_enabled: cfg.management.runtime_mutations,
        client_ip: facts.client.to_string(),
        strategy: cfg.pools.first().map_or("", |p| p.policy.as_str()),
        pools,
        backends,
        bucket: BucketStatus {
            capacity: rate.capacity(),
            tokens: facts.bucket.tokens.min(rate.capacity()),
            refill_per_second: rate.refill_per_second(),
            storage: rate.storage().label(),
            degraded: facts.bucket.degraded,
        },
        rate_limit: rate_limit_status(cfg),
        health_check: health_check_status(&cfg.config.health_check),
        retry: retry_status(runtime, now),
        protection: ProtectionStatus {
            overload: OverloadStatus {
                in_flight: facts.gate_in_flight,
                queued: facts.gate_queued,
                max_concurrent_requests: cfg.gate.max_concurrent_requests(),
                max_queue: cfg.gate.max_queue(),
                queue_timeout: format_duration(cfg.gate.queue_timeout()),
            },
            routes,
            backend_max_concurrent_requests: params.max_concurrent_requests,
        },
    }
}

/// `rate_limit` of the status document: the configuration in force.
fn rate_limit_status(cfg: &ValidConfig) -> RateLimitStatus {
    let rate = &cfg.rate;
    // The configured store even when limiting is off (`bucket.storage` then says `disabled`).
    let configured_storage = cfg
        .config
        .rate_limit
        .storage
        .parse::<StorageKind>()
        .map_or("", StorageKind::label);
    RateLimitStatus {
        enabled: rate.enabled(),
        dry_run: rate.dry_run(),
        storage: configured_storage,
        failure_mode: rate.failure_mode().as_str(),
        capacity: rate.capacity(),
        refill_per_second: rate.refill_per_second(),
        operation_timeout: format_duration(rate.operation_timeout()),
        ipv4_prefix_bits: rate.key().ipv4_prefix_bits(),
        ipv6_prefix_bits: rate.key().ipv6_prefix_bits(),
    }
}

/// `health_check` of the status document: the configuration in force.
fn health_check_status(h: &HealthCheckConfig) -> HealthCheckStatus {
    HealthCheckStatus {
        mode: h.mode.as_str(),
        path: h.path.clone(),
        grpc_service: h.grpc_service.clone(),
        interval: format_duration(h.interval),
        timeout: format_duration(h.timeout),
        jitter: format_duration(h.jitter),
        failure_threshold: h.failure_threshold,
        success_threshold: h.success_threshold,
        max_concurrency: h.max_concurrency,
        expected_statuses: h.expected_statuses.clone(),
        cooldown: format_duration(h.cooldown),
        max_cooldown: format_duration(h.max_cooldown),
        half_open_requests: h.half_open_requests,
        slow_start: format_duration(h.slow_start),
        slow_start_minimum_percent: h.slow_start_minimum_percent,
    }
}

/// `retry` of the status document: the policy in force and the budget's tokens at `now`.
fn retry_status(runtime: &Runtime, now: Instant) -> RetryStatus {
    let retry = runtime.retry();
    let budget = runtime.budget();
    RetryStatus {
        max_attempts: retry.max_attempts(),
        per_try_timeout: format_duration(retry.per_try_timeout()),
        body_limit: retry.body_limit(),
        methods: retry.methods().to_vec(),
        statuses: retry.statuses().to_vec(),
        budget: BudgetStatus {
            capacity: budget.capacity(),
            tokens: budget.tokens(now),
            refill_per_second: budget.refill_per_second(),
        },
    }
}
