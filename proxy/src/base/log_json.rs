//! The JSON log line format of `weir run` and `weir demo` (docs/operations.md, "Log events"):
//! one object per line, `{"timestamp","level","fields":{...},"target"}` as tracing-subscriber's
//! JSON formatter writes it, except that a list logged through [`list`] is a JSON array, not a
//! string (`applied`, `errors`, `unhealthy`, ...). Numbers and booleans stay numbers
//! and booleans; everything else is a string.

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime as _, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Marks a field value that is JSON text to embed as it is (only [`JsonList`] writes it).
const RAW: &str = "\u{1e}weir-json:";

/// A list field: `field = %list(&items)` is written as a JSON array of strings.
pub struct JsonList(String);

/// `items` as a [`JsonList`].
#[must_use]
pub fn list<T: AsRef<str>>(items: &[T]) -> JsonList {
    let v: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    JsonList(serde_json::to_string(&v).unwrap_or_else(|_| "[]".to_owned()))
}

impl fmt::Display for JsonList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{RAW}{}", self.0)
    }
}

impl fmt::Debug for JsonList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

struct Fields(Map<String, Value>);

impl Fields {
    fn text(&mut self, field: &Field, text: String) {
        let value = match text.strip_prefix(RAW) {
            Some(raw) => serde_json::from_str(raw).unwrap_or(Value::String(raw.to_owned())),
            None => Value::String(text),
        };
        self.0.insert(field.name().to_owned(), value);
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.text(field, format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.text(field, value.to_owned());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), value.into());
    }
}

/// The event formatter (module doc).
#[derive(Debug, Default, Clone, Copy)]
pub struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        let mut fields = Fields(Map::new());
        event.record(&mut fields);
        let meta = event.metadata();
        let line = serde_json::json!({
            "timestamp": timestamp,
            "level": meta.level().as_str(),
            "fields": Value::Object(fields.0),
            "target": meta.target(),
        });
        writeln!(writer, "{line}")
    }
}
