//! A small, strict parser of the OpenMetrics text exposition (the format `/metrics` serves),
//! for tests: it rejects anything it does not understand rather than skipping it.
//!
//! Checked: `# HELP`, `# TYPE`, `# UNIT` before a family's samples and only once each; metric
//! and label name syntax; label value escapes; sample names allowed for the family's type
//! (`_total` for counters, `_bucket`/`_sum`/`_count` for histograms, the bare name for gauges);
//! no duplicate series; histogram buckets cumulative and ending with `le="+Inf"` equal to
//! `_count`; `# EOF` as the last line and nowhere else.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};

/// A series: its sample name and its labels (sorted).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Series {
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

/// One family as declared.
#[derive(Debug, Clone, Default)]
pub struct Family {
    pub kind: String,
    pub help: Option<String>,
    pub unit: Option<String>,
}

/// A parsed exposition.
#[derive(Debug, Default)]
pub struct Exposition {
    pub families: HashMap<String, Family>,
    pub samples: BTreeMap<Series, f64>,
}

impl Exposition {
    /// The value of sample `name` with exactly `labels`.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let key = Series {
            name: name.to_string(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        self.samples.get(&key).copied()
    }

    /// [`get`](Self::get), panicking with the exposition's series of that name when absent.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels).unwrap_or_else(|| {
            let near: Vec<_> = self
                .samples
                .keys()
                .filter(|s| s.name == name)
                .map(|s| format!("{:?}", s.labels))
                .collect();
            panic!("no sample {name}{labels:?}; series of that name: {near:?}")
        })
    }

    /// The sum over every series of sample `name` whose labels include `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|(s, _)| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, v)| *v)
            .sum()
    }

    /// Every series of sample `name`.
    pub fn series(&self, name: &str) -> Vec<(&Series, f64)> {
        self.samples
            .iter()
            .filter(|(s, _)| s.name == name)
            .map(|(s, v)| (s, *v))
            .collect()
    }
}

fn is_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn is_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => s
            .parse::<f64>()
            .map_err(|e| format!("bad value {s:?}: {e}")),
    }
}

/// Parse `{a="x",b="y"}` at the start of `s`; returns the labels and the rest.
fn parse_labels(s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    let mut rest = s.strip_prefix('{').ok_or("labels must start with {")?;
    if let Some(r) = rest.strip_prefix('}') {
        return Ok((labels, r));
    }
    loop {
        let eq = rest.find('=').ok_or("label without =")?;
        let name = &rest[..eq];
        if !is_label_name(name) {
            return Err(format!("bad label name {name:?}"));
        }
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value must be quoted")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("unterminated label value".into()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("bad escape {other:?}")),
                },
                Some((_, c)) => value.push(c),
            }
        };
        if labels.insert(name.to_string(), value).is_some() {
            return Err(format!("duplicate label {name}"));
        }
        rest = &rest[end + 1..];
        if let Some(r) = rest.strip_prefix('}') {
            return Ok((labels, r));
        }
        rest = rest
            .strip_prefix(',')
            .ok_or("labels must be separated by ,")?;
    }
}

/// The family a sample name belongs to, given the declared families.
fn family_of<'a>(name: &'a str, families: &HashMap<String, Family>) -> Result<&'a str, String> {
    for (suffix, kinds) in [
        ("_total", &["counter"][..]),
        ("_created", &["counter", "histogram"][..]),
        ("_bucket", &["histogram"][..]),
        ("_sum", &["histogram"][..]),
        ("_count", &["histogram"][..]),
        ("", &["gauge", "unknown", "info"][..]),
    ] {
        if let Some(base) = name.strip_suffix(suffix)
            && let Some(f) = families.get(base)
            && kinds.contains(&f.kind.as_str())
        {
            return Ok(base);
        }
    }
    Err(format!(
        "sample {name} belongs to no declared family of a matching type"
    ))
}

/// Parse `text` strictly.
pub fn parse(text: &str) -> Result<Exposition, String> {
    let mut out = Exposition::default();
    let mut seen_eof = false;
    let mut current: Option<String> = None;
    let mut finished: Vec<String> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let at = |e: String| format!("line {}: {e}: {line:?}", n + 1);
        if seen_eof {
            return Err(at("content after # EOF".into()));
        }
        if line == "# EOF" {
            seen_eof = true;
            continue;
        }
        if let Some(meta) = line.strip_prefix("# ") {
            let mut parts = meta.splitn(3, ' ');
            let (Some(kw), Some(name)) = (parts.next(), parts.next()) else {
                return Err(at("short metadata line".into()));
            };
            let arg = parts.next().unwrap_or("").to_string();
            if !is_metric_name(name) {
                return Err(at(format!("bad family name {name:?}")));
            }
            if current.as_deref() != Some(name) {
                if finished.iter().any(|f| f == name) {
                    return Err(at(format!("family {name} is not contiguous")));
                }
                if let Some(c) = current.take() {
                    finished.push(c);
                }
                current = Some(name.to_string());
            }
            let f = out.families.entry(name.to_string()).or_default();
            match kw {
                "HELP" if f.help.is_none() => f.help = Some(arg),
                "TYPE" if f.kind.is_empty() => {
                    if ![
                        "counter",
                        "gauge",
                        "histogram",
                        "summary",
                        "info",
                        "unknown",
                        "stateset",
                        "gaugehistogram",
                    ]
                    .contains(&arg.as_str())
                    {
                        return Err(at(format!("unknown type {arg:?}")));
                    }
                    f.kind = arg;
                }
                "UNIT" if f.unit.is_none() => {
                    if !name.ends_with(&format!("_{arg}")) {
                        return Err(at("family name must end with its unit".into()));
                    }
                    f.unit = Some(arg);
                }
                _ => return Err(at(format!("unexpected or repeated # {kw}"))),
            }
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            return Err(at("not a sample, metadata or # EOF".into()));
        }
        let name_end = line
            .find(['{', ' '])
            .ok_or_else(|| at("sample without value".into()))?;
        let name = &line[..name_end];
        if !is_metric_name(name) {
            return Err(at(format!("bad metric name {name:?}")));
        }
        let (labels, rest) = if line[name_end..].starts_with('{') {
            parse_labels(&line[name_end..]).map_err(at)?
        } else {
            (BTreeMap::new(), &line[name_end..])
        };
        let rest = rest
            .strip_prefix(' ')
            .ok_or_else(|| at("value must follow a space".into()))?;
        let mut fields = rest.split(' ');
        let value = parse_value(fields.next().unwrap_or("")).map_err(at)?;
        if let Some(ts) = fields.next() {
            parse_value(ts).map_err(at)?;
        }
        if fields.next().is_some() {
            return Err(at("trailing fields".into()));
        }
        let family = family_of(name, &out.families).map_err(at)?;
        if current.as_deref() != Some(family) {
            return Err(at(format!("sample of {family} outside its family's block")));
        }
        let series = Series {
            name: name.to_string(),
            labels,
        };
        if out.samples.insert(series, value).is_some() {
            return Err(at("duplicate series".into()));
        }
    }
    if !seen_eof {
        return Err("no # EOF line".into());
    }
    check_histograms(&out)?;
    Ok(out)
}

fn check_histograms(e: &Exposition) -> Result<(), String> {
    for (name, f) in &e.families {
        if f.kind != "histogram" {
            continue;
        }
        // Group buckets by their labels without `le`.
        let mut groups: BTreeMap<BTreeMap<String, String>, Vec<(f64, f64)>> = BTreeMap::new();
        for (s, v) in e.series(&format!("{name}_bucket")) {
            let mut labels = s.labels.clone();
            let le = labels
                .remove("le")
                .ok_or_else(|| format!("{name}_bucket without le"))?;
            groups
                .entry(labels)
                .or_default()
                .push((parse_value(&le)?, v));
        }
        for (labels, mut buckets) in groups {
            buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            if buckets.windows(2).any(|w| w[1].1 < w[0].1) {
                return Err(format!("{name}{labels:?}: buckets not cumulative"));
            }
            let last = buckets.last().ok_or("no buckets")?;
            if last.0 != f64::INFINITY {
                return Err(format!("{name}{labels:?}: no +Inf bucket"));
            }
            let key = Series {
                name: format!("{name}_count"),
                labels: labels.clone(),
            };
            let count = e
                .samples
                .get(&key)
                .ok_or_else(|| format!("{name}{labels:?}: no _count"))?;
            if *count != last.1 {
                return Err(format!(
                    "{name}{labels:?}: _count {count} != +Inf bucket {}",
                    last.1
                ));
            }
            let sum = Series {
                name: format!("{name}_sum"),
                labels,
            };
            if !e.samples.contains_key(&sum) {
                return Err(format!("{name}: no _sum"));
            }
        }
    }
    Ok(())
}

#[test]
fn parser_rejects_what_it_should() {
    let good = "# HELP a_x help\n# TYPE a_x counter\na_x_total{k=\"v\\\"q\"} 1\n# EOF\n";
    let e = parse(good).expect("good");
    assert_eq!(e.value("a_x_total", &[("k", "v\"q")]), 1.0);
    for bad in [
        "# TYPE a counter\na_total 1\n",                   // no EOF
        "a_total 1\n# EOF\n",                              // undeclared
        "# TYPE a gauge\na_total 1\n# EOF\n",              // wrong suffix for type
        "# TYPE a counter\na_total{k=v} 1\n# EOF\n",       // unquoted label
        "# TYPE a counter\na_total 1\na_total 2\n# EOF\n", // duplicate
        "# TYPE a counter\na_total one\n# EOF\n",          // bad value
        "# TYPE a counter\na_total 1\n# EOF\nx\n",         // after EOF
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\nh_sum 0\n# EOF\n",
    ] {
        assert!(parse(bad).is_err(), "accepted {bad:?}");
    }
}
