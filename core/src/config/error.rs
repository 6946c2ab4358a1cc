//! What is wrong with a configuration: one [`ConfigError`] (a path, a position, a message) and
//! all of them ([`ConfigErrors`], C-CONF-1).

use core::fmt;

use super::tree::Pos;

/// One problem in a configuration: where, and what (C-CONF-1). Never contains a secret value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Field path, e.g. `server.retry.max_attempts` or `backends[1].url`; empty for an error of
    /// the text as a whole (syntax, size).
    pub path: String,
    /// Line and column where the parser placed the value (or its nearest written parent).
    pub pos: Option<Pos>,
    /// What is wrong, lower case.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.path.is_empty(), self.pos) {
            (false, Some(pos)) => write!(f, "{} ({pos}): {}", self.path, self.message),
            (false, None) => write!(f, "{}: {}", self.path, self.message),
            (true, Some(pos)) => write!(f, "{pos}: {}", self.message),
            (true, None) => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Every error found in a configuration, in document order (C-CONF-1). Never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// The errors.
    #[must_use]
    pub fn errors(&self) -> &[ConfigError] {
        &self.0
    }

    /// Whether some error is at exactly `path`.
    #[must_use]
    pub fn has(&self, path: &str) -> bool {
        self.0.iter().any(|e| e.path == path)
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        writeln!(
            f,
            "invalid configuration: {n} error{}",
            if n == 1 { "" } else { "s" }
        )?;
        for e in &self.0 {
            writeln!(f, "  {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}
