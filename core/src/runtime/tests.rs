//! Runtime building, carry-over on reload (C-CONF-6), warm-up (C-CONF-5), restart-only changes
//! (C-CONF-7), the shared validation path (C-CONF-8), routing (C-ROUTE-1) and affinity keys
//! (C-POOL-4).

use core::time::Duration;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use http::{HeaderMap, HeaderValue};

use super::*;
use crate::bulkhead::Bulkhead;
use crate::config::{self, Apply, MapSecrets, SecretSource, ValidConfig, load, validate_config};
use crate::pool::Backend;
use crate::rng::WyRand;
use crate::select::{PickContext, hash_key};
use crate::sync::Arc;
use crate::time::Instant;

const T0: Instant = Instant::ZERO;

pub(crate) fn valid(text: &str) -> ValidConfig {
    valid_with(text, &MapSecrets::new())
}

pub(crate) fn valid_with(text: &str, secrets: &MapSecrets) -> ValidConfig {
    match load(text, secrets) {
        Ok(v) => v,
        Err(e) => panic!("expected a valid config, got:\n{e}"),
    }
}

pub(crate) fn build(text: &str) -> Runtime {
    Runtime::build(valid(text), None, T0, &mut WyRand::new(1)).expect("runtime")
}

fn reload(prev: &Runtime, text: &str) -> Reload {
    prev.reload(valid(text), Instant::from_secs(10), &mut WyRand::new(2))
        .expect("reload")
}

fn backend<'r>(rt: &'r Runtime, id: &str) -> &'r Arc<Backend> {
    rt.find_backend(id).expect("backend").1
}

const TWO: &str = "
backends:
  - id: a
    url: http://10.0.0.1:80
  - id: b
    url: http://10.0.0.2:80
";

/// Every field away from its default, so the round trip of `validate_config` is checked for
/// each (a field the writer forgot would come back as its default).
const EVERYTHING: &str = r#"
server:
  port: "8081"
  trusted_proxies: ["10.0.0.0/8", "192.168.1.1"]
  access_log_sample_rate: 0.5
  access_log_include_path: true
  read_header_timeout: 6s
  read_timeout: 16s
  write_timeout: 1m30s
  idle_timeout: 61s
  shutdown_timeout: 11s
  max_header_bytes: 2048
  upstream:
    dial_timeout: 3s
    tls_handshake_timeout: 4s
    response_header_timeout: 11s
    expect_continue_timeout: 2s
    idle_conn_timeout: 91s
    max_idle_conns: 257
    max_idle_conns_per_host: 65
    max_concurrent_requests: 513
  retry:
    max_attempts: 3
    per_try_timeout: 1.5s
    body_limit: 4096
    methods: [GET, PUT]
    statuses: [500, 503]
    budget_capacity: 50
    budget_refill_per_second: 2.5
  overload:
    max_concurrent_requests: 100
    max_queue: 10
    queue_timeout: 0s
health_check:
  mode: tcp
  path: /ping
  interval: 7s
  timeout: 1s
  failure_threshold: 3
  success_threshold: 2
  max_concurrency: 4
  jitter: 0s
  cooldown: 5s
  max_cooldown: 1m
  half_open_requests: 2
  slow_start: 0s
  slow_start_minimum_percent: 20
  expected_statuses: [200]
rate_limit:
  enabled: true
  storage: redis
  failure_mode: fail-open
  capacity: 7
  refill_per_second: 0.5
  operation_timeout: 20ms
  local_shards: 8
  local_max_buckets: 1000
  ipv4_prefix_bits: 24
  ipv6_prefix_bits: 48
redis:
  address: "cache:6380"
  password_env: REDIS_PASSWORD
  database: 2
  pool_size: 8
  dial_timeout: 1s
  read_timeout: 20ms
  write_timeout: 30ms
database:
  host: db
  port: "5433"
  user: weir
  name: weir
  sslmode: require
  password_env: DB_PASSWORD
  connect_timeout: 2s
  max_open_connections: 5
management:
  enabled: true
  address: "127.0.0.1:9091"
  auth_token_env: ADMIN_TOKEN
  allow_insecure: false
  runtime_mutations: true
  write_timeout: 10s
balancing:
  policy: consistent_hash
  hash_key: "header:X-User"
backends:
  - id: a
    url: http://10.0.0.1:80
    weight: 2
  - id: b
    url: http://10.0.0.2:80
    disabled: true
pools:
  api:
    balancing:
      policy: least_request
    backends:
      - id: api-1
        url: https://10.0.1.1:8443/base
routes:
  - prefix: /api
    pool: api
    max_concurrent_requests: 4
  - prefix: /static
    pool: default
"#;

fn everything_secrets() -> MapSecrets {
    MapSecrets::new()
        .with_env("ADMIN_TOKEN", "admin-secret-token")
        .with_env("REDIS_PASSWORD", "redis-secret")
        .with_env("DB_PASSWORD", "db-secret")
}

#[test]
fn c_conf_8_validate_config_gives_what_load_gives() {
    let mut texts: Vec<(String, MapSecrets)> = vec![
        (EVERYTHING.to_owned(), everything_secrets()),
        (TWO.to_owned(), MapSecrets::new()),
    ];
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../config");
    for name in [
        "weir.yaml",
        "routes-and-pools.yaml",
        "consistent-hash.yaml",
        "reference-go.yaml",
    ] {
        // Test-only file read of the shipped examples (core itself reads no files).
        #[allow(clippy::disallowed_methods)]
        let text = std::fs::read_to_string(format!("{dir}/{name}")).expect("example");
        texts.push((
            text,
            everything_secrets().with_env("BALANCER_ADMIN_TOKEN", "t"),
        ));
    }
    for (text, secrets) in &texts {
        let loaded = valid_with(text, secrets);
        let again = validate_config(loaded.config.clone(), secrets).expect("re-validates");
        assert_eq!(again.config, loaded.config);
        assert_eq!(
            again.values, loaded.values,
            "values in force differ for\n{text}"
        );
        assert_eq!(again.management, loaded.management);
        assert_eq!(again.pools, loaded.pools);
    }
}

#[test]
fn c_conf_8_validate_config_reports_paths_without_positions() {
    let mut cfg = valid(TWO).config;
    cfg.rate_limit.capacity = 0;
    cfg.server.retry.max_attempts = 9;
    cfg.backends[1].id = String::new();
    cfg.server.access_log_sample_rate = f64::NAN;
    let e = validate_config(cfg, &MapSecrets::new()).expect_err("invalid");
    for path in [
        "rate_limit.capacity",
        "server.retry.max_attempts",
        "backends[1].id",
        "server.access_log_sample_rate",
    ] {
        assert!(e.has(path), "no error at {path}: {e}");
    }
    assert!(e.errors().iter().all(|e| e.pos.is_none()));
}

#[test]
fn c_route_1_target_is_the_longest_prefix_with_its_bulkhead() {
    let text = format!(
        "{TWO}pools:\n  api:\n    backends:\n      - id: api-1\n        url: http://10.0.1.1:80\n\
         routes:\n  - prefix: /api\n    pool: api\n    max_concurrent_requests: 2\n  \
         - prefix: /api/open\n    pool: default\n"
    );
    let rt = build(&text);
    let (t, m) = rt.target("/api/x?q=1");
    assert_eq!(m.pool, 1);
    assert_eq!(m.route, Some(0));
    assert!(Arc::ptr_eq(&t.pool, &rt.pools()[1]));
    assert_eq!(t.bulkhead.as_ref().and_then(|b| b.limit()), Some(2));
    let (t, m) = rt.target("/api/open/y");
    assert_eq!((m.route, m.pool), (Some(1), 0));
    assert!(
        t.bulkhead.is_none(),
        "a route without a limit has no bulkhead"
    );
    let (t, m) = rt.target("/apix");
    assert_eq!((m.route, m.pool), (None, 0));
    assert!(Arc::ptr_eq(&t.pool, &rt.pools()[0]));
}

#[test]
fn find_backend_and_ids_in_config_order() {
    let rt = build(&format!(
        "{TWO}pools:\n  p:\n    backends:\n      - id: c\n        url: http://10.0.1.1:80\n"
    ));
    assert_eq!(rt.backend_ids().collect::<Vec<_>>(), ["a", "b", "c"]);
    assert_eq!(
        rt.find_backend("c").map(|(p, b)| (p, b.id())),
        Some((1, "c"))
    );
    assert!(rt.find_backend("zz").is_none());
}

fn hashed(key: &str) -> Runtime {
    build(&format!(
        "{TWO}balancing:\n  policy: consistent_hash\n  hash_key: \"{key}\"\n"
    ))
}

#[test]
fn c_pool_4_pick_context_hashes_the_configured_key() {
    let client = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));
    let client_hash = hash_key(&[192, 0, 2, 7]);
    let mut h = HeaderMap::new();

    let rt = hashed("header:X-User");
    assert_eq!(
        rt.pick_context(0, client, &h).hash,
        Some(client_hash),
        "absent: address"
    );
    h.insert("x-user", HeaderValue::from_static(""));
    assert_eq!(
        rt.pick_context(0, client, &h).hash,
        Some(client_hash),
        "empty: address"
    );
    h.insert("x-user", HeaderValue::from_static("alice"));
    let ctx = rt.pick_context(0, client, &h);
    assert_eq!(
        ctx,
        PickContext {
            hash: Some(hash_key(b"alice"))
        }
    );

    let rt = hashed("cookie:sid");
    let mut h = HeaderMap::new();
    h.append("cookie", HeaderValue::from_static("other=1; sidx=2"));
    assert_eq!(rt.pick_context(0, client, &h).hash, Some(client_hash));
    h.append(
        "cookie",
        HeaderValue::from_static("a=b;  sid=\"s-42\" ; sid=late"),
    );
    assert_eq!(rt.pick_context(0, client, &h).hash, Some(hash_key(b"s-42")));

    let rt = hashed("client_address");
    let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
    assert_eq!(
        rt.pick_context(0, v6, &h).hash,
        Some(hash_key(&Ipv6Addr::LOCALHOST.octets()))
    );

    // Other policies get no hash.
    let rt = build(TWO);
    assert_eq!(rt.pick_context(0, client, &h).hash, None);
}

#[test]
fn c_conf_6_same_id_and_url_keep_health_and_in_flight() {
    let rt = build(TWO);
    let a = Arc::clone(backend(&rt, "a"));
    a.set_healthy(true, T0);
    let slot = Backend::try_reserve(&a, &rt.config().pool_params, T0, false).expect("slot");
    assert_eq!(a.in_flight(), 1);

    // b's url changes; c is new.
    let next = reload(
        &rt,
        "backends:\n  - id: a\n    url: http://10.0.0.1:80\n  - id: b\n    url: http://10.0.0.9:80\n  \
         - id: c\n    url: http://10.0.0.3:80\n",
    );
    let rt2 = next.runtime;
    assert!(
        Arc::ptr_eq(backend(&rt2, "a"), &a),
        "same id and url: same state"
    );
    assert!(backend(&rt2, "a").is_healthy());
    assert_eq!(backend(&rt2, "a").in_flight(), 1);
    assert!(
        !Arc::ptr_eq(backend(&rt2, "b"), backend(&rt, "b")),
        "new url: new backend"
    );
    assert!(
        !backend(&rt2, "b").is_healthy(),
        "new backends start unhealthy"
    );
    assert!(!backend(&rt2, "c").is_healthy());
    drop(slot);
    assert_eq!(
        backend(&rt2, "a").in_flight(),
        0,
        "the slot is released on the kept state"
    );
    assert!(next.warmup.is_empty(), "a healthy backend was kept");
}

#[test]
fn c_conf_6_declarative_disabled_wins_and_cancels_a_drain() {
    let rt = build(TWO);
    let (a, b) = (backend(&rt, "a"), backend(&rt, "b"));
    a.start_drain(T0);
    b.set_enabled(false, T0);
    let rt2 = reload(&rt, TWO).runtime;
    assert!(
        !backend(&rt2, "a").is_draining(),
        "a reload cancels an administrative drain"
    );
    assert!(
        backend(&rt2, "b").is_enabled(),
        "declarative enabled replaces a runtime disable"
    );

    let disabled = "backends:\n  - id: a\n    url: http://10.0.0.1:80\n    disabled: true\n  \
                    - id: b\n    url: http://10.0.0.2:80\n";
    let rt3 = reload(&rt2, disabled).runtime;
    assert!(Arc::ptr_eq(backend(&rt3, "a"), backend(&rt2, "a")));
    assert!(!backend(&rt3, "a").is_enabled());
}

#[test]
fn c_conf_6_management_rebuild_keeps_runtime_flags() {
    let rt = build(TWO);
    backend(&rt, "a").start_drain(T0);
    backend(&rt, "b").set_enabled(false, T0);
    let mut cfg = rt.config().config.clone();
    cfg.health_check.cooldown = Duration::from_secs(3);
    let v = validate_config(cfg, &rt.secrets()).expect("valid");
    let rt2 = Runtime::build_with(v, Some(&rt), AdminState::Keep, T0, &mut WyRand::new(3))
        .expect("runtime");
    assert!(
        !Arc::ptr_eq(&rt2.pools()[0], &rt.pools()[0]),
        "new parameters, new snapshot"
    );
    assert_eq!(
        rt2.pools()[0].params().breaker,
        rt2.config().pool_params.breaker
    );
    assert!(Arc::ptr_eq(backend(&rt2, "a"), backend(&rt, "a")));
    assert!(backend(&rt2, "a").is_draining());
    assert!(!backend(&rt2, "b").is_enabled());

    // Nothing changed for the pool: the very same snapshot.
    let v = validate_config(rt2.config().config.clone(), &rt2.secrets()).expect("valid");
    let rt3 = Runtime::build_with(v, Some(&rt2), AdminState::Keep, T0, &mut WyRand::new(3))
        .expect("runtime");
    assert!(Arc::ptr_eq(&rt3.pools()[0], &rt2.pools()[0]));
}

#[test]
fn c_load_2_bulkhead_carried_over_when_prefix_and_limit_unchanged() {
    let with = |limit: u32| {
        format!(
            "{TWO}routes:\n  - prefix: /api\n    pool: default\n    max_concurrent_requests: {limit}\n"
        )
    };
    let rt = build(&with(2));
    let bh = Arc::clone(rt.bulkhead(0).expect("bulkhead"));
    let permit = Bulkhead::try_acquire(&bh).expect("permit");
    let rt2 = reload(&rt, &with(2)).runtime;
    assert!(Arc::ptr_eq(rt2.bulkhead(0).expect("kept"), &bh));
    assert_eq!(rt2.bulkhead(0).map(|b| b.in_flight()), Some(1));
    let rt3 = reload(&rt2, &with(3)).runtime;
    assert!(
        !Arc::ptr_eq(rt3.bulkhead(0).expect("new"), &bh),
        "a new limit: a new bulkhead"
    );
    drop(permit);
}

#[test]
fn c_retry_7_budget_carried_over_on_reload() {
    let rt = build(TWO);
    let now = Instant::from_millis(1);
    for _ in 0..60 {
        assert!(rt.budget().try_withdraw(now));
    }
    let same = rt
        .reload(valid(TWO), now, &mut WyRand::new(2))
        .expect("reload")
        .runtime;
    assert!(
        Arc::ptr_eq(same.budget(), rt.budget()),
        "same shape: same budget"
    );
    let bigger = format!("{TWO}server:\n  retry:\n    budget_capacity: 200\n");
    let rt2 = same
        .reload(valid(&bigger), now, &mut WyRand::new(2))
        .expect("reload")
        .runtime;
    assert_eq!(rt2.budget().capacity(), 200);
    assert_eq!(
        rt2.budget().tokens(now),
        40,
        "tokens carried over, none minted"
    );
    assert!(same.budget().is_retired());
    assert_eq!(rt2.retry().budget_capacity(), 200);
}

#[test]
fn c_conf_5_warmup_when_no_healthy_backend_is_kept() {
    let rt = build(TWO);
    let replaced = "backends:\n  - id: x\n    url: http://10.0.0.8:80\n";
    // Nothing healthy now: nothing to lose, no warm-up (an outage fix is not blocked).
    assert!(reload(&rt, replaced).warmup.is_empty());

    backend(&rt, "a").set_healthy(true, T0);
    assert_eq!(
        reload(&rt, replaced).warmup,
        vec![0],
        "the healthy a is gone"
    );
    let keeps_a = "backends:\n  - id: a\n    url: http://10.0.0.1:80\n  - id: x\n    url: http://10.0.0.8:80\n";
    assert!(reload(&rt, keeps_a).warmup.is_empty());
    let keeps_unhealthy_b = "backends:\n  - id: b\n    url: http://10.0.0.2:80\n";
    assert_eq!(reload(&rt, keeps_unhealthy_b).warmup, vec![0]);
    let moved_url = "backends:\n  - id: a\n    url: http://10.0.0.7:80\n";
    assert_eq!(
        reload(&rt, moved_url).warmup,
        vec![0],
        "same id, new url: a new backend"
    );

    // A new pool name starts cold and is not a reason to reject.
    let new_pool = format!(
        "{TWO}pools:\n  fresh:\n    backends:\n      - id: f\n        url: http://10.0.5.1:80\n"
    );
    assert!(reload(&rt, &new_pool).warmup.is_empty());
}

#[test]
fn c_conf_7_restart_only_changes_are_reported_and_not_applied() {
    let rt = build(TWO);
    let text = format!(
        "{TWO}server:\n  port: 9999\n  read_timeout: 1s\n  trusted_proxies: [10.0.0.0/8]\n  \
         overload:\n    max_concurrent_requests: 5\n  upstream:\n    dial_timeout: 9s\n    \
         max_concurrent_requests: 7\nrate_limit:\n  capacity: 3\n  local_shards: 2\n\
         redis:\n  address: other:1\nhealth_check:\n  interval: 9s\n"
    );
    let plan = plan_reload(&rt, valid(&text)).expect("plan");
    let restart: Vec<&str> = plan.restart_required().collect();
    for p in [
        "server.port",
        "server.read_timeout",
        "server.overload.max_concurrent_requests",
        "server.upstream.dial_timeout",
        "rate_limit.local_shards",
        "redis.address",
    ] {
        assert!(restart.contains(&p), "{p} not reported: {restart:?}");
    }
    let applied: Vec<&str> = plan.applied().collect();
    for p in [
        "server.trusted_proxies",
        "server.upstream.max_concurrent_requests",
        "rate_limit.capacity",
        "health_check.interval",
    ] {
        assert!(applied.contains(&p), "{p} not applied: {applied:?}");
    }
    let next = rt
        .reload(valid(&text), T0, &mut WyRand::new(5))
        .expect("reload");
    let c = next.runtime.config();
    assert_eq!(c.server.port, 8080, "restart-only: the running value stays");
    assert_eq!(c.server.read_timeout, Some(Duration::from_secs(15)));
    assert_eq!(c.gate.max_concurrent_requests(), 2048);
    assert_eq!(c.server.upstream.dial_timeout, Duration::from_secs(2));
    assert_eq!(c.rate.local_store().shards, 64);
    assert_eq!(c.redis.address.host, "redis");
    assert_eq!(c.rate.capacity(), 3, "dynamic: applied");
    assert_eq!(c.pool_params.max_concurrent_requests, 7);
    assert_eq!(c.health.params.interval(), Duration::from_secs(9));
    assert_eq!(next.runtime.trusted_proxies().nets().len(), 1);
    let left = config::diff(rt.config(), c);
    assert!(
        !left.needs_restart(),
        "nothing restart-only moved: {left:?}"
    );

    // The same file again: still needs a restart, nothing dynamic left to apply.
    let again = plan_reload(&next.runtime, valid(&text)).expect("plan");
    assert!(again.restart_required().any(|p| p == "server.port"));
    assert_eq!(again.applied().count(), 0);
}

#[test]
fn c_conf_7_every_restart_only_field_is_kept() {
    // From the minimal file to one that changes every field: the planned configuration
    // differs from the running one only in dynamic fields, and in all of them.
    let secrets = everything_secrets();
    let rt = build(TWO);
    let file = valid_with(EVERYTHING, &secrets);
    let full = config::diff(rt.config(), &file);
    let plan = plan_reload(&rt, file).expect("plan");
    let left = config::diff(rt.config(), &plan.config);
    assert!(
        left.changes.iter().all(|c| c.apply == Apply::Dynamic),
        "{left:?}"
    );
    let dynamic: Vec<&str> = full.dynamic_paths().collect();
    assert_eq!(left.dynamic_paths().collect::<Vec<_>>(), dynamic);
    assert!(
        plan.config.management.auth_token.is_none(),
        "management is restart-only"
    );
}

#[test]
fn running_secrets_serve_the_secrets_in_force_by_name() {
    let v = valid_with(EVERYTHING, &everything_secrets());
    let s = running_secrets(&v);
    assert_eq!(s.env("ADMIN_TOKEN").as_deref(), Some("admin-secret-token"));
    assert_eq!(s.env("REDIS_PASSWORD").as_deref(), Some("redis-secret"));
    assert_eq!(
        s.env("DB_PASSWORD"),
        None,
        "postgres is not the store: not resolved"
    );
    assert_eq!(s.env("HOME"), None);
    assert!(s.read_file("/etc/passwd").is_err());
    let shown = format!("{s:?}");
    assert!(!shown.contains("secret-token") && !shown.contains("db-secret"));
}

mod proptests {
    use proptest::prelude::*;

    use super::*;

    /// One backend line of a generated file: id from a small set, url from a small set.
    fn file(backends: &[(u8, u8, bool)]) -> String {
        let mut t = String::from("backends:\n");
        let mut seen = Vec::new();
        for (id, url, disabled) in backends {
            if seen.contains(id) {
                continue;
            }
            seen.push(*id);
            t.push_str(&format!(
                "  - id: b{id}\n    url: http://10.0.{url}.{id}:80\n    disabled: {disabled}\n"
            ));
        }
        t
    }

    proptest! {
        /// C-CONF-6 and C-CONF-5 over random reload sequences: a backend with the same id and
        /// url is the same state (health, slots) after the reload, a changed one is new and
        /// unhealthy, the declarative `disabled` is in force, no drain survives, and the warm-up
        /// decision matches its definition.
        #[test]
        fn c_conf_6_reload_sequences_keep_exactly_the_unchanged_backends(
            steps in proptest::collection::vec(
                (
                    proptest::collection::vec((0u8..5, 1u8..4, any::<bool>()), 1..5),
                    proptest::collection::vec(any::<bool>(), 5),
                    proptest::collection::vec(any::<bool>(), 5),
                ),
                1..8,
            ),
        ) {
            let mut rt = build("backends:\n  - id: b0\n    url: http://10.0.1.0:80\n");
            for (i, (backends, healthy, drain)) in steps.iter().enumerate() {
                let now = Instant::from_secs(i as u64 + 1);
                // Random runtime state on the live backends.
                for (j, (_, b)) in rt.backends().enumerate() {
                    b.set_healthy(healthy[j % 5], now);
                    if drain[j % 5] {
                        b.start_drain(now);
                    }
                }
                let had_healthy = rt.backends().any(|(_, b)| b.is_healthy());
                let text = file(backends);
                let next = rt.reload(valid(&text), now, &mut WyRand::new(i as u64)).expect("reload");
                let new = &next.runtime;
                for spec in &new.config().pools[0].backends {
                    let b = backend(new, &spec.id);
                    let old = rt.find_backend(&spec.id).map(|(_, b)| b);
                    match old {
                        Some(o) if o.url() == spec.url => {
                            prop_assert!(Arc::ptr_eq(o, b), "same id and url must keep state");
                        }
                        _ => prop_assert!(!b.is_healthy(), "a new backend starts unhealthy"),
                    }
                    prop_assert_eq!(b.is_enabled(), !spec.disabled);
                    prop_assert!(!b.is_draining() || spec.disabled, "a reload cancels drains");
                }
                let now_healthy = new.backends().any(|(_, b)| b.is_healthy());
                let expected: Vec<usize> = if had_healthy && !now_healthy { vec![0] } else { vec![] };
                prop_assert_eq!(&next.warmup, &expected);
                rt = next.runtime;
            }
        }
    }
}
