//! `redis.mode` and its fields (C-RATE-3, C-CONF-1).

use crate::config::{ConfigErrors, MapSecrets, RedisMode, ValidConfig, load};

const MIN: &str = "backends:\n  - id: a\n    url: http://127.0.0.1:9001\n";

fn load_redis(redis: &str) -> Result<ValidConfig, ConfigErrors> {
    load(&format!("redis:\n{redis}{MIN}"), &MapSecrets::new())
}

fn message_at(e: &ConfigErrors, path: &str) -> String {
    e.0.iter()
        .find(|x| x.path == path)
        .map(|x| x.message.clone())
        .unwrap_or_else(|| panic!("no error at {path}; got:\n{e}"))
}

#[test]
fn c_rate_3_standalone_is_the_default_and_keeps_address() {
    let v = load_redis("  address: cache:6380\n").expect("valid");
    assert_eq!(v.redis.mode, RedisMode::Standalone);
    assert_eq!(v.redis.addresses, std::slice::from_ref(&v.redis.address));
    assert_eq!(v.redis.address.to_string(), "cache:6380");
    assert!(!v.redis.tls && v.redis.sentinel_master.is_none());
}

#[test]
fn c_rate_3_cluster_takes_seed_nodes() {
    let v = load_redis(
        "  mode: cluster\n  tls: true\n  addresses: ['10.0.0.1:7000', 'redis-b:7001', '[::1]:7002']\n",
    )
    .expect("valid");
    assert_eq!(v.redis.mode, RedisMode::Cluster);
    let seeds: Vec<String> = v.redis.addresses.iter().map(ToString::to_string).collect();
    assert_eq!(seeds, ["10.0.0.1:7000", "redis-b:7001", "[::1]:7002"]);
    assert_eq!(v.redis.address, v.redis.addresses[0]);
    assert!(v.redis.tls);
}

#[test]
fn c_rate_3_sentinel_takes_sentinels_and_a_master_name() {
    let v = load_redis(
        "  mode: sentinel\n  sentinel_master: weir\n  database: 2\n  addresses: ['s1:26379', 's2:26379']\n",
    )
    .expect("valid");
    assert_eq!(v.redis.mode, RedisMode::Sentinel);
    assert_eq!(v.redis.sentinel_master.as_deref(), Some("weir"));
    assert_eq!(v.redis.addresses.len(), 2);
    assert_eq!(v.redis.database, 2);
}

#[test]
fn c_conf_1_mode_errors_name_the_field() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "  mode: clustered\n",
            "redis.mode",
            "standalone, cluster, sentinel",
        ),
        ("  mode: cluster\n", "redis.addresses", "seed node"),
        (
            "  mode: sentinel\n  sentinel_master: m\n",
            "redis.addresses",
            "sentinel",
        ),
        (
            "  mode: sentinel\n  addresses: ['s:26379']\n",
            "redis.sentinel_master",
            "required",
        ),
        (
            "  mode: sentinel\n  sentinel_master: ' '\n  addresses: ['s:26379']\n",
            "redis.sentinel_master",
            "empty",
        ),
        (
            "  mode: cluster\n  sentinel_master: m\n  addresses: ['a:7000']\n",
            "redis.sentinel_master",
            "mode sentinel",
        ),
        (
            "  mode: cluster\n  database: 3\n  addresses: ['a:7000']\n",
            "redis.database",
            "only database 0",
        ),
        (
            "  addresses: ['a:7000']\n",
            "redis.addresses",
            "redis.address",
        ),
        (
            "  mode: cluster\n  addresses: ['a:7000', 'nope']\n",
            "redis.addresses[1]",
            "host:port",
        ),
        (
            "  mode: cluster\n  addresses: ['a:7000', 'a:7000']\n",
            "redis.addresses[1]",
            "twice",
        ),
        ("  tls: maybe\n", "redis.tls", ""),
    ];
    for (yaml, path, words) in cases {
        let e = load_redis(yaml).expect_err(yaml);
        let m = message_at(&e, path);
        assert!(m.contains(words), "{yaml}: {path}: {m}");
    }
}

/// A configuration that uses the Redis store (its secrets resolved, its files read).
fn load_used(redis: &str, secrets: &MapSecrets) -> Result<ValidConfig, ConfigErrors> {
    load(
        &format!("rate_limit:\n  storage: redis\nredis:\n{redis}{MIN}"),
        secrets,
    )
}

#[test]
fn c_conf_1_tls_files_are_kept() {
    let v = load_used(
        "  tls: true\n  tls_ca_file: /etc/weir/ca.pem\n  tls_cert_file: client.pem\n  \
         tls_key_file: client.key\n",
        &MapSecrets::new(),
    )
    .expect("valid");
    assert!(v.redis.tls);
    assert_eq!(
        v.redis.tls_ca_file.as_deref(),
        Some(std::path::Path::new("/etc/weir/ca.pem"))
    );
    assert_eq!(
        v.redis.tls_client,
        Some(("client.pem".into(), "client.key".into()))
    );
    // Without a CA file the system's roots are used.
    let v = load_used("  tls: true\n", &MapSecrets::new()).expect("valid");
    assert!(v.redis.tls && v.redis.tls_ca_file.is_none() && v.redis.tls_client.is_none());
}

#[test]
fn c_conf_1_tls_file_errors_name_the_field() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "  tls_ca_file: ca.pem\n",
            "redis.tls_ca_file",
            "only with redis.tls: true",
        ),
        (
            "  tls_key_file: client.key\n",
            "redis.tls_key_file",
            "only with redis.tls: true",
        ),
        (
            "  tls: true\n  tls_cert_file: client.pem\n",
            "redis.tls_key_file",
            "required with redis.tls_cert_file",
        ),
        (
            "  tls: true\n  tls_key_file: client.key\n",
            "redis.tls_cert_file",
            "required with redis.tls_key_file",
        ),
        (
            "  tls: true\n  tls_ca_file: ''\n",
            "redis.tls_ca_file",
            "must not be empty",
        ),
    ];
    for (yaml, path, words) in cases {
        let e = load_used(yaml, &MapSecrets::new()).expect_err(yaml);
        let m = message_at(&e, path);
        assert!(m.contains(words), "{yaml}: {path}: {m}");
    }
}

#[test]
fn c_conf_3_sentinel_password_is_a_secret_of_its_own() {
    let sentinel = "  mode: sentinel\n  sentinel_master: m\n  addresses: ['s:26379']\n";
    let secrets = MapSecrets::new()
        .with_env("SENTINEL_PW", "spw")
        .with_env("REDIS_PW", "mpw");
    let v = load_used(
        &format!("{sentinel}  password_env: REDIS_PW\n  sentinel_password_env: SENTINEL_PW\n"),
        &secrets,
    )
    .expect("valid");
    assert_eq!(
        v.redis.sentinel_password.as_ref().map(|s| s.expose()),
        Some("spw")
    );
    assert_eq!(v.redis.password.as_ref().map(|s| s.expose()), Some("mpw"));
    assert!(
        !format!("{:?}", v.redis).contains("spw"),
        "redacted in Debug"
    );

    let e = load_used(
        &format!("{sentinel}  sentinel_password_env: MISSING_PW\n"),
        &secrets,
    )
    .expect_err("unresolved");
    assert!(message_at(&e, "redis.sentinel_password_env").contains("secret not found"));
    let e = load_used(
        &format!("{sentinel}  sentinel_password_env: 'hunter2 pasted'\n"),
        &secrets,
    )
    .expect_err("not a variable name");
    let m = message_at(&e, "redis.sentinel_password_env");
    assert!(
        m.contains("environment variable") && !m.contains("hunter2"),
        "{m}"
    );
    let e = load_used(
        "  mode: cluster\n  addresses: ['a:7000']\n  sentinel_password_env: SENTINEL_PW\n",
        &secrets,
    )
    .expect_err("cluster");
    assert!(message_at(&e, "redis.sentinel_password_env").contains("mode sentinel"));
    // Not used (storage local): named, not resolved.
    let v = load_redis(&format!("{sentinel}  sentinel_password_env: MISSING_PW\n")).expect("valid");
    assert!(v.redis.sentinel_password.is_none());
}
