//! What an operator sees against the `weir` binary over real processes and sockets:
//! secrets never echoed (C-CONF-3), `allow_insecure` only on loopback (C-MGMT-1), `MIGRATE_ONLY`
//! parsed strictly (C-RATE-7), `check-config` on a file whose secrets are not in this
//! environment, and a start error printed with its whole cause chain.

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use weir_conformance::backend::Backend;
use weir_conformance::client::{Req, get, send};
use weir_conformance::config::{ADMIN_TOKEN, Config};
use weir_conformance::harness::{Binary, Proxy, StartOptions};

fn bin() -> Binary {
    Binary::new(env!("CARGO_BIN_EXE_weir"))
}

fn shipped(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../config")
        .join(name)
}

/// The secrets the shipped examples name, removed from the child's environment.
const SHIPPED_SECRETS: &[&str] = &[
    "BALANCER_ADMIN_TOKEN",
    "BALANCER_ADMIN_TOKEN_FILE",
    "REDIS_PASSWORD",
    "REDIS_PASSWORD_FILE",
    "POSTGRES_PASSWORD",
    "POSTGRES_PASSWORD_FILE",
];

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = bin().command(args);
    for k in SHIPPED_SECRETS {
        cmd.env_remove(k);
    }
    cmd.env_remove("MIGRATE_ONLY");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run weir")
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The shipped `config/redis.yaml` and `config/postgres.yaml` pass
/// `check-config` without their secrets, each unresolved secret named in a warning; with
/// `--strict-secrets` they fail as `weir run` does.
#[test]
fn c_conf_3_check_config_warns_about_unresolved_secrets() {
    for (file, secrets) in [
        (
            "redis.yaml",
            &["REDIS_PASSWORD", "BALANCER_ADMIN_TOKEN"][..],
        ),
        ("postgres.yaml", &["POSTGRES_PASSWORD"][..]),
    ] {
        let path = shipped(file);
        let path = path.to_str().expect("utf-8 path");
        let o = run(&["check-config", path], &[]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{file}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("configuration is valid"),
            "{file}: {}",
            text(&o)
        );
        for s in secrets {
            assert!(
                stderr
                    .lines()
                    .any(|l| l.contains("warning") && l.contains(&format!("secret {s} "))),
                "{file}: {s} not named:\n{stderr}"
            );
        }
        let strict = run(&["check-config", "--strict-secrets", path], &[]);
        assert!(!strict.status.success(), "{file}: {}", text(&strict));
        assert!(
            text(&strict).contains(&format!("secret not found: set {}", secrets[0])),
            "{file}: {}",
            text(&strict)
        );
        // With the secrets set, no warning at all.
        let env: Vec<(&str, &str)> = secrets.iter().map(|s| (*s, "x-value")).collect();
        let set = run(&["check-config", path], &env);
        assert!(set.status.success(), "{file}: {}", text(&set));
        assert!(!text(&set).contains("warning"), "{file}: {}", text(&set));
    }
    // A genuine error is still an error, and `run` stays strict.
    let o = run(
        &["run", "--config", shipped("redis.yaml").to_str().unwrap()],
        &[],
    );
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("secret not found"), "{}", text(&o));
}

/// The secret pasted into `management.auth_token_env` (a common mistake) is
/// rejected without being repeated, by `check-config`, by `weir run`, and by a SIGHUP reload of
/// a running weir; nothing it logs, answers or exposes carries it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_conf_3_a_secret_in_an_env_field_is_never_echoed() {
    const PLANTED: &str = "pl4nted-s3cret-token";
    let a = Backend::start("p-a").await;
    let good = Config::new(&[&a])
        .management()
        .set("server.access_log_sample_rate", 1.0);
    let bad = good.clone().set("management.auth_token_env", PLANTED);
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("bad.yaml");
    std::fs::write(&file, bad.yaml()).expect("write");
    let file = file.to_str().expect("utf-8");
    let mut seen = String::new();
    for args in [
        &["check-config", file][..],
        &["check-config", "--strict-secrets", file][..],
        &["run", "--config", file, "--public-bind", "127.0.0.1:0"][..],
    ] {
        let o = run(args, &[]);
        assert!(!o.status.success(), "{args:?} accepted it: {}", text(&o));
        assert!(
            text(&o).contains("management.auth_token_env"),
            "{args:?}: {}",
            text(&o)
        );
        seen.push_str(&text(&o));
    }
    // A running weir: the bad file arrives by SIGHUP and is rejected.
    let p = Proxy::start_config(&bin(), &good, StartOptions::for_config(&good)).await;
    let m = p.management.expect("management");
    std::fs::write(p.dir().join("weir.yaml"), bad.yaml()).expect("write");
    p.signal("HUP");
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !p.logs().stdout().contains("configuration reload rejected") {
        assert!(
            std::time::Instant::now() < deadline,
            "no reload error logged"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for path in [
        "/metrics",
        "/readyz",
        "/api/dashboard/status",
        "/api/dashboard/config",
        "/api/dashboard/backends/nope",
    ] {
        let r = send(m, &Req::get(path).header("authorization", &auth)).await;
        seen.push_str(&format!("{:?}\n{}\n", r.headers, r.text()));
    }
    let r = get(p.public, "/readyz").await;
    seen.push_str(&r.text());
    let logs = format!("{}\n{}", p.logs().stdout(), p.logs().stderr());
    assert!(logs.contains("management.auth_token_env"), "{logs}");
    assert!(
        !seen.contains(PLANTED),
        "planted secret in an output:\n{seen}"
    );
    assert!(
        !logs.contains(PLANTED),
        "planted secret in the logs:\n{logs}"
    );
}

/// C-MGMT-1: `allow_insecure` needs a loopback management bind, in the file
/// (a config error) and on the command line (`--management-bind` overrides the file).
#[test]
fn c_mgmt_1_allow_insecure_only_on_loopback() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("w.yaml");
    let yaml = |addr: &str| {
        format!(
            "backends:\n  - id: a\n    url: http://127.0.0.1:9\nmanagement:\n  enabled: true\n  \
             address: \"{addr}\"\n  allow_insecure: true\n"
        )
    };
    std::fs::write(&file, yaml("0.0.0.0:9090")).expect("write");
    let f = file.to_str().expect("utf-8");
    let o = run(&["check-config", f], &[]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("management.allow_insecure"),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("loopback"), "{}", text(&o));
    std::fs::write(&file, yaml("127.0.0.1:9090")).expect("write");
    assert!(run(&["check-config", f], &[]).status.success());
    let o = run(
        &[
            "run",
            "--config",
            f,
            "--public-bind",
            "127.0.0.1:0",
            "--management-bind",
            "0.0.0.0:0",
        ],
        &[],
    );
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("only a loopback address"), "{}", text(&o));
}

/// C-RATE-7: `MIGRATE_ONLY` accepts `1`/`true`; any other value is an error
/// before anything listens, naming the variable.
#[test]
fn c_rate_7_migrate_only_values() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("w.yaml");
    std::fs::write(&file, "backends:\n  - id: a\n    url: http://127.0.0.1:9\n").expect("write");
    let f = file.to_str().expect("utf-8");
    let args = ["run", "--config", f, "--public-bind", "127.0.0.1:0"];
    for bad in ["yes", "TRUE ", "2"] {
        let o = run(&args, &[("MIGRATE_ONLY", bad)]);
        assert!(!o.status.success(), "{bad}: {}", text(&o));
        assert!(
            text(&o).contains("MIGRATE_ONLY must be"),
            "{bad}: {}",
            text(&o)
        );
    }
    for good in ["1", "true"] {
        // Not postgres: nothing to migrate, exit 0 without serving.
        let o = run(&args, &[("MIGRATE_ONLY", good)]);
        assert!(o.status.success(), "{good}: {}", text(&o));
        assert!(
            text(&o).contains("nothing to migrate"),
            "{good}: {}",
            text(&o)
        );
    }
}

/// C-MGMT-2, C-MGMT-4: a body of the wrong type names the field path and the
/// expected type; an unknown backend id is named; every refused mutation is counted (a refused
/// `PATCH` also as a rejected management reload) and access-logged with a `reason`; `/readyz`
/// says which cause holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_mgmt_4_errors_name_the_field_and_the_id_and_are_counted() {
    let a = Backend::start("me-a").await;
    let cfg = Config::new(&[&a])
        .management()
        .set("management.runtime_mutations", true);
    let p = Proxy::start_config(&bin(), &cfg, StartOptions::for_config(&cfg)).await;
    let m = p.management.expect("management");
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let mutate = |method: &str, path: &str, body: &str| {
        Req::new(method, path)
            .header("authorization", &auth)
            .header("x-balancer-csrf", "1")
            .header("content-type", "application/json")
            .body(body)
    };
    let r = send(
        m,
        &mutate(
            "PATCH",
            "/api/dashboard/config",
            r#"{"retry": {"max_attempts": "three"}}"#,
        ),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.summary());
    let j = r.json();
    assert_eq!(j["errors"][0]["path"], "retry.max_attempts", "{j}");
    assert!(
        j["message"]
            .as_str()
            .is_some_and(|s| s.contains("retry.max_attempts") && s.contains("invalid type")),
        "{j}"
    );
    let r = send(
        m,
        &mutate(
            "POST",
            "/api/dashboard/backends/no-such-backend",
            r#"{"enabled": false}"#,
        ),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.summary());
    assert!(r.text().contains("no-such-backend"), "{}", r.text());
    let r = send(
        m,
        &mutate(
            "POST",
            "/api/dashboard/backends/me-a",
            r#"{"enabled": "no"}"#,
        ),
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["errors"][0]["path"], "enabled", "{}", r.text());
    let r = send(
        m,
        &mutate(
            "PATCH",
            "/api/dashboard/config",
            r#"{"retry": {"max_attempts": 9}}"#,
        ),
    )
    .await;
    assert_eq!(r.status, 400, "an out-of-range value");

    let r = send(m, &Req::get("/metrics").header("authorization", &auth)).await;
    let text = r.text();
    for (endpoint, n) in [("patch_config", 2), ("set_enabled", 2)] {
        let line = format!(
            "load_balancer_management_rejected_mutations_total{{endpoint=\"{endpoint}\"}} {n}"
        );
        assert!(text.contains(&line), "{line} not in\n{text}");
    }
    assert!(
        text.contains(
            "load_balancer_config_reloads_total{source=\"management\",result=\"rejected\"} 2"
        ),
        "{text}"
    );
    let logs = p.logs().stdout();
    let refused: Vec<serde_json::Value> = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["target"] == "weir::access" && v["fields"]["listener"] == "management")
        .filter(|v| v["fields"]["status"].as_u64().is_some_and(|s| s >= 400))
        .collect();
    assert_eq!(refused.len(), 4, "{logs}");
    assert!(refused.iter().any(|v| v["fields"]["reason"] == "not_found"));
    assert!(refused.iter().all(|v| v["fields"]["reason"].is_string()));

    // /readyz names its cause: the only backend down.
    a.down().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = send(m, &Req::get("/readyz").header("authorization", &auth)).await;
        if r.status == 503 {
            assert!(r.text().contains("no_backend_available"), "{}", r.text());
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never not ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// C-TLS-1: `check-config` loads every certificate pair of `server.tls` and fails, naming the
/// pair and the files, when a key does not match its certificate or a file is missing.
#[test]
fn c_tls_1_check_config_validates_certificate_pairs() {
    use weir_conformance::tls::Cert;
    let dir = tempfile::tempdir().expect("temp dir");
    let (a, b) = (Cert::new(&["a.test"]), Cert::new(&["b.test"]));
    let (a_crt, a_key) = a.write(dir.path(), "a");
    let (_, b_key) = b.write(dir.path(), "b");
    let write = |name: &str, crt: &std::path::Path, key: &std::path::Path| {
        let f = dir.path().join(name);
        std::fs::write(
            &f,
            format!(
                "server:\n  tls:\n    certificates:\n      - cert_file: {}\n        key_file: {}\n\
                 backends:\n  - id: a\n    url: http://127.0.0.1:9\n",
                crt.display(),
                key.display()
            ),
        )
        .expect("write config");
        f
    };
    let good = write("good.yaml", &a_crt, &a_key);
    let o = run(&["check-config", good.to_str().unwrap()], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let crossed = write("crossed.yaml", &a_crt, &b_key);
    let o = run(&["check-config", crossed.to_str().unwrap()], &[]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("server.tls.certificates[0]")
            && text(&o).contains("is not the private key"),
        "{}",
        text(&o)
    );
    let missing = write("missing.yaml", &dir.path().join("nope.crt"), &a_key);
    let o = run(&["check-config", missing.to_str().unwrap()], &[]);
    assert!(
        !o.status.success() && text(&o).contains("nope.crt"),
        "{}",
        text(&o)
    );
    // `run` refuses to start on the same error.
    let o = run(&["run", "--config", crossed.to_str().unwrap()], &[]);
    assert!(!o.status.success(), "{}", text(&o));
}

/// A fatal start error is printed with its whole cause chain, each level once: what failed
/// (`cannot start`, the listener's TLS), the setting and file, down to the system's error.
#[test]
fn a_start_error_prints_its_cause_chain() {
    use weir_conformance::tls::Cert;
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, key) = Cert::new(&["a.test"]).write(dir.path(), "a");
    let crt = dir.path().join("missing.crt");
    let file = dir.path().join("w.yaml");
    std::fs::write(
        &file,
        format!(
            "server:\n  tls:\n    certificates:\n      - cert_file: {}\n        key_file: {}\n\
             backends:\n  - id: a\n    url: http://127.0.0.1:9\n",
            crt.display(),
            key.display()
        ),
    )
    .expect("write config");
    let o = run(
        &[
            "run",
            "--config",
            file.to_str().expect("utf-8"),
            "--public-bind",
            "127.0.0.1:0",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("weir: cannot start: "))
        .unwrap_or_else(|| panic!("no start error on stderr:\n{}", text(&o)));
    let want = format!(
        "weir: cannot start: cannot set up TLS on the public listener: \
         server.tls.certificates[0]: cannot read {}: ",
        crt.display()
    );
    assert!(line.starts_with(&want), "{line}");
    // The OS error, once, at the end.
    assert!(line.ends_with("(os error 2)"), "{line}");
    assert_eq!(line.matches("os error").count(), 1, "{line}");
    assert_eq!(line.matches("missing.crt").count(), 1, "{line}");
}
