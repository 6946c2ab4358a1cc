//! Hostile configuration paths against the real binary (C-CONF-4, C-PATH-10): the
//! config path replaced by a named pipe or a symlink to `/dev/zero`, or a huge file. Each reload
//! is rejected with an error naming what is wrong, within bounded time and memory; management
//! mutations keep answering, a later valid reload applies, SIGTERM still exits; and
//! `check-config` / `run --config` on such a path fail promptly.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use weir_conformance::backend::Backend;
use weir_conformance::client::{Req, send};
use weir_conformance::config::{ADMIN_TOKEN, Config};
use weir_conformance::harness::{Binary, Proxy};

/// The binary under test: `weir` here; `weir-smol` when adapter-smol's tests include this file.
fn bin() -> Binary {
    let path = option_env!("CARGO_BIN_EXE_weir-smol").or(option_env!("CARGO_BIN_EXE_weir"));
    Binary::new(path.expect("cargo names the proxy binary under test"))
}

fn authed(method: &str, path: &str) -> Req {
    Req::new(method, path).header("authorization", &format!("Bearer {ADMIN_TOKEN}"))
}

fn patch(body: &str) -> Req {
    authed("PATCH", "/api/dashboard/config")
        .header("x-balancer-csrf", "1")
        .header("content-type", "application/json")
        .body(body)
}

/// Sends `req`, failing the test if no answer comes within 10 s (a PATCH once hung > 50 s).
async fn answered(m: SocketAddr, req: &Req, what: &str) -> weir_conformance::client::Resp {
    tokio::time::timeout(Duration::from_secs(10), send(m, req))
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within 10 s"))
}

async fn max_attempts(m: SocketAddr) -> Value {
    let r = answered(m, &authed("GET", "/api/dashboard/status"), "status").await;
    assert_eq!(r.status, 200, "{}", r.summary());
    r.json()["retry"]["max_attempts"].clone()
}

fn config(b: &Backend) -> Config {
    Config::new(&[b])
        .management()
        .set("management.runtime_mutations", true)
        .set("server.shutdown_timeout", "2s")
}

/// Replace the proxy's config file atomically.
fn write_config(dir: &Path, yaml: &str) {
    let tmp = dir.join("weir.yaml.tmp");
    std::fs::write(&tmp, yaml).expect("write config");
    std::fs::rename(&tmp, dir.join("weir.yaml")).expect("rename config");
}

fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let st = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo");
    assert!(st.success(), "mkfifo {}", path.display());
}

/// The `n`-th `weir::reload` ERROR event (0-based), waiting up to 10 s for it.
async fn reload_error(p: &Proxy, n: usize) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = p
            .logs()
            .stdout()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["target"] == "weir::reload" && v["level"] == "ERROR")
            .nth(n);
        if let Some(v) = found {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "reload error {n} not logged within 10 s\n{}",
            p.describe()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Resident memory of `pid` in KiB (`VmRSS` of /proc/PID/status).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// SIGTERM, then the exit within `shutdown_timeout` (2 s) plus a margin.
async fn terminate(mut p: Proxy) {
    p.signal("TERM");
    let st = p.wait_exit(Duration::from_secs(10)).await;
    assert!(
        st.is_some_and(|s| s.success()),
        "no clean exit within 10 s of SIGTERM: {st:?}\n{}",
        p.describe()
    );
}

/// The config path replaced by a named pipe. SIGHUP is rejected with a named
/// error (before: the reload blocked opening it forever, holding the lock mutations share);
/// a PATCH still answers, a later SIGHUP with a valid file applies, SIGTERM exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_conf_4_fifo_config_path_is_rejected_and_blocks_nothing() {
    let b = Backend::start("fifo-a").await;
    let cfg = config(&b);
    let p = Proxy::start(&bin(), &cfg).await;
    let m = p.management.expect("management listener");
    let file = p.dir().join("weir.yaml");
    mkfifo(&file);
    p.signal("HUP");
    let event = reload_error(&p, 0).await;
    let f = &event["fields"];
    assert_eq!(f["reason"], "read", "{event}");
    let errors = f["errors"][0].as_str().unwrap_or_default();
    assert!(
        errors.contains("named pipe") && errors.contains("weir.yaml"),
        "{errors}"
    );
    // Mutations share the reload lock: one answers at once.
    let r = answered(m, &patch(r#"{"retry": {"max_attempts": 3}}"#), "PATCH").await;
    assert_eq!(r.status, 200, "{}", r.summary());
    assert_eq!(max_attempts(m).await, 3);
    // A second SIGHUP on the FIFO: rejected again, nothing stuck.
    p.signal("HUP");
    reload_error(&p, 1).await;
    // A valid file again: the next SIGHUP applies it.
    write_config(
        p.dir(),
        &cfg.clone().set("server.retry.max_attempts", 4).yaml(),
    );
    p.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while max_attempts(m).await != 4 {
        assert!(
            Instant::now() < deadline,
            "valid reload not applied\n{}",
            p.describe()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Through all of it the data plane served.
    let r = answered(p.public, &Req::get("/x"), "data plane").await;
    assert_eq!(r.status, 200, "{}", r.summary());
    // The FIFO once more, then SIGTERM: the process exits.
    mkfifo(&file);
    p.signal("HUP");
    reload_error(&p, 2).await;
    terminate(p).await;
}

/// The config path a symlink to `/dev/zero` (before: RSS grew ~500 MB/s until
/// allocation failed), then a 200 MB (sparse) regular file: each rejected with a named error,
/// RSS stays bounded, mutations still answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_conf_4_dev_zero_and_huge_config_paths_are_rejected_in_bounded_memory() {
    let b = Backend::start("zero-a").await;
    let cfg = config(&b);
    let p = Proxy::start(&bin(), &cfg).await;
    let m = p.management.expect("management listener");
    let file = p.dir().join("weir.yaml");
    let before = rss_kib(p.pid);

    std::fs::remove_file(&file).expect("remove config");
    std::os::unix::fs::symlink("/dev/zero", &file).expect("symlink");
    p.signal("HUP");
    let event = reload_error(&p, 0).await;
    let errors = event["fields"]["errors"][0]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(errors.contains("character device"), "{event}");
    assert_eq!(event["fields"]["reason"], "read");

    std::fs::remove_file(&file).expect("remove symlink");
    let huge = std::fs::File::create(&file).expect("create");
    huge.set_len(200 << 20).expect("a sparse 200 MB file");
    drop(huge);
    p.signal("HUP");
    let event = reload_error(&p, 1).await;
    let errors = event["fields"]["errors"][0]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(errors.contains("larger than 1048576 bytes"), "{event}");

    // A liveness bound, not a measurement: reading either would have taken hundreds of MB.
    let after = rss_kib(p.pid);
    assert!(
        after < before + 20 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
    let r = answered(m, &patch(r#"{"retry": {"max_attempts": 3}}"#), "PATCH").await;
    assert_eq!(r.status, 200, "{}", r.summary());
    eprintln!("RSS {before} KiB before, {after} KiB after two hostile reloads");
    terminate(p).await;
}

/// Runs `cmd` to its exit, failing the test if it takes more than 15 s (it would block on a
/// FIFO forever, or read `/dev/zero` until memory ran out); returns its status and stderr.
fn run_bounded(mut cmd: Command, what: &str) -> (ExitStatus, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not exit within 15 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    (status, err)
}

/// `check-config /dev/zero` and `run --config <fifo>` fail promptly with an
/// error naming the path and what it is.
#[test]
fn c_conf_4_cli_refuses_devices_and_fifos_promptly() {
    let (st, err) = run_bounded(
        {
            let mut c = bin().command(&["check-config"]);
            c.arg("/dev/zero");
            c
        },
        "check-config /dev/zero",
    );
    assert!(!st.success(), "check-config accepted /dev/zero");
    assert!(
        err.contains("/dev/zero") && err.contains("character device"),
        "{err}"
    );

    // A directory of this test's own (tempfile is not a dev-dependency of both adapters).
    let dir = std::env::temp_dir().join(format!("weir-reload-safety-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let fifo = dir.join("weir.yaml");
    mkfifo(&fifo);
    let (st, err) = run_bounded(
        {
            let mut c = bin().command(&["run", "--config"]);
            c.arg(&fifo)
                .arg("--public-bind")
                .arg("127.0.0.1:0")
                .arg("--management-bind")
                .arg("127.0.0.1:0");
            c
        },
        "run --config <fifo>",
    );
    assert!(!st.success(), "run started on a FIFO");
    assert!(
        err.contains("named pipe") && err.contains("weir.yaml"),
        "{err}"
    );

    let (st, err) = run_bounded(
        {
            let mut c = bin().command(&["check-config"]);
            c.arg(&dir);
            c
        },
        "check-config <dir>",
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!st.success(), "check-config accepted a directory");
    assert!(err.contains("a directory"), "{err}");
}
