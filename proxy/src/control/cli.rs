//! The command line of the `weir` (tokio) and `weir-smol` binaries, written once: `run`,
//! `check-config`, `demo`, `--version` (process protocol in docs/proxy.md). Each binary's
//! `main` is `weir_proxy::cli::main(<its runtime>, "<its name>")`.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use futures_util::future::Either;

use clap::{Args, CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use weir_core::config::{ConfigErrors, ValidConfig};

use crate::base::error_chain::chain;
use crate::base::rt::{Rt, Signal, Signals};
use crate::base::safe_read::FileError;
use crate::control::config_file::{self, LoadError};
use crate::control::start::{Options, ProxyHandle};

/// What `weir --help` opens with: what weir is for a user, not the crate's description.
const ABOUT: &str = "weir: an HTTP load balancer and reverse proxy. It spreads requests over \
    backends, checks their health, retries safely, sheds load and rate-limits, with a \
    management API and Prometheus metrics.";

const AFTER_HELP: &str = "Start with `weir demo` (backends and proxy on 127.0.0.1), or \
    `weir check-config FILE` then `weir run --config FILE`. Docs: README.md, docs/proxy.md, \
    docs/operations.md.";

/// What the command line itself fails on, around the proxy's own start (why that fails is a
/// [`StartError`](crate::control::start::StartError)).
#[derive(Debug, thiserror::Error)]
enum CliError {
    /// This binary's async runtime cannot be built.
    #[error("cannot build the {runtime} runtime")]
    Runtime {
        /// Its name (`tokio`, `smol`).
        runtime: &'static str,
        /// Why.
        #[source]
        error: std::io::Error,
    },
    /// The signal handlers cannot be registered.
    #[error("cannot register signal handlers")]
    Signals(#[source] std::io::Error),
    /// The configuration file cannot be read (the message names the path and why).
    #[error(transparent)]
    ConfigFile(#[from] FileError),
    /// The configuration is invalid: every error on a line of its own, each with the file,
    /// the field path and the line (C-CONF-1). The errors are listed here, so they are kept
    /// as a field, not as the `source()`, which would print them a second time.
    #[error("{}", list_errors(.path, .errors))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Every error.
        errors: ConfigErrors,
    },
    /// `MIGRATE_ONLY` is neither on nor off (C-RATE-7).
    #[error(
        "MIGRATE_ONLY must be 1 or true (migrate and exit) or 0, false or unset (run), got {0}"
    )]
    MigrateOnly(String),
    /// The migrations `MIGRATE_ONLY=true` asked for did not apply (C-RATE-7).
    #[error("MIGRATE_ONLY: cannot migrate {database}")]
    Migrate {
        /// `database.name`.
        database: String,
        /// Why.
        #[source]
        error: weir_storage::StoreError,
    },
    /// `--ready-file` cannot be written.
    #[error("cannot write {}", .file.display())]
    ReadyFile {
        /// The file.
        file: PathBuf,
        /// Why.
        #[source]
        error: std::io::Error,
    },
}

/// The command line (`weir --help`).
#[derive(Debug, Parser)]
#[command(name = "weir", version, about = ABOUT, after_help = AFTER_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the proxy.
    Run(RunArgs),
    /// Validate a configuration file and list every error (exit 0 when valid). A secret not set
    /// in this environment is a warning (it is an error for `run`), unless --strict-secrets.
    CheckConfig {
        /// The configuration file.
        file: PathBuf,
        /// Secrets that are not set (NAME or NAME_FILE) are errors, as for `weir run`.
        #[arg(long)]
        strict_secrets: bool,
    },
    /// Start demo backends on 127.0.0.1 and the proxy in front of them.
    Demo(DemoArgs),
    /// Serve the web console for a running weir (the token comes from $BALANCER_ADMIN_TOKEN
    /// or $BALANCER_ADMIN_TOKEN_FILE and is added server-side; the browser never sees it).
    Console(ConsoleArgs),
}

#[derive(Debug, Args)]
struct ConsoleArgs {
    /// Where the console listens. Beyond loopback it needs --auth-token-env or --allow-remote:
    /// whoever reaches the console acts with the admin token.
    #[arg(long, default_value = "127.0.0.1:3000")]
    listen: SocketAddr,
    /// The management listener of the weir to manage.
    #[arg(
        long,
        env = "WEIR_MANAGEMENT_URL",
        default_value = "http://127.0.0.1:9090"
    )]
    management: String,
    /// Require a bearer token of the console's own, read from this variable (or the file
    /// VAR_FILE names), on every request: `Authorization: Bearer <token>`, else 401.
    #[arg(long, value_name = "VAR")]
    auth_token_env: Option<String>,
    /// Listen beyond loopback without a token of the console's own: only behind an
    /// authenticating proxy (or where only such a proxy can reach it).
    #[arg(long)]
    allow_remote: bool,
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
    /// The web console's listener.
    #[arg(long, default_value = "127.0.0.1:3000")]
    console_bind: SocketAddr,
    /// Worker threads [default: the number of CPUs].
    #[arg(long, env = "WEIR_WORKERS")]
    workers: Option<usize>,
}

/// Parse the command line and run it on `rt`; `name` is the binary's name (usage, errors).
pub fn main(rt: Rt, name: &'static str) -> ExitCode {
    let matches = Cli::command().name(name).bin_name(name).get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    match cli.command {
        Command::CheckConfig {
            file,
            strict_secrets,
        } => check_config(&file, strict_secrets),
        Command::Console(args) => {
            init_logs("info");
            block_on(rt, name, async move {
                let access = crate::control::console::Access {
                    allow_remote: args.allow_remote,
                    auth_token_env: args.auth_token_env,
                };
                match crate::control::console::run(rt, args.listen, &args.management, access).await
                {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => cannot_start(name, &e),
                }
            })
        }
        Command::Run(args) => {
            init_logs("info");
            block_on(rt, name, run(rt, name, args))
        }
        Command::Demo(args) => {
            // The demo talks to a person on stdout; its JSON log lines go to stderr so the two
            // do not interleave (`weir demo 2>/dev/null` shows the walkthrough alone).
            init_logs_to("info", Writer::Stderr);
            block_on(rt, name, async move {
                let opts = Options {
                    public_bind: Some(args.public_bind),
                    management_bind: Some(args.management_bind),
                    workers: args.workers,
                    rate_limiter: None,
                };
                match crate::control::demo::run(rt, opts, args.console_bind).await {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => cannot_start(name, &e),
                }
            })
        }
    }
}

/// Where the JSON log lines go.
enum Writer {
    Stdout,
    Stderr,
}

/// JSON log lines on stdout; `RUST_LOG` overrides the level.
fn init_logs(default: &str) {
    init_logs_to(default, Writer::Stdout);
}

/// JSON log lines on `writer`; `RUST_LOG` overrides the level.
fn init_logs_to(default: &str, writer: Writer) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let logs = tracing_subscriber::fmt()
        .event_format(crate::base::log_json::JsonLines)
        .with_env_filter(filter);
    match writer {
        Writer::Stdout => logs.with_writer(std::io::stdout).init(),
        Writer::Stderr => logs.with_writer(std::io::stderr).init(),
    }
}

/// The control executor, on the main thread: signals, the acceptor, health checks,
/// management. The data plane runs on the worker threads' own executors.
fn block_on(
    rt: Rt,
    name: &'static str,
    f: impl std::future::Future<Output = ExitCode>,
) -> ExitCode {
    let mut code = ExitCode::FAILURE;
    let main = async {
        code = f.await;
    };
    match rt.block_on(Box::pin(main)) {
        Ok(()) => code,
        Err(error) => cannot_start(
            name,
            &CliError::Runtime {
                runtime: rt.name(),
                error,
            },
        ),
    }
}

/// `NAME: <message>` on stderr; exit 1.
fn fail(name: &str, message: &str) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "{name}: {message}");
    ExitCode::FAILURE
}

/// `NAME: <error>: <its source>: ...` on stderr, each level of the cause chain once; exit 1.
fn fail_with(name: &str, error: &(dyn std::error::Error + 'static)) -> ExitCode {
    fail(name, &chain(error).to_string())
}

/// `NAME: cannot start: <error>: <its source>: ...` on stderr: a failure before the process
/// serves anything; exit 1.
fn cannot_start(name: &str, error: &(dyn std::error::Error + 'static)) -> ExitCode {
    fail(name, &format!("cannot start: {}", chain(error)))
}

fn config_path(given: Option<PathBuf>) -> PathBuf {
    given
        .or_else(|| std::env::var_os("CONFIG_PATH").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("config/weir.yaml"))
}

/// Read and validate `path` safely (only a regular file, at most 1 MiB, within
/// `config_file::READ_TIMEOUT`: a FIFO or `/dev/zero` is a prompt error).
fn load(path: &Path) -> Result<ValidConfig, CliError> {
    match config_file::load_blocking(path, config_file::READ_TIMEOUT) {
        Ok(cfg) => Ok(cfg),
        Err(LoadError::File(e)) => Err(CliError::ConfigFile(e)),
        Err(LoadError::Invalid(errors)) => Err(CliError::Invalid {
            path: path.to_owned(),
            errors,
        }),
    }
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

fn check_config(path: &Path, strict_secrets: bool) -> ExitCode {
    let result = if strict_secrets {
        load(path).map(|cfg| (Vec::new(), check_files(&cfg.server)))
    } else {
        load_lenient(path)
    };
    match result {
        // C-TLS-1: every certificate pair loads and its key matches; C-GRPC-5: so do the
        // upstream CA and client certificate.
        Ok((_, Err(tls))) => {
            let mut err = std::io::stderr();
            for e in &tls {
                let _ = writeln!(err, "{}: {e}", path.display());
            }
            ExitCode::FAILURE
        }
        Ok((missing, Ok(()))) => {
            let mut err = std::io::stderr();
            for name in &missing {
                let _ = writeln!(
                    err,
                    "{}: warning: secret {name} is not set in this environment (set {name} or \
                     {name}_FILE); `weir run` needs it; --strict-secrets makes this an error",
                    path.display()
                );
            }
            let note = match missing.len() {
                0 => String::new(),
                n => format!(" ({n} secret(s) not resolved here)"),
            };
            let _ = writeln!(
                std::io::stdout(),
                "{}: configuration is valid{note}",
                path.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "{}", chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// What `check-config` found in a valid file: unresolved secret names, and the check of its
/// TLS files (each failure as its whole error chain).
type Checked = (Vec<String>, Result<(), Vec<String>>);

/// The TLS files of `server` (the listener's pairs and client CA, C-TLS-1; the upstream CA and
/// client certificate, C-GRPC-5): every failure, as its error chain.
fn check_files(server: &weir_core::config::ServerSettings) -> Result<(), Vec<String>> {
    let mut errors: Vec<String> = Vec::new();
    if let Err(e) = crate::observe::listener_tls::check(server) {
        errors.extend(e.iter().map(|e| chain(e).to_string()));
    }
    if let Err(e) = crate::services::upstream_tls::check(&server.upstream.tls) {
        errors.extend(e.iter().map(|e| chain(e).to_string()));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// [`load`] with [`LenientSecrets`](crate::base::secrets::LenientSecrets): the valid configuration's
/// unresolved secret names and its certificate check, or the errors.
fn load_lenient(path: &Path) -> Result<Checked, CliError> {
    let owned = path.to_owned();
    let read = config_file::READERS.run_blocking(path, config_file::READ_TIMEOUT, move || {
        let secrets = crate::base::secrets::LenientSecrets::new();
        config_file::load_with(&owned, &secrets)
            .map(|cfg| (secrets.missing(), check_files(&cfg.server)))
    });
    match read {
        Ok(Ok(checked)) => Ok(checked),
        Ok(Err(LoadError::File(e))) | Err(e) => Err(CliError::ConfigFile(e)),
        Ok(Err(LoadError::Invalid(errors))) => Err(CliError::Invalid {
            path: path.to_owned(),
            errors,
        }),
    }
}

/// `MIGRATE_ONLY` (C-RATE-7): unset, empty, `0` or `false` run normally; `1` or `true`
/// migrate and exit; anything else is an error (a typo must not start serving).
/// A value that is not UTF-8 is an error too, not "unset".
fn migrate_only_requested(value: Option<&std::ffi::OsStr>) -> Result<bool, CliError> {
    let value = match value.map(std::ffi::OsStr::to_str) {
        None => None,
        Some(Some(v)) => Some(v),
        Some(None) => {
            return Err(CliError::MigrateOnly(format!(
                "{:?} (not UTF-8)",
                value.unwrap_or_default()
            )));
        }
    };
    match value.map(str::trim) {
        None | Some("" | "0" | "false") => Ok(false),
        Some("1" | "true") => Ok(true),
        Some(other) => Err(CliError::MigrateOnly(format!("{other:?}"))),
    }
}

/// The next SIGTERM or SIGINT (SIGHUPs meanwhile are ignored).
async fn terminated(signals: &mut dyn Signals) {
    while let Some(s) = signals.next().await {
        if s != Signal::Hangup {
            return;
        }
    }
    std::future::pending::<()>().await;
}

async fn run(rt: Rt, name: &'static str, args: RunArgs) -> ExitCode {
    // Registered first: SIGHUP's default action would kill the process.
    let mut signals = match rt.signals() {
        Ok(s) => s,
        Err(e) => return cannot_start(name, &CliError::Signals(e)),
    };
    let path = config_path(args.config);
    let cfg = match load(&path) {
        Ok(c) => c,
        Err(e) => return cannot_start(name, &e),
    };
    if let Err(e) = crate::control::start::check_runtime_support(rt, &cfg) {
        return cannot_start(name, &e);
    }
    let migrate = match migrate_only_requested(std::env::var_os("MIGRATE_ONLY").as_deref()) {
        Ok(m) => m,
        Err(e) => return cannot_start(name, &e),
    };
    if migrate {
        // A migration may queue behind another process's on the advisory lock: a signal ends
        // the wait (the server releases what this session held).
        let migrate = std::pin::pin!(migrate_only(name, &cfg));
        let stop = std::pin::pin!(terminated(&mut *signals));
        return match futures_util::future::select(migrate, stop).await {
            Either::Left((code, _)) => code,
            Either::Right(_) => fail(name, "MIGRATE_ONLY: interrupted"),
        };
    }
    let opts = Options {
        public_bind: args.public_bind,
        management_bind: args.management_bind,
        workers: args.workers,
        rate_limiter: None,
    };
    let handle = {
        let start = std::pin::pin!(crate::control::start::start(rt, cfg, opts));
        let stop = std::pin::pin!(terminated(&mut *signals));
        match futures_util::future::select(start, stop).await {
            Either::Left((Ok(h), _)) => h,
            Either::Left((Err(e), _)) => return cannot_start(name, &e),
            Either::Right(_) => return ExitCode::SUCCESS,
        }
    };
    if let Some(file) = &args.ready_file
        && let Err(error) = write_ready_file(file, &handle)
    {
        handle.stop().await;
        return fail_with(
            name,
            &CliError::ReadyFile {
                file: file.clone(),
                error,
            },
        );
    }
    while let Some(signal) = signals.next().await {
        if signal != Signal::Hangup {
            break;
        }
        // C-CONF-4: re-read, validate, warm up, publish; the result is logged there.
        // In a task, so a warm-up never delays a SIGTERM; reloads queue on one lock.
        let proxy_state = std::sync::Arc::clone(handle.proxy_state());
        let path = path.clone();
        rt.spawn(async move {
            let _ = crate::control::reload::reload_file(&proxy_state, &path).await;
        });
    }
    withdraw(rt, &handle, &mut *signals).await;
    handle.stop().await;
    tracing::info!("stopped");
    ExitCode::SUCCESS
}

/// The first phase of SIGTERM (C-PATH-10): `/readyz` turns `503` at once, the listeners keep
/// accepting for `server.shutdown_delay` (cut short by a second SIGTERM or SIGINT, for an
/// operator at a terminal); then the caller closes them.
async fn withdraw(rt: Rt, handle: &ProxyHandle, signals: &mut dyn Signals) {
    handle.withdraw();
    let delay = handle.shutdown_delay();
    if delay.is_zero() {
        tracing::info!("shutting down");
        return;
    }
    tracing::info!(
        delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
        "shutting down: not ready; the listeners keep accepting for server.shutdown_delay"
    );
    let wait = std::pin::pin!(crate::base::rt::sleep(rt, delay));
    let again = std::pin::pin!(terminated(signals));
    if let Either::Right(_) = futures_util::future::select(wait, again).await {
        tracing::info!("second signal: server.shutdown_delay cut short");
    }
    tracing::info!("closing the listeners");
}

/// `MIGRATE_ONLY=true` (C-RATE-7): apply the PostgreSQL migrations of the configured
/// `database` and exit without opening any listener: 0 when the schema is migrated (or there is
/// no database to migrate), 1 with the error on stderr otherwise.
async fn migrate_only(name: &str, cfg: &ValidConfig) -> ExitCode {
    let Some(db) = cfg.database.as_ref() else {
        tracing::info!("MIGRATE_ONLY: rate_limit.storage is not postgres; nothing to migrate");
        return ExitCode::SUCCESS;
    };
    match weir_storage::migrate_only(db).await {
        Ok(report) => {
            tracing::info!(
                applied = %crate::base::log_json::list(&report.applied.iter().map(ToString::to_string).collect::<Vec<_>>()),
                unknown = %crate::base::log_json::list(&report.unknown.iter().map(ToString::to_string).collect::<Vec<_>>()),
                database = %db.name,
                "MIGRATE_ONLY: migrations applied; exiting"
            );
            ExitCode::SUCCESS
        }
        Err(error) => fail_with(
            name,
            &CliError::Migrate {
                database: db.name.clone(),
                error,
            },
        ),
    }
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

#[cfg(test)]
mod tests;
