//! `weir-load`: helpers of the side-by-side benchmark (see docs/benchmarks.md).
#![allow(
    clippy::print_stdout,
    reason = "a command-line tool: its report goes to stdout"
)]

use std::io::Read as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use weir_load::{
    backend, h2abuse, idle, plot, probe, procfs, profile, run as runner, summary, wrk,
};

#[derive(Debug, Parser)]
#[command(
    name = "weir-load",
    version,
    about = "Benchmark helpers for weir (see docs/benchmarks.md)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs a load profile against TARGET_URL with wrk and checks its hypothesis
    /// (exit 0: pass, 1: fail, 2: could not run). See load/README.md.
    Run(RunArgs),
    /// One GET every INTERVAL ms on a new connection; prints `epoch_ms status storage degraded ms`.
    Probe {
        #[arg(long)]
        addr: SocketAddr,
        #[arg(long, default_value = "/")]
        path: String,
        #[arg(long, default_value_t = 50)]
        interval_ms: u64,
        #[arg(long)]
        seconds: f64,
        #[arg(long, default_value_t = 1000)]
        timeout_ms: u64,
    },
    /// Draws the soak plot (SVG) of a `run --json` report.
    PlotSoak {
        report: std::path::PathBuf,
        #[arg(long)]
        out: std::path::PathBuf,
        #[arg(long, default_value = "weir soak")]
        title: String,
    },
    /// Draws the side-by-side bars (SVG) of a load/bench.sh results file.
    PlotBench {
        results: std::path::PathBuf,
        #[arg(long)]
        out: std::path::PathBuf,
        #[arg(long, default_value = "weir, nginx and HAProxy side by side")]
        title: String,
    },
    /// Static HTTP/1.1 keep-alive backend: every path answers 200 with a fixed body.
    Backend {
        /// Address to listen on (127.0.0.0/8).
        #[arg(long)]
        listen: SocketAddr,
        /// Tokio worker threads.
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Response body size in bytes.
        #[arg(long, default_value_t = 64)]
        body_bytes: usize,
        /// Body size of paths under `/big` (0: the same as every path).
        #[arg(long, default_value_t = 0)]
        big_bytes: usize,
        /// Name the backend answers with (`X-Backend: NAME`, body `Hostname: NAME`).
        #[arg(long)]
        name: Option<String>,
        /// Milliseconds each answer is held back.
        #[arg(long, default_value_t = 0)]
        delay_ms: u64,
        /// Serve gRPC over h2c (prior knowledge): every call gets a BODY_BYTES message and
        /// `grpc-status: 0` in trailers.
        #[arg(long)]
        grpc: bool,
    },
    /// Reads `wrk --latency` output on stdin and prints one results line (TSV).
    WrkRow {
        #[arg(long)]
        proxy: String,
        #[arg(long)]
        workers: u32,
        #[arg(long)]
        connections: u32,
        #[arg(long)]
        round: u32,
        /// CPU seconds the proxy spent during the run (see `cpu-seconds`).
        #[arg(long)]
        cpu_seconds: Option<f64>,
    },
    /// Prints the CPU time (user + system, seconds) of a process and its descendants.
    CpuSeconds { pid: u32 },
    /// Prints the results header line (TSV).
    WrkHeader,
    /// Prints N distinct free TCP ports on 127.0.0.1 (bound together, then released).
    FreePorts {
        #[arg(default_value_t = 1)]
        count: usize,
    },
    /// Prints the side-by-side table (medians, paired ratios, goals) of a results file.
    Summarize {
        /// Results file written by bench.sh.
        file: std::path::PathBuf,
    },
    /// Opens N idle keep-alive connections (one request each) and reports the proxy's RSS.
    IdleConns {
        /// Proxy address.
        #[arg(long)]
        addr: SocketAddr,
        /// Proxy pid (its descendants are counted too: nginx workers).
        #[arg(long)]
        pid: u32,
        /// Name printed in the result line.
        #[arg(long, default_value = "proxy")]
        label: String,
        /// Connections to open.
        #[arg(short = 'n', long, default_value_t = 10_000)]
        connections: usize,
        /// Connections per loopback source address before moving to the next (127.0.0.2, ...).
        #[arg(long, default_value_t = 20_000)]
        per_source: usize,
        /// Connections being set up at once.
        #[arg(long, default_value_t = 200)]
        parallel: usize,
        /// Seconds to wait before each RSS reading.
        #[arg(long, default_value_t = 3)]
        settle_secs: u64,
        /// Speak HTTP/2 with prior knowledge (h2c) instead of HTTP/1.1.
        #[arg(long)]
        h2c: bool,
    },
    /// Runs one HTTP/2 abuse case against an h2c proxy; prints the proxy's CPU time and peak RSS
    /// during it, how the connection ended and whether another client was served (one RESULT line).
    H2Abuse {
        /// Proxy address (HTTP/2 with prior knowledge).
        #[arg(long)]
        addr: SocketAddr,
        /// Proxy pid (its descendants are counted too: nginx workers).
        #[arg(long)]
        pid: u32,
        #[arg(long, value_enum)]
        case: weir_load::h2abuse::Case,
        /// Name printed in the result line.
        #[arg(long, default_value = "proxy")]
        label: String,
        /// A path the backend answers with a large body (the zero-window case).
        #[arg(long, default_value = "/big")]
        big_path: String,
    },
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The profile.
    #[arg(long, env = "PROFILE", value_enum, default_value = "smoke")]
    profile: profile::Profile,
    /// Where the load goes (any weir: local, compose, a cluster's ingress).
    #[arg(long, env = "TARGET_URL", default_value = "http://127.0.0.1:8080/")]
    target_url: String,
    /// Minimum req/s of throughput (default 100).
    #[arg(long, env = "MIN_RPS")]
    min_rps: Option<f64>,
    /// Comma-separated backend names: each must answer a success, no other may.
    #[arg(long, env = "EXPECTED_BACKENDS", value_delimiter = ',')]
    expected_backends: Vec<String>,
    /// Length of the profile's main phase, seconds (profile default otherwise).
    #[arg(long, env = "DURATION")]
    duration: Option<f64>,
    /// Connections of the main phase.
    #[arg(long, env = "CONNECTIONS")]
    connections: Option<u32>,
    /// Requests per second over all connections (paced phases; closed loop).
    #[arg(long, env = "RATE")]
    rate: Option<f64>,
    /// Seconds per wrk run: a progress line and an RSS/fd sample after each.
    #[arg(long, env = "WINDOW", default_value_t = 5.0)]
    window: f64,
    /// wrk threads.
    #[arg(long, env = "WRK_THREADS", default_value_t = 2)]
    threads: u32,
    /// Extra request header `Name: value` (repeatable).
    #[arg(long = "header")]
    headers: Vec<String>,
    /// Per-request timeout, milliseconds.
    #[arg(long, default_value_t = 5000)]
    timeout_ms: u64,
    /// Response header naming the backend (else a `Hostname: NAME` body line).
    #[arg(long, env = "BACKEND_HEADER", default_value = "X-Backend")]
    backend_header: String,
    /// The proxy's pid (local targets): RSS and open fds sampled after each window.
    #[arg(long, env = "TARGET_PID")]
    pid: Option<u32>,
    /// Writes the report (JSON) here.
    #[arg(long, env = "JSON_OUT")]
    json: Option<std::path::PathBuf>,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
}

fn run_profile(a: RunArgs) -> ExitCode {
    let secs = |s: f64| Duration::from_secs_f64(s.max(0.001));
    let headers = a
        .headers
        .iter()
        .filter_map(|h| {
            h.split_once(':')
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        })
        .collect();
    let setup = runner::Setup {
        profile: a.profile,
        url: a.target_url,
        knobs: profile::Knobs {
            duration: a.duration.map(secs),
            connections: a.connections,
            rate: a.rate,
        },
        criteria: profile::Criteria {
            min_rps: a.min_rps,
            expected_backends: a
                .expected_backends
                .into_iter()
                .filter(|b| !b.is_empty())
                .collect(),
        },
        window: secs(a.window),
        threads: a.threads,
        headers,
        timeout: Duration::from_millis(a.timeout_ms),
        backend_header: a.backend_header,
        pid: a.pid,
        progress: !a.quiet,
    };
    let report = match runner::run(&setup) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("weir-load run: {e}");
            return ExitCode::from(2);
        }
    };
    print!("{}", runner::summary(&report));
    if let Some(path) = a.json {
        let written = serde_json::to_vec_pretty(&report)
            .map_err(|e| e.to_string())
            .and_then(|j| std::fs::write(&path, j).map_err(|e| e.to_string()));
        if let Err(e) = written {
            eprintln!("weir-load run: cannot write {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    if report.pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Run(args) = cli.command {
        return run_profile(args);
    }
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weir-load: {e}");
            ExitCode::FAILURE
        }
    }
}

type BoxError = Box<dyn std::error::Error>;

fn run(command: Command) -> Result<(), BoxError> {
    match command {
        Command::Run(_) => unreachable!("handled in main"),
        Command::Probe {
            addr,
            path,
            interval_ms,
            seconds,
            timeout_ms,
        } => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(probe::run(
                addr,
                &path,
                Duration::from_millis(interval_ms.max(1)),
                Duration::from_secs_f64(seconds.max(0.0)),
                Duration::from_millis(timeout_ms),
                &mut std::io::stdout().lock(),
            ))?;
            Ok(())
        }
        Command::PlotSoak { report, out, title } => {
            #[derive(serde::Deserialize)]
            struct Only {
                samples: Vec<runner::Sample>,
            }
            let only: Only = serde_json::from_slice(&std::fs::read(&report)?)?;
            plot::soak(&only.samples, &title, &out)
        }
        Command::PlotBench {
            results,
            out,
            title,
        } => {
            let rows = summary::parse_rows(&std::fs::read_to_string(&results)?)?;
            plot::bench(&rows, &title, &out)
        }
        Command::Backend {
            listen,
            threads,
            body_bytes,
            big_bytes,
            name,
            delay_ms,
            grpc,
        } => serve_backend(
            listen,
            threads,
            backend::Options {
                grpc,
                body_bytes,
                big_bytes,
                name,
                delay: Duration::from_millis(delay_ms),
            },
        ),
        Command::WrkRow {
            proxy,
            workers,
            connections,
            round,
            cpu_seconds,
        } => wrk_row(proxy, workers, connections, round, cpu_seconds),
        Command::CpuSeconds { pid } => {
            let ticks = procfs::tree_cpu_ticks(pid);
            println!(
                "{:.3}",
                ticks as f64 / procfs::CLOCK_TICKS_PER_SECOND as f64
            );
            Ok(())
        }
        Command::WrkHeader => {
            println!("{}", summary::TSV_HEADER);
            Ok(())
        }
        Command::FreePorts { count } => {
            let listeners = (0..count)
                .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
                .collect::<Result<Vec<_>, _>>()?;
            for l in &listeners {
                println!("{}", l.local_addr()?.port());
            }
            Ok(())
        }
        Command::Summarize { file } => {
            let text = std::fs::read_to_string(&file)?;
            let rows = summary::parse_rows(&text)?;
            print!("{}", summary::render(&summary::summarize(&rows)));
            Ok(())
        }
        Command::H2Abuse {
            addr,
            pid,
            case,
            label,
            big_path,
        } => h2_abuse(case, addr, pid, &label, &big_path),
        idle @ Command::IdleConns { .. } => idle_conns_command(idle),
    }
}

/// `idle-conns`: open idle connections to a running proxy and report its memory.
fn idle_conns_command(command: Command) -> Result<(), BoxError> {
    let Command::IdleConns {
        addr,
        pid,
        label,
        connections,
        per_source,
        parallel,
        settle_secs,
        h2c,
    } = command
    else {
        unreachable!("called with idle-conns only");
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(idle_conns(
        addr,
        pid,
        &label,
        idle::Shape {
            n: connections,
            per_source,
            parallel,
            proto: if h2c {
                idle::Proto::H2c
            } else {
                idle::Proto::Http1
            },
        },
        Duration::from_secs(settle_secs),
    ))
}

/// `h2-abuse`: one abuse case against a running proxy, reported as one line.
fn h2_abuse(
    case: h2abuse::Case,
    addr: SocketAddr,
    pid: u32,
    label: &str,
    big_path: &str,
) -> Result<(), BoxError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let report = rt
        .block_on(h2abuse::run(case, addr, pid, big_path))
        .map_err(|e| -> BoxError { e.to_string().into() })?;
    println!("{}", report.line(case, label));
    Ok(())
}

/// `backend`: the load backend on its own multi-threaded runtime.
fn serve_backend(
    listen: SocketAddr,
    threads: usize,
    opts: backend::Options,
) -> Result<(), BoxError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()?;
    rt.block_on(backend::run(listen, opts))?;
    Ok(())
}

/// `wrk-row`: wrk's output on stdin as one TSV row.
fn wrk_row(
    proxy: String,
    workers: u32,
    connections: u32,
    round: u32,
    cpu_seconds: Option<f64>,
) -> Result<(), BoxError> {
    let mut text = String::new();
    std::io::stdin().read_to_string(&mut text)?;
    let sample = wrk::parse(&text)?;
    let cpu_us_per_request = cpu_seconds
        .filter(|_| sample.requests > 0)
        .map(|secs| secs * 1e6 / sample.requests as f64);
    let row = summary::Row {
        proxy,
        workers,
        connections,
        round,
        sample,
        cpu_us_per_request,
    };
    println!("{}", row.to_tsv());
    Ok(())
}

async fn idle_conns(
    addr: SocketAddr,
    pid: u32,
    label: &str,
    shape: idle::Shape,
    settle: Duration,
) -> Result<(), BoxError> {
    let n = shape.n;
    let kib = |b: u64| b as f64 / 1024.0;
    let (idle, pids) = procfs::tree_rss_bytes(pid);
    if idle == 0 {
        return Err(format!("no such process (or no RSS): {pid}").into());
    }
    println!("{label}: pids {pids:?}, RSS idle {:.0} KiB", kib(idle));
    let opened = idle::open(addr, shape).await;
    if opened.failures > 0 {
        println!(
            "{label}: {} of {n} connections failed, e.g. {:?}",
            opened.failures, opened.sample_errors
        );
    }
    tokio::time::sleep(settle).await;
    let alive = idle::still_open(&opened.streams);
    let (loaded, _) = procfs::tree_rss_bytes(pid);
    let per_conn = if alive > 0 {
        loaded.saturating_sub(idle) as f64 / alive as f64
    } else {
        f64::NAN
    };
    println!(
        "{label}: RSS with {alive} idle connections {:.0} KiB (+{:.0} KiB), {per_conn:.0} bytes per idle connection",
        kib(loaded),
        kib(loaded.saturating_sub(idle))
    );
    drop(opened);
    tokio::time::sleep(settle).await;
    let (after, _) = procfs::tree_rss_bytes(pid);
    println!("{label}: RSS after closing them {:.0} KiB", kib(after));
    println!(
        "RESULT\t{label}\t{n}\t{alive}\t{}\t{}\t{}\t{per_conn:.0}",
        idle / 1024,
        loaded / 1024,
        after / 1024
    );
    Ok(())
}
