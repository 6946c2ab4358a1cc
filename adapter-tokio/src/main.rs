//! The `weir` binary: `run`, `check-config`, `demo`, `--version` (process protocol in
//! docs/proxy.md).

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use weir_core::config::{ConfigErrors, ValidConfig};
use weir_tokio::secrets::EnvSecrets;
use weir_tokio::{Options, ProxyHandle};

/// mimalloc: per-thread free lists suit the per-worker runtimes (a request allocates and frees
/// on one thread); glibc's malloc showed up at ~8% of a proxied request's CPU time.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// weir: an HTTP load balancer and reverse proxy.
#[derive(Debug, Parser)]
#[command(name = "weir", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the proxy.
    Run(RunArgs),
    /// Validate a configuration file and list every error (exit 0 when valid).
    CheckConfig {
        /// The configuration file.
        file: PathBuf,
    },
    /// Start demo backends on 127.0.0.1 and the proxy in front of them.
    Demo(DemoArgs),
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Configuration file [default: $CONFIG_PATH, else config/weir.yaml].
    #[arg(long)]
    config: Option<PathBuf>,
    /// Data-plane listener [default: 0.0.0.0:<server.port>].
    #[arg(long)]
    public_bind: Option<SocketAddr>,
    /// Management listener [default: management.address].
    #[arg(long)]
    management_bind: Option<SocketAddr>,
    /// Once listening, write {"public","management","pid"} to this file (atomically).
    #[arg(long)]
    ready_file: Option<PathBuf>,
    /// Worker threads [default: the number of CPUs].
    #[arg(long, env = "WEIR_WORKERS")]
    workers: Option<usize>,
}

#[derive(Debug, Args)]
struct DemoArgs {
    /// Data-plane listener.
    #[arg(long, default_value = "127.0.0.1:8080")]
    public_bind: SocketAddr,
    /// Management listener.
    #[arg(long, default_value = "127.0.0.1:9090")]
    management_bind: SocketAddr,
    /// Worker threads [default: the number of CPUs].
    #[arg(long, env = "WEIR_WORKERS")]
    workers: Option<usize>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::CheckConfig { file } => check_config(&file),
        Command::Run(args) => {
            init_logs("info");
            block_on(run(args))
        }
        Command::Demo(args) => {
            init_logs("warn");
            block_on(async move {
                let opts = Options {
                    public_bind: Some(args.public_bind),
                    management_bind: Some(args.management_bind),
                    workers: args.workers,
                    rate_store: None,
                };
                match weir_tokio::demo::run(opts).await {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => fail(&e),
                }
            })
        }
    }
}

/// JSON log lines on stdout; `RUST_LOG` overrides the level.
fn init_logs(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_writer(std::io::stdout)
        .init();
}

/// The control runtime: signals, the acceptor, health checks, management. The data plane runs
/// on the worker threads' own runtimes.
fn block_on(f: impl std::future::Future<Output = ExitCode>) -> ExitCode {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(f),
        Err(e) => fail(&format!("cannot start the tokio runtime: {e}")),
    }
}

fn fail(message: &str) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "weir: {message}");
    ExitCode::FAILURE
}

fn config_path(given: Option<PathBuf>) -> PathBuf {
    given
        .or_else(|| std::env::var_os("CONFIG_PATH").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("config/weir.yaml"))
}

fn load(path: &Path) -> Result<ValidConfig, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    weir_core::config::load(&text, &EnvSecrets::new()).map_err(|e| list_errors(path, &e))
}

/// One line per error, each with the file, the field path and the line (C-CONF-1).
fn list_errors(path: &Path, errors: &ConfigErrors) -> String {
    let mut out = format!(
        "invalid configuration {}: {} error(s)",
        path.display(),
        errors.errors().len()
    );
    for e in errors.errors() {
        out.push_str(&format!("\n{}: {e}", path.display()));
    }
    out
}

fn check_config(path: &Path) -> ExitCode {
    match load(path) {
        Ok(_) => {
            let _ = writeln!(
                std::io::stdout(),
                "{}: configuration is valid",
                path.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "{e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: RunArgs) -> ExitCode {
    use tokio::signal::unix::{SignalKind, signal};
    // Registered first: SIGHUP's default action would kill the process.
    let signals = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    );
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = signals else {
        return fail("cannot register signal handlers");
    };
    let path = config_path(args.config);
    let cfg = match load(&path) {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    let opts = Options {
        public_bind: args.public_bind,
        management_bind: args.management_bind,
        workers: args.workers,
        rate_store: None,
    };
    let handle = tokio::select! {
        h = weir_tokio::start(cfg, opts) => match h {
            Ok(h) => h,
            Err(e) => return fail(&e.to_string()),
        },
        _ = term.recv() => return ExitCode::SUCCESS,
        _ = int.recv() => return ExitCode::SUCCESS,
    };
    if let Some(file) = &args.ready_file
        && let Err(e) = write_ready_file(file, &handle)
    {
        handle.stop().await;
        return fail(&format!("cannot write {}: {e}", file.display()));
    }
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => {
                tracing::warn!("SIGHUP: reload not yet supported");
            }
        }
    }
    tracing::info!("shutting down");
    handle.stop().await;
    tracing::info!("stopped");
    ExitCode::SUCCESS
}

/// `{"public":"…","management":"…"|null,"pid":N}` written to FILE.tmp, then renamed.
fn write_ready_file(file: &Path, handle: &ProxyHandle) -> std::io::Result<()> {
    let doc = serde_json::json!({
        "public": handle.public_addr().to_string(),
        "management": handle.management_addr().map(|a| a.to_string()),
        "pid": std::process::id(),
    });
    let mut tmp = file.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, doc.to_string())?;
    std::fs::rename(&tmp, file)
}
