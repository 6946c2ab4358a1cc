//! Secrets (C-CONF-3): a value comes from the environment variable `NAME` or from the file named
//! by `NAME_FILE`; the environment value wins. Core does no IO: the caller passes a
//! [`SecretSource`] that reads the environment and files (the adapters use the process
//! environment and the file system; tests use [`MapSecrets`]).
//!
//! A resolved value is a [`Secret`], whose `Debug` and `Display` print `[redacted]`, so a secret
//! cannot reach a log line, an error message, the status API or a metric label by accident. Only
//! [`Secret::expose`] gives the text, and [`Secret::matches`] compares in constant time (C-MGMT-1).

use core::fmt;

/// Where secrets come from. Implementations must not log what they return.
pub trait SecretSource {
    /// The value of environment variable `name`, if set.
    fn env(&self, name: &str) -> Option<String>;
    /// The contents of the file at `path`, or why it could not be read (the message may name the
    /// path; it must not contain the contents).
    fn read_file(&self, path: &str) -> Result<String, String>;
}

/// A fixed set of variables and files, for tests and for embedding.
#[derive(Debug, Clone, Default)]
pub struct MapSecrets {
    /// `(name, value)` environment variables.
    pub env: Vec<(String, String)>,
    /// `(path, contents)` files.
    pub files: Vec<(String, String)>,
}

impl MapSecrets {
    /// No variables, no files.
    #[must_use]
    pub fn new() -> MapSecrets {
        MapSecrets::default()
    }

    /// Add an environment variable.
    #[must_use]
    pub fn with_env(mut self, name: &str, value: &str) -> MapSecrets {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Add a file.
    #[must_use]
    pub fn with_file(mut self, path: &str, contents: &str) -> MapSecrets {
        self.files.push((path.to_owned(), contents.to_owned()));
        self
    }
}

impl SecretSource for MapSecrets {
    fn env(&self, name: &str) -> Option<String> {
        self.env
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }

    fn read_file(&self, path: &str) -> Result<String, String> {
        self.files
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, c)| c.clone())
            .ok_or_else(|| format!("cannot read {path:?}: no such file"))
    }
}

/// A secret value. Prints as `[redacted]`; compare with [`Secret::matches`].
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a value.
    #[must_use]
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret text, for the one place that needs it (a connection string, a comparison).
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `candidate` equals the secret, in time that depends only on the lengths
    /// (C-MGMT-1: a bearer token is compared in constant time).
    #[must_use]
    pub fn matches(&self, candidate: &[u8]) -> bool {
        let secret = self.0.as_bytes();
        let mut diff = u8::from(secret.len() != candidate.len());
        for (i, &c) in candidate.iter().enumerate() {
            // Compare against the secret cyclically so the loop length is the candidate's.
            let s = if secret.is_empty() {
                0
            } else {
                secret[i % secret.len()]
            };
            diff |= s ^ c;
        }
        diff == 0 && !secret.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// How a secret resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resolved {
    /// From `NAME` or `NAME_FILE`.
    Found(Secret),
    /// Neither `NAME` nor `NAME_FILE` is set.
    Missing,
    /// `NAME_FILE` is set but the file could not be read (the message names the path only).
    Unreadable(String),
}

/// Resolve secret `name`: a non-empty `NAME` wins; else the file named by `NAME_FILE`, with one
/// trailing newline (`\n` or `\r\n`) removed. An empty `NAME` counts as unset (compose files
/// often write `NAME=`), so `NAME_FILE` still applies.
pub(crate) fn resolve(source: &dyn SecretSource, name: &str) -> Resolved {
    if let Some(v) = source.env(name).filter(|v| !v.is_empty()) {
        return Resolved::Found(Secret(v));
    }
    let file_var = format!("{name}_FILE");
    let Some(path) = source.env(&file_var).filter(|p| !p.is_empty()) else {
        return Resolved::Missing;
    };
    match source.read_file(&path) {
        Ok(mut contents) => {
            if contents.ends_with('\n') {
                contents.pop();
                if contents.ends_with('\r') {
                    contents.pop();
                }
            }
            Resolved::Found(Secret(contents))
        }
        Err(e) => Resolved::Unreadable(format!("{file_var}: {e}")),
    }
}
