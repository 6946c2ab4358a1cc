//! Validation of the backend side: the retry policy, active health checks, the pool parameters (breaker, slow
//! start, slot limit), backends, pools, balancing and routes (C-CONF-1, C-POOL-1, C-ROUTE-1).

#[allow(clippy::wildcard_imports)]
use super::*;
use crate::adaptive::AdaptiveParams;
use crate::backend::Protocol;
use crate::config::OutlierConfig;
use crate::outlier::{OutlierError, OutlierParams};

/// Name of the default pool in `routes[].pool`.
pub const DEFAULT_POOL: &str = "default";

/// `health_check` probe settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// http, https, tcp or grpc.
    pub mode: ProbeMode,
    /// Joined to each backend URL's path (http and https).
    pub path: String,
    /// The service a grpc probe asks about (`""`: the whole server).
    pub grpc_service: String,
    /// Interval, jitter, timeout, thresholds, concurrency, expected statuses.
    pub params: HealthParams,
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
    /// Backends in config order; for a DNS pool, the addresses of the last good answer
    /// (none until the first, C-DISC-1).
    pub backends: Vec<BackendSpec>,
    /// `dns`: the pool's backends are the addresses of a name (C-DISC-1).
    pub dns: Option<DnsSpec>,
}

/// `pools.<name>.dns`, validated (C-DISC-1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsSpec {
    /// The name resolved (lower case, no trailing dot).
    pub name: String,
    /// The backends' port.
    pub port: u16,
    /// How often the name is resolved again.
    pub interval: Duration,
    /// `https` instead of `http`.
    pub https: bool,
    /// The backends' protocol.
    pub protocol: Protocol,
}

/// Smallest `pools.<name>.dns.interval`: more often is a query flood, not freshness.
pub const MIN_DNS_INTERVAL: Duration = Duration::from_secs(1);
/// Largest `pools.<name>.dns.interval`.
pub const MAX_DNS_INTERVAL: Duration = Duration::from_secs(3600);

/// A DNS name as a resolver takes it: 1..=253 characters, labels of 1..=63 letters, digits,
/// `-` and `_`, a trailing dot allowed; an IP address literal also passes (it resolves to itself).
pub(super) fn valid_dns_name(name: &str) -> bool {
    if name.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    let name = name.strip_suffix('.').unwrap_or(name);
    (1..=253).contains(&name.len())
        && name.split('.').all(|l| {
            (1..=63).contains(&l.len())
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// `pools.<name>.dns`: every field checked, each error naming its key.
fn check_dns(d: &DnsConfig, base: &str, grpc_probe: bool, c: &mut Check<'_>) -> Option<DnsSpec> {
    let mut ok = true;
    if !d.name.is_empty() && !valid_dns_name(&d.name) {
        c.err(
            &format!("{base}.name"),
            format!(
                "{:?} is not a DNS name (labels of letters, digits, - and _, at most 253                  characters)",
                d.name
            ),
        );
        ok = false;
    }
    ok &= !d.name.is_empty() && d.port != 0;
    if !(MIN_DNS_INTERVAL..=MAX_DNS_INTERVAL).contains(&d.interval) {
        c.err(
            &format!("{base}.interval"),
            format!(
                "must be within 1s..=1h, got {}",
                crate::config::format_duration(d.interval)
            ),
        );
        ok = false;
    }
    let https = match d.scheme.as_str() {
        "http" => false,
        "https" => true,
        other => {
            c.err(
                &format!("{base}.scheme"),
                format!("must be http or https, got {other:?}"),
            );
            ok = false;
            false
        }
    };
    let protocol = Protocol::parse(&d.protocol);
    match protocol {
        None => {
            c.err(
                &format!("{base}.protocol"),
                format!(
                    "must be one of {}; got {:?}",
                    Protocol::NAMES.join(", "),
                    d.protocol
                ),
            );
            ok = false;
        }
        Some(Protocol::H2) if !https => {
            c.err(
                &format!("{base}.protocol"),
                "h2 is HTTP/2 over TLS: the scheme must be https",
            );
            ok = false;
        }
        Some(Protocol::H2c) if https => {
            c.err(
                &format!("{base}.protocol"),
                "h2c is HTTP/2 over plain TCP: use h2 with scheme https",
            );
            ok = false;
        }
        Some(Protocol::Http1) if grpc_probe => {
            c.err(
                &format!("{base}.protocol"),
                "health_check.mode grpc needs HTTP/2: set protocol h2c (plain) or h2 (TLS), or                  choose another health_check.mode",
            );
            ok = false;
        }
        _ => {}
    }
    let name = d
        .name
        .strip_suffix('.')
        .unwrap_or(&d.name)
        .to_ascii_lowercase();
    (ok && protocol.is_some()).then(|| DnsSpec {
        name,
        port: d.port,
        interval: d.interval,
        https,
        protocol: protocol.unwrap_or(Protocol::Http1),
    })
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
    /// The route's mirror (C-MIRROR-1), its pool resolved.
    pub mirror: Option<MirrorSpec>,
}

/// `routes[].mirror` resolved (C-MIRROR-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MirrorSpec {
    /// Index into [`ValidConfig::pools`](super::ValidConfig::pools) of the mirror pool.
    pub pool: usize,
    /// The share of the route's requests mirrored, 0..=100.
    pub percent: u8,
}

/// RFC 7230 `tchar` (also the set of cookie-name characters of RFC 6265).
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

pub(super) fn check_health(h: &HealthCheckConfig, c: &mut Check<'_>) -> Option<HealthCheck> {
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
    if h.mode != ProbeMode::Grpc && !h.grpc_service.is_empty() {
        c.err(
            "health_check.grpc_service",
            format!(
                "grpc_service is used only by mode grpc, not {}",
                h.mode.as_str()
            ),
        );
    }
    if h.grpc_service.chars().any(char::is_control) {
        c.err(
            "health_check.grpc_service",
            "a service name has no control characters",
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
                    grpc_service: h.grpc_service.clone(),
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

pub(super) fn check_pool_params(cfg: &Config, c: &mut Check<'_>) -> Option<PoolParams> {
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
    let outlier = check_outlier(&h.outlier, c);
    let a = &cfg.server.upstream.adaptive_concurrency;
    let adaptive = AdaptiveParams::new(
        a.enabled,
        a.min_limit,
        a.max_limit,
        cfg.server.upstream.max_concurrent_requests,
        a.window,
        a.rtt_tolerance,
        a.backoff_ratio,
    )
    .map_err(|e| {
        let key = format!("server.upstream.adaptive_concurrency.{}", e.key());
        c.core_err(&key, e.to_string());
    })
    .ok();
    Some(PoolParams {
        max_concurrent_requests: cfg.server.upstream.max_concurrent_requests,
        breaker: breaker?,
        slow_start: slow_start?,
        outlier: outlier?,
        // Its range is checked with the other bounds.
        retry_after_max: h.retry_after_max,
        adaptive: adaptive?,
    })
}

/// `health_check.outlier` (C-OUT-1, C-OUT-2): every field checked, each error naming its key.
fn check_outlier(o: &OutlierConfig, c: &mut Check<'_>) -> Option<OutlierParams> {
    let factor = OutlierParams::stdev_factor_milli(o.success_rate_stdev_factor);
    if factor.is_none() {
        c.core_err(
            "health_check.outlier.success_rate_stdev_factor",
            OutlierError::StdevFactor.to_string(),
        );
    }
    let params = OutlierParams {
        enabled: o.enabled,
        interval: o.interval,
        base_ejection_time: o.base_ejection_time,
        max_ejection_time: o.max_ejection_time,
        max_ejection_percent: o.max_ejection_percent,
        failure_percentage_threshold: o.failure_percentage_threshold,
        failure_percentage_minimum_hosts: o.failure_percentage_minimum_hosts,
        failure_percentage_request_volume: o.failure_percentage_request_volume,
        success_rate_minimum_hosts: o.success_rate_minimum_hosts,
        success_rate_request_volume: o.success_rate_request_volume,
        // Checked above; the other keys are still checked with a valid stand-in.
        success_rate_stdev_factor_milli: factor.unwrap_or(0),
    };
    let errors = params.errors();
    for e in &errors {
        c.core_err(&format!("health_check.outlier.{}", e.key()), e.to_string());
    }
    (errors.is_empty() && factor.is_some()).then_some(params)
}

pub(super) fn valid_pool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

pub(super) fn valid_id(id: &str) -> bool {
    (1..=128).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic())
}

/// A backend URL: http or https with a host; no userinfo, query or fragment (C-POOL-1).
pub(super) fn check_url(url: &str) -> Result<(), String> {
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

pub(super) fn check_balancing(
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

pub(super) fn check_backends(
    backends: &[BackendConfig],
    base: &str,
    params: &PoolParams,
    seen: &mut BTreeMap<String, String>,
    c: &mut Check<'_>,
    grpc_probe: bool,
) -> Vec<BackendSpec> {
    let mut urls: BTreeMap<&str, usize> = BTreeMap::new();
    let mut out = Vec::with_capacity(backends.len());
    for (i, b) in backends.iter().enumerate() {
        let path = format!("{base}[{i}]");
        let send_proxy = match b.send_proxy_protocol.as_deref() {
            None | Some("off") => None,
            Some("v1") => Some(crate::proxy_proto::Version::V1),
            Some("v2") => Some(crate::proxy_proto::Version::V2),
            Some(other) => {
                c.err(
                    &format!("{path}.send_proxy_protocol"),
                    format!("must be one of off, v1, v2; got {other:?}"),
                );
                None
            }
        };
        let protocol = check_protocol(b, &path, send_proxy.is_some(), c);
        if grpc_probe && matches!(b.protocol.as_deref(), None | Some("http1")) {
            // gRPC is HTTP/2 only: a health probe over HTTP/1.1 could never pass, and probing
            // such a backend over h2c behind its back would test a protocol its traffic never
            // uses. Refused, so the operator says what the backend speaks.
            c.err(
                &format!("{path}.protocol"),
                format!(
                    "health_check.mode grpc needs HTTP/2: backend {:?} speaks http1; set \
                     protocol h2c (plain) or h2 (TLS), or choose another health_check.mode",
                    b.id
                ),
            );
        }
        let spec = BackendSpec {
            id: b.id.clone(),
            url: b.url.clone(),
            weight: b.weight,
            disabled: b.disabled,
            send_proxy,
            protocol,
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

/// C-GRPC-1: `protocol` is one of the names; `h2` needs an `https` URL (ALPN is TLS's), and
/// `h2c` a plain one. A PROXY header names one client, so it cannot begin a connection that
/// HTTP/2 shares between clients.
fn check_protocol(b: &BackendConfig, path: &str, send_proxy: bool, c: &mut Check<'_>) -> Protocol {
    let key = format!("{path}.protocol");
    let Some(name) = b.protocol.as_deref() else {
        return Protocol::Http1;
    };
    let Some(protocol) = Protocol::parse(name) else {
        c.err(
            &key,
            format!(
                "must be one of {}; got {name:?}",
                Protocol::NAMES.join(", ")
            ),
        );
        return Protocol::Http1;
    };
    let https = b.url.starts_with("https://");
    match protocol {
        Protocol::H2 if !https && !b.url.is_empty() => {
            c.err(&key, "h2 is HTTP/2 over TLS: the url must be https://");
        }
        Protocol::H2c if https => {
            c.err(
                &key,
                "h2c is HTTP/2 over plain TCP: use h2 for an https:// url",
            );
        }
        _ => {}
    }
    if protocol.is_h2() && send_proxy {
        c.err(
            &key,
            format!("{name} shares connections between clients: send_proxy_protocol must be off"),
        );
    }
    protocol
}

pub(super) type Routing = (Vec<PoolSpec>, Vec<RouteSpec>, Option<RouteTable>);

pub(super) fn check_pools_and_routes(cfg: &Config, c: &mut Check<'_>) -> Routing {
    let pools = check_pools(cfg, c);
    let (routes, candidates, catch_all) = check_routes(cfg, c);
    let table = route_table(candidates, c);
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

/// The default pool and every named pool: names, backends (ids unique across all pools) and
/// balancing.
fn check_pools(cfg: &Config, c: &mut Check<'_>) -> Vec<PoolSpec> {
    // Weight and id checks do not depend on the pool parameters; the defaults stand in when the
    // configured ones are invalid (already reported).
    let params = PoolParams::default();
    let mut seen_ids = BTreeMap::new();
    let mut pools = Vec::with_capacity(cfg.pools.len() + 1);

    let grpc_probe = cfg.health_check.mode == ProbeMode::Grpc;
    let default_backends = check_backends(
        &cfg.backends,
        "backends",
        &params,
        &mut seen_ids,
        c,
        grpc_probe,
    );
    let default_balancing = check_balancing(&cfg.balancing, "balancing", c);
    if let Some((policy, hash_key)) = default_balancing {
        pools.push(PoolSpec {
            name: DEFAULT_POOL.to_owned(),
            policy,
            hash_key,
            backends: default_backends,
            dns: None,
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
            grpc_probe,
        );
        let dns = p
            .dns
            .as_ref()
            .and_then(|d| check_dns(d, &format!("{base}.dns"), grpc_probe, c));
        match (&p.dns, p.backends.is_empty()) {
            (Some(_), false) => c.err(
                &base,
                format!(
                    "pool {:?} takes its backends from either `backends` or `dns`, not both",
                    p.name
                ),
            ),
            (None, true) => c.err(
                &format!("{base}.backends"),
                format!(
                    "pool {:?} needs at least one backend, or `dns` to take them from a name",
                    p.name
                ),
            ),
            _ => {}
        }
        if let Some((policy, hash_key)) =
            check_balancing(&p.balancing, &format!("{base}.balancing"), c)
        {
            pools.push(PoolSpec {
                name: p.name.clone(),
                policy,
                hash_key,
                backends,
                dns,
            });
        }
    }
    pools
}

/// A route that passed its own checks: its index in `routes`, its prefix and its pool's index.
type Candidate<'a> = (usize, &'a str, usize);

/// Each route on its own: its pool exists, its bulkhead and prefix are valid. Returns the routes
/// that passed, the candidates for the table and whether some route catches every path.
fn check_routes<'a>(
    cfg: &'a Config,
    c: &mut Check<'_>,
) -> (Vec<RouteSpec>, Vec<Candidate<'a>>, bool) {
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
        let mirror = route
            .mirror
            .as_ref()
            .and_then(|m| check_mirror(cfg, &path, &route.prefix, m, c));
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
                mirror,
            });
        }
    }
    (routes, candidates, catch_all)
}

/// A route's mirror (C-MIRROR-1): its pool must exist (the error names the route and the
/// pool) and its percent be at most 100.
fn check_mirror(
    cfg: &Config,
    path: &str,
    prefix: &str,
    m: &crate::config::MirrorConfig,
    c: &mut Check<'_>,
) -> Option<MirrorSpec> {
    let pool = if m.pool == DEFAULT_POOL {
        Some(0)
    } else {
        cfg.pools
            .iter()
            .position(|p| p.name == m.pool)
            .map(|i| i + 1)
    };
    if pool.is_none() && !m.pool.is_empty() {
        let mut names: Vec<&str> = vec![DEFAULT_POOL];
        names.extend(cfg.pools.iter().map(|p| p.name.as_str()));
        c.err(
            &format!("{path}.mirror.pool"),
            format!(
                "route {prefix:?} mirrors to unknown pool {:?}, expected one of {}",
                m.pool,
                names.join(", ")
            ),
        );
    }
    let percent = u8::try_from(m.percent).ok().filter(|p| *p <= 100);
    if percent.is_none() {
        c.err(
            &format!("{path}.mirror.percent"),
            format!("must be between 0 and 100, got {}", m.percent),
        );
    }
    Some(MirrorSpec {
        pool: pool?,
        percent: percent?,
    })
}

/// The route table of the candidates, each duplicate prefix reported and left out.
fn route_table(mut candidates: Vec<Candidate<'_>>, c: &mut Check<'_>) -> Option<RouteTable> {
    loop {
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
    }
}

pub(super) fn check_retry(p: &RetryParams, c: &mut Check<'_>) -> Option<RetryPolicy> {
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
                    "backoff_max" => params.backoff_max = params.backoff_base,
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
