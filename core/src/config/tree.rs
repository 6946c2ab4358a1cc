//! Phase 1: YAML text → a value tree that remembers where every node was written.
//!
//! serde-saphyr parses the text under a tight budget (size, events, nodes, depth, anchors and
//! alias replay: no YAML bomb gets through) with strict booleans (`yes`/`on` stay strings, so a
//! boolean field rejects them), duplicate keys rejected and unknown tags rejected. Every node is
//! wrapped in `serde_saphyr::Spanned`, so phase 2 can name the line and column of any value it
//! rejects. The tree itself accepts any well-formed YAML: type and schema errors are phase 2's, so
//! that all of them can be collected instead of stopping at the first.

use core::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{DuplicateKeyPolicy, Spanned};

/// Largest configuration text accepted, in bytes. Real configurations are a few kilobytes; this
/// bounds parse time and memory before the parser sees a byte.
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

/// A position in the YAML text, 1-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pos {
    /// Line, from 1.
    pub line: u32,
    /// Column, from 1.
    pub column: u32,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

impl Pos {
    fn from_location(loc: serde_saphyr::Location) -> Option<Pos> {
        let line = u32::try_from(loc.line()).ok().filter(|l| *l > 0)?;
        let column = u32::try_from(loc.column()).unwrap_or(0);
        Some(Pos { line, column })
    }
}

/// One YAML node and where it was written (`None` when the parser gave no location).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    pub value: Value,
    pub pos: Option<Pos>,
}

/// A YAML value as the parser typed it, before any schema applies.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    /// Entries in document order (duplicates were already rejected by the parser).
    Map(Vec<(Node, Node)>),
}

impl Value {
    /// What the value is, for "expected X, found Y" messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a number",
            Value::Str(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
        let spanned = Spanned::<Value>::deserialize(d)?;
        Ok(Node {
            value: spanned.value,
            pos: Pos::from_location(spanned.referenced)
                .or_else(|| Pos::from_location(spanned.defined)),
        })
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(i128::from(v)))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Int(i128::from(v)))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        Ok(Value::Int(v))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        // Beyond i128 is beyond every field's range; saturate and let the range check speak.
        Ok(Value::Int(i128::try_from(v).unwrap_or(i128::MAX)))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::Str(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(node) = seq.next_element::<Node>()? {
            items.push(node);
        }
        Ok(Value::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries = Vec::new();
        while let Some((k, v)) = map.next_entry::<Node, Node>()? {
            entries.push((k, v));
        }
        Ok(Value::Map(entries))
    }
}

/// The parser's limits for configuration files: generous for any real config (the largest
/// shipped example is under 200 nodes), small enough that a hostile file fails in milliseconds.
fn options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_reader_input_bytes = Some(MAX_CONFIG_BYTES);
    budget.max_events = 200_000;
    budget.max_nodes = 100_000;
    budget.max_depth = 32;
    budget.max_documents = 1;
    budget.max_anchors = 1_000;
    budget.max_aliases = 1_000;
    budget.max_recorded_anchor_events = 100_000;
    budget.max_recorded_anchor_bytes = MAX_CONFIG_BYTES;
    budget.max_total_scalar_bytes = MAX_CONFIG_BYTES;
    budget.max_merge_keys = 1_000;
    let mut alias_limits = serde_saphyr::options::AliasLimits::default();
    alias_limits.max_total_replayed_events = 100_000;
    alias_limits.max_replay_stack_depth = 16;
    serde_saphyr::options! {
        budget: Some(budget),
        alias_limits: alias_limits,
        duplicate_keys: DuplicateKeyPolicy::Error,
        strict_booleans: true,
        reject_unsupported_tags: true,
        with_snippet: false,
    }
}

/// Why the text could not be parsed at all (syntax, budget, duplicate key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    pub message: String,
    pub pos: Option<Pos>,
}

/// Parse `text` into a tree. An empty document is an empty mapping (every field defaulted).
pub(crate) fn parse(text: &str) -> Result<Node, SyntaxError> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(SyntaxError {
            message: format!(
                "the configuration is {} bytes, more than the {MAX_CONFIG_BYTES}-byte limit",
                text.len()
            ),
            pos: None,
        });
    }
    if text
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
    {
        return Ok(Node {
            value: Value::Map(Vec::new()),
            pos: None,
        });
    }
    match serde_saphyr::from_str_with_options::<Node>(text, options()) {
        Ok(node) => Ok(node),
        Err(e) => {
            let pos = e.location().and_then(Pos::from_location);
            let message = e
                .without_snippet()
                .render_with_formatter(&serde_saphyr::UserMessageFormatter);
            Err(SyntaxError {
                message: tidy(&message),
                pos,
            })
        }
    }
}

/// One line, without the parser's own location suffix (the caller prints the position).
fn tidy(message: &str) -> String {
    let first = message.lines().next().unwrap_or("").trim();
    let cut = first.find(" at line ").map_or(first, |i| &first[..i]);
    if cut.is_empty() {
        "the YAML could not be parsed".to_owned()
    } else {
        cut.to_owned()
    }
}
