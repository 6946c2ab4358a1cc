//! The operating bounds: each range's edges accepted, the values just outside rejected with the
//! field path and the range, the table's texts read back exactly, and the documentation's row of
//! each field stating the same range.
// One test reads docs/configuration.md from disk, which core itself never does.
#![allow(clippy::disallowed_methods)]

use super::*;
use crate::config::{ConfigErrors, MapSecrets, load, parse_duration};

/// A minimal valid file with `value` written at `path`.
fn yaml(path: &str, value: &str) -> String {
    let parts: Vec<&str> = path.split('.').collect();
    let mut out = String::new();
    for (depth, key) in parts.iter().enumerate() {
        out.push_str(&"  ".repeat(depth));
        out.push_str(key);
        out.push(':');
        if depth + 1 == parts.len() {
            out.push(' ');
            out.push_str(value);
        }
        out.push('\n');
    }
    let backends = "backends:\n  - id: a\n    url: http://127.0.0.1:1\n";
    if path.starts_with("backends") {
        out
    } else {
        out + backends
    }
}

fn errors(path: &str, value: &str) -> Result<(), ConfigErrors> {
    load(&yaml(path, value), &MapSecrets::new()).map(drop)
}

/// The error at `path`, if the value written there is rejected by its bound.
fn bound_error(path: &str, value: &str) -> Option<String> {
    errors(path, value).err().and_then(|e| {
        e.errors()
            .iter()
            .find(|e| e.path == path && e.message.starts_with("must be within"))
            .map(|e| e.message.clone())
    })
}

#[track_caller]
fn rejected(path: &str, value: &str, range: &str) {
    let message = bound_error(path, value)
        .unwrap_or_else(|| panic!("{path}: {value} accepted, want the range {range}"));
    assert!(
        message.contains(range) && message.contains("got "),
        "{path}: {message}"
    );
}

#[track_caller]
fn accepted(path: &str, value: &str) {
    assert_eq!(bound_error(path, value), None, "{path}: {value} rejected");
}

fn nanos(d: Duration) -> String {
    format!("{}ns", d.as_nanos())
}

#[test]
fn every_duration_range_is_enforced_at_its_edges() {
    for b in SPANS {
        let text = b.text();
        assert_eq!(parse_duration(b.min.1), Ok(b.min.0), "{}", b.path);
        assert_eq!(parse_duration(b.max.1), Ok(b.max.0), "{}", b.path);
        accepted(b.path, b.min.1);
        accepted(b.path, b.max.1);
        rejected(b.path, &nanos(b.max.0 + Duration::from_nanos(1)), &text);
        if !b.min.0.is_zero() {
            rejected(b.path, &nanos(b.min.0 - Duration::from_nanos(1)), &text);
        }
        if b.zero || b.min.0.is_zero() {
            accepted(b.path, "0s");
        } else {
            rejected(b.path, "0s", &text);
        }
    }
}

#[test]
fn every_count_and_rate_range_is_enforced_at_its_edges() {
    for b in COUNTS {
        accepted(b.path, &b.min.to_string());
        accepted(b.path, &b.max.to_string());
        rejected(b.path, &(b.max + 1).to_string(), &b.text());
        if b.min > 0 {
            rejected(b.path, &(b.min - 1).to_string(), &b.text());
        }
    }
    for b in RATES {
        accepted(b.path, &b.min.to_string());
        accepted(b.path, &b.max.to_string());
        rejected(b.path, &(b.max * 2.0).to_string(), &b.text());
        rejected(b.path, &(b.min / 2.0).to_string(), &b.text());
    }
}

/// The case that made the bounds: `health_check.interval: 1ns` is a named error with the range,
/// and one error only (the constructor's own checks do not repeat it).
#[test]
fn a_one_nanosecond_probe_interval_is_one_named_error() {
    let e = errors("health_check.interval", "1ns").expect_err("1ns rejected");
    assert_eq!(e.errors().len(), 1, "{e}");
    let err = &e.errors()[0];
    assert_eq!(err.path, "health_check.interval");
    assert_eq!(err.message, "must be within 100ms..=1h, got 1ns");
    assert!(err.pos.is_some(), "placed at its line: {err}");
    let e = errors("health_check.interval", "0s").expect_err("0s rejected");
    assert_eq!(e.errors().len(), 1, "{e}");
}

#[test]
fn every_bounded_path_exists_and_is_read() {
    let cfg = Config::default();
    for b in SPANS {
        assert!(duration(&cfg, b.path).is_some(), "{}", b.path);
    }
    for b in COUNTS {
        assert!(count(&cfg, b.path).is_some(), "{}", b.path);
    }
    for b in RATES {
        assert!(rate(&cfg, b.path).is_some(), "{}", b.path);
    }
    let known = crate::config::schema_paths();
    let paths = SPANS
        .iter()
        .map(|b| b.path)
        .chain(COUNTS.iter().map(|b| b.path))
        .chain(RATES.iter().map(|b| b.path));
    for p in paths {
        assert!(known.contains(p), "{p} is not a schema field");
    }
}

/// docs/configuration.md states each field's range on the field's own row.
#[test]
fn the_documentation_states_every_range() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md"),
    )
    .expect("docs/configuration.md");
    let row = |path: &str| {
        doc.lines()
            .find(|l| l.starts_with(&format!("| `{path}` |")))
            .unwrap_or_else(|| panic!("no row for {path}"))
            .to_owned()
    };
    let ranges = SPANS
        .iter()
        .map(|b| (b.path, b.text()))
        .chain(COUNTS.iter().map(|b| (b.path, b.text())))
        .chain(RATES.iter().map(|b| (b.path, b.text())));
    for (path, text) in ranges {
        let line = row(path);
        assert!(
            line.contains(&text),
            "{path}: the row does not say {text}:\n{line}"
        );
    }
}
