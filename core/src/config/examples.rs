//! Every file in `config/` loads and validates (C-CONF-0), with specific checks per file; the
//! reference balancer's example loads unchanged; docs/configuration.md documents every schema
//! field; hostile input fails fast. New example files are covered automatically (the directory
//! is iterated).
//!
//! Written against the public API only. It lives in the crate rather than in `core/tests/`
//! because an integration test makes `cargo test` build the library without `cfg(test)`, and
//! under `--cfg loom` that build lacks `loom` (a dev-dependency), which breaks the loom command.
// This test reads the example files and the documentation from disk, which core itself never does.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::{self, HashKey, MapSecrets, ProbeMode, ValidConfig, load, schema_paths};
use crate::rate::{FailureMode, StorageKind};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("core/ has a parent")
        .to_path_buf()
}

/// The secrets the examples name.
fn secrets() -> MapSecrets {
    MapSecrets::new()
        .with_env("BALANCER_ADMIN_TOKEN", "example-admin-token")
        .with_env("REDIS_PASSWORD", "example-redis-password")
        .with_env("POSTGRES_PASSWORD_FILE", "/run/secrets/postgres_password")
        .with_file("/run/secrets/postgres_password", "example-pg-password\n")
}

fn examples() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(repo().join("config")).expect("config/ exists") {
        let path = entry.expect("readable entry").path();
        let ext = path.extension().and_then(|e| e.to_str());
        if !matches!(ext, Some("yaml" | "yml")) {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).expect("readable example");
        out.push((name, text));
    }
    out.sort();
    out
}

/// Load an example, failing the test with every error when it does not validate.
fn load_example(name: &str) -> ValidConfig {
    let text = std::fs::read_to_string(repo().join("config").join(name)).expect("example exists");
    load(&text, &secrets()).unwrap_or_else(|e| panic!("{name} does not validate:\n{e}"))
}

#[test]
fn c_conf_0_every_example_validates() {
    let files = examples();
    assert!(
        files.len() >= 6,
        "expected the shipped examples, got {files:?}"
    );
    for (name, text) in &files {
        if let Err(e) = load(text, &secrets()) {
            panic!("{name} does not validate:\n{e}");
        }
    }
}

#[test]
fn c_conf_0_reference_config_loads_unchanged() {
    let v = load_example("reference-go.yaml");
    assert_eq!(v.server.access_log_sample_rate, 0.01);
    assert!(!v.server.access_log_include_path);
    assert_eq!(v.server.write_timeout, None);
    assert_eq!(v.pool_params.max_concurrent_requests, 512);
    assert_eq!(v.retry.max_attempts(), 2);
    assert_eq!(v.retry.per_try_timeout(), Duration::from_secs(5));
    assert_eq!(v.retry.budget_capacity(), 100);
    assert_eq!(v.gate.max_concurrent_requests(), 2048);
    assert_eq!(v.gate.queue_timeout(), Duration::from_millis(50));
    assert_eq!(v.health.params.failure_threshold(), 2);
    assert_eq!(v.health.params.success_threshold(), 1);
    // The reference names redis storage but leaves rate limiting off (its default).
    assert!(!v.rate.enabled());
    assert_eq!(v.config.rate_limit.storage, "redis");
    assert_eq!(v.rate.failure_mode(), FailureMode::LocalFallback);
    assert_eq!(v.rate.local_store().max_buckets, 100_000);
    assert!(v.management.runtime_mutations);
    assert!(!v.management.enabled);
    assert_eq!(v.management.write_timeout, Duration::from_secs(30));
    let backends = &v.pools[0].backends;
    assert_eq!(backends.len(), 2);
    assert_eq!(backends[0].id, "backend-1");
    assert_eq!(backends[1].url, "http://backend3:80");
    assert!(!backends[0].disabled && backends[1].disabled);
}

#[test]
fn c_conf_0_shipped_config() {
    let v = load_example("weir.yaml");
    assert!(v.rate.enabled());
    assert_eq!(v.rate.storage(), StorageKind::Local);
    assert!(v.management.enabled);
    assert_eq!(v.management.address.to_string(), "127.0.0.1:9090");
    assert_eq!(
        v.management.auth_token.as_ref().map(|t| t.expose()),
        Some("example-admin-token")
    );
    let urls: Vec<&str> = v.pools[0].backends.iter().map(|b| b.url.as_str()).collect();
    assert_eq!(urls, ["http://127.0.0.1:9001", "http://127.0.0.1:9002"]);
    assert_eq!(v.health.mode, ProbeMode::Http);
    assert_eq!(v.pool_params.breaker, Default::default());
    assert!(v.routes.is_empty());
}

#[test]
fn c_route_1_routes_and_pools_example() {
    let v = load_example("routes-and-pools.yaml");
    let names: Vec<&str> = v.pools.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["default", "api", "static", "reports"]);
    assert_eq!(v.routes.len(), 4);
    assert_eq!(v.pools[1].policy.as_str(), "least_request");
    assert_eq!(v.pools[2].policy.as_str(), "weighted_round_robin");
    assert_eq!(v.pools[2].backends[0].weight, 3);
    assert_eq!(v.pools[3].policy.as_str(), "pick_first");
    assert!(v.pools[1].backends[2].disabled);
    let reports = v.route_table.lookup("/api/reports/monthly");
    assert_eq!(reports.pool, 3);
    assert_eq!(
        v.routes[reports.route.unwrap()].max_concurrent_requests,
        Some(8)
    );
    assert_eq!(v.route_table.lookup("/api/users").pool, 1);
    assert_eq!(v.route_table.lookup("/apix").pool, 0);
    assert_eq!(v.route_table.lookup("/static/app.js").pool, 2);
    assert_eq!(v.route_table.lookup("/healthcheck-probe").pool, 0);
}

#[test]
fn c_tls_1_tls_example() {
    let v = load_example("tls.yaml");
    let t = v.server.tls.as_ref().expect("tls on");
    assert_eq!(t.certificates.len(), 2);
    assert_eq!(t.min_version, config::TlsVersion::Tls12);
    let p = v.server.proxy_protocol.as_ref().expect("proxy protocol on");
    assert_eq!(p.accept, crate::proxy_proto::Accept::Any);
    assert_eq!(p.trusted.len(), 1);
}

#[test]
fn c_rate_3_redis_example() {
    let v = load_example("redis.yaml");
    assert_eq!(v.rate.storage(), StorageKind::Redis);
    assert_eq!(v.redis.address.host, "redis.internal");
    assert_eq!(v.redis.address.port, 6379);
    assert_eq!(
        v.redis.password.as_ref().map(|p| p.expose()),
        Some("example-redis-password")
    );
    let proxies: Vec<String> = v
        .server
        .trusted_proxies
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(proxies, ["10.0.0.0/8", "192.168.1.10/32"]);
    assert!(!v.management.runtime_mutations);
    assert!(v.database.is_none());
}

#[test]
fn c_rate_3_postgres_example() {
    let v = load_example("postgres.yaml");
    assert_eq!(v.rate.storage(), StorageKind::Postgres);
    assert_eq!(v.rate.failure_mode(), FailureMode::FailClosed);
    let db = v.database.as_ref().expect("postgres settings");
    assert_eq!((db.host.as_str(), db.port), ("postgres.internal", 5432));
    assert_eq!(db.sslmode, "disable");
    // From POSTGRES_PASSWORD_FILE, one trailing newline removed (C-CONF-3).
    assert_eq!(db.password.expose(), "example-pg-password");
    assert!(!format!("{v:?}").contains("example-pg-password"));
    // Without the secret the file is rejected, naming the field.
    let text = std::fs::read_to_string(repo().join("config/postgres.yaml")).unwrap();
    let e = load(&text, &MapSecrets::new()).unwrap_err();
    assert!(e.has("database.password_env"), "{e}");
}

#[test]
fn c_pool_4_consistent_hash_example() {
    let v = load_example("consistent-hash.yaml");
    assert_eq!(v.pools[0].policy.as_str(), "consistent_hash");
    assert_eq!(
        v.pools[0].hash_key,
        Some(HashKey::Cookie("session_id".into()))
    );
    assert_eq!(
        v.pools[1].hash_key,
        Some(HashKey::Header(http::HeaderName::from_static(
            "x-tenant-id"
        )))
    );
    assert_eq!(v.route_table.lookup("/tenant/42").pool, 1);
}

/// Every schema field appears in docs/configuration.md as `` `path` `` (C-CONF-0, C-CONF-1).
#[test]
fn c_conf_0_every_schema_field_is_documented() {
    let doc = std::fs::read_to_string(repo().join("docs/configuration.md"))
        .expect("docs/configuration.md exists");
    let missing: BTreeSet<String> = schema_paths()
        .into_iter()
        .filter(|p| !doc.contains(&format!("`{p}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/configuration.md does not document: {missing:?}"
    );
    // And every field the doc's tables name exists (no stale rows).
    let known = schema_paths();
    for line in doc.lines().filter(|l| l.starts_with("| `")) {
        let path = line[3..].split('`').next().unwrap_or("");
        if path.contains('/') {
            continue; // the table of example files
        }
        assert!(
            known.contains(path),
            "docs/configuration.md documents unknown field {path}"
        );
    }
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = std::time::Instant::now();
    let out = f();
    (out, start.elapsed())
}

/// A 10 MB random file, a 1 MiB random file, a 120k-node document and a billion-laughs bomb are
/// each rejected with one clear error by the parser's budgets (size, nodes, aliases) (C-CONF-1).
#[test]
fn c_conf_1_hostile_files_fail_fast() {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let alphabet = b"key: value\n- [ ] { } & * ! | > ' \" # , 0123456789 abc";
    let random: String = (0..10_000_000)
        .map(|_| alphabet[(next() % alphabet.len() as u64) as usize] as char)
        .collect();
    let (r, took) = timed(|| load(&random, &MapSecrets::new()));
    let e = r.unwrap_err();
    assert_eq!(e.errors().len(), 1);
    assert!(e.to_string().contains("limit"), "{e}");
    eprintln!("10 MB random: rejected in {took:?}: {e}");

    // Under the size limit, random text fails in the parser, not in memory.
    let (r, took) = timed(|| load(&random[..config::MAX_CONFIG_BYTES - 1], &MapSecrets::new()));
    let e = r.unwrap_err();
    eprintln!("1 MiB random: rejected in {took:?}: {e}");

    // A large but regular document hits the node budget.
    let many = format!("backends: [{}]\n", "{}, ".repeat(120_000));
    let (r, took) = timed(|| load(&many, &MapSecrets::new()));
    let e = r.unwrap_err();
    eprintln!("120k nodes: rejected in {took:?}: {e}");
    assert_eq!(e.errors().len(), 1, "{e}");
    assert!(e.to_string().contains("too large or too complex"), "{e}");

    let mut bomb = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..10 {
        let p = i - 1;
        bomb.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let (r, took) = timed(|| load(&bomb, &MapSecrets::new()));
    let e = r.unwrap_err();
    assert_eq!(e.errors().len(), 1, "{e}");
    assert!(e.to_string().contains("too large or too complex"), "{e}");
    // Bounded work is guaranteed by the parser budgets, not by a clock: the durations are
    // reported, never asserted (benchmarks measure speed; tests assert behaviour).
    eprintln!("billion laughs: rejected in {took:?}: {e}");
}

/// The cluster and sentinel examples load with their topology.
#[test]
fn c_rate_3_redis_topology_examples() {
    let v = load_example("redis-cluster.yaml");
    assert_eq!(v.rate.storage(), StorageKind::Redis);
    assert_eq!(v.redis.mode, config::RedisMode::Cluster);
    assert_eq!(v.redis.addresses.len(), 3);
    assert_eq!(v.redis.addresses[2].host, "redis-2.redis.internal");
    assert!(v.redis.password.is_some());
    let v = load_example("redis-sentinel.yaml");
    assert_eq!(v.redis.mode, config::RedisMode::Sentinel);
    assert_eq!(v.redis.sentinel_master.as_deref(), Some("weir-limits"));
    assert_eq!(v.redis.addresses[0].port, 26379);
    assert_eq!(v.redis.database, 1);
    assert_eq!(v.rate.failure_mode(), FailureMode::FailClosed);
}

/// C-GRPC-4, C-GRPC-5: the gRPC example: HTTP/2 backends probed with the gRPC health service,
/// upstream TLS with a private CA, a server name and a client certificate.
#[test]
fn c_grpc_4_grpc_example() {
    let v = load_example("grpc.yaml");
    assert_eq!(v.health.mode, ProbeMode::Grpc);
    assert_eq!(v.health.grpc_service, "helloworld.Greeter");
    let t = &v.server.upstream.tls;
    assert_eq!(t.ca_file.as_deref(), Some("/etc/weir/backend-ca.pem"));
    assert_eq!(t.server_name.as_deref(), Some("greeter.internal"));
    assert!(t.client_cert.is_some());
    for pool in &v.pools {
        for b in &pool.backends {
            assert!(b.protocol.is_h2(), "{} speaks HTTP/2", b.id);
        }
    }
    assert_eq!(v.route_table.lookup("/reports.v1.Reports/Get").pool, 1);
}

/// C-DISC-1, C-GRPC-1: the Kubernetes component balancing a headless Service's pods over h2c
/// (deploy/kubernetes/components/grpc-dns) loads: one pool fed by the Service's name.
#[test]
fn c_disc_1_kubernetes_headless_service_example() {
    let path = repo().join("deploy/kubernetes/components/grpc-dns/weir.yaml");
    let text = std::fs::read_to_string(&path).expect("the component's config");
    let v = load(&text, &secrets())
        .unwrap_or_else(|e| panic!("{} does not validate:\n{e}", path.display()));
    assert_eq!(v.health.mode, ProbeMode::Grpc);
    let pool = v
        .pools
        .iter()
        .find(|p| p.name == "greeter")
        .expect("the greeter pool");
    let dns = pool.dns.as_ref().expect("fed by DNS");
    assert_eq!(dns.name, "greeter-pods.default.svc.cluster.local");
    assert_eq!(dns.port, 50051);
    assert_eq!(dns.protocol, crate::backend::Protocol::H2c);
    assert!(pool.backends.is_empty(), "filled by the resolver at start");
    assert_eq!(v.route_table.lookup("/helloworld.Greeter/SayHello").pool, 1);
}
