//! Why a management request body was refused, as precisely as the YAML errors say it:
//! the field path where the JSON went wrong and serde's reason (`invalid type: string "3",
//! expected u32`, `unknown field "x", expected one of ...`, `missing field "enabled"`).

use serde::Deserialize;

use super::command::{CountBody, EmptyBody, EnabledBody, LimitBody};
use super::{ConfigPatch, Endpoint, FieldError, Reply};

/// The `400` for a body `json_object` refused on `endpoint`.
pub(super) fn problem(endpoint: &Endpoint, body: &[u8]) -> Reply {
    let error = match endpoint {
        Endpoint::SetCount => explain::<CountBody>(body),
        Endpoint::SetEnabled { .. } => explain::<EnabledBody>(body),
        Endpoint::Drain { .. } => explain::<EmptyBody>(body),
        Endpoint::Limit => explain::<LimitBody>(body),
        _ => explain::<ConfigPatch>(body),
    };
    let (path, reason) = error.unwrap_or_else(|| {
        (
            String::new(),
            "request body must be one JSON object of known fields".to_owned(),
        )
    });
    let message = if path.is_empty() {
        format!("request body: {reason}")
    } else {
        format!("request body: {path}: {reason}")
    };
    Reply::Problem {
        status: 400,
        message,
        errors: vec![FieldError {
            path,
            message: reason,
        }],
    }
}

/// The path and reason of the first error reading `body` as `T`; `None` if it reads.
fn explain<'de, T: Deserialize<'de>>(body: &'de [u8]) -> Option<(String, String)> {
    if body.trim_ascii_start().first() != Some(&b'{') {
        return Some((String::new(), "must be one JSON object".to_owned()));
    }
    let e = serde_json::from_slice::<T>(body).err()?;
    let text = e.to_string();
    // serde_json appends " at line L column C"; the path says where instead.
    let reason = text
        .rsplit_once(" at line ")
        .map_or(text.as_str(), |(r, _)| r)
        .to_owned();
    let offset = offset_of(body, e.line(), e.column());
    Some((path_at(body, offset), reason))
}

/// The byte offset of 1-based `line` and `column` (serde_json's position, at or just past the
/// offending token).
fn offset_of(body: &[u8], line: usize, column: usize) -> usize {
    let mut at = 0;
    for _ in 1..line {
        match body[at..].iter().position(|&b| b == b'\n') {
            Some(i) => at += i + 1,
            None => return body.len(),
        }
    }
    (at + column).min(body.len())
}

enum Frame {
    Object { key: Option<String> },
    Array { index: usize },
}

/// The dotted path (`retry.max_attempts`, `routes[1].prefix`) of the value being read at
/// `offset`, by scanning the JSON text before it.
pub(super) fn path_at(body: &[u8], offset: usize) -> String {
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0;
    let end = offset.min(body.len());
    let mut expect_key = false;
    while i < end {
        match body[i] {
            b'{' => {
                stack.push(Frame::Object { key: None });
                expect_key = true;
            }
            b'[' => {
                stack.push(Frame::Array { index: 0 });
                expect_key = false;
            }
            b'}' | b']' => {
                // The error may sit on this very byte (a missing field): keep the frame.
                if i + 1 < end {
                    stack.pop();
                }
                expect_key = false;
            }
            b',' => match stack.last_mut() {
                Some(Frame::Array { index }) => *index += 1,
                Some(Frame::Object { .. }) => expect_key = true,
                None => {}
            },
            b'"' => {
                let start = i + 1;
                i += 1;
                while i < body.len() && body[i] != b'"' {
                    if body[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                if expect_key && let Some(Frame::Object { key }) = stack.last_mut() {
                    let raw = &body[start..i.min(body.len())];
                    *key = Some(String::from_utf8_lossy(raw).into_owned());
                    expect_key = false;
                }
            }
            _ => {}
        }
        i += 1;
    }
    let mut path = String::new();
    for f in &stack {
        match f {
            Frame::Object { key: Some(k) } => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(k);
            }
            Frame::Object { key: None } => {}
            Frame::Array { index } => path.push_str(&format!("[{index}]")),
        }
    }
    path
}

#[cfg(test)]
mod tests;
