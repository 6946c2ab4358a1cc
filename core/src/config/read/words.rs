//! The words of the reader's errors: a value as the message shows it, a list of names, and the
//! "did you mean" suggestion (the known name within edit distance 2).

use std::fmt::Write as _;

use crate::config::tree::{Node, Value};

/// The value as the error message shows it: short, quoted when a string.
pub(super) fn describe(node: &Node) -> String {
    match &node.value {
        Value::Str(s) => {
            let short: String = s.chars().take(40).collect();
            let more = if short.len() < s.len() { "…" } else { "" };
            format!("the string {short:?}{more}")
        }
        Value::Int(i) => format!("the integer {i}"),
        Value::Float(f) => format!("the number {f}"),
        Value::Bool(b) => format!("the boolean {b}"),
        other => other.kind().to_owned(),
    }
}

pub(super) fn quoted(names: &[&str]) -> String {
    let mut out = String::new();
    for (i, n) in names.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "`{n}`");
    }
    out
}

/// The known name within edit distance 2 of `s`, if exactly one is nearest.
pub(super) fn closest<'a>(s: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (levenshtein(s, k), *k))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(row[j]).min(cur)
            };
            prev = cur;
        }
    }
    row[b.len()]
}
