//! The process harness: writes a config to a temp dir, starts `<binary> run` with the process
//! protocol (docs/proxy.md, "The CLI and the process protocol"), waits for the ready file, and
//! keeps the child's stdout and stderr to show when a case fails. The child is killed when the [`Proxy`] is dropped.

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::backend::{Backend, lock};
use crate::config::Config;

/// How long a proxy may take to write its ready file.
pub const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// Most bytes of each output stream kept (the tail).
const LOG_CAP: usize = 4 << 20;

/// The proxy binary under test.
#[derive(Debug, Clone)]
pub struct Binary {
    path: PathBuf,
}

impl Binary {
    /// The binary at `path` (e.g. `env!("CARGO_BIN_EXE_weir")`).
    pub fn new(path: impl Into<PathBuf>) -> Binary {
        Binary { path: path.into() }
    }
    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// A command running this binary with `args`, stdin closed.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.path);
        c.args(args).stdin(Stdio::null());
        c
    }
}

/// Options for [`Proxy::start_with`].
#[derive(Debug, Clone)]
pub struct StartOptions {
    /// `--public-bind` (default `127.0.0.1:0`).
    pub public_bind: String,
    /// `--management-bind`, passed only when set.
    pub management_bind: Option<String>,
    /// Extra environment variables for the child.
    pub env: Vec<(String, String)>,
    /// Backends to describe when the case fails.
    pub backends: Vec<Backend>,
    /// `--workers`, passed only when set.
    pub workers: Option<usize>,
    /// Run the child under `prlimit --nofile=N:N` (a low file-descriptor limit, soft = hard).
    pub nofile: Option<u64>,
}

impl StartOptions {
    /// What `config` implies: management on `127.0.0.1:0` when it is enabled, its environment
    /// and its backends.
    #[must_use]
    pub fn for_config(config: &Config) -> StartOptions {
        StartOptions {
            management_bind: config
                .management_enabled()
                .then(|| "127.0.0.1:0".to_string()),
            env: config.env(),
            backends: config.backends_used(),
            ..StartOptions::default()
        }
    }
}

impl Default for StartOptions {
    fn default() -> Self {
        StartOptions {
            public_bind: "127.0.0.1:0".to_string(),
            management_bind: None,
            env: Vec::new(),
            backends: Vec::new(),
            workers: None,
            nofile: None,
        }
    }
}

/// Output captured from a child, kept as a bounded tail.
#[derive(Debug, Clone, Default)]
pub struct Logs {
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
}

impl Logs {
    fn pump(buf: Arc<Mutex<Vec<u8>>>, mut src: impl Read + Send + 'static) {
        std::thread::spawn(move || {
            let mut tmp = [0u8; 8192];
            loop {
                match src.read(&mut tmp) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        let mut b = lock(&buf);
                        b.extend_from_slice(&tmp[..n]);
                        if b.len() > LOG_CAP {
                            let cut = b.len() - LOG_CAP / 2;
                            b.drain(..cut);
                        }
                    }
                }
            }
        });
    }
    /// Everything kept of stdout.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&lock(&self.stdout)).into_owned()
    }
    /// Everything kept of stderr.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&lock(&self.stderr)).into_owned()
    }
    fn tail(s: &str, n: usize) -> &str {
        if s.len() <= n {
            return s;
        }
        let mut i = s.len() - n;
        while !s.is_char_boundary(i) {
            i += 1;
        }
        &s[i..]
    }
    /// The last `n` bytes of both streams, labelled.
    pub fn describe(&self, n: usize) -> String {
        let out = self.stdout();
        let err = self.stderr();
        format!(
            "----- proxy stdout (last {n} bytes) -----\n{}\n----- proxy stderr (last {n} bytes) -----\n{}\n-----",
            Self::tail(&out, n),
            Self::tail(&err, n)
        )
    }
}

/// Why a proxy did not become ready.
#[derive(Debug)]
pub struct StartFailure {
    /// The exit status, when the process exited.
    pub status: Option<ExitStatus>,
    /// What went wrong.
    pub reason: String,
    /// Its output.
    pub logs: Logs,
}

impl std::fmt::Display for StartFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "proxy did not start: {} (status {:?})\n{}",
            self.reason,
            self.status,
            self.logs.describe(16 * 1024)
        )
    }
}

/// A running proxy process.
#[derive(Debug)]
pub struct Proxy {
    /// The public (data plane) listener.
    pub public: SocketAddr,
    /// The management listener, when enabled.
    pub management: Option<SocketAddr>,
    /// The process id.
    pub pid: u32,
    child: Option<Child>,
    exit: Option<ExitStatus>,
    logs: Logs,
    dir: tempfile::TempDir,
    backends: Vec<Backend>,
}

impl Proxy {
    /// Starts a proxy on `config` (public and, when enabled, management on `127.0.0.1:0`) and
    /// panics, with its output, if it does not become ready.
    pub async fn start(bin: &Binary, config: &Config) -> Proxy {
        Proxy::start_config(bin, config, StartOptions::for_config(config)).await
    }

    /// Like [`Proxy::start`], with the child's file-descriptor limit (soft and hard) at `nofile`.
    pub async fn start_with_nofile(bin: &Binary, config: &Config, nofile: u64) -> Proxy {
        let opts = StartOptions {
            nofile: Some(nofile),
            ..StartOptions::for_config(config)
        };
        Proxy::start_config(bin, config, opts).await
    }

    /// Starts a proxy on `config` with `opts` and panics, with its output, if it does not
    /// become ready.
    pub async fn start_config(bin: &Binary, config: &Config, opts: StartOptions) -> Proxy {
        match Proxy::start_with(bin, &config.yaml(), opts).await {
            Ok(p) => p,
            Err(e) => panic!("{e}\nconfig:\n{}", config.yaml()),
        }
    }

    /// Starts a proxy on the YAML text `yaml` with `opts`.
    pub async fn start_with(
        bin: &Binary,
        yaml: &str,
        opts: StartOptions,
    ) -> Result<Proxy, StartFailure> {
        let dir = tempfile::Builder::new()
            .prefix("weir-conformance-")
            .tempdir()
            .expect("temp dir");
        let config_path = dir.path().join("weir.yaml");
        std::fs::write(&config_path, yaml).expect("write config");
        let ready = dir.path().join("ready.json");
        let mut cmd = run_command(bin, &config_path, &ready, &opts);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let logs = Logs::default();
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return Err(StartFailure {
                    status: None,
                    reason: format!("spawn {}: {e}", bin.path().display()),
                    logs,
                });
            }
        };
        if let Some(out) = child.stdout.take() {
            Logs::pump(logs.stdout.clone(), out);
        }
        if let Some(err) = child.stderr.take() {
            Logs::pump(logs.stderr.clone(), err);
        }
        let pid = child.id();
        let start = Instant::now();
        loop {
            if let Ok(text) = std::fs::read_to_string(&ready) {
                match parse_ready(&text) {
                    Ok((public, management)) => {
                        return Ok(Proxy {
                            public,
                            management,
                            pid,
                            child: Some(child),
                            exit: None,
                            logs,
                            dir,
                            backends: opts.backends,
                        });
                    }
                    Err(e) if start.elapsed() > Duration::from_secs(2) && !text.is_empty() => {
                        let _ = child.kill();
                        let status = child.wait().ok();
                        return Err(StartFailure {
                            status,
                            reason: format!("bad ready file {text:?}: {e}"),
                            logs,
                        });
                    }
                    Err(_) => {}
                }
            }
            if let Ok(Some(status)) = child.try_wait() {
                // Let the pump threads drain the pipes.
                tokio::time::sleep(Duration::from_millis(50)).await;
                return Err(StartFailure {
                    status: Some(status),
                    reason: "exited before ready".into(),
                    logs,
                });
            }
            if start.elapsed() > READY_TIMEOUT {
                let _ = child.kill();
                let status = child.wait().ok();
                return Err(StartFailure {
                    status,
                    reason: format!("no ready file within {READY_TIMEOUT:?}"),
                    logs,
                });
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The child's captured output.
    pub fn logs(&self) -> &Logs {
        &self.logs
    }

    /// The directory holding the config and ready files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Sends a signal by name (`TERM`, `INT`, `HUP`) with `kill(1)`.
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid.to_string())
            .status()
            .expect("run kill");
        assert!(
            status.success(),
            "kill -{sig} {} failed: {status}",
            self.pid
        );
    }

    /// The exit status if the process has exited.
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none()
            && let Some(child) = self.child.as_mut()
            && let Ok(Some(st)) = child.try_wait()
        {
            self.exit = Some(st);
        }
        self.exit
    }

    /// Waits (polling) up to `timeout` for the process to exit.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(st) = self.try_exit() {
                return Some(st);
            }
            if start.elapsed() > timeout {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Backend summaries and the proxy's output, for failure messages.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for b in &self.backends {
            s.push_str(&b.summary());
            s.push('\n');
        }
        s.push_str(&self.logs.describe(32 * 1024));
        s
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "===== proxy pid {} public {} =====\n{}",
                self.pid,
                self.public,
                self.describe()
            );
        }
        if let Some(mut child) = self.child.take() {
            if self.exit.is_none() {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

fn parse_ready(text: &str) -> Result<(SocketAddr, Option<SocketAddr>), String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let public = v
        .get("public")
        .and_then(|p| p.as_str())
        .ok_or("no \"public\" string")?
        .parse::<SocketAddr>()
        .map_err(|e| format!("public: {e}"))?;
    let management = match v.get("management") {
        None | Some(serde_json::Value::Null) => None,
        Some(m) => Some(
            m.as_str()
                .ok_or("\"management\" is not a string")?
                .parse::<SocketAddr>()
                .map_err(|e| format!("management: {e}"))?,
        ),
    };
    Ok((public, management))
}

/// `weir run` of `bin` on `config`, with `opts`' binds, workers, environment and fd limit,
/// writing its ready file to `ready`.
fn run_command(bin: &Binary, config: &Path, ready: &Path, opts: &StartOptions) -> Command {
    let mut cmd = match opts.nofile {
        // prlimit sets the limit on itself and execs the binary: the pid is the proxy's.
        Some(n) => {
            let mut c = Command::new("prlimit");
            c.arg(format!("--nofile={n}:{n}"))
                .arg("--")
                .arg(bin.path())
                .args(["run", "--config"])
                .stdin(Stdio::null());
            c
        }
        None => bin.command(&["run", "--config"]),
    };
    cmd.arg(config).arg("--public-bind").arg(&opts.public_bind);
    if let Some(m) = &opts.management_bind {
        cmd.arg("--management-bind").arg(m);
    }
    if let Some(n) = opts.workers {
        cmd.arg("--workers").arg(n.to_string());
    }
    cmd.arg("--ready-file").arg(ready);
    cmd.env_remove("CONFIG_PATH");
    for (k, v) in &opts.env {
        cmd.env(k, v);
    }
    cmd
}
