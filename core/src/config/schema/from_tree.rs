//! Reading each section of the tree into its schema type: every field asked for, written or not,
//! so the reader's list of schema paths is the complete list of fields.

use super::*;
use crate::config::read::{Field, Reader};
use crate::retry::RetryParams;

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
    let resolver = r.strings(&o.field("resolver"), &[]);
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
        resolver,
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
        mirror_max_in_flight: r.u32(&o.field("mirror_max_in_flight"), d.mirror_max_in_flight, 0),
        adaptive_concurrency: read_adaptive(r, &o.field("adaptive_concurrency")),
        tls_ca_file: r.opt_string(&o.field("tls_ca_file")),
        tls_server_name: r.opt_string(&o.field("tls_server_name")),
        tls_cert_file: r.opt_string(&o.field("tls_cert_file")),
        tls_key_file: r.opt_string(&o.field("tls_key_file")),
    };
    o.finish(r);
    v
}

fn read_adaptive(r: &mut Reader, f: &Field<'_>) -> AdaptiveConfig {
    let d = AdaptiveConfig::default();
    let mut o = r.obj(f);
    let v = AdaptiveConfig {
        enabled: r.bool(&o.field("enabled"), d.enabled),
        min_limit: r.u32(&o.field("min_limit"), d.min_limit, 0),
        max_limit: r.opt_u32(&o.field("max_limit")),
        window: r.duration(&o.field("window"), d.window),
        rtt_tolerance: r.f64(&o.field("rtt_tolerance"), d.rtt_tolerance),
        backoff_ratio: r.f64(&o.field("backoff_ratio"), d.backoff_ratio),
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
        backoff_base: r.duration(&o.field("backoff_base"), d.backoff_base),
        backoff_max: r.duration(&o.field("backoff_max"), d.backoff_max),
        hedge_delay: r.duration(&o.field("hedge_delay"), d.hedge_delay),
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
            format!("mode must be {}, got {mode_text:?}", ProbeMode::NAMES),
        );
        d.mode
    });
    let v = HealthCheckConfig {
        mode,
        path: r.string(&o.field("path"), &d.path),
        grpc_service: r.string(&o.field("grpc_service"), &d.grpc_service),
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
        outlier: read_outlier(r, &o.field("outlier")),
        retry_after_max: r.duration(&o.field("retry_after_max"), d.retry_after_max),
    };
    o.finish(r);
    v
}

fn read_outlier(r: &mut Reader, f: &Field<'_>) -> OutlierConfig {
    let d = OutlierConfig::default();
    let mut o = r.obj(f);
    let v = OutlierConfig {
        enabled: r.bool(&o.field("enabled"), d.enabled),
        interval: r.duration(&o.field("interval"), d.interval),
        base_ejection_time: r.duration(&o.field("base_ejection_time"), d.base_ejection_time),
        max_ejection_time: r.duration(&o.field("max_ejection_time"), d.max_ejection_time),
        max_ejection_percent: r.u32(&o.field("max_ejection_percent"), d.max_ejection_percent, 0),
        failure_percentage_threshold: r.u32(
            &o.field("failure_percentage_threshold"),
            d.failure_percentage_threshold,
            0,
        ),
        failure_percentage_minimum_hosts: r.u32(
            &o.field("failure_percentage_minimum_hosts"),
            d.failure_percentage_minimum_hosts,
            0,
        ),
        failure_percentage_request_volume: r.u32(
            &o.field("failure_percentage_request_volume"),
            d.failure_percentage_request_volume,
            0,
        ),
        success_rate_minimum_hosts: r.u32(
            &o.field("success_rate_minimum_hosts"),
            d.success_rate_minimum_hosts,
            0,
        ),
        success_rate_request_volume: r.u32(
            &o.field("success_rate_request_volume"),
            d.success_rate_request_volume,
            0,
        ),
        success_rate_stdev_factor: r.f64(
            &o.field("success_rate_stdev_factor"),
            d.success_rate_stdev_factor,
        ),
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
        dry_run: r.bool(&o.field("dry_run"), d.dry_run),
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
        tls_ca_file: r.opt_string(&o.field("tls_ca_file")),
        tls_cert_file: r.opt_string(&o.field("tls_cert_file")),
        tls_key_file: r.opt_string(&o.field("tls_key_file")),
        password_env: r.opt_string(&o.field("password_env")),
        sentinel_password_env: r.opt_string(&o.field("sentinel_password_env")),
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
            send_proxy_protocol: r.opt_string(&o.field("send_proxy_protocol")),
            protocol: r.opt_string(&o.field("protocol")),
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
        let dns = read_dns(r, &o.field("dns"));
        o.finish(r);
        out.push(PoolConfig {
            name: name.clone(),
            balancing,
            backends,
            dns,
        });
    }
    out
}

/// `routes[].mirror`, when set (C-MIRROR-1).
fn read_mirror(r: &mut Reader, f: &Field<'_>) -> Option<MirrorConfig> {
    if !f.is_set() {
        return None;
    }
    let mut o = r.obj(f);
    let v = MirrorConfig {
        pool: r.required_string(&o.field("pool")),
        percent: r.u32(&o.field("percent"), 100, 0),
    };
    o.finish(r);
    Some(v)
}

/// `pools.<name>.dns`: every field asked for even when the section is absent (the schema's
/// list of paths), the section itself only when written.
fn read_dns(r: &mut Reader, f: &Field<'_>) -> Option<DnsConfig> {
    let d = DnsConfig::default();
    let set = f.is_set();
    let mut o = r.obj(f);
    let name_field = o.field("name");
    let name = if set {
        r.required_string(&name_field)
    } else {
        r.opt_string(&name_field).unwrap_or_default()
    };
    let port_field = o.field("port");
    let port = r.port(&port_field, None);
    if set && port.is_none() && !port_field.is_set() {
        r.error(&port_field.path.concrete, None, "required field is missing");
    }
    let v = DnsConfig {
        name,
        port: port.unwrap_or(0),
        interval: r.duration(&o.field("interval"), d.interval),
        scheme: r.string(&o.field("scheme"), &d.scheme),
        protocol: r.string(&o.field("protocol"), &d.protocol),
    };
    o.finish(r);
    set.then_some(v)
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
            mirror: read_mirror(r, &o.field("mirror")),
        };
        o.finish(r);
        out.push(route);
    }
    out
}
