//! Driving wrk: one window of load is one `wrk` run with [`SCRIPT`], whose JSON report is read
//! into a [`Window`]. Windows merge exactly ([`Tally::add`]): counts add up and the latency
//! histograms (every distinct microsecond value with its count) are summed, so percentiles over a
//! 30-minute soak are the same as if wrk had run once.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The wrk Lua script that counts statuses and backends (load/src/drive/report.lua).
pub const SCRIPT: &str = include_str!("drive/report.lua");

/// The marker the script prints before its JSON line.
const MARKER: &str = "WEIR_LOAD_JSON ";

/// Socket-level failures wrk counts (no HTTP status).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Errors {
    pub connect: u64,
    pub read: u64,
    pub write: u64,
    /// Non-2xx/3xx answers (also counted by status).
    pub status: u64,
    pub timeout: u64,
}

impl Errors {
    /// Failures without an HTTP answer.
    pub fn transport(&self) -> u64 {
        self.connect + self.read + self.write + self.timeout
    }
}

/// What the script prints after one wrk run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Window {
    pub duration_us: u64,
    pub requests: u64,
    pub bytes: u64,
    pub errors: Errors,
    pub statuses: BTreeMap<String, u64>,
    pub backends: BTreeMap<String, u64>,
    /// A 429 came after a 2xx on one connection (the rate limit switched on).
    pub transition: bool,
    /// `[microseconds, count]` pairs.
    pub latency_us: Vec<(u64, u64)>,
}

/// Why a window could not be run or read.
#[derive(Debug)]
pub enum DriveError {
    Spawn(std::io::Error),
    /// wrk ran but printed no report (it could not connect at all, a bad URL, ...)
    NoReport {
        stderr: String,
        stdout: String,
    },
    BadReport(serde_json::Error),
}

impl fmt::Display for DriveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Spawn(e) => write!(f, "cannot run wrk ({e}); install it (apt-get install wrk)"),
            Self::NoReport { stderr, stdout } => {
                write!(
                    f,
                    "wrk printed no report: {}{}",
                    stderr.trim(),
                    stdout.trim()
                )
            }
            Self::BadReport(e) => write!(f, "cannot read the script's report: {e}"),
        }
    }
}

impl std::error::Error for DriveError {}

/// Reads the script's report out of wrk's stdout.
pub fn parse(stdout: &str) -> Result<Option<Window>, serde_json::Error> {
    match stdout.lines().find_map(|l| l.strip_prefix(MARKER)) {
        Some(json) => serde_json::from_str(json).map(Some),
        None => Ok(None),
    }
}

/// One window's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shot {
    pub url: String,
    pub connections: u32,
    pub threads: u32,
    pub duration: Duration,
    /// Per-connection pause before each request (the rate knob).
    pub delay_ms: u64,
    /// Extra request headers.
    pub headers: Vec<(String, String)>,
    pub timeout: Duration,
    pub backend_header: String,
}

/// Writes the script where wrk can read it; returns its path.
pub fn write_script(dir: &Path) -> std::io::Result<PathBuf> {
    let path = dir.join(format!("weir-load-{}.lua", std::process::id()));
    let mut f = std::fs::File::create(&path)?;
    f.write_all(SCRIPT.as_bytes())?;
    Ok(path)
}

/// wrk reads whole seconds only (`-d 1s`, not `1.5s` or `500ms`): rounded up, at least 1.
pub fn whole_seconds(d: Duration) -> u64 {
    d.as_secs_f64().ceil().max(1.0) as u64
}

/// Runs wrk once.
pub fn run(shot: &Shot, script: &Path) -> Result<Window, DriveError> {
    let threads = shot.threads.clamp(1, shot.connections.max(1));
    let headers: String = shot
        .headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\n"))
        .collect();
    let out = Command::new("wrk")
        .arg("-t")
        .arg(threads.to_string())
        .arg("-c")
        .arg(shot.connections.max(threads).to_string())
        .arg("-d")
        .arg(format!("{}s", whole_seconds(shot.duration)))
        .arg("--timeout")
        .arg(format!("{}s", whole_seconds(shot.timeout)))
        .arg("-s")
        .arg(script)
        .arg(&shot.url)
        .env("WEIR_LOAD_DELAY_MS", shot.delay_ms.to_string())
        .env("WEIR_LOAD_HEADERS", headers)
        .env("WEIR_LOAD_BACKEND_HEADER", &shot.backend_header)
        .output()
        .map_err(DriveError::Spawn)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    match parse(&stdout).map_err(DriveError::BadReport)? {
        Some(w) => Ok(w),
        None => Err(DriveError::NoReport {
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            stdout: stdout.into_owned(),
        }),
    }
}

/// Everything seen over several windows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    pub seconds: f64,
    pub requests: u64,
    pub errors: Errors,
    pub statuses: BTreeMap<String, u64>,
    pub backends: BTreeMap<String, u64>,
    pub transition: bool,
    /// Microseconds → count.
    #[serde(skip)]
    pub latency: BTreeMap<u64, u64>,
}

impl Tally {
    pub fn add(&mut self, w: &Window) {
        self.seconds += w.duration_us as f64 / 1e6;
        self.requests += w.requests;
        let e = &mut self.errors;
        e.connect += w.errors.connect;
        e.read += w.errors.read;
        e.write += w.errors.write;
        e.status += w.errors.status;
        e.timeout += w.errors.timeout;
        for (k, v) in &w.statuses {
            *self.statuses.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &w.backends {
            *self.backends.entry(k.clone()).or_default() += v;
        }
        self.transition |= w.transition;
        for &(us, n) in &w.latency_us {
            *self.latency.entry(us).or_default() += n;
        }
    }

    pub fn of(windows: &[Window]) -> Self {
        let mut t = Self::default();
        for w in windows {
            t.add(w);
        }
        t
    }

    /// Answers with this status.
    pub fn status(&self, code: u16) -> u64 {
        self.statuses.get(&code.to_string()).copied().unwrap_or(0)
    }

    /// Every attempt: answers plus transport failures.
    pub fn attempts(&self) -> u64 {
        self.statuses.values().sum::<u64>() + self.errors.transport()
    }

    pub fn rate(&self) -> f64 {
        if self.seconds > 0.0 {
            self.requests as f64 / self.seconds
        } else {
            0.0
        }
    }

    /// The `p`-th percentile (0..=100) latency in microseconds (0 without samples).
    pub fn percentile(&self, p: f64) -> u64 {
        let total: u64 = self.latency.values().sum();
        if total == 0 {
            return 0;
        }
        let rank = ((p / 100.0) * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (&us, &n) in &self.latency {
            seen += n;
            if seen >= rank {
                return us;
            }
        }
        self.latency.keys().next_back().copied().unwrap_or(0)
    }

    pub fn max_us(&self) -> u64 {
        self.latency.keys().next_back().copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests;
