//! The side-by-side table: one row per wrk round in, medians and ratios out.
//!
//! The bench script runs the proxies in interleaved rounds (weir, nginx, HAProxy, then the next
//! round in a rotated order) so that slow drift of the shared machine (other builds, thermal
//! state) falls on every proxy alike. Each round is one [`Row`]; the table gives, per worker
//! count and connection count, the median of each proxy's rounds, and the ratios weir/nginx and
//! weir/HAProxy as the median of the per-round ratios (each round's pair ran minutes apart at
//! most, so pairing by round cancels more drift than dividing the medians would).

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

use crate::wrk::Sample;

/// The proxy every ratio is about.
pub const SUBJECT: &str = "weir";
/// The proxies weir is compared with, in table order.
pub const BASELINES: [&str; 2] = ["nginx", "haproxy"];
/// The same proxy on another runtime: listed right after weir, not a baseline.
pub const SIBLINGS: [&str; 1] = ["weir-smol"];

/// One wrk round of one proxy.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// `weir`, `weir-smol`, `nginx` or `haproxy`.
    pub proxy: String,
    /// Worker processes / threads the proxy ran with.
    pub workers: u32,
    /// wrk connections.
    pub connections: u32,
    /// Round number (1-based) within this workers × connections cell.
    pub round: u32,
    /// What wrk measured.
    pub sample: Sample,
    /// CPU time (user + system) the proxy's process tree spent per completed request, in
    /// microseconds, when the bench script measured it.
    pub cpu_us_per_request: Option<f64>,
}

/// A results line that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowError {
    /// 1-based line number.
    pub line: usize,
    /// What was wrong.
    pub reason: String,
}

impl fmt::Display for RowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "results line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for RowError {}

impl Row {
    /// The tab-separated results line (the format [`parse_rows`] reads).
    pub fn to_tsv(&self) -> String {
        let s = &self.sample;
        let cpu = self
            .cpu_us_per_request
            .map_or_else(|| "-".to_owned(), |c| format!("{c:.2}"));
        format!(
            "{}\t{}\t{}\t{}\t{:.2}\t{:.1}\t{:.1}\t{}\t{}\t{}\t{cpu}",
            self.proxy,
            self.workers,
            self.connections,
            self.round,
            s.requests_per_second,
            s.p50_us,
            s.p99_us,
            s.requests,
            s.socket_errors,
            s.non_2xx
        )
    }
}

/// Header line of the results file.
pub const TSV_HEADER: &str = "proxy\tworkers\tconnections\tround\treq_per_s\tp50_us\tp99_us\trequests\tsocket_errors\tnon_2xx\tcpu_us_per_req";

/// Reads a results file (header and `#` lines skipped).
pub fn parse_rows(text: &str) -> Result<Vec<Row>, RowError> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        if line.trim().is_empty() || line.starts_with('#') || line.starts_with("proxy\t") {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        let err = |reason: &str| RowError {
            line: line_no,
            reason: reason.to_owned(),
        };
        if f.len() != 10 && f.len() != 11 {
            return Err(err("expected 10 or 11 tab-separated fields"));
        }
        let int = |s: &str| s.parse::<u64>().map_err(|_| err("bad integer"));
        let num = |s: &str| s.parse::<f64>().map_err(|_| err("bad number"));
        let small = |s: &str| s.parse::<u32>().map_err(|_| err("bad integer"));
        rows.push(Row {
            proxy: f[0].to_owned(),
            workers: small(f[1])?,
            connections: small(f[2])?,
            round: small(f[3])?,
            sample: Sample {
                requests_per_second: num(f[4])?,
                p50_us: num(f[5])?,
                p99_us: num(f[6])?,
                requests: int(f[7])?,
                socket_errors: int(f[8])?,
                non_2xx: int(f[9])?,
            },
            cpu_us_per_request: match f.get(10) {
                None | Some(&"-") => None,
                Some(v) => Some(num(v)?),
            },
        });
    }
    Ok(rows)
}

/// Median of a list (mean of the middle two for an even count); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

/// One proxy's medians in one cell.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyStats {
    /// Proxy name.
    pub proxy: String,
    /// Rounds counted.
    pub rounds: usize,
    /// Median requests per second.
    pub rps: f64,
    /// Lowest and highest requests per second over the rounds.
    pub rps_range: (f64, f64),
    /// Median p50 latency (µs).
    pub p50_us: f64,
    /// Median p99 latency (µs).
    pub p99_us: f64,
    /// Socket errors plus non-2xx responses, summed over the rounds.
    pub errors: u64,
    /// Median proxy CPU time per request (µs), when measured.
    pub cpu_us_per_request: Option<f64>,
}

/// weir against one baseline in one cell: medians of per-round ratios.
#[derive(Debug, Clone, PartialEq)]
pub struct Ratio {
    /// The baseline's name.
    pub baseline: String,
    /// Median of weir rps / baseline rps over rounds where both ran.
    pub rps: f64,
    /// Median of weir p50 / baseline p50.
    pub p50: f64,
    /// Median of weir p99 / baseline p99.
    pub p99: f64,
    /// Median of weir CPU per request / baseline CPU per request, when measured for both.
    pub cpu: Option<f64>,
    /// Rounds paired.
    pub pairs: usize,
}

/// One workers × connections cell of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// Worker count.
    pub workers: u32,
    /// wrk connections.
    pub connections: u32,
    /// Per proxy, weir first, then weir-smol, then the baselines, then anything else by name.
    pub proxies: Vec<ProxyStats>,
    /// weir against each baseline present.
    pub ratios: Vec<Ratio>,
}

fn proxy_order(name: &str) -> (usize, String) {
    let after_subject = SIBLINGS.len() + 1;
    let rank = if name == SUBJECT {
        0
    } else if let Some(p) = SIBLINGS.iter().position(|s| *s == name) {
        p + 1
    } else {
        BASELINES
            .iter()
            .position(|b| *b == name)
            .map_or(after_subject + BASELINES.len(), |p| p + after_subject)
    };
    (rank, name.to_owned())
}

/// Groups rows into cells with medians and paired ratios.
pub fn summarize(rows: &[Row]) -> Vec<Cell> {
    // (workers, connections) -> proxy -> round -> (sample, cpu per request)
    type Rounds = BTreeMap<u32, (Sample, Option<f64>)>;
    let mut cells: BTreeMap<(u32, u32), BTreeMap<String, Rounds>> = BTreeMap::new();
    for r in rows {
        cells
            .entry((r.workers, r.connections))
            .or_default()
            .entry(r.proxy.clone())
            .or_default()
            .insert(r.round, (r.sample, r.cpu_us_per_request));
    }
    let mut out = Vec::new();
    for ((workers, connections), by_proxy) in cells {
        let mut names: Vec<&String> = by_proxy.keys().collect();
        names.sort_by_key(|n| proxy_order(n));
        let proxies = names
            .iter()
            .map(|name| {
                let rounds = &by_proxy[*name];
                let rps: Vec<f64> = rounds
                    .values()
                    .map(|(s, _)| s.requests_per_second)
                    .collect();
                let p50: Vec<f64> = rounds.values().map(|(s, _)| s.p50_us).collect();
                let p99: Vec<f64> = rounds.values().map(|(s, _)| s.p99_us).collect();
                let cpu: Vec<f64> = rounds.values().filter_map(|(_, c)| *c).collect();
                let lo = rps.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = rps.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                ProxyStats {
                    proxy: (*name).clone(),
                    rounds: rounds.len(),
                    rps: median(&rps).unwrap_or(f64::NAN),
                    rps_range: (lo, hi),
                    p50_us: median(&p50).unwrap_or(f64::NAN),
                    p99_us: median(&p99).unwrap_or(f64::NAN),
                    errors: rounds
                        .values()
                        .map(|(s, _)| s.socket_errors + s.non_2xx)
                        .sum(),
                    cpu_us_per_request: median(&cpu),
                }
            })
            .collect();
        let mut ratios = Vec::new();
        if let Some(subject) = by_proxy.get(SUBJECT) {
            for baseline in BASELINES {
                let Some(base) = by_proxy.get(baseline) else {
                    continue;
                };
                let (mut rps, mut p50, mut p99, mut cpu) =
                    (Vec::new(), Vec::new(), Vec::new(), Vec::new());
                for (round, (s, s_cpu)) in subject {
                    if let Some((b, b_cpu)) = base.get(round) {
                        rps.push(s.requests_per_second / b.requests_per_second);
                        p50.push(s.p50_us / b.p50_us);
                        p99.push(s.p99_us / b.p99_us);
                        if let (Some(sc), Some(bc)) = (s_cpu, b_cpu) {
                            cpu.push(sc / bc);
                        }
                    }
                }
                if rps.is_empty() {
                    continue;
                }
                ratios.push(Ratio {
                    baseline: baseline.to_owned(),
                    rps: median(&rps).unwrap_or(f64::NAN),
                    p50: median(&p50).unwrap_or(f64::NAN),
                    p99: median(&p99).unwrap_or(f64::NAN),
                    cpu: median(&cpu),
                    pairs: rps.len(),
                });
            }
        }
        out.push(Cell {
            workers,
            connections,
            proxies,
            ratios,
        });
    }
    out
}

fn fmt_us(us: f64) -> String {
    if !us.is_finite() {
        "-".to_owned()
    } else if us >= 1_000.0 {
        format!("{:.2}ms", us / 1_000.0)
    } else {
        format!("{us:.0}us")
    }
}

/// The goals of the HTTP/1 hot-path work, checked against one cell: req/s ≥ 1.10× nginx at 50
/// connections (≥ 1.0× at more) and ≥ 1.0× HAProxy; p99 ≤ nginx's; CPU per request ≤ nginx's and
/// ≤ 0.8× HAProxy's (when measured for both). Informational: benchmarks report, they never assert.
pub fn goals(cell: &Cell) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for r in &cell.ratios {
        let nginx = r.baseline == "nginx";
        let need = if nginx && cell.connections <= 50 {
            1.10
        } else {
            1.0
        };
        out.push((
            format!(
                "req/s weir/{} = {:.2} (goal >= {need:.2})",
                r.baseline, r.rps
            ),
            r.rps >= need,
        ));
        if nginx {
            out.push((
                format!("p99 weir/nginx = {:.2} (goal <= 1.00)", r.p99),
                r.p99 <= 1.0,
            ));
        }
        if let Some(cpu) = r.cpu {
            let most = if nginx { 1.0 } else { 0.8 };
            out.push((
                format!("CPU/req weir/{} = {cpu:.2} (goal <= {most:.2})", r.baseline),
                cpu <= most,
            ));
        }
    }
    out
}

/// Renders the table as Markdown-ish text (readable in a terminal, pastable into docs).
pub fn render(cells: &[Cell]) -> String {
    let mut s = String::new();
    for cell in cells {
        let _ = writeln!(
            s,
            "\n### {} worker{}, {} connections\n",
            cell.workers,
            if cell.workers == 1 { "" } else { "s" },
            cell.connections
        );
        let _ = writeln!(
            s,
            "| proxy | req/s (median) | req/s min..max | p50 | p99 | proxy CPU/req | rounds | errors |"
        );
        let _ = writeln!(
            s,
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        );
        for p in &cell.proxies {
            let cpu = p
                .cpu_us_per_request
                .map_or_else(|| "-".to_owned(), |c| format!("{c:.1}us"));
            let _ = writeln!(
                s,
                "| {} | {:.0} | {:.0}..{:.0} | {} | {} | {cpu} | {} | {} |",
                p.proxy,
                p.rps,
                p.rps_range.0,
                p.rps_range.1,
                fmt_us(p.p50_us),
                fmt_us(p.p99_us),
                p.rounds,
                p.errors
            );
        }
        if !cell.ratios.is_empty() {
            let _ = writeln!(s);
            for r in &cell.ratios {
                let cpu = r
                    .cpu
                    .map_or_else(String::new, |c| format!(", CPU/req {c:.2}x"));
                let _ = writeln!(
                    s,
                    "weir/{}: req/s {:.2}x, p50 {:.2}x, p99 {:.2}x{cpu} (median of {} paired rounds)",
                    r.baseline, r.rps, r.p50, r.p99, r.pairs
                );
            }
            for (what, ok) in goals(cell) {
                let _ = writeln!(s, "{} {what}", if ok { "[met]   " } else { "[missed]" });
            }
        }
    }
    s
}

#[cfg(test)]
mod tests;
