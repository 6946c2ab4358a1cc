//! The process protocol itself (docs/proxy.md, "The CLI and the process protocol"): ready file,
//! startup errors, `check-config`, `--version`, SIGHUP.

use std::process::Stdio;

use super::expect_status;
use crate::backend::Backend;
use crate::client::get;
use crate::config::Config;
use crate::harness::{Binary, Proxy, StartOptions};
use crate::util::{ms, stays};

/// The ready file names the bound listeners and the pid; `management` is null when disabled.
pub async fn proto_ready_file_names_listeners(bin: Binary) {
    let b = Backend::start("b-1").await;
    let mut p = Proxy::start(&bin, &Config::new(&[&b])).await;
    assert!(
        p.public.ip().is_loopback() && p.public.port() != 0,
        "public {}",
        p.public
    );
    assert!(
        p.management.is_none(),
        "management listener reported while disabled"
    );
    let text = std::fs::read_to_string(p.dir().join("ready.json")).expect("ready file");
    let v: serde_json::Value = serde_json::from_str(&text).expect("ready file is JSON");
    assert_eq!(v["pid"].as_u64(), Some(u64::from(p.pid)), "pid in {text}");
    assert!(
        v.get("management").is_some_and(serde_json::Value::is_null),
        "management in {text}"
    );
    expect_status(&get(p.public, "/healthz").await, 200, "/healthz");
    assert!(p.try_exit().is_none());
}

/// An invalid config: exit 1, every error on stderr, no ready file.
pub async fn proto_invalid_config_exits_1_listing_errors(bin: Binary) {
    let yaml = "server:\n  retry:\n    max_attempts: 9\n  bogus_key: 1\nbackends:\n  - id: a\n    url: ftp://x\n";
    let opts = StartOptions::default();
    match Proxy::start_with(&bin, yaml, opts).await {
        Ok(p) => panic!("started on an invalid config (public {})", p.public),
        Err(e) => {
            assert_eq!(e.status.and_then(|s| s.code()), Some(1), "{e}");
            let err = e.logs.stderr();
            for needle in ["max_attempts", "bogus_key", "url"] {
                assert!(
                    err.contains(needle),
                    "stderr does not mention {needle}: {err}"
                );
            }
        }
    }
}

/// `weir check-config FILE`: 0 for a valid file, non-zero with every error listed otherwise.
pub async fn proto_check_config(bin: Binary) {
    let b = Backend::start("b-1").await;
    let dir = tempfile::tempdir().expect("temp dir");
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, Config::new(&[&b]).yaml()).expect("write");
    let out = bin
        .command(&["check-config"])
        .arg(&good)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output();
    let out = out.expect("run check-config");
    assert!(
        out.status.success(),
        "valid config rejected: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "server:\n  retry:\n    max_attempts: 9\n  bogus_key: 1\nbackends: []\n",
    )
    .expect("write");
    let out = bin
        .command(&["check-config"])
        .arg(&bad)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output();
    let out = out.expect("run check-config");
    assert!(!out.status.success(), "invalid config accepted");
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in ["max_attempts", "bogus_key"] {
        assert!(
            err.contains(needle),
            "check-config stderr does not list {needle}: {err}"
        );
    }
}

/// `weir --version` exits 0 and prints a version.
pub async fn proto_version(bin: Binary) {
    let out = bin
        .command(&["--version"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output();
    let out = out.expect("run --version");
    assert!(
        out.status.success(),
        "--version failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.chars().any(|c| c.is_ascii_digit()),
        "no version in {text:?}"
    );
}

/// SIGHUP never kills the process (the handler is registered before the ready file).
pub async fn proto_sighup_does_not_kill(bin: Binary) {
    let b = Backend::start("b-1").await;
    let mut p = Proxy::start(&bin, &Config::new(&[&b])).await;
    p.signal("HUP");
    stays(ms(500), "process alive after SIGHUP", || {
        p.try_exit().is_none()
    })
    .await;
    expect_status(&get(p.public, "/x").await, 200, "serving after SIGHUP");
}
