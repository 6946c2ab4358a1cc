//! Parsing `wrk --latency` output into one [`Sample`].
//!
//! wrk prints human units (`635.91us`, `1.20ms`, `2.00s`, `56.20k`); the benchmark needs numbers,
//! so this module turns the summary lines it cares about (the latency distribution, `Requests/sec`,
//! socket errors and non-2xx responses) into plain values. Latencies are kept in microseconds.

use std::fmt;

/// One wrk run, reduced to what the side-by-side table shows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// `Requests/sec` as wrk printed it.
    pub requests_per_second: f64,
    /// Median latency in microseconds (`--latency` distribution, 50%).
    pub p50_us: f64,
    /// 99th percentile latency in microseconds.
    pub p99_us: f64,
    /// Total requests completed.
    pub requests: u64,
    /// Socket errors (connect + read + write + timeout).
    pub socket_errors: u64,
    /// Responses that were not 2xx or 3xx.
    pub non_2xx: u64,
}

/// Why a wrk output could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// a line the sample needs is missing (wrk failed, or ran without `--latency`)
    Missing(&'static str),
    /// a number or unit could not be read
    BadValue(String),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing(what) => write!(f, "wrk output has no {what} line"),
            Self::BadValue(v) => write!(f, "cannot read wrk value {v:?}"),
        }
    }
}

impl std::error::Error for ParseError {}

/// Reads a wrk duration (`250.00us`, `1.20ms`, `2.00s`, `1.50m`) as microseconds.
pub fn duration_us(text: &str) -> Result<f64, ParseError> {
    let bad = || ParseError::BadValue(text.to_owned());
    let split = text
        .find(|c: char| c.is_ascii_alphabetic())
        .ok_or_else(bad)?;
    let (num, unit) = text.split_at(split);
    let value: f64 = num.parse().map_err(|_| bad())?;
    let scale = match unit {
        "ns" => 0.001,
        "us" => 1.0,
        "ms" => 1_000.0,
        "s" => 1_000_000.0,
        "m" => 60_000_000.0,
        "h" => 3_600_000_000.0,
        _ => return Err(bad()),
    };
    Ok(value * scale)
}

/// Parses the whole output of `wrk --latency ...`.
pub fn parse(output: &str) -> Result<Sample, ParseError> {
    let mut rps = None;
    let mut p50 = None;
    let mut p99 = None;
    let mut requests = None;
    let mut socket_errors = 0;
    let mut non_2xx = 0;
    let mut in_distribution = false;
    for line in output.lines() {
        let line = line.trim();
        if line.starts_with("Latency Distribution") {
            in_distribution = true;
            continue;
        }
        if in_distribution {
            let mut parts = line.split_whitespace();
            match (parts.next(), parts.next()) {
                (Some("50%"), Some(v)) => p50 = Some(duration_us(v)?),
                (Some("99%"), Some(v)) => p99 = Some(duration_us(v)?),
                (Some(p), Some(_)) if p.ends_with('%') => {}
                _ => in_distribution = false,
            }
            if in_distribution {
                continue;
            }
        }
        if let Some(v) = line.strip_prefix("Requests/sec:") {
            let v = v.trim();
            rps = Some(
                v.parse::<f64>()
                    .map_err(|_| ParseError::BadValue(v.to_owned()))?,
            );
        } else if let Some((count, rest)) = line.split_once(" requests in ") {
            let _ = rest;
            requests = Some(parse_u64(count)?);
        } else if let Some(list) = line.strip_prefix("Socket errors:") {
            for item in list.split(',') {
                let v = item.split_whitespace().last().unwrap_or("");
                socket_errors += parse_u64(v)?;
            }
        } else if let Some(v) = line.strip_prefix("Non-2xx or 3xx responses:") {
            non_2xx = parse_u64(v.trim())?;
        }
    }
    Ok(Sample {
        requests_per_second: rps.ok_or(ParseError::Missing("Requests/sec"))?,
        p50_us: p50.ok_or(ParseError::Missing("50% latency"))?,
        p99_us: p99.ok_or(ParseError::Missing("99% latency"))?,
        requests: requests.ok_or(ParseError::Missing("requests in"))?,
        socket_errors,
        non_2xx,
    })
}

fn parse_u64(text: &str) -> Result<u64, ParseError> {
    text.trim()
        .parse()
        .map_err(|_| ParseError::BadValue(text.to_owned()))
}

#[cfg(test)]
mod tests;
