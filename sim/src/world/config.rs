//! The runtime snapshot the request engine reads, built as the proxy builds it: a configuration
//! validated by weir-core ([`validate_config`]) and [`Runtime::build`]. The simulator publishes
//! its own pool snapshots into it one pool at a time ([`Runtime::with_pool`]), because its
//! reloads and warm-ups are per pool.

use weir_core::Instant;
use weir_core::config::{
    BackendConfig, BalancingConfig, Config, MapSecrets, PoolConfig, RouteConfig, validate_config,
};
use weir_core::rng::WyRand;
use weir_core::runtime::Runtime;
use weir_core::select::PolicyKind;

use crate::scenario::Setup;

fn balancing(policy: PolicyKind) -> BalancingConfig {
    BalancingConfig {
        policy: policy.as_str().to_owned(),
        hash_key: (policy == PolicyKind::ConsistentHash).then(|| "client_address".to_owned()),
    }
}

fn backends(s: &Setup, pool: usize) -> Vec<BackendConfig> {
    s.pools[pool]
        .backends
        .iter()
        .map(|&i| BackendConfig {
            id: s.backends[i].id.clone(),
            url: s.backends[i].url.clone(),
            weight: s.backends[i].weight,
            disabled: false,
            send_proxy_protocol: None,
            protocol: s.backends[i].h2.as_ref().map(|_| "h2c".to_owned()),
        })
        .collect()
}

/// Pool 0 is the default pool; the others are named `p1`, `p2`, … in order.
fn pool_name(pool: usize) -> String {
    if pool == 0 {
        "default".to_owned()
    } else {
        format!("p{pool}")
    }
}

/// The configuration of `s` in generation `generation` (see [`Setup::generations`]): its pools, routes
/// and bulkheads, retry policy and budget, rate limit and its store, request timers and upstream
/// slot limit. The gate is the world's own (`Services`), as in the proxy.
fn config(s: &Setup, generation: usize) -> Config {
    let mut cfg = Config::default();
    cfg.server.retry = s.retry.clone();
    if let Some(g) = s.generations.get(generation) {
        cfg.server.retry.max_attempts = g.max_attempts;
        cfg.server.retry.per_try_timeout = g.per_try_timeout;
    }
    if let Some(t) = s.timers {
        cfg.server.read_timeout = t.read_timeout;
        cfg.server.write_timeout = t.write_timeout;
        cfg.server.upstream.response_header_timeout = t.response_header_timeout;
    }
    if let Some(c) = s.conn_timers {
        cfg.server.read_header_timeout = c.read_header_timeout;
        cfg.server.idle_timeout = c.idle_timeout;
    }
    cfg.server.upstream.max_concurrent_requests = s.max_concurrent_requests;
    cfg.backends = backends(s, 0);
    cfg.balancing = balancing(s.pools[0].policy);
    cfg.pools = (1..s.pools.len())
        .map(|p| PoolConfig {
            name: pool_name(p),
            balancing: balancing(s.pools[p].policy),
            backends: backends(s, p),
            dns: None,
        })
        .collect();
    cfg.routes = s
        .routes
        .iter()
        .map(|r| RouteConfig {
            prefix: r.prefix.to_owned(),
            pool: pool_name(r.pool),
            max_concurrent_requests: r.limit,
            // The world's scenarios mirror nothing; `mirror_isolation` (sim/src/mirror.rs) is
            // the mirroring scenario.
            mirror: None,
        })
        .collect();
    if let Some((capacity, refill)) = s.rate {
        cfg.rate_limit.enabled = true;
        cfg.rate_limit.capacity = capacity;
        cfg.rate_limit.refill_per_second = refill;
    }
    if let Some(store) = &s.store {
        cfg.rate_limit.storage = "redis".to_owned();
        cfg.rate_limit.failure_mode = store.failure_mode.as_str().to_owned();
        cfg.rate_limit.operation_timeout = store.operation_timeout;
    }
    cfg
}

/// The runtime of `s` at start (generation 0).
pub(super) fn runtime(s: &Setup, seed: u64) -> Result<Runtime, String> {
    let valid = validate_config(config(s, 0), &MapSecrets::new()).map_err(|e| e.to_string())?;
    Runtime::build(valid, None, Instant::ZERO, &mut WyRand::new(seed)).map_err(|e| e.to_string())
}

/// The runtime of generation `generation`, built from `previous` as a reload builds it (C-CONF-4).
pub(super) fn reload(
    s: &Setup,
    generation: usize,
    previous: &Runtime,
    now: Instant,
    rng: &mut WyRand,
) -> Result<Runtime, String> {
    let valid =
        validate_config(config(s, generation), &MapSecrets::new()).map_err(|e| e.to_string())?;
    Runtime::build(valid, Some(previous), now, rng).map_err(|e| e.to_string())
}
