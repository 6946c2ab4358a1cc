//! The load profiles and their hypotheses (the reference's k6 profiles, document 000).
//!
//! A profile is a list of [`Phase`]s (connections, length, whether its answers are judged) and a
//! hypothesis checked over the judged answers ([`verdict`]):
//!
//! | profile | hypothesis |
//! | --- | --- |
//! | smoke, throughput (load), soak, recovery | more than 99 % of attempts are `200`; throughput also reaches `MIN_RPS` |
//! | rate-limit | both `200` and `429` are seen, a `429` after a `200` on one connection, never a `503`, nothing else |
//! | overload, spike | both useful `200`s and managed `503`s, nothing else (no other status, no transport failure) |
//!
//! With `EXPECTED_BACKENDS`, every named backend answers at least one success and no success
//! comes from any other backend (an unnamed answer counts as another backend).

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::drive::Tally;

/// One of the profiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    Smoke,
    /// `load` is the reference's alias.
    #[value(alias = "load")]
    Throughput,
    Soak,
    Spike,
    RateLimit,
    Overload,
    Recovery,
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Self::Smoke => "smoke",
            Self::Throughput => "throughput",
            Self::Soak => "soak",
            Self::Spike => "spike",
            Self::RateLimit => "rate-limit",
            Self::Overload => "overload",
            Self::Recovery => "recovery",
        };
        f.write_str(name)
    }
}

/// One stretch of constant load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Phase {
    pub name: &'static str,
    pub connections: u32,
    #[serde(serialize_with = "secs")]
    pub duration: Duration,
    /// Whether the hypothesis looks at this phase's answers.
    pub judged: bool,
    /// Whether the rate knob applies (the overload stretches of spike and recovery run flat out).
    pub paced: bool,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// The knobs every profile takes (`None`: the profile's default).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Knobs {
    pub duration: Option<Duration>,
    pub connections: Option<u32>,
    /// Requests per second over all connections (paced phases only).
    pub rate: Option<f64>,
}

impl Profile {
    /// The default length and connections of the profile's main phase.
    pub fn defaults(self) -> (Duration, u32) {
        let s = Duration::from_secs;
        match self {
            Self::Smoke => (s(10), 4),
            Self::Throughput => (s(30), 64),
            Self::Soak => (s(30 * 60), 32),
            Self::Spike => (s(10), 256),
            Self::RateLimit => (s(10), 4),
            Self::Overload => (s(10), 256),
            Self::Recovery => (s(10), 8),
        }
    }

    /// The phases the profile runs, with the knobs applied.
    pub fn plan(self, knobs: &Knobs) -> Vec<Phase> {
        let (d, c) = self.defaults();
        let d = knobs.duration.unwrap_or(d);
        let c = knobs.connections.unwrap_or(c).max(1);
        let phase = |name, connections: u32, duration, judged, paced| Phase {
            name,
            connections: connections.max(1),
            duration,
            judged,
            paced,
        };
        match self {
            // Quiet, the spike (connections, 1/2 of the length), quiet again: all judged.
            Self::Spike => vec![
                phase("before", (c / 32).max(1), d / 4, true, true),
                phase("spike", c, d / 2, true, false),
                phase("after", (c / 32).max(1), d / 4, true, true),
            ],
            // Overload it first (not judged), then ordinary traffic must be served again.
            Self::Recovery => vec![
                phase("overload", c.saturating_mul(32), d / 2, false, false),
                phase("recovered", c, d, true, true),
            ],
            _ => vec![phase(self_name(self), c, d, true, true)],
        }
    }
}

fn self_name(p: Profile) -> &'static str {
    match p {
        Profile::Smoke => "smoke",
        Profile::Throughput => "throughput",
        Profile::Soak => "soak",
        Profile::RateLimit => "rate-limit",
        Profile::Overload => "overload",
        Profile::Spike => "spike",
        Profile::Recovery => "recovery",
    }
}

/// The per-connection pause that makes `connections` connections send about `rate` requests per
/// second in all (closed loop: the latency adds to it, so the rate reached is a little lower).
pub fn delay_ms(rate: Option<f64>, connections: u32) -> u64 {
    match rate {
        Some(r) if r > 0.0 => ((f64::from(connections) * 1000.0 / r).round() as u64).max(1),
        _ => 0,
    }
}

/// The criteria beyond the profile's own.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Criteria {
    /// Minimum requests per second (throughput; default 100).
    pub min_rps: Option<f64>,
    /// Backends that must each answer a success, and the only ones allowed to.
    pub expected_backends: Vec<String>,
}

/// One checked statement of the hypothesis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

fn check(name: &str, ok: bool, detail: String) -> Check {
    Check {
        name: name.to_owned(),
        ok,
        detail,
    }
}

/// The share of `200`s needed by smoke, throughput, soak and recovery.
pub const MIN_OK_SHARE: f64 = 0.99;

/// Answers that are neither `200` nor one of `allowed`, plus transport failures.
fn others(t: &Tally, allowed: &[u16]) -> (u64, String) {
    let mut n = t.errors.transport();
    let mut what = Vec::new();
    for (code, count) in &t.statuses {
        let known = code
            .parse::<u16>()
            .is_ok_and(|c| c == 200 || allowed.contains(&c));
        if !known {
            n += count;
            what.push(format!("{count} x {code}"));
        }
    }
    if t.errors.transport() > 0 {
        what.push(format!("{} transport failures", t.errors.transport()));
    }
    (n, what.join(", "))
}

/// Checks the hypothesis of `profile` over the judged answers `t`.
pub fn verdict(profile: Profile, t: &Tally, criteria: &Criteria) -> Vec<Check> {
    let ok = t.status(200);
    let attempts = t.attempts();
    let mut checks = Vec::new();
    match profile {
        Profile::Smoke | Profile::Throughput | Profile::Soak | Profile::Recovery => {
            let share = if attempts > 0 {
                ok as f64 / attempts as f64
            } else {
                0.0
            };
            checks.push(check(
                "more than 99 % of attempts are 200",
                attempts > 0 && share > MIN_OK_SHARE,
                format!("{ok} of {attempts} ({:.3} %)", share * 100.0),
            ));
            if profile == Profile::Throughput {
                let min = criteria.min_rps.unwrap_or(100.0);
                checks.push(check(
                    "rate reaches MIN_RPS",
                    t.rate() >= min,
                    format!("{:.0} req/s, MIN_RPS {min}", t.rate()),
                ));
            }
        }
        Profile::RateLimit => {
            let limited = t.status(429);
            checks.push(check("200s seen", ok > 0, format!("{ok} x 200")));
            checks.push(check("429s seen", limited > 0, format!("{limited} x 429")));
            checks.push(check(
                "a 429 follows a 200 (the limit switched on)",
                t.transition,
                format!("transition seen: {}", t.transition),
            ));
            let (n, what) = others(t, &[429]);
            checks.push(check("no 503 and nothing else", n == 0, none_or(n, what)));
        }
        Profile::Overload | Profile::Spike => {
            let shed = t.status(503);
            checks.push(check("useful 200s seen", ok > 0, format!("{ok} x 200")));
            checks.push(check(
                "managed 503s seen",
                shed > 0,
                format!("{shed} x 503"),
            ));
            let (n, what) = others(t, &[503]);
            checks.push(check("nothing else", n == 0, none_or(n, what)));
        }
    }
    if !criteria.expected_backends.is_empty() {
        checks.extend(backend_checks(t, &criteria.expected_backends));
    }
    checks
}

fn none_or(n: u64, what: String) -> String {
    if n == 0 { "none".to_owned() } else { what }
}

fn backend_checks(t: &Tally, expected: &[String]) -> Vec<Check> {
    let missing: Vec<&str> = expected
        .iter()
        .filter(|b| t.backends.get(*b).copied().unwrap_or(0) == 0)
        .map(String::as_str)
        .collect();
    let strangers: Vec<String> = t
        .backends
        .iter()
        .filter(|(b, n)| **n > 0 && !expected.contains(b))
        .map(|(b, n)| format!("{n} from {b}"))
        .collect();
    vec![
        check(
            "every EXPECTED_BACKENDS answered a success",
            missing.is_empty(),
            if missing.is_empty() {
                format!("{} backends", expected.len())
            } else {
                format!("no success from {}", missing.join(", "))
            },
        ),
        check(
            "no success from any other backend",
            strangers.is_empty(),
            if strangers.is_empty() {
                "none".to_owned()
            } else {
                strangers.join(", ")
            },
        ),
    ]
}

#[cfg(test)]
mod tests;
