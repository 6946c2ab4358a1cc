//! Unit tests of the configuration: defaults, explicit zeros, strict parsing with every error
//! listed, durations, secrets, reload classification and hostile input.

use core::time::Duration;

use super::*;
use crate::proxy_proto;
use crate::select::PolicyKind;

const MIN: &str = "backends:\n  - id: a\n    url: http://127.0.0.1:9001\n";

fn ok(text: &str) -> ValidConfig {
    match load(text, &MapSecrets::new()) {
        Ok(v) => v,
        Err(e) => panic!("expected a valid config, got:\n{e}"),
    }
}

fn errs(text: &str) -> ConfigErrors {
    match load(text, &MapSecrets::new()) {
        Ok(_) => panic!("expected errors for:\n{text}"),
        Err(e) => e,
    }
}

fn err_at<'a>(e: &'a ConfigErrors, path: &str) -> &'a ConfigError {
    e.0.iter()
        .find(|x| x.path == path)
        .unwrap_or_else(|| panic!("no error at {path}; got:\n{e}"))
}

#[test]
fn c_conf_0_defaults_match_the_contract() {
    let v = ok(MIN);
    let s = &v.server;
    assert_eq!(s.port, 8080);
    assert!(s.trusted_proxies.is_empty());
    assert!((s.access_log_sample_rate - 0.01).abs() < 1e-12);
    assert!(!s.access_log_include_path);
    assert_eq!(s.read_header_timeout, Duration::from_secs(5));
    assert_eq!(s.read_timeout, Some(Duration::from_secs(15)));
    assert_eq!(s.write_timeout, None);
    assert_eq!(s.idle_timeout, Duration::from_secs(60));
    assert_eq!(s.shutdown_timeout, Duration::from_secs(10));
    assert_eq!(s.max_header_bytes, 1_048_576);
    let u = &s.upstream;
    assert_eq!(u.dial_timeout, Duration::from_secs(2));
    assert_eq!(u.tls_handshake_timeout, Duration::from_secs(3));
    assert_eq!(u.response_header_timeout, Some(Duration::from_secs(10)));
    assert_eq!(u.expect_continue_timeout, Duration::from_secs(1));
    assert_eq!(u.idle_conn_timeout, Some(Duration::from_secs(90)));
    assert_eq!(u.max_idle_conns, 256);
    assert_eq!(u.max_idle_conns_per_host, 64);
    assert_eq!(u.max_conns_per_host, None);
    assert_eq!(v.pool_params.max_concurrent_requests, 512);

    assert_eq!(v.retry.max_attempts(), 2);
    assert_eq!(v.retry.per_try_timeout(), Duration::from_secs(5));
    assert_eq!(v.retry.body_limit(), 1_048_576);
    assert_eq!(v.retry.methods(), ["GET", "HEAD", "OPTIONS"]);
    assert_eq!(v.retry.statuses(), [502, 503, 504]);
    assert_eq!(v.retry.budget_capacity(), 100);
    assert!((v.retry.budget_refill_per_second() - 10.0).abs() < 1e-12);

    assert_eq!(v.gate.max_concurrent_requests(), 2048);
    assert_eq!(v.gate.max_queue(), 2048);
    assert_eq!(v.gate.queue_timeout(), Duration::from_millis(50));

    let h = &v.health;
    assert_eq!(h.mode, ProbeMode::Http);
    assert_eq!(h.path, "/health");
    assert_eq!(h.params.interval(), Duration::from_secs(5));
    assert_eq!(h.params.timeout(), Duration::from_secs(2));
    assert_eq!(h.params.jitter(), Duration::from_millis(500));
    assert_eq!(h.params.failure_threshold(), 2);
    assert_eq!(h.params.success_threshold(), 1);
    assert_eq!(h.params.max_concurrency(), 16);
    assert_eq!(h.params.expected_statuses().collect::<Vec<_>>(), [200, 204]);
    assert_eq!(
        v.pool_params.breaker,
        crate::breaker::BreakerParams::new(2, 1, Duration::from_secs(10), Duration::from_secs(300))
            .unwrap()
    );
    assert_eq!(
        v.pool_params.slow_start,
        crate::slow_start::SlowStart::new(Duration::from_secs(30), 10).unwrap()
    );

    let r = &v.rate;
    assert!(!r.enabled());
    assert_eq!(r.failure_mode(), crate::rate::FailureMode::LocalFallback);
    assert_eq!(r.capacity(), 100);
    assert!((r.refill_per_second() - 100.0).abs() < 1e-12);
    assert_eq!(r.operation_timeout(), Duration::from_millis(50));
    assert_eq!(r.local_store().shards, 64);
    assert_eq!(r.local_store().max_buckets, 100_000);
    assert_eq!(r.key().ipv4_prefix_bits(), 32);
    assert_eq!(r.key().ipv6_prefix_bits(), 64);
    assert_eq!(v.config.rate_limit.storage, "local");
    assert_eq!(
        v.rate_housekeeping,
        (
            Duration::from_secs(6 * 3600),
            Duration::from_secs(24 * 3600)
        )
    );

    assert_eq!(v.redis.address.to_string(), "redis:6379");
    assert_eq!(v.redis.database, 0);
    assert_eq!(v.redis.pool_size, 64);
    assert_eq!(v.redis.dial_timeout, Duration::from_secs(2));
    assert_eq!(v.redis.read_timeout, Duration::from_millis(50));
    assert_eq!(v.redis.write_timeout, Duration::from_millis(50));
    assert!(v.database.is_none());
    assert_eq!(v.config.database.connect_timeout, Duration::from_secs(5));
    assert_eq!(v.config.database.max_open_connections, 25);

    let m = &v.management;
    assert!(!m.enabled);
    assert_eq!(m.address.to_string(), ":9090");
    assert_eq!(v.config.management.auth_token_env, "BALANCER_ADMIN_TOKEN");
    assert!(!m.allow_insecure && !m.enable_pprof && !m.runtime_mutations);
    assert_eq!(m.write_timeout, Duration::from_secs(30));

    assert_eq!(v.pools.len(), 1);
    assert_eq!(v.pools[0].name, "default");
    assert_eq!(v.pools[0].policy, PolicyKind::RoundRobin);
    assert_eq!(
        v.pools[0].backends,
        [crate::pool::BackendSpec::new("a", "http://127.0.0.1:9001")]
    );
    assert!(v.routes.is_empty() && v.route_table.is_empty());
}

#[test]
fn c_conf_0_explicit_zeros_are_honoured_not_replaced() {
    let v = ok(&format!(
        "server:\n  write_timeout: 0s\n  read_timeout: 0s\n  shutdown_timeout: 0s\n  \
         upstream:\n    response_header_timeout: 0s\n    idle_conn_timeout: 0s\n    \
         max_idle_conns: 0\n    max_conns_per_host: 0\n  overload:\n    queue_timeout: 0s\n    \
         max_queue: 0\nhealth_check:\n  jitter: 0s\n  slow_start: 0s\n{MIN}"
    ));
    assert_eq!(v.server.write_timeout, None);
    assert_eq!(v.server.read_timeout, None);
    assert_eq!(v.server.shutdown_timeout, Duration::ZERO);
    assert_eq!(v.server.upstream.response_header_timeout, None);
    assert_eq!(v.server.upstream.idle_conn_timeout, None);
    assert_eq!(v.server.upstream.max_idle_conns, 0);
    assert_eq!(v.gate.queue_timeout(), Duration::ZERO);
    assert!(!v.gate.queues());
    assert_eq!(v.gate.max_queue(), 0);
    assert_eq!(v.health.params.jitter(), Duration::ZERO);
    assert_eq!(v.pool_params.slow_start.window(), Duration::ZERO);
}

#[test]
fn c_conf_0_zero_without_a_meaning_is_rejected_with_its_path() {
    let e = errs(&format!(
        "server:\n  read_header_timeout: 0s\n  idle_timeout: 0s\n  upstream:\n    dial_timeout: 0s\n    \
         max_concurrent_requests: 0\n  retry:\n    per_try_timeout: 0s\n    budget_capacity: 0\n  \
         overload:\n    max_concurrent_requests: 0\nhealth_check:\n  interval: 0s\n  timeout: 0s\n  \
         cooldown: 0s\n  failure_threshold: 0\n  slow_start_minimum_percent: 0\nrate_limit:\n  capacity: 0\n  \
         operation_timeout: 0s\nmanagement:\n  write_timeout: 0s\n{MIN}"
    ));
    for path in [
        "server.read_header_timeout",
        "server.idle_timeout",
        "server.upstream.dial_timeout",
        "server.upstream.max_concurrent_requests",
        "server.retry.per_try_timeout",
        "server.retry.budget_capacity",
        "server.overload.max_concurrent_requests",
        "health_check.interval",
        "health_check.timeout",
        "health_check.cooldown",
        "health_check.failure_threshold",
        "health_check.slow_start_minimum_percent",
        "rate_limit.capacity",
        "rate_limit.operation_timeout",
        "management.write_timeout",
    ] {
        let err = err_at(&e, path);
        assert!(err.pos.is_some(), "{path} has no position: {err}");
    }
    assert_eq!(e.0.len(), 15, "one error per field:\n{e}");
}

#[test]
fn c_conf_1_unknown_field_names_path_line_and_suggestion() {
    let e = errs(&format!("server:\n  retry:\n    max_atempts: 3\n{MIN}"));
    let err = err_at(&e, "server.retry.max_atempts");
    assert_eq!(err.pos.map(|p| p.line), Some(3));
    assert!(err.message.contains("did you mean `max_attempts`"), "{err}");
    let e = errs(&format!("colour: blue\n{MIN}"));
    let err = err_at(&e, "colour");
    assert_eq!(err.pos.map(|p| (p.line, p.column)), Some((1, 1)));
    assert!(err.message.contains("unknown field `colour`"), "{err}");
}

#[test]
fn c_conf_1_wrong_type_names_path_and_line() {
    let e = errs(&format!(
        "server:\n  retry:\n    max_attempts: three\n  access_log_include_path: yes\n{MIN}"
    ));
    let err = err_at(&e, "server.retry.max_attempts");
    assert_eq!(err.pos.map(|p| p.line), Some(3));
    assert!(err.message.contains("expected an integer"), "{err}");
    // Strict booleans: YAML 1.1's `yes` is not a boolean here.
    let err = err_at(&e, "server.access_log_include_path");
    assert_eq!(err.pos.map(|p| p.line), Some(4));
    assert!(err.message.contains("true or false"), "{err}");
    let text = e.to_string();
    assert!(
        text.contains("server.retry.max_attempts (line 3, column 19)"),
        "{text}"
    );
}

#[test]
fn c_conf_1_invalid_value_names_path_and_line() {
    let e = errs(&format!("server:\n  retry:\n    max_attempts: 9\n{MIN}"));
    let err = err_at(&e, "server.retry.max_attempts");
    assert_eq!(err.pos.map(|p| p.line), Some(3));
    assert!(err.message.contains("1..=5"), "{err}");
    assert_eq!(e.0.len(), 1);
}

#[test]
fn c_conf_1_every_error_is_listed_in_document_order() {
    let text = "\
server:
  port: 70000
  trusted_proxies: [10.0.0.1/8, not-an-ip, 192.168.0.0/16, ::1]
  retry:
    max_attempts: 0
    methods: [GET, 'BAD METHOD']
    statuses: [200, 503]
  overload:
    queue_timeout: soon
health_check:
  mode: udp
  expected_statuses: [700]
rate_limit:
  storage: memcached
  failure_mode: fail-sometimes
  ipv4_prefix_bits: 40
  bogus: 1
balancing:
  policy: random
backends:
  - id: a
    url: ftp://x
  - id: a
    url: http://h:1?q=1
    weight: 0
  - url: http://user:pw@h:2
routes:
  - prefix: api
    pool: nowhere
  - prefix: /x
    pool: default
    max_concurrent_requests: 0
";
    let e = errs(text);
    for path in [
        "server.port",
        "server.trusted_proxies[0]",
        "server.trusted_proxies[1]",
        "server.retry.max_attempts",
        "server.retry.methods",
        "server.retry.statuses",
        "server.overload.queue_timeout",
        "health_check.mode",
        "health_check.expected_statuses",
        "rate_limit.storage",
        "rate_limit.failure_mode",
        "rate_limit.ipv4_prefix_bits",
        "rate_limit.bogus",
        "balancing.policy",
        "backends[0].url",
        "backends[1].id",
        "backends[1].url",
        "backends[1].weight",
        "backends[2].id",
        "backends[2].url",
        "routes[0].prefix",
        "routes[0].pool",
        "routes[1].max_concurrent_requests",
    ] {
        let err = err_at(&e, path);
        assert!(err.pos.is_some(), "{path}: no position");
    }
    assert!(!e.has("server.trusted_proxies[2]") && !e.has("server.trusted_proxies[3]"));
    let lines: Vec<u32> = e.0.iter().filter_map(|x| x.pos.map(|p| p.line)).collect();
    assert!(
        lines.windows(2).all(|w| w[0] <= w[1]),
        "not in order: {lines:?}"
    );
    assert!(
        err_at(&e, "server.trusted_proxies[0]")
            .message
            .contains("did you mean 10.0.0.0/8")
    );
}

#[test]
fn c_conf_1_syntax_error_and_duplicate_keys_have_a_line() {
    let e = errs("server:\n  port: \"8080\"\n  port: \"8081\"\n");
    assert_eq!(e.0.len(), 1);
    assert!(e.0[0].pos.is_some(), "{e}");
    let e = errs("server: [unclosed\n");
    assert!(e.0[0].pos.is_some(), "{e}");
}

#[test]
fn c_conf_1_required_and_cross_field_rules() {
    let e = errs("backends:\n  - {}\n");
    assert!(e.has("backends[0].id") && e.has("backends[0].url"), "{e}");
    assert_eq!(err_at(&e, "backends[0].id").pos.map(|p| p.line), Some(2));
    let e = errs("");
    assert!(e.has("backends"), "{e}");
    let e = errs(&format!(
        "balancing:\n  policy: round_robin\n  hash_key: client_address\n{MIN}"
    ));
    assert!(e.has("balancing.hash_key"), "{e}");
    let e = errs(&format!(
        "management:\n  enabled: true\n  auth_token_env: \"\"\n{MIN}"
    ));
    assert!(e.has("management.auth_token_env"), "{e}");
    let e = errs(&format!("management:\n  enabled: true\n{MIN}"));
    assert!(
        err_at(&e, "management.auth_token_env")
            .message
            .contains("BALANCER_ADMIN_TOKEN")
    );
    let v = ok(&format!(
        "management:\n  enabled: true\n  address: 127.0.0.1:9090\n  allow_insecure: true\n{MIN}"
    ));
    assert!(v.management.auth_token.is_none());
    let e = errs(&format!(
        "rate_limit:\n  storage: postgres\ndatabase:\n  host: db\n{MIN}"
    ));
    for f in ["port", "user", "name", "sslmode", "password_env"] {
        assert!(e.has(&format!("database.{f}")), "{f}: {e}");
    }
    assert!(!e.has("database.host"));
    let e = errs(&format!(
        "pools:\n  p:\n    backends:\n      - id: a\n        url: http://x:1\n{MIN}"
    ));
    // The later occurrence is the duplicate (the default pool is read first).
    let err = err_at(&e, "pools.p.backends[0].id");
    assert!(err.message.contains("duplicate backend id"), "{err}");
    let e = errs(&format!(
        "routes:\n  - prefix: /api\n    pool: default\n  - prefix: /api/\n    pool: default\n{MIN}"
    ));
    assert!(
        err_at(&e, "routes[1].prefix").message.contains("duplicate"),
        "{e}"
    );
    let e = errs(&format!("pools:\n  empty: {{}}\n{MIN}"));
    assert!(e.has("pools.empty.backends"), "{e}");
    let e = errs(&format!(
        "pools:\n  default:\n    backends: [{{id: z, url: 'http://z:1'}}]\n{MIN}"
    ));
    assert!(e.has("pools.default"), "{e}");
    // A catch-all route lets the default pool be empty.
    let v = ok(
        "pools:\n  all:\n    backends: [{id: z, url: 'http://z:1'}]\nroutes:\n  - prefix: /\n    pool: all\n",
    );
    assert!(v.pools[0].backends.is_empty());
}

#[test]
fn c_conf_0_trusted_proxies_cidrs_and_bare_addresses() {
    let v = ok(&format!(
        "server:\n  trusted_proxies: [10.0.0.0/8, 192.168.1.10, '::1', 'fd00::/8']\n{MIN}"
    ));
    let nets: Vec<String> = v
        .server
        .trusted_proxies
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        nets,
        ["10.0.0.0/8", "192.168.1.10/32", "::1/128", "fd00::/8"]
    );
}

#[test]
fn c_conf_0_port_as_string_or_number() {
    assert_eq!(
        ok(&format!("server:\n  port: \"9000\"\n{MIN}")).server.port,
        9000
    );
    assert_eq!(
        ok(&format!("server:\n  port: 9001\n{MIN}")).server.port,
        9001
    );
    for bad in ["0", "\"0\"", "65536", "\"80a\"", "\"\"", "-1"] {
        let e = errs(&format!("server:\n  port: {bad}\n{MIN}"));
        assert!(e.has("server.port"), "{bad}: {e}");
    }
}

#[test]
fn c_conf_2_durations() {
    let cases = [
        ("50ms", Duration::from_millis(50)),
        ("5s", Duration::from_secs(5)),
        ("1m", Duration::from_secs(60)),
        ("1h", Duration::from_secs(3600)),
        ("1m30s", Duration::from_secs(90)),
        ("1.5s", Duration::from_millis(1500)),
        ("2h45m", Duration::from_secs(9900)),
        ("250us", Duration::from_micros(250)),
        ("10ns", Duration::from_nanos(10)),
        ("0s", Duration::ZERO),
        ("0", Duration::ZERO),
    ];
    for (text, want) in cases {
        assert_eq!(parse_duration(text), Ok(want), "{text}");
    }
    for bad in [
        "",
        "5",
        "-5s",
        "5 s",
        "s",
        "5x",
        "1.s.",
        "five",
        "5S",
        "1e3s",
        "99999999999999999999h",
        "5s ",
        ".s",
    ] {
        assert!(parse_duration(bad).is_err(), "{bad:?} parsed");
    }
    let e = errs(&format!(
        "health_check:\n  interval: -5s\n  timeout: 5\n  jitter: [1s]\n{MIN}"
    ));
    assert!(
        err_at(&e, "health_check.interval")
            .message
            .contains("negative")
    );
    assert!(err_at(&e, "health_check.timeout").message.contains("unit"));
    assert!(e.has("health_check.jitter"));
}

#[test]
fn c_conf_3_env_wins_over_file_and_file_loses_one_newline() {
    let text = format!("management:\n  enabled: true\n{MIN}");
    let both = MapSecrets::new()
        .with_env("BALANCER_ADMIN_TOKEN", "from-env")
        .with_env("BALANCER_ADMIN_TOKEN_FILE", "/run/secrets/t")
        .with_file("/run/secrets/t", "from-file\n");
    let v = load(&text, &both).unwrap();
    assert_eq!(
        v.management.auth_token.as_ref().unwrap().expose(),
        "from-env"
    );
    let file = MapSecrets::new()
        .with_env("BALANCER_ADMIN_TOKEN_FILE", "/run/secrets/t")
        .with_file("/run/secrets/t", "from-file\r\n\n");
    let v = load(&text, &file).unwrap();
    assert_eq!(
        v.management.auth_token.as_ref().unwrap().expose(),
        "from-file\r\n"
    );
    let file = MapSecrets::new()
        .with_env("BALANCER_ADMIN_TOKEN", "")
        .with_env("BALANCER_ADMIN_TOKEN_FILE", "/t")
        .with_file("/t", "x\r\n");
    let v = load(&text, &file).unwrap();
    assert_eq!(v.management.auth_token.as_ref().unwrap().expose(), "x");
    let missing = MapSecrets::new().with_env("BALANCER_ADMIN_TOKEN_FILE", "/nope");
    let e = load(&text, &missing).unwrap_err();
    assert!(
        err_at(&e, "management.auth_token_env")
            .message
            .contains("/nope")
    );
}

#[test]
fn c_conf_3_secrets_never_printed() {
    let token = "s3cr3t-t0ken-value";
    let text = format!(
        "management:\n  enabled: true\nrate_limit:\n  storage: redis\nredis:\n  password_env: RP\n  \
         pool_size: 0\n{MIN}"
    );
    let secrets = MapSecrets::new()
        .with_env("BALANCER_ADMIN_TOKEN", token)
        .with_env("RP", token);
    // Invalid (pool_size): the error text must not carry the secrets.
    let e = load(&text, &secrets).unwrap_err();
    assert!(!e.to_string().contains(token) && !format!("{e:?}").contains(token));
    let v = load(&text.replace("  pool_size: 0\n", ""), &secrets).unwrap();
    let dump = format!("{v:?}");
    assert!(!dump.contains(token), "secret in Debug output");
    assert!(dump.contains("[redacted]"));
    let s = v.management.auth_token.clone().unwrap();
    assert_eq!(format!("{s} {s:?}"), "[redacted] [redacted]");
    assert!(s.matches(token.as_bytes()));
    assert!(!s.matches(b"s3cr3t-t0ken-valuf"));
    assert!(!s.matches(b""));
    assert_eq!(v.redis.password.as_ref().map(Secret::expose), Some(token));
}

#[test]
fn c_conf_7_diff_classifies_dynamic_and_restart_changes() {
    let base = ok(MIN);
    assert!(diff(&base, &ok(MIN)).is_empty());
    // Writing a default explicitly is not a change.
    assert!(diff(&base, &ok(&format!("server:\n  port: \"8080\"\n{MIN}"))).is_empty());
    let new = ok("\
server:
  port: 9000
  trusted_proxies: [10.0.0.0/8]
  write_timeout: 30s
  retry:
    max_attempts: 3
  overload:
    max_concurrent_requests: 10
  upstream:
    max_idle_conns: 5
    max_concurrent_requests: 7
health_check:
  slow_start: 0s
rate_limit:
  capacity: 5
  storage: redis
redis:
  address: r:1
management:
  address: ':9999'
backends:
  - id: a
    url: http://127.0.0.1:9001
    disabled: true
  - id: b
    url: http://127.0.0.1:9002
");
    let d = diff(&base, &new);
    let dynamic: Vec<&str> = d.dynamic_paths().collect();
    let restart: Vec<&str> = d.restart_paths().collect();
    for p in [
        "backends[0].disabled",
        "backends[1].id",
        "backends[1].url",
        "health_check.slow_start",
        "rate_limit.capacity",
        "server.retry.max_attempts",
        "server.trusted_proxies",
        "server.upstream.max_concurrent_requests",
    ] {
        assert!(dynamic.contains(&p), "{p} not dynamic: {d:?}");
    }
    for p in [
        "management.address",
        "rate_limit.storage",
        "redis.address",
        "server.overload.max_concurrent_requests",
        "server.port",
        "server.upstream.max_idle_conns",
        "server.write_timeout",
    ] {
        assert!(restart.contains(&p), "{p} not restart: {d:?}");
    }
    assert!(d.needs_restart());
    assert_eq!(d.changes.len(), dynamic.len() + restart.len());
    // Routes, pools and balancing are dynamic.
    let routed = ok(&format!(
        "balancing:\n  policy: round_robin\npools:\n  p:\n    backends: [{{id: p1, url: 'http://p:1'}}]\n\
         routes:\n  - prefix: /p\n    pool: p\n{MIN}"
    ));
    let d = diff(&base, &routed);
    assert!(!d.is_empty() && !d.needs_restart(), "{d:?}");
    // A rotated secret behind the same name is a change of the naming field.
    let text = format!("management:\n  enabled: true\n{MIN}");
    let a = load(
        &text,
        &MapSecrets::new().with_env("BALANCER_ADMIN_TOKEN", "one"),
    )
    .unwrap();
    let b = load(
        &text,
        &MapSecrets::new().with_env("BALANCER_ADMIN_TOKEN", "two"),
    )
    .unwrap();
    let d = diff(&a, &b);
    assert_eq!(d.changes.len(), 1);
    assert_eq!(d.changes[0].path, "management.auth_token_env");
    assert_eq!(classify("pools.<name>.backends[].url"), Apply::Dynamic);
    assert_eq!(classify("server.upstream.dial_timeout"), Apply::Restart);
    assert_eq!(classify("server.retryx"), Apply::Restart);
}

#[test]
fn c_conf_1_hostile_input_fails_fast_without_panic() {
    // Billion laughs: nine levels of ten aliases each.
    let mut bomb = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..10 {
        let p = i - 1;
        bomb.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let e = errs(&bomb);
    assert_eq!(e.0.len(), 1, "{e}");
    // Deep nesting.
    let deep = format!("{}1{}", "[".repeat(10_000), "]".repeat(10_000));
    assert_eq!(errs(&deep).0.len(), 1);
    // Oversized input is refused before parsing.
    let big = "#".repeat(MAX_CONFIG_BYTES + 1);
    assert!(errs(&big).0[0].message.contains("limit"));
}

#[test]
fn c_conf_1_random_text_never_panics() {
    use crate::rng::{Rng, WyRand};
    let mut rng = WyRand::new(7);
    let alphabet = b"ab:- \n\t[]{}&*!|>'\"#%@,?0123456789.";
    for _ in 0..300 {
        let len = rng.below(400) as usize;
        let text: String = (0..len)
            .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize] as char)
            .collect();
        let _ = load(&text, &MapSecrets::new());
    }
}

#[test]
fn schema_paths_cover_every_section() {
    let paths = schema_paths();
    for p in [
        "server.port",
        "server.retry.max_attempts",
        "server.overload.max_queue",
        "server.upstream.max_conns_per_host",
        "health_check.half_open_requests",
        "rate_limit.retention",
        "redis.password_env",
        "database.sslmode",
        "management.runtime_mutations",
        "backends[].weight",
        "backends[].send_proxy_protocol",
        "backends[].protocol",
        "pools.<name>.backends[].protocol",
        "balancing.hash_key",
        "pools.<name>.balancing.policy",
        "pools.<name>.backends[].url",
        "routes[].max_concurrent_requests",
    ] {
        assert!(paths.contains(p), "{p} missing from {paths:?}");
    }
}

#[test]
fn c_pool_4_hash_key_syntax() {
    assert_eq!(HashKey::parse("client_address"), Ok(HashKey::ClientAddress));
    assert_eq!(
        HashKey::parse("header:X-User-Id"),
        Ok(HashKey::Header(http::HeaderName::from_static("x-user-id")))
    );
    assert_eq!(
        HashKey::parse("cookie:session_id"),
        Ok(HashKey::Cookie("session_id".to_owned()))
    );
    for bad in [
        "",
        "ip",
        "header:",
        "header:bad name",
        "cookie:",
        "cookie:a;b",
        "Header:x",
        "client",
    ] {
        assert!(HashKey::parse(bad).is_err(), "{bad:?} parsed");
    }
    // consistent_hash needs a key; the error names the field whichever policies have landed.
    let e = errs(&format!("balancing:\n  policy: consistent_hash\n{MIN}"));
    assert!(
        err_at(&e, "balancing.hash_key")
            .message
            .contains("needs a hash_key")
    );
    let e = errs(&format!(
        "pools:\n  p:\n    balancing: {{policy: consistent_hash, hash_key: 'header:'}}\n    \
         backends: [{{id: p, url: 'http://p:1'}}]\n{MIN}"
    ));
    assert!(e.has("pools.p.balancing.hash_key"), "{e}");
}

#[test]
fn c_conf_1_backend_urls_and_ids() {
    for good in [
        "http://10.0.0.1",
        "http://backend1:80",
        "https://api.internal:8443/base/path",
        "http://[::1]:9000",
    ] {
        let text = format!("backends:\n  - id: a\n    url: '{good}'\n");
        assert_eq!(ok(&text).pools[0].backends[0].url, good);
    }
    for bad in [
        "backend1:80",
        "ftp://h",
        "http://",
        "http://u@h",
        "http://h/?q",
        "http://h/#f",
        "http://h h",
        "/relative",
    ] {
        let e = errs(&format!("backends:\n  - id: a\n    url: '{bad}'\n"));
        assert!(e.has("backends[0].url"), "{bad:?} accepted");
    }
    let e = errs("backends:\n  - id: 'a b'\n    url: http://h\n");
    assert!(e.has("backends[0].id"), "{e}");
    let e = errs("backends:\n  - {id: a, url: 'http://h:1'}\n  - {id: b, url: 'http://h:1'}\n");
    assert!(
        err_at(&e, "backends[1].url")
            .message
            .contains("duplicate url"),
        "{e}"
    );
}

#[test]
fn c_conf_0_listener_and_store_addresses() {
    let v = ok(&format!(
        "management:\n  address: '[::1]:9091'\nredis:\n  address: 'cache.internal:6380'\n{MIN}"
    ));
    assert_eq!(v.management.address.host, "::1");
    assert_eq!(v.management.address.to_string(), "[::1]:9091");
    assert_eq!(v.redis.address.port, 6380);
    for (field, bad) in [
        ("management.address", "9090"),
        ("management.address", ":0"),
        ("management.address", "host:port"),
        ("redis.address", ":6379"),
        ("redis.address", "redis"),
    ] {
        let (section, key) = field.split_once('.').unwrap();
        let e = errs(&format!("{section}:\n  {key}: '{bad}'\n{MIN}"));
        assert!(e.has(field), "{field}={bad:?} accepted");
    }
}

#[test]
fn c_conf_0_null_is_absent() {
    let v = ok(&format!(
        "server:\n  retry:\n    methods:\n    max_attempts: ~\n  write_timeout:\nhealth_check:\n{MIN}"
    ));
    assert_eq!(v.retry.methods(), ["GET", "HEAD", "OPTIONS"]);
    assert_eq!(v.retry.max_attempts(), 2);
    assert_eq!(v.server.write_timeout, None);
    let e = errs("backends:\n  - id:\n    url: http://h\n");
    assert!(
        err_at(&e, "backends[0].id").message.contains("missing"),
        "{e}"
    );
}

/// `server.max_connections` is optional (derived from the fd limit), 1..=2^24, and a
/// change needs a restart (C-CONF-7).
#[test]
fn server_max_connections_range_and_restart() {
    assert_eq!(ok(MIN).server.max_connections, None);
    let set = ok(&format!("server:\n  max_connections: 200\n{MIN}"));
    assert_eq!(set.server.max_connections, Some(200));
    for bad in ["0", "16777217"] {
        let e = errs(&format!("server:\n  max_connections: {bad}\n{MIN}"));
        let msg = err_at(&e, "server.max_connections").to_string();
        assert!(msg.contains("1..=16777216"), "{msg}");
    }
    let d = diff(&ok(MIN), &set);
    assert_eq!(
        d.restart_paths().collect::<Vec<_>>(),
        ["server.max_connections"]
    );
}

/// A `*_env` field holding something that is not a variable name (most likely the
/// secret itself) is an error that never repeats the value, in every such field, used or not.
#[test]
fn c_conf_3_env_fields_must_be_variable_names_and_are_never_echoed() {
    let planted = "s3cret-token";
    for (yaml, path) in [
        (
            format!("management:\n  enabled: true\n  auth_token_env: {planted}\n{MIN}"),
            "management.auth_token_env",
        ),
        (
            format!("management:\n  enabled: false\n  auth_token_env: {planted}\n{MIN}"),
            "management.auth_token_env",
        ),
        (
            format!("redis:\n  password_env: {planted}\n{MIN}"),
            "redis.password_env",
        ),
        (
            format!("database:\n  password_env: {planted}\n{MIN}"),
            "database.password_env",
        ),
    ] {
        let e = errs(&yaml);
        let err = err_at(&e, path);
        assert!(err.message.contains("environment variable"), "{err}");
        assert!(!e.to_string().contains(planted), "{e}");
        assert!(!format!("{e:?}").contains(planted), "{e:?}");
    }
    for good in ["WEIR_TOKEN", "_X", "A1_B2"] {
        assert!(validate::is_env_name(good), "{good}");
    }
    for bad in ["", "lower", "1ABC", "A-B", "A B", "Ä"] {
        assert!(!validate::is_env_name(bad), "{bad}");
    }
}

/// C-MGMT-1: `allow_insecure` only with a loopback management address.
#[test]
fn c_mgmt_1_allow_insecure_needs_a_loopback_address() {
    for addr in [
        ":9090",
        "0.0.0.0:9090",
        "10.0.0.1:9090",
        "[::]:9090",
        "example.com:9090",
    ] {
        let e = errs(&format!(
            "management:\n  enabled: true\n  address: \"{addr}\"\n  allow_insecure: true\n{MIN}"
        ));
        assert!(
            err_at(&e, "management.allow_insecure")
                .message
                .contains("loopback"),
            "{e}"
        );
    }
    for addr in [
        "127.0.0.1:9090",
        "127.1.2.3:9090",
        "[::1]:9090",
        "localhost:9090",
    ] {
        let v = ok(&format!(
            "management:\n  enabled: true\n  address: \"{addr}\"\n  allow_insecure: true\n{MIN}"
        ));
        assert!(v.management.allow_insecure, "{addr}");
    }
}

#[test]
fn c_tls_1_tls_defaults_and_settings() {
    let v = ok(MIN);
    assert_eq!(v.server.tls, None, "no certificate: plain HTTP");
    assert_eq!(v.server.proxy_protocol, None);
    let v = ok(&format!(
        "server:\n  tls:\n    certificates:\n      - {{cert_file: /c/a.pem, key_file: /c/a.key}}\n      \
         - {{cert_file: /c/b.pem, key_file: /c/b.key}}\n    min_version: '1.3'\n    \
         handshake_timeout: 2s\n    client_ca_file: /c/ca.pem\n{MIN}"
    ));
    let t = v.server.tls.expect("tls on");
    assert_eq!(t.certificates.len(), 2);
    assert_eq!(t.certificates[1].key_file, "/c/b.key");
    assert_eq!(t.min_version, TlsVersion::Tls13);
    assert_eq!(t.handshake_timeout, Duration::from_secs(2));
    assert_eq!(t.client_ca_file.as_deref(), Some("/c/ca.pem"));
    let d = ok(&format!(
        "server:\n  tls:\n    certificates: [{{cert_file: a, key_file: b}}]\n{MIN}"
    ));
    let t = d.server.tls.expect("tls on");
    assert_eq!(t.min_version, TlsVersion::Tls12);
    assert_eq!(t.handshake_timeout, Duration::from_secs(5));
}

#[test]
fn c_tls_1_tls_errors_name_their_field() {
    let e = errs(&format!(
        "server:\n  tls:\n    certificates: [{{cert_file: a}}]\n    min_version: '1.1'\n    \
         handshake_timeout: 0s\n{MIN}"
    ));
    assert!(e.has("server.tls.certificates[0].key_file"), "{e}");
    let m = &err_at(&e, "server.tls.min_version").message;
    assert!(m.contains("RFC 8996"), "{m}");
    assert!(e.has("server.tls.handshake_timeout"), "{e}");
    let e = errs(&format!(
        "server:\n  tls:\n    client_ca_file: ca.pem\n{MIN}"
    ));
    assert!(e.has("server.tls.certificates"), "{e}");
    let e = errs(&format!("server:\n  tls:\n    certificate: []\n{MIN}"));
    assert!(e.has("server.tls.certificate"), "unknown field: {e}");
}

#[test]
fn c_tls_3_send_proxy_protocol_settings() {
    for (text, want) in [
        ("off", None),
        ("v1", Some(proxy_proto::Version::V1)),
        ("v2", Some(proxy_proto::Version::V2)),
    ] {
        let v = ok(&format!(
            "backends:\n  - id: a\n    url: http://127.0.0.1:9001\n    send_proxy_protocol: {text}\n\
             pools:\n  p:\n    backends:\n      - id: b\n        url: http://127.0.0.1:9002\n        send_proxy_protocol: {text}\n"
        ));
        assert_eq!(v.pools[0].backends[0].send_proxy, want, "{text}");
        assert_eq!(v.pools[1].backends[0].send_proxy, want, "{text}");
    }
    assert_eq!(
        ok(MIN).pools[0].backends[0].send_proxy,
        None,
        "off by default"
    );
    let e = errs(
        "backends:\n  - id: a\n    url: http://127.0.0.1:9001\n    send_proxy_protocol: any\n",
    );
    assert!(
        err_at(&e, "backends[0].send_proxy_protocol")
            .message
            .contains("off, v1, v2"),
        "{e}"
    );
    let e = errs(
        "backends:\n  - id: a\n    url: http://127.0.0.1:9001\npools:\n  p:\n    backends:\n      - id: b\n        url: http://127.0.0.1:9002\n        send_proxy_protocol: 2\n",
    );
    assert!(e.has("pools.p.backends[0].send_proxy_protocol"), "{e}");
    assert_eq!(classify("backends[0].send_proxy_protocol"), Apply::Dynamic);
}

#[test]
fn c_tls_3_proxy_protocol_settings() {
    for (text, want) in [
        ("v1", proxy_proto::Accept::V1),
        ("v2", proxy_proto::Accept::V2),
        ("any", proxy_proto::Accept::Any),
    ] {
        let v = ok(&format!(
            "server:\n  proxy_protocol: {text}\n  proxy_protocol_trusted: [10.0.0.0/8, 127.0.0.1]\n{MIN}"
        ));
        let p = v.server.proxy_protocol.expect("on");
        assert_eq!(p.accept, want);
        assert_eq!(p.trusted.len(), 2);
    }
    let e = errs(&format!("server:\n  proxy_protocol: v3\n{MIN}"));
    assert!(
        err_at(&e, "server.proxy_protocol")
            .message
            .contains("off, v1, v2, any"),
        "{e}"
    );
    let e = errs(&format!("server:\n  proxy_protocol: v2\n{MIN}"));
    assert!(
        e.has("server.proxy_protocol_trusted"),
        "on with nobody trusted: {e}"
    );
    let e = errs(&format!(
        "server:\n  proxy_protocol: any\n  proxy_protocol_trusted: [10.0.0.1/8]\n{MIN}"
    ));
    assert!(e.has("server.proxy_protocol_trusted[0]"), "{e}");
    // Restart-only (C-CONF-7).
    assert_eq!(classify("server.proxy_protocol"), Apply::Restart);
    assert_eq!(
        classify("server.tls.certificates[0].cert_file"),
        Apply::Restart
    );
}

/// Keys of the reference balancer that weir does not act on are refused by name when written
/// (an accepted-but-ignored key would mislead); their "off" value still loads.
#[test]
fn keys_weir_does_not_act_on_are_refused_by_name() {
    let (path, says) = ("management.enable_pprof", "pprof");
    let e = errs(&format!("management:\n  enable_pprof: true\n{MIN}"));
    let at = err_at(&e, path);
    assert!(
        at.message.starts_with("not supported") && at.message.contains(says),
        "{path}: {}",
        at.message
    );
    ok(&format!(
        "server:\n  upstream:\n    max_conns_per_host: 0\nmanagement:\n  enable_pprof: false\n{MIN}"
    ));
}

#[test]
fn c_out_1_outlier_keys_are_read_validated_and_strict() {
    let v = ok(&format!(
        "health_check:\n  outlier:\n    interval: 1s\n    success_rate_stdev_factor: 2.5\n    \
         max_ejection_percent: 30\n{MIN}"
    ));
    let o = v.pool_params.outlier;
    assert_eq!(o.interval, Duration::from_secs(1));
    assert_eq!(o.success_rate_stdev_factor_milli, 2500);
    assert_eq!(o.max_ejection_percent, 30);
    assert!(o.enabled);
    assert_eq!(
        ok(MIN).pool_params.outlier,
        crate::outlier::OutlierParams::default()
    );
    for (yaml, path, words) in [
        (
            "interval: 10ms",
            "health_check.outlier.interval",
            "100ms..=1h",
        ),
        (
            "max_ejection_percent: 101",
            "health_check.outlier.max_ejection_percent",
            "0..=100",
        ),
        (
            "success_rate_stdev_factor: -1",
            "health_check.outlier.success_rate_stdev_factor",
            "0..=10",
        ),
        (
            "base_ejection_time: 10m",
            "health_check.outlier.base_ejection_time",
            "max_ejection_time",
        ),
        (
            "failure_percentage_request_volume: 0",
            "health_check.outlier.failure_percentage_request_volume",
            "at least 1",
        ),
        (
            "ejection: 1s",
            "health_check.outlier.ejection",
            "unknown field",
        ),
    ] {
        let e = errs(&format!("health_check:\n  outlier:\n    {yaml}\n{MIN}"));
        let err = err_at(&e, path);
        assert!(err.message.contains(words), "{yaml}: {err}");
    }
}

#[test]
fn c_conf_1_every_outlier_error_is_listed() {
    let e = errs(&format!(
        "health_check:\n  outlier:\n    interval: 5ms\n    max_ejection_percent: 120\n    \
         success_rate_stdev_factor: 11\n    success_rate_minimum_hosts: 0\n{MIN}"
    ));
    for path in [
        "health_check.outlier.interval",
        "health_check.outlier.max_ejection_percent",
        "health_check.outlier.success_rate_stdev_factor",
        "health_check.outlier.success_rate_minimum_hosts",
    ] {
        err_at(&e, path);
    }
}

#[test]
fn c_grpc_1_backend_protocol_settings() {
    use crate::backend::Protocol;
    for (text, url, want) in [
        ("http1", "http", Protocol::Http1),
        ("h2c", "http", Protocol::H2c),
        ("h2", "https", Protocol::H2),
    ] {
        let v = ok(&format!(
            "backends:\n  - id: a\n    url: {url}://127.0.0.1:9001\n    protocol: {text}\n\
             pools:\n  p:\n    backends:\n      - id: b\n        url: {url}://127.0.0.1:9002\n        protocol: {text}\n"
        ));
        assert_eq!(v.pools[0].backends[0].protocol, want, "{text}");
        assert_eq!(v.pools[1].backends[0].protocol, want, "{text}");
    }
    assert_eq!(
        ok(MIN).pools[0].backends[0].protocol,
        Protocol::Http1,
        "http1 by default"
    );
    let e = errs("backends:\n  - id: a\n    url: http://127.0.0.1:9001\n    protocol: http2\n");
    assert!(
        err_at(&e, "backends[0].protocol")
            .message
            .contains("http1, h2c, h2"),
        "{e}"
    );
    let e = errs(
        "backends:\n  - id: a\n    url: http://127.0.0.1:9001\npools:\n  p:\n    backends:\n      - id: b\n        url: http://127.0.0.1:9002\n        protocol: h2\n",
    );
    assert!(
        err_at(&e, "pools.p.backends[0].protocol")
            .message
            .contains("https://"),
        "{e}"
    );
    let e = errs("backends:\n  - id: a\n    url: https://127.0.0.1:9001\n    protocol: h2c\n");
    assert!(e.has("backends[0].protocol"), "{e}");
    let e = errs(
        "backends:\n  - id: a\n    url: http://127.0.0.1:9001\n    protocol: h2c\n    send_proxy_protocol: v1\n",
    );
    assert!(e.has("backends[0].protocol"), "{e}");
    assert_eq!(classify("backends[0].protocol"), Apply::Dynamic);
}

#[test]
fn c_grpc_4_health_mode_grpc_settings() {
    let h2c = "backends:\n  - id: a\n    url: http://127.0.0.1:9001\n    protocol: h2c\n";
    let v = ok(&format!("{h2c}health_check:\n  mode: grpc\n"));
    assert_eq!(v.health.mode, ProbeMode::Grpc);
    assert_eq!(v.health.grpc_service, "", "the whole server by default");
    let v = ok(&format!(
        "{h2c}health_check:\n  mode: grpc\n  grpc_service: pkg.Echo\n"
    ));
    assert_eq!(v.health.grpc_service, "pkg.Echo");
    assert_eq!(classify("health_check.grpc_service"), Apply::Dynamic);
    // grpc_service without mode grpc says what it is for.
    let e = errs(&format!("{MIN}health_check:\n  grpc_service: pkg.Echo\n"));
    assert!(
        err_at(&e, "health_check.grpc_service")
            .message
            .contains("only by mode grpc"),
        "{e}"
    );
    // The modes are listed when one is misspelt.
    let e = errs(&format!("{MIN}health_check:\n  mode: grcp\n"));
    assert!(
        err_at(&e, "health_check.mode")
            .message
            .contains("http, https, tcp or grpc"),
        "{e}"
    );
}

#[test]
fn c_grpc_4_health_mode_grpc_refuses_http1_backends_by_name() {
    let e = errs(
        "backends:\n  - id: h2\n    url: http://127.0.0.1:9001\n    protocol: h2c\n  - id: old\n    url: http://127.0.0.1:9002\n\
         pools:\n  p:\n    backends:\n      - id: legacy\n        url: http://127.0.0.1:9003\n        protocol: http1\n\
         health_check:\n  mode: grpc\n",
    );
    let m = &err_at(&e, "backends[1].protocol").message;
    assert!(m.contains("\"old\"") && m.contains("HTTP/2"), "{e}");
    assert!(e.has("pools.p.backends[0].protocol"), "{e}");
    assert!(!e.has("backends[0].protocol"), "{e}");
    // An h2 (TLS) backend is fine too.
    ok(
        "backends:\n  - id: a\n    url: https://127.0.0.1:9001\n    protocol: h2\nhealth_check:\n  mode: grpc\n",
    );
}

#[test]
fn c_grpc_5_upstream_tls_settings() {
    let v = ok(MIN);
    assert_eq!(v.server.upstream.tls, UpstreamTls::default());
    let v = ok(&format!(
        "server:\n  upstream:\n    tls_ca_file: /ca.pem\n    tls_server_name: api.internal\n    \
         tls_cert_file: /c.pem\n    tls_key_file: /k.pem\n{MIN}"
    ));
    let t = &v.server.upstream.tls;
    assert_eq!(t.ca_file.as_deref(), Some("/ca.pem"));
    assert_eq!(t.server_name.as_deref(), Some("api.internal"));
    assert_eq!(
        t.client_cert,
        Some(("/c.pem".to_owned(), "/k.pem".to_owned()))
    );
    ok(&format!(
        "server:\n  upstream:\n    tls_server_name: 10.0.0.7\n{MIN}"
    ));
    let e = errs(&format!(
        "server:\n  upstream:\n    tls_cert_file: /c.pem\n{MIN}"
    ));
    assert!(e.has("server.upstream.tls_key_file"), "{e}");
    let e = errs(&format!(
        "server:\n  upstream:\n    tls_key_file: /k.pem\n{MIN}"
    ));
    assert!(e.has("server.upstream.tls_cert_file"), "{e}");
    let e = errs(&format!(
        "server:\n  upstream:\n    tls_server_name: \"bad name\"\n{MIN}"
    ));
    assert!(e.has("server.upstream.tls_server_name"), "{e}");
    let e = errs(&format!(
        "server:\n  upstream:\n    tls_ca_file: \"\"\n{MIN}"
    ));
    assert!(e.has("server.upstream.tls_ca_file"), "{e}");
    for key in [
        "tls_ca_file",
        "tls_server_name",
        "tls_cert_file",
        "tls_key_file",
    ] {
        assert_eq!(
            classify(&format!("server.upstream.{key}")),
            Apply::Restart,
            "{key}"
        );
    }
}

#[test]
fn c_mirror_1_route_mirror_keys_defaults_and_errors() {
    let base = "backends:\n  - id: a\n    url: http://h:1\npools:\n  shadow:\n    backends:\n      \
                - id: s\n        url: http://h:2\nroutes:\n  - prefix: /api\n    pool: default\n";
    let v = ok(&format!("{base}    mirror:\n      pool: shadow\n"));
    assert_eq!(v.server.upstream.mirror_max_in_flight, 64);
    let m = v.routes[0].mirror.expect("mirror");
    assert_eq!((m.pool, m.percent), (1, 100));
    let v = ok(&format!(
        "{base}    mirror: {{pool: default, percent: 0}}\n"
    ));
    assert_eq!(
        v.routes[0].mirror.map(|m| (m.pool, m.percent)),
        Some((0, 0))
    );
    let e = errs(&format!(
        "{base}    mirror: {{pool: nowhere, percent: 101}}\n"
    ));
    let msg = &err_at(&e, "routes[0].mirror.pool").message;
    assert!(
        msg.contains("\"/api\"") && msg.contains("\"nowhere\""),
        "{msg}"
    );
    let _ = err_at(&e, "routes[0].mirror.percent");
    let e = errs(&format!("{base}    mirror: {{percent: 5, bogus: 1}}\n"));
    let _ = err_at(&e, "routes[0].mirror.pool");
    let _ = err_at(&e, "routes[0].mirror.bogus");
    assert_eq!(
        classify("server.upstream.mirror_max_in_flight"),
        Apply::Dynamic
    );
    assert_eq!(classify("routes[0].mirror.percent"), Apply::Dynamic);
}

/// `server.upstream.max_conns_per_host` is acted on: any value in range loads (0, the default,
/// is unlimited), and the proxy bounds each backend's connections by it (docs/proxy.md).
#[test]
fn max_conns_per_host_loads() {
    let v = ok(&format!(
        "server:\n  upstream:\n    max_conns_per_host: 7\n{MIN}"
    ));
    assert_eq!(v.server.upstream.max_conns_per_host, Some(7));
    let v = ok(&format!(
        "server:\n  upstream:\n    max_conns_per_host: 0\n{MIN}"
    ));
    assert_eq!(v.server.upstream.max_conns_per_host, None);
    let e = errs(&format!(
        "server:\n  upstream:\n    max_conns_per_host: -1\n{MIN}"
    ));
    err_at(&e, "server.upstream.max_conns_per_host");
}

/// C-LOAD-4: `server.upstream.adaptive_concurrency`: defaults, values, strictness and errors
/// naming their key; a reload changes it (dynamic, as `max_concurrent_requests`).
#[test]
fn c_load_4_adaptive_concurrency_config() {
    let base = "backends:\n  - id: a\n    url: http://10.0.0.1:80\n";
    let d = ok(base).pool_params.adaptive;
    assert!(!d.enabled);
    assert_eq!((d.min_limit, d.max_limit), (3, 512));
    assert_eq!((d.rtt_tolerance_milli, d.backoff_milli), (1500, 900));
    assert_eq!(d.window, core::time::Duration::from_secs(1));
    let on = format!(
        "{base}server:\n  upstream:\n    max_concurrent_requests: 100\n    adaptive_concurrency:\n      \
         enabled: true\n      min_limit: 2\n      max_limit: 50\n      window: 250ms\n      \
         rtt_tolerance: 2\n      backoff_ratio: 0.5\n"
    );
    let p = ok(&on).pool_params.adaptive;
    assert!(p.enabled);
    assert_eq!((p.min_limit, p.max_limit), (2, 50));
    assert_eq!((p.rtt_tolerance_milli, p.backoff_milli), (2000, 500));
    assert_eq!(p.window, core::time::Duration::from_millis(250));
    let bad = |field: &str, value: &str| {
        format!(
            "{base}server:\n  upstream:\n    max_concurrent_requests: 100\n    \
             adaptive_concurrency:\n      enabled: true\n      {field}: {value}\n"
        )
    };
    for (field, value) in [
        ("min_limit", "0"),
        ("max_limit", "101"),
        ("window", "0s"),
        ("rtt_tolerance", "1"),
        ("backoff_ratio", "1.5"),
    ] {
        let e = errs(&bad(field, value));
        err_at(&e, &format!("server.upstream.adaptive_concurrency.{field}"));
    }
    let e = errs(&bad("min_limit: 60\n      max_limit", "50"));
    err_at(&e, "server.upstream.adaptive_concurrency.max_limit");
    let e = errs(&bad("gradient", "true"));
    err_at(&e, "server.upstream.adaptive_concurrency.gradient");
    assert_eq!(
        crate::config::diff::classify("server.upstream.adaptive_concurrency.min_limit"),
        crate::config::diff::Apply::Dynamic
    );
}

const DNS_BASE: &str = "backends: [{id: a, url: 'http://127.0.0.1:1'}]\n";

#[test]
fn c_disc_1_dns_pool_config_defaults_and_checks() {
    let v = ok(&format!(
        "{DNS_BASE}pools: {{api: {{dns: {{name: API.Internal., port: \"8080\"}}}}}}\n"
    ));
    let spec = v.pools[1].dns.clone().expect("dns");
    assert_eq!(spec.name, "api.internal");
    assert_eq!(spec.port, 8080);
    assert_eq!(spec.interval, Duration::from_secs(5));
    assert!(!spec.https);
    assert_eq!(spec.protocol, crate::backend::Protocol::Http1);
    assert!(v.pools[1].backends.is_empty(), "filled by the resolver");
    assert!(v.server.resolver.is_empty());
    assert!(v.pools[0].dns.is_none());

    // Both, or neither: the error names the pool.
    let e = errs(&format!(
        "{DNS_BASE}pools: {{api: {{backends: [{{id: b, url: 'http://127.0.0.1:2'}}], dns: {{name: x, port: 1}}}}}}\n"
    ));
    assert!(err_at(&e, "pools.api").message.contains("\"api\""), "{e}");
    assert!(err_at(&e, "pools.api").message.contains("not both"), "{e}");
    let e = errs(&format!("{DNS_BASE}pools: {{api: {{}}}}\n"));
    assert!(
        err_at(&e, "pools.api.backends").message.contains("dns"),
        "{e}"
    );

    // Every field checked and named.
    let e = errs(&format!(
        "{DNS_BASE}pools: {{api: {{dns: {{name: 'bad name', port: 0, interval: 100ms, scheme: ftp, protocol: h3}}}}}}\n"
    ));
    for path in [
        "pools.api.dns.name",
        "pools.api.dns.port",
        "pools.api.dns.interval",
        "pools.api.dns.scheme",
        "pools.api.dns.protocol",
    ] {
        let _ = err_at(&e, path);
    }
    let e = errs(&format!(
        "{DNS_BASE}pools: {{api: {{dns: {{interval: 5s}}}}}}\n"
    ));
    assert!(
        err_at(&e, "pools.api.dns.name")
            .message
            .contains("required")
    );
    assert!(
        err_at(&e, "pools.api.dns.port")
            .message
            .contains("required")
    );
    let e = errs(&format!(
        "{DNS_BASE}pools: {{api: {{dns: {{name: x, port: 1, protocol: h2}}}}}}\n"
    ));
    assert!(
        err_at(&e, "pools.api.dns.protocol")
            .message
            .contains("https")
    );
    let e = errs(&format!(
        "{DNS_BASE}pools: {{api: {{dns: {{name: x, port: 1, extra: 1}}}}}}\n"
    ));
    let _ = err_at(&e, "pools.api.dns.extra");
    let v = ok(&format!(
        "{DNS_BASE}pools: {{g: {{dns: {{name: g.svc, port: 443, interval: 1h, scheme: https, protocol: h2}}}}}}\n"
    ));
    let g = v.pools[1].dns.clone().expect("dns");
    assert!(g.https);
    assert_eq!(g.protocol, crate::backend::Protocol::H2);
}

#[test]
fn c_disc_1_server_resolver_addresses_and_restart() {
    let v = ok(&format!(
        "{DNS_BASE}server: {{resolver: ['10.0.0.10:53', '[fd00::a]:5353']}}\n"
    ));
    assert_eq!(
        v.server.resolver,
        [
            "10.0.0.10:53"
                .parse::<std::net::SocketAddr>()
                .expect("addr"),
            "[fd00::a]:5353".parse().expect("addr")
        ]
    );
    let e = errs(&format!(
        "{DNS_BASE}server: {{resolver: ['dns.internal:53', '10.0.0.1', '10.0.0.1:0']}}\n"
    ));
    for i in 0..3 {
        let _ = err_at(&e, &format!("server.resolver[{i}]"));
    }
    assert_eq!(classify("server.resolver"), Apply::Restart);
    assert_eq!(classify("pools.api.dns.interval"), Apply::Dynamic);
    assert!(schema_paths().contains("pools.<name>.dns.name"));
    assert!(schema_paths().contains("server.resolver"));
}

#[test]
fn c_disc_1_a_dns_pool_survives_validate_config_round_trip() {
    let v = ok(&format!(
        "{DNS_BASE}pools: {{api: {{dns: {{name: api.internal, port: 8080, interval: 2s}}}}}}\n"
    ));
    let again = validate_config(v.config.clone(), &MapSecrets::new()).expect("valid");
    assert_eq!(again.pools[1].dns, v.pools[1].dns);
}
