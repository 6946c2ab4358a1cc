//! weir's configuration: YAML text in, a [`ValidConfig`] of typed core parameters out, or every
//! error at once (C-CONF-0..3, C-CONF-7). See docs/configuration.md for every key.
//!
//! Parsing is strict (C-CONF-1) and runs in three phases so that one pass lists every error, each
//! with its field path and position, instead of stopping at the first like a serde derive does:
//!
//! 1. `tree`: serde-saphyr parses the text into a value tree whose nodes keep their line and
//!    column (`serde_saphyr::Spanned`). Budgets bound size, nodes, depth and alias expansion (a
//!    YAML bomb fails fast), booleans are strict (`yes` is not `true`), duplicate keys and unknown
//!    tags are rejected. Only a syntax error stops here.
//! 2. `schema` + `read`: the tree is read against the schema, field by field. A wrong type, an
//!    unparsable duration or an unknown field records an error and the field's default stands
//!    in, so reading goes on.
//! 3. `validate`: ranges and cross-field rules, checked by the core constructors themselves
//!    (`HealthParams::new`, `RetryPolicy::new`, ...) so no range is written twice, and secrets,
//!    resolved through a caller-supplied [`SecretSource`] (core does no IO, C-CONF-3).
//!
//! This is the approach of Envoy's and Kubernetes' config validators (collect, then report all)
//! rather than serde's fail-fast; the value tree with spans is serde-saphyr's `Spanned`, the
//! schema reader is hand-written because serde's derive cannot keep going after an error or name
//! every unknown field. Durations follow Go's `time.ParseDuration`, the reference balancer's
//! format (`50ms`, `5s`, `1m30s`).
//!
//! [`diff`] compares two valid configurations and says, per changed field, whether the reload
//! applies it or it needs a restart (C-CONF-7).

use std::collections::BTreeSet;

mod diff;
mod duration;
mod error;
mod read;
mod schema;
mod secret;
mod tree;
mod validate;

#[cfg(all(test, not(loom)))]
mod examples;
#[cfg(test)]
mod tests;

pub use diff::{Apply, Change, ConfigDiff, classify, diff};
pub use duration::{format_duration, parse_duration};
pub use error::{ConfigError, ConfigErrors};
pub use schema::{
    AdaptiveConfig, BackendConfig, BalancingConfig, CertPairConfig, Config, DEFAULT_DNS_INTERVAL,
    DatabaseConfig, DnsConfig, HealthCheckConfig, ManagementConfig, MirrorConfig, OutlierConfig,
    OverloadConfig, PoolConfig, ProbeMode, RateLimitConfig, RedisConfig, RouteConfig, ServerConfig,
    TlsConfig, UpstreamConfig,
};
pub use secret::{MapSecrets, Secret, SecretSource};
pub use tree::{MAX_CONFIG_BYTES, Pos};
pub use validate::{
    CertPair, DEFAULT_POOL, DatabaseSettings, DnsSpec, HashKey, HealthCheck, HostPort, ListenerTls,
    MAX_HEADER_BYTES_LIMIT, MIN_HEADER_BYTES, ManagementSettings, MirrorSpec, PoolSpec,
    ProxyProtocol, RedisMode, RedisSettings, RouteSpec, ServerSettings, TlsVersion,
    UpstreamSettings, UpstreamTls, ValidConfig,
};

use read::{Field, Path, Reader};

/// Parse, read and validate a configuration; resolve its secrets through `secrets`.
/// The one entry point for start, SIGHUP reload (C-CONF-4) and tests.
pub fn load(text: &str, secrets: &dyn SecretSource) -> Result<ValidConfig, ConfigErrors> {
    let root = tree::parse(text).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            path: String::new(),
            pos: e.pos,
            message: e.message,
        }])
    })?;
    let mut r = Reader::default();
    let cfg = schema::from_tree::read_config(
        &mut r,
        &Field {
            node: Some(&root),
            path: Path::root(),
            pos: None,
        },
    );
    let valid = validate::validate(cfg, &mut r, secrets);
    match valid {
        Some(v) if r.errors.is_empty() => Ok(v),
        _ => {
            let mut errors = r.errors;
            // Document order; errors without a position (rare) last; stable otherwise.
            errors.sort_by_key(|e| e.pos.map_or((u32::MAX, u32::MAX), |p| (p.line, p.column)));
            if errors.is_empty() {
                errors.push(ConfigError {
                    path: String::new(),
                    pos: None,
                    message: "invalid configuration".to_owned(),
                });
            }
            Err(ConfigErrors(errors))
        }
    }
}

/// Validate a configuration that is already a [`Config`] value (no text): phase 3 of [`load`],
/// for the management API's `PATCH` and the reload planner, which edit the configuration in
/// force and must pass it through the same checks a reload does (C-CONF-8).
///
/// The value is written back into a value tree and read again by the same schema reader that
/// [`load`] uses, so the result is exactly what loading an equivalent file gives: the same
/// checks, the same values in force for [`diff`]. Errors carry paths but no positions (there is
/// no text). A value that cannot survive that round trip (for example a non-finite number) is
/// reported at its path like any invalid value.
pub fn validate_config(
    cfg: Config,
    secrets: &dyn SecretSource,
) -> Result<ValidConfig, ConfigErrors> {
    let root = unread::config(&cfg);
    let mut r = Reader::default();
    let read = schema::from_tree::read_config(
        &mut r,
        &Field {
            node: Some(&root),
            path: Path::root(),
            pos: None,
        },
    );
    if r.errors.is_empty() && read != cfg {
        // Only a field the writer below forgot could get here (a test walks every field).
        r.error("", None, "the configuration did not survive re-reading");
    }
    let valid = validate::validate(cfg, &mut r, secrets);
    match valid {
        Some(v) if r.errors.is_empty() => Ok(v),
        _ => {
            let mut errors = r.errors;
            for e in &mut errors {
                e.pos = None;
            }
            if errors.is_empty() {
                errors.push(ConfigError {
                    path: String::new(),
                    pos: None,
                    message: "invalid configuration".to_owned(),
                });
            }
            Err(ConfigErrors(errors))
        }
    }
}

/// A [`Config`] written back as the value tree the reader reads, field by field (the inverse of
/// `schema::from_tree::read_config`). Empty required strings are left out, so they are reported
/// as missing exactly as in a file.
mod unread {
    use core::time::Duration;

    use super::schema::{
        AdaptiveConfig, BackendConfig, BalancingConfig, Config, DatabaseConfig, DnsConfig,
        HealthCheckConfig, ManagementConfig, OutlierConfig, RateLimitConfig, RedisConfig,
        RouteConfig, ServerConfig, TlsConfig,
    };
    use super::tree::{Node, Value};
    use crate::retry::RetryParams;

    fn node(value: Value) -> Node {
        Node { value, pos: None }
    }

    fn map(entries: Vec<(&str, Option<Value>)>) -> Node {
        node(Value::Map(
            entries
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (node(Value::Str(k.to_owned())), node(v))))
                .collect(),
        ))
    }

    fn int(v: impl Into<i128>) -> Option<Value> {
        Some(Value::Int(v.into()))
    }

    fn boolean(v: bool) -> Option<Value> {
        Some(Value::Bool(v))
    }

    fn float(v: f64) -> Option<Value> {
        Some(Value::Float(v))
    }

    fn string(v: &str) -> Option<Value> {
        Some(Value::Str(v.to_owned()))
    }

    fn required(v: &str) -> Option<Value> {
        (!v.is_empty()).then(|| Value::Str(v.to_owned()))
    }

    fn opt_string(v: Option<&String>) -> Option<Value> {
        v.map(|s| Value::Str(s.clone()))
    }

    /// In nanoseconds, which `parse_duration` reads back exactly (a duration beyond `u64`
    /// nanoseconds is reported as too long, as it would be in a file).
    fn duration(d: Duration) -> Option<Value> {
        Some(Value::Str(format!("{}ns", d.as_nanos())))
    }

    fn strings(v: &[String]) -> Option<Value> {
        Some(Value::Seq(
            v.iter().map(|s| node(Value::Str(s.clone()))).collect(),
        ))
    }

    fn statuses(v: &[u16]) -> Option<Value> {
        Some(Value::Seq(
            v.iter().map(|s| node(Value::Int((*s).into()))).collect(),
        ))
    }

    fn sub(n: Node) -> Option<Value> {
        Some(n.value)
    }

    pub(super) fn config(c: &Config) -> Node {
        map(vec![
            ("server", sub(server(&c.server))),
            ("health_check", sub(health(&c.health_check))),
            ("rate_limit", sub(rate(&c.rate_limit))),
            ("redis", sub(redis(&c.redis))),
            ("database", sub(database(&c.database))),
            ("management", sub(management(&c.management))),
            ("backends", Some(backends(&c.backends))),
            ("balancing", sub(balancing(&c.balancing))),
            (
                "pools",
                Some(Value::Map(
                    c.pools
                        .iter()
                        .map(|p| {
                            let pool = map(vec![
                                ("balancing", sub(balancing(&p.balancing))),
                                ("backends", Some(backends(&p.backends))),
                                ("dns", p.dns.as_ref().map(|d| dns(d).value)),
                            ]);
                            (node(Value::Str(p.name.clone())), pool)
                        })
                        .collect(),
                )),
            ),
            (
                "routes",
                Some(Value::Seq(c.routes.iter().map(route).collect())),
            ),
        ])
    }

    fn server(s: &ServerConfig) -> Node {
        let u = &s.upstream;
        let o = &s.overload;
        map(vec![
            ("port", int(s.port)),
            ("trusted_proxies", strings(&s.trusted_proxies)),
            ("access_log_sample_rate", float(s.access_log_sample_rate)),
            (
                "access_log_include_path",
                boolean(s.access_log_include_path),
            ),
            ("allow_trace", boolean(s.allow_trace)),
            ("read_header_timeout", duration(s.read_header_timeout)),
            ("read_timeout", duration(s.read_timeout)),
            ("write_timeout", duration(s.write_timeout)),
            ("idle_timeout", duration(s.idle_timeout)),
            ("shutdown_delay", duration(s.shutdown_delay)),
            ("shutdown_timeout", duration(s.shutdown_timeout)),
            ("max_header_bytes", int(s.max_header_bytes)),
            (
                "max_connections",
                s.max_connections.map(|n| Value::Int(n.into())),
            ),
            (
                "upstream",
                sub(map(vec![
                    ("dial_timeout", duration(u.dial_timeout)),
                    ("tls_handshake_timeout", duration(u.tls_handshake_timeout)),
                    (
                        "response_header_timeout",
                        duration(u.response_header_timeout),
                    ),
                    (
                        "expect_continue_timeout",
                        duration(u.expect_continue_timeout),
                    ),
                    ("idle_conn_timeout", duration(u.idle_conn_timeout)),
                    ("max_idle_conns", int(u.max_idle_conns)),
                    ("max_idle_conns_per_host", int(u.max_idle_conns_per_host)),
                    ("max_conns_per_host", int(u.max_conns_per_host)),
                    ("max_concurrent_requests", int(u.max_concurrent_requests)),
                    ("mirror_max_in_flight", int(u.mirror_max_in_flight)),
                    (
                        "adaptive_concurrency",
                        sub(adaptive(&u.adaptive_concurrency)),
                    ),
                    ("tls_ca_file", opt_string(u.tls_ca_file.as_ref())),
                    ("tls_server_name", opt_string(u.tls_server_name.as_ref())),
                    ("tls_cert_file", opt_string(u.tls_cert_file.as_ref())),
                    ("tls_key_file", opt_string(u.tls_key_file.as_ref())),
                ])),
            ),
            ("retry", sub(retry(&s.retry))),
            (
                "overload",
                sub(map(vec![
                    ("max_concurrent_requests", int(o.max_concurrent_requests)),
                    ("max_queue", o.max_queue.map(|q| Value::Int(q.into()))),
                    ("queue_timeout", duration(o.queue_timeout)),
                ])),
            ),
            ("proxy_protocol", string(&s.proxy_protocol)),
            ("proxy_protocol_trusted", strings(&s.proxy_protocol_trusted)),
            ("tls", sub(tls(&s.tls))),
            ("resolver", strings(&s.resolver)),
        ])
    }

    fn dns(d: &DnsConfig) -> Node {
        map(vec![
            ("name", required(&d.name)),
            ("port", (d.port != 0).then(|| Value::Int(d.port.into()))),
            ("interval", duration(d.interval)),
            ("scheme", string(&d.scheme)),
            ("protocol", string(&d.protocol)),
        ])
    }

    fn adaptive(a: &AdaptiveConfig) -> Node {
        map(vec![
            ("enabled", boolean(a.enabled)),
            ("min_limit", int(a.min_limit)),
            ("max_limit", a.max_limit.map(|n| Value::Int(n.into()))),
            ("window", duration(a.window)),
            ("rtt_tolerance", float(a.rtt_tolerance)),
            ("backoff_ratio", float(a.backoff_ratio)),
        ])
    }

    fn tls(t: &TlsConfig) -> Node {
        let certs = t
            .certificates
            .iter()
            .map(|c| {
                map(vec![
                    ("cert_file", required(&c.cert_file)),
                    ("key_file", required(&c.key_file)),
                ])
            })
            .collect();
        map(vec![
            ("certificates", Some(Value::Seq(certs))),
            ("min_version", string(&t.min_version)),
            ("handshake_timeout", duration(t.handshake_timeout)),
            ("client_ca_file", opt_string(t.client_ca_file.as_ref())),
        ])
    }

    fn retry(r: &RetryParams) -> Node {
        map(vec![
            ("max_attempts", int(r.max_attempts)),
            ("per_try_timeout", duration(r.per_try_timeout)),
            ("body_limit", int(r.body_limit)),
            ("methods", strings(&r.methods)),
            ("statuses", statuses(&r.statuses)),
            ("budget_capacity", int(r.budget_capacity)),
            (
                "budget_refill_per_second",
                float(r.budget_refill_per_second),
            ),
            ("backoff_base", duration(r.backoff_base)),
            ("backoff_max", duration(r.backoff_max)),
            ("hedge_delay", duration(r.hedge_delay)),
        ])
    }

    fn health(h: &HealthCheckConfig) -> Node {
        map(vec![
            ("mode", string(h.mode.as_str())),
            ("path", string(&h.path)),
            ("grpc_service", string(&h.grpc_service)),
            ("interval", duration(h.interval)),
            ("timeout", duration(h.timeout)),
            ("failure_threshold", int(h.failure_threshold)),
            ("success_threshold", int(h.success_threshold)),
            ("max_concurrency", int(h.max_concurrency)),
            ("jitter", duration(h.jitter)),
            ("cooldown", duration(h.cooldown)),
            ("max_cooldown", duration(h.max_cooldown)),
            ("half_open_requests", int(h.half_open_requests)),
            ("slow_start", duration(h.slow_start)),
            (
                "slow_start_minimum_percent",
                int(h.slow_start_minimum_percent),
            ),
            ("expected_statuses", statuses(&h.expected_statuses)),
            ("outlier", sub(outlier(&h.outlier))),
            ("retry_after_max", duration(h.retry_after_max)),
        ])
    }

    fn outlier(o: &OutlierConfig) -> Node {
        map(vec![
            ("enabled", boolean(o.enabled)),
            ("interval", duration(o.interval)),
            ("base_ejection_time", duration(o.base_ejection_time)),
            ("max_ejection_time", duration(o.max_ejection_time)),
            ("max_ejection_percent", int(o.max_ejection_percent)),
            (
                "failure_percentage_threshold",
                int(o.failure_percentage_threshold),
            ),
            (
                "failure_percentage_minimum_hosts",
                int(o.failure_percentage_minimum_hosts),
            ),
            (
                "failure_percentage_request_volume",
                int(o.failure_percentage_request_volume),
            ),
            (
                "success_rate_minimum_hosts",
                int(o.success_rate_minimum_hosts),
            ),
            (
                "success_rate_request_volume",
                int(o.success_rate_request_volume),
            ),
            (
                "success_rate_stdev_factor",
                float(o.success_rate_stdev_factor),
            ),
        ])
    }

    fn rate(r: &RateLimitConfig) -> Node {
        map(vec![
            ("enabled", boolean(r.enabled)),
            ("storage", string(&r.storage)),
            ("failure_mode", string(&r.failure_mode)),
            ("dry_run", boolean(r.dry_run)),
            ("capacity", int(r.capacity)),
            ("refill_per_second", float(r.refill_per_second)),
            ("operation_timeout", duration(r.operation_timeout)),
            ("local_shards", int(r.local_shards)),
            ("local_max_buckets", int(r.local_max_buckets)),
            ("ipv4_prefix_bits", int(r.ipv4_prefix_bits)),
            ("ipv6_prefix_bits", int(r.ipv6_prefix_bits)),
            ("cleanup_interval", duration(r.cleanup_interval)),
            ("retention", duration(r.retention)),
        ])
    }

    fn redis(r: &RedisConfig) -> Node {
        map(vec![
            ("mode", string(&r.mode)),
            ("address", string(&r.address)),
            ("addresses", strings(&r.addresses)),
            ("sentinel_master", opt_string(r.sentinel_master.as_ref())),
            ("tls", boolean(r.tls)),
            ("tls_ca_file", opt_string(r.tls_ca_file.as_ref())),
            ("tls_cert_file", opt_string(r.tls_cert_file.as_ref())),
            ("tls_key_file", opt_string(r.tls_key_file.as_ref())),
            ("password_env", opt_string(r.password_env.as_ref())),
            (
                "sentinel_password_env",
                opt_string(r.sentinel_password_env.as_ref()),
            ),
            ("database", int(r.database)),
            ("pool_size", int(r.pool_size)),
            ("dial_timeout", duration(r.dial_timeout)),
            ("read_timeout", duration(r.read_timeout)),
            ("write_timeout", duration(r.write_timeout)),
        ])
    }

    fn database(d: &DatabaseConfig) -> Node {
        map(vec![
            ("host", opt_string(d.host.as_ref())),
            ("port", d.port.map(|p| Value::Int(p.into()))),
            ("user", opt_string(d.user.as_ref())),
            ("name", opt_string(d.name.as_ref())),
            ("sslmode", opt_string(d.sslmode.as_ref())),
            ("password_env", opt_string(d.password_env.as_ref())),
            ("connect_timeout", duration(d.connect_timeout)),
            ("max_open_connections", int(d.max_open_connections)),
        ])
    }

    fn management(m: &ManagementConfig) -> Node {
        map(vec![
            ("enabled", boolean(m.enabled)),
            ("address", string(&m.address)),
            ("auth_token_env", string(&m.auth_token_env)),
            ("allow_insecure", boolean(m.allow_insecure)),
            ("enable_pprof", boolean(m.enable_pprof)),
            ("runtime_mutations", boolean(m.runtime_mutations)),
            ("write_timeout", duration(m.write_timeout)),
        ])
    }

    fn backends(list: &[BackendConfig]) -> Value {
        Value::Seq(
            list.iter()
                .map(|b| {
                    map(vec![
                        ("id", required(&b.id)),
                        ("url", required(&b.url)),
                        ("weight", int(b.weight)),
                        ("disabled", boolean(b.disabled)),
                        (
                            "send_proxy_protocol",
                            opt_string(b.send_proxy_protocol.as_ref()),
                        ),
                        ("protocol", opt_string(b.protocol.as_ref())),
                    ])
                })
                .collect(),
        )
    }

    fn balancing(b: &BalancingConfig) -> Node {
        map(vec![
            ("policy", string(&b.policy)),
            ("hash_key", opt_string(b.hash_key.as_ref())),
        ])
    }

    fn route(r: &RouteConfig) -> Node {
        map(vec![
            ("prefix", required(&r.prefix)),
            ("pool", required(&r.pool)),
            (
                "max_concurrent_requests",
                r.max_concurrent_requests.map(|n| Value::Int(n.into())),
            ),
            (
                "mirror",
                r.mirror.as_ref().map(|m| {
                    map(vec![
                        ("pool", required(&m.pool)),
                        ("percent", int(m.percent)),
                    ])
                    .value
                }),
            ),
        ])
    }
}

/// Every field path of the schema, with `[]` for list items and `<name>` for pool names
/// (`pools.<name>.backends[].url`). The documentation lists each (a test checks it).
#[must_use]
pub fn schema_paths() -> BTreeSet<String> {
    // One item of every list and one named pool, so that item fields are asked for too.
    let probe = "server: {tls: {certificates: [{}]}}\nbackends: [{}]\npools: {p: {backends: [{}]}}\n\
                 routes: [{mirror: {}}]\n";
    let mut r = Reader::default();
    if let Ok(root) = tree::parse(probe) {
        let _ = schema::from_tree::read_config(
            &mut r,
            &Field {
                node: Some(&root),
                path: Path::root(),
                pos: None,
            },
        );
    }
    r.schema_paths.remove("");
    r.schema_paths
}
