//! `weir-load run`: a profile's phases as consecutive wrk windows, a progress line after each
//! window (when the run is longer than one window), samples of the proxy's RSS and open file
//! descriptors (`--pid`), the hypothesis checked over the judged windows, a one-screen summary and
//! a JSON report ([`Report`]) for CI and for the soak plot.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::drive::{self, Shot, Tally, Window};
use crate::procfs;
use crate::profile::{self, Check, Criteria, Knobs, Phase, Profile};

/// How a run is set up.
#[derive(Debug, Clone)]
pub struct Setup {
    pub profile: Profile,
    pub url: String,
    pub knobs: Knobs,
    pub criteria: Criteria,
    /// Length of one wrk run; a progress line and a sample follow each.
    pub window: Duration,
    pub threads: u32,
    pub headers: Vec<(String, String)>,
    pub timeout: Duration,
    pub backend_header: String,
    /// The proxy's pid, for RSS and open-fd samples (its descendants' RSS is added).
    pub pid: Option<u32>,
    pub progress: bool,
}

/// One sample of the series (one window).
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Sample {
    /// Seconds since the start, at the end of the window.
    pub t: f64,
    pub phase: String,
    pub connections: u32,
    pub rps: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub ok: u64,
    pub not_ok: u64,
    pub rss_kib: Option<u64>,
    pub fds: Option<u64>,
}

/// Totals over some windows, as the report shows them.
#[derive(Debug, Clone, Serialize)]
pub struct Totals {
    #[serde(flatten)]
    pub tally: Tally,
    pub rps: f64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

impl Totals {
    pub fn of(t: Tally) -> Self {
        Self {
            rps: t.rate(),
            p50_us: t.percentile(50.0),
            p90_us: t.percentile(90.0),
            p99_us: t.percentile(99.0),
            max_us: t.max_us(),
            tally: t,
        }
    }
}

/// The JSON report (`--json FILE`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub profile: Profile,
    pub target: String,
    pub phases: Vec<Phase>,
    /// Over the judged phases.
    pub judged: Totals,
    /// Over every phase.
    pub all: Totals,
    pub checks: Vec<Check>,
    pub pass: bool,
    pub samples: Vec<Sample>,
    pub rss_kib: Option<Memory>,
}

/// RSS over the run (KiB).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Memory {
    pub start: u64,
    pub end: u64,
    pub max: u64,
}

fn fd_count(pid: u32) -> Option<u64> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()
        .map(|d| d.count() as u64)
}

fn rss_kib(pid: u32) -> Option<u64> {
    let (bytes, _) = procfs::tree_rss_bytes(pid);
    (bytes > 0).then_some(bytes / 1024)
}

/// Runs the profile. Errors are the engine's (wrk missing, nothing listening at all).
pub fn run(setup: &Setup) -> Result<Report, drive::DriveError> {
    let phases = setup.profile.plan(&setup.knobs);
    let script = drive::write_script(&std::env::temp_dir()).map_err(drive::DriveError::Spawn)?;
    let total: Duration = phases.iter().map(|p| p.duration).sum();
    let start = Instant::now();
    let rss0 = setup.pid.and_then(rss_kib);
    let (mut judged, mut all) = (Vec::new(), Vec::new());
    let mut samples = Vec::new();
    let result = (|| {
        for phase in &phases {
            // Wall-clock bounded: each wrk run also costs its start and its report (about a
            // second on a loaded machine), so counting windows would overrun the phase.
            let deadline = Instant::now() + phase.duration;
            let mut first = true;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                if !first && left < Duration::from_millis(500) {
                    break;
                }
                first = false;
                let len = left.min(setup.window);
                let w = drive::run(&shot(setup, phase, len), &script)?;
                let s = sample(setup, phase, &w, start.elapsed());
                if setup.progress && total > setup.window {
                    eprintln!("{}", progress_line(setup.profile, &s, total));
                }
                samples.push(s);
                if phase.judged {
                    judged.push(w.clone());
                }
                all.push(w);
            }
        }
        Ok(())
    })();
    let _ = std::fs::remove_file(&script);
    result?;
    let judged = Totals::of(Tally::of(&judged));
    let checks = profile::verdict(setup.profile, &judged.tally, &setup.criteria);
    let rss_kib = rss0.map(|start| {
        let seen = samples.iter().filter_map(|s| s.rss_kib);
        Memory {
            start,
            end: samples.last().and_then(|s| s.rss_kib).unwrap_or(start),
            max: seen.fold(start, u64::max),
        }
    });
    Ok(Report {
        profile: setup.profile,
        target: setup.url.clone(),
        phases,
        pass: checks.iter().all(|c| c.ok),
        checks,
        judged,
        all: Totals::of(Tally::of(&all)),
        samples,
        rss_kib,
    })
}

fn shot(setup: &Setup, phase: &Phase, len: Duration) -> Shot {
    let rate = if phase.paced { setup.knobs.rate } else { None };
    Shot {
        url: setup.url.clone(),
        connections: phase.connections,
        threads: setup.threads,
        duration: len,
        delay_ms: profile::delay_ms(rate, phase.connections),
        headers: setup.headers.clone(),
        timeout: setup.timeout,
        backend_header: setup.backend_header.clone(),
    }
}

fn sample(setup: &Setup, phase: &Phase, w: &Window, at: Duration) -> Sample {
    let t = Tally::of(std::slice::from_ref(w));
    let ok = t.status(200);
    Sample {
        t: at.as_secs_f64(),
        phase: phase.name.to_owned(),
        connections: phase.connections,
        rps: t.rate(),
        p50_us: t.percentile(50.0),
        p99_us: t.percentile(99.0),
        ok,
        not_ok: t.attempts() - ok,
        rss_kib: setup.pid.and_then(rss_kib),
        fds: setup.pid.and_then(fd_count),
    }
}

fn progress_line(p: Profile, s: &Sample, total: Duration) -> String {
    let phase = if s.phase == p.to_string() {
        String::new()
    } else {
        format!(" {}", s.phase)
    };
    let mut line = format!(
        "[{:>5.0}s/{:.0}s] {p}{}: {:>8.0} req/s  p50 {:>7}  p99 {:>7}  200 {:>8}  other {:>6}",
        s.t,
        total.as_secs_f64(),
        phase,
        s.rps,
        us(s.p50_us),
        us(s.p99_us),
        s.ok,
        s.not_ok
    );
    if let (Some(rss), Some(fds)) = (s.rss_kib, s.fds) {
        let _ = write!(line, "  RSS {:.1} MiB  fds {fds}", rss as f64 / 1024.0);
    }
    line
}

/// A latency for people: `850us`, `1.25ms`, `2.00s`.
pub fn us(v: u64) -> String {
    if v < 1000 {
        format!("{v}us")
    } else if v < 1_000_000 {
        format!("{:.2}ms", v as f64 / 1000.0)
    } else {
        format!("{:.2}s", v as f64 / 1e6)
    }
}

/// The one-screen summary.
pub fn summary(r: &Report) -> String {
    let mut s = String::new();
    let j = &r.judged;
    let _ = writeln!(s, "profile {} against {}", r.profile, r.target);
    for p in &r.phases {
        let _ = writeln!(
            s,
            "  phase {:<10} {:>5} connections  {:>6.1}s{}",
            p.name,
            p.connections,
            p.duration.as_secs_f64(),
            if p.judged { "" } else { "  (not judged)" }
        );
    }
    let _ = writeln!(
        s,
        "judged: {} answers in {:.1}s = {:.0} req/s",
        j.tally.requests, j.tally.seconds, j.rps
    );
    let statuses: Vec<String> = j
        .tally
        .statuses
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    let _ = writeln!(s, "  status    {}", statuses.join("  "));
    let e = &j.tally.errors;
    let _ = writeln!(
        s,
        "  transport connect {}  read {}  write {}  timeout {}",
        e.connect, e.read, e.write, e.timeout
    );
    let _ = writeln!(
        s,
        "  latency   p50 {}  p90 {}  p99 {}  max {}",
        us(j.p50_us),
        us(j.p90_us),
        us(j.p99_us),
        us(j.max_us)
    );
    let backends: Vec<String> = j
        .tally
        .backends
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    let _ = writeln!(s, "  backends  {}", backends.join("  "));
    if let Some(m) = r.rss_kib {
        let _ = writeln!(
            s,
            "  RSS       start {} KiB  end {} KiB  max {} KiB",
            m.start, m.end, m.max
        );
    }
    for c in &r.checks {
        let _ = writeln!(
            s,
            "  [{}] {}: {}",
            if c.ok { "pass" } else { "FAIL" },
            c.name,
            c.detail
        );
    }
    let _ = writeln!(s, "verdict: {}", if r.pass { "PASS" } else { "FAIL" });
    s
}

#[cfg(test)]
mod tests;
