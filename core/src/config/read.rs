//! Phase 2: reading the tree against the schema, one field at a time, collecting every error.
//!
//! A [`Reader`] hands out typed values (`bool`, integers in a range, durations, strings, lists)
//! and never stops: a field it rejects records a [`ConfigError`] with the field's path and
//! position and yields the field's default, so the rest of the file is still read and checked.
//! Each mapping is read through an [`Obj`], which remembers the keys the schema asked for;
//! [`Obj::finish`] reports every key nobody asked for as an unknown field (C-CONF-1). The reader
//! also records, per field, the position (for errors found later, in validation), the final
//! value as text (for [`diff`](super::diff)) and the schema path (for the documentation test).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use core::time::Duration;

use super::ConfigError;
use super::duration::parse_duration;
use super::tree::{Node, Pos, Value};
use words::{closest, describe, quoted};

mod words;

/// A field's path twice: concrete (`pools.api.backends[2].url`, for errors and diffs) and schema
/// (`pools.<name>.backends[].url`, for the documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Path {
    pub concrete: String,
    pub schema: String,
}

impl Path {
    pub fn root() -> Path {
        Path {
            concrete: String::new(),
            schema: String::new(),
        }
    }

    fn join(base: &str, key: &str) -> String {
        if base.is_empty() {
            key.to_owned()
        } else {
            format!("{base}.{key}")
        }
    }

    /// A field of a mapping.
    pub fn key(&self, key: &str) -> Path {
        Path {
            concrete: Path::join(&self.concrete, key),
            schema: Path::join(&self.schema, key),
        }
    }

    /// An item of a list.
    pub fn index(&self, i: usize) -> Path {
        Path {
            concrete: format!("{}[{i}]", self.concrete),
            schema: format!("{}[]", self.schema),
        }
    }

    /// An entry of a mapping keyed by a user-chosen name (`pools.<name>`).
    pub fn name(&self, name: &str) -> Path {
        Path {
            concrete: Path::join(&self.concrete, name),
            schema: Path::join(&self.schema, "<name>"),
        }
    }
}

/// A field as the schema asked for it: its node (absent when not written) and its path.
#[derive(Debug, Clone)]
pub(crate) struct Field<'t> {
    pub node: Option<&'t Node>,
    pub path: Path,
    /// Where the value (or else its key) was written.
    pub pos: Option<Pos>,
}

impl Field<'_> {
    /// Whether the field was written (and is not an explicit null).
    pub fn is_set(&self) -> bool {
        self.node.is_some_and(|n| n.value != Value::Null)
    }
}

/// Collects errors, positions, final values and schema paths while the schema is read.
#[derive(Debug, Default)]
pub(crate) struct Reader {
    pub errors: Vec<ConfigError>,
    /// Concrete path → where its value (or, for a missing field, its parent) was written.
    pub positions: BTreeMap<String, Pos>,
    /// Concrete path → the value in force, as text (defaults included).
    pub values: BTreeMap<String, String>,
    /// Every schema path the schema asked for.
    pub schema_paths: BTreeSet<String>,
}

/// A mapping being read: the keys asked for so far, so that the rest can be reported.
#[derive(Debug)]
pub(crate) struct Obj<'t> {
    entries: &'t [(Node, Node)],
    path: Path,
    known: Vec<&'static str>,
}

impl Reader {
    /// Record an error at `path`, placed at `pos` or else at the nearest written ancestor.
    pub fn error(&mut self, path: &str, pos: Option<Pos>, message: impl Into<String>) {
        let pos = pos.or_else(|| self.position_of(path));
        self.errors.push(ConfigError {
            path: path.to_owned(),
            pos,
            message: message.into(),
        });
    }

    /// Where `path` (or its nearest written ancestor) was written.
    pub fn position_of(&self, path: &str) -> Option<Pos> {
        let mut p = path;
        loop {
            if let Some(pos) = self.positions.get(p) {
                return Some(*pos);
            }
            let cut = p.rfind(['.', '['])?;
            p = &p[..cut];
        }
    }

    /// Note that the schema asked for `field`: its schema path and its position.
    fn enter(&mut self, field: &Field<'_>) {
        self.schema_paths.insert(field.path.schema.clone());
        if let Some(pos) = field.pos {
            self.positions.insert(field.path.concrete.clone(), pos);
        }
    }

    fn record(&mut self, path: &Path, text: String) {
        self.values.insert(path.concrete.clone(), text);
    }

    /// Open a mapping. Null and absent read as an empty mapping (all defaults).
    pub fn obj<'t>(&mut self, field: &Field<'t>) -> Obj<'t> {
        self.enter(field);
        let entries: &'t [(Node, Node)] = match field.node {
            Some(Node {
                value: Value::Map(entries),
                ..
            }) => entries,
            Some(Node {
                value: Value::Null, ..
            })
            | None => &[],
            Some(other) => {
                self.error(
                    &field.path.concrete,
                    other.pos,
                    format!("expected a mapping, found {}", other.value.kind()),
                );
                &[]
            }
        };
        Obj {
            entries,
            path: field.path.clone(),
            known: Vec::new(),
        }
    }

    /// The items of a list field. Null and absent read as an empty list.
    pub fn list<'t>(&mut self, field: &Field<'t>) -> Vec<Field<'t>> {
        self.enter(field);
        match field.node {
            Some(Node {
                value: Value::Seq(items),
                ..
            }) => items
                .iter()
                .enumerate()
                .map(|(i, node)| {
                    let item = Field {
                        node: Some(node),
                        path: field.path.index(i),
                        pos: node.pos,
                    };
                    self.enter(&item);
                    item
                })
                .collect(),
            Some(Node {
                value: Value::Null, ..
            })
            | None => Vec::new(),
            Some(other) => {
                self.error(
                    &field.path.concrete,
                    other.pos,
                    format!("expected a list, found {}", other.value.kind()),
                );
                Vec::new()
            }
        }
    }

    /// The entries of a mapping keyed by names the user chooses (`pools`), in document order.
    pub fn named<'t>(&mut self, field: &Field<'t>) -> Vec<(String, Field<'t>)> {
        self.enter(field);
        let entries: &'t [(Node, Node)] = match field.node {
            Some(Node {
                value: Value::Map(entries),
                ..
            }) => entries,
            Some(Node {
                value: Value::Null, ..
            })
            | None => return Vec::new(),
            Some(other) => {
                self.error(
                    &field.path.concrete,
                    other.pos,
                    format!("expected a mapping of names, found {}", other.value.kind()),
                );
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for (key, value) in entries {
            let Value::Str(name) = &key.value else {
                self.error(
                    &field.path.concrete,
                    key.pos,
                    format!("names must be strings, found {}", key.value.kind()),
                );
                continue;
            };
            let entry = Field {
                node: Some(value),
                path: field.path.name(name),
                pos: value.pos.or(key.pos),
            };
            self.enter(&entry);
            out.push((name.clone(), entry));
        }
        out
    }

    fn mismatch(&mut self, field: &Field<'_>, node: &Node, expected: &str) {
        self.error(
            &field.path.concrete,
            node.pos,
            format!("expected {expected}, found {}", describe(node)),
        );
    }

    /// A boolean: exactly `true` or `false` (YAML 1.1 `yes`/`on` are strings here).
    pub fn bool(&mut self, field: &Field<'_>, default: bool) -> bool {
        self.enter(field);
        let v = match field.node {
            None => default,
            Some(Node {
                value: Value::Bool(b),
                ..
            }) => *b,
            Some(node) => {
                self.mismatch(field, node, "true or false");
                default
            }
        };
        self.record(&field.path, v.to_string());
        v
    }

    /// An integer within `min..=max`.
    pub fn int(&mut self, field: &Field<'_>, default: i128, min: i128, max: i128) -> i128 {
        self.enter(field);
        let v = match field.node {
            None => default,
            Some(node) => self.int_node(field, node, min, max).unwrap_or(default),
        };
        self.record(&field.path, v.to_string());
        v
    }

    fn int_node(&mut self, field: &Field<'_>, node: &Node, min: i128, max: i128) -> Option<i128> {
        match &node.value {
            Value::Int(i) if (min..=max).contains(i) => Some(*i),
            Value::Int(i) => {
                self.error(
                    &field.path.concrete,
                    node.pos,
                    format!("must be within {min}..={max}, got {i}"),
                );
                None
            }
            _ => {
                self.mismatch(field, node, "an integer");
                None
            }
        }
    }

    pub fn u32(&mut self, field: &Field<'_>, default: u32, min: u32) -> u32 {
        // In range by construction.
        self.int(
            field,
            i128::from(default),
            i128::from(min),
            i128::from(u32::MAX),
        ) as u32
    }

    pub fn u64(&mut self, field: &Field<'_>, default: u64, min: u64) -> u64 {
        // In range by construction.
        self.int(
            field,
            i128::from(default),
            i128::from(min),
            i128::from(u64::MAX),
        ) as u64
    }

    /// An optional integer (`None` when absent or null).
    pub fn opt_u32(&mut self, field: &Field<'_>) -> Option<u32> {
        self.enter(field);
        let v = match field.node {
            None
            | Some(Node {
                value: Value::Null, ..
            }) => None,
            Some(node) => self
                .int_node(field, node, 0, i128::from(u32::MAX))
                // In range by construction.
                .map(|i| i as u32),
        };
        self.record(
            &field.path,
            v.map_or_else(|| "none".to_owned(), |v| v.to_string()),
        );
        v
    }

    /// A finite number (integers accepted).
    pub fn f64(&mut self, field: &Field<'_>, default: f64) -> f64 {
        self.enter(field);
        let v = match field.node {
            None => default,
            Some(Node {
                value: Value::Float(f),
                ..
            }) if f.is_finite() => *f,
            // Config integers are small; the conversion is exact below 2^53.
            Some(Node {
                value: Value::Int(i),
                ..
            }) => *i as f64,
            Some(node) => {
                self.mismatch(field, node, "a number");
                default
            }
        };
        self.record(&field.path, v.to_string());
        v
    }

    /// A string.
    pub fn string(&mut self, field: &Field<'_>, default: &str) -> String {
        self.opt_string(field).unwrap_or_else(|| {
            // Record the default too, so a file that writes it and one that omits it compare equal.
            self.record(&field.path, default.to_owned());
            default.to_owned()
        })
    }

    /// An optional string (`None` when absent or null).
    pub fn opt_string(&mut self, field: &Field<'_>) -> Option<String> {
        self.enter(field);
        let v = match field.node {
            None
            | Some(Node {
                value: Value::Null, ..
            }) => None,
            Some(Node {
                value: Value::Str(s),
                ..
            }) => Some(s.clone()),
            Some(node) => {
                self.mismatch(field, node, "a string");
                None
            }
        };
        if let Some(s) = &v {
            self.record(&field.path, s.clone());
        }
        v
    }

    /// A required string: absent is an error.
    pub fn required_string(&mut self, field: &Field<'_>) -> String {
        if !field.is_set() {
            self.enter(field);
            self.error(&field.path.concrete, None, "required field is missing");
            return String::new();
        }
        self.opt_string(field).unwrap_or_default()
    }

    /// A TCP port written as a string (`"8080"`, as the reference writes it) or a number.
    pub fn port(&mut self, field: &Field<'_>, default: Option<u16>) -> Option<u16> {
        self.enter(field);
        let v = match field.node {
            None
            | Some(Node {
                value: Value::Null, ..
            }) => default,
            Some(node) => {
                let parsed = match &node.value {
                    Value::Int(i) => u16::try_from(*i).ok(),
                    Value::Str(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
                        s.parse::<u16>().ok()
                    }
                    _ => None,
                };
                match parsed.filter(|p| *p >= 1) {
                    Some(p) => Some(p),
                    None => {
                        self.error(
                            &field.path.concrete,
                            node.pos,
                            format!("expected a port 1..=65535, found {}", describe(node)),
                        );
                        default
                    }
                }
            }
        };
        self.record(
            &field.path,
            v.map_or_else(|| "none".to_owned(), |p| p.to_string()),
        );
        v
    }

    /// A duration (`50ms`, `5s`, `1m30s`; see [`parse_duration`]).
    pub fn duration(&mut self, field: &Field<'_>, default: Duration) -> Duration {
        self.enter(field);
        let v = match field.node {
            None => default,
            Some(node) => match &node.value {
                Value::Str(s) => match parse_duration(s) {
                    Ok(d) => d,
                    Err(msg) => {
                        self.error(&field.path.concrete, node.pos, msg);
                        default
                    }
                },
                Value::Int(0) => Duration::ZERO,
                Value::Int(i) => {
                    self.error(
                        &field.path.concrete,
                        node.pos,
                        format!("a duration needs a unit: write {i}s or {i}ms, not {i}"),
                    );
                    default
                }
                _ => {
                    self.mismatch(field, node, "a duration such as 50ms, 5s or 1m");
                    default
                }
            },
        };
        self.record(&field.path, format!("{v:?}"));
        v
    }

    /// A list of strings.
    pub fn strings(&mut self, field: &Field<'_>, default: &[&str]) -> Vec<String> {
        if field.node.is_none() {
            self.enter(field);
            let v: Vec<String> = default.iter().map(|s| (*s).to_owned()).collect();
            self.record(&field.path, format!("{v:?}"));
            return v;
        }
        let items = self.list(field);
        let mut out = Vec::with_capacity(items.len());
        for item in &items {
            match item.node.map(|n| &n.value) {
                Some(Value::Str(s)) => out.push(s.clone()),
                _ => {
                    if let Some(node) = item.node {
                        self.mismatch(item, node, "a string");
                    }
                }
            }
        }
        self.record(&field.path, format!("{out:?}"));
        out
    }

    /// A list of HTTP status codes (integers 0..=65535; the range check is the consumer's).
    pub fn statuses(&mut self, field: &Field<'_>, default: &[u16]) -> Vec<u16> {
        if field.node.is_none() {
            self.enter(field);
            self.record(&field.path, format!("{default:?}"));
            return default.to_vec();
        }
        let items = self.list(field);
        let mut out = Vec::with_capacity(items.len());
        for item in &items {
            if let Some(node) = item.node
                && let Some(i) = self.int_node(item, node, 0, i128::from(u16::MAX))
            {
                // In range by construction.
                out.push(i as u16);
            }
        }
        self.record(&field.path, format!("{out:?}"));
        out
    }
}

impl<'t> Obj<'t> {
    /// The field `key` of this mapping (remembered as known).
    pub fn field(&mut self, key: &'static str) -> Field<'t> {
        self.known.push(key);
        let found = self
            .entries
            .iter()
            .find(|(k, _)| matches!(&k.value, Value::Str(s) if s == key));
        Field {
            // `key:` with nothing after it (null) is the same as leaving the key out, as in the
            // reference balancer (Go's YAML decoder leaves the default in place).
            node: found.map(|(_, v)| v).filter(|v| v.value != Value::Null),
            path: self.path.key(key),
            pos: found.and_then(|(k, v)| v.pos.or(k.pos)),
        }
    }

    /// Report every key the schema did not ask for (C-CONF-1).
    pub fn finish(self, r: &mut Reader) {
        for (key, _) in self.entries {
            match &key.value {
                Value::Str(s) if self.known.contains(&s.as_str()) => {}
                Value::Str(s) => {
                    let mut msg = format!("unknown field `{s}`");
                    if let Some(near) = closest(s, &self.known) {
                        let _ = write!(msg, ", did you mean `{near}`?");
                    } else {
                        let _ = write!(msg, ", expected one of {}", quoted(&self.known));
                    }
                    r.error(&self.path.key(s).concrete, key.pos, msg);
                }
                other => r.error(
                    &self.path.concrete,
                    key.pos,
                    format!("field names must be strings, found {}", other.kind()),
                ),
            }
        }
    }
}
