//! An error and its causes on one line: `<error>: <its source>: <that one's source>...`.
//!
//! weir's error types say only their own level in `Display` and keep the underlying error as
//! their `source()`, so that a caller can inspect the cause; printing only the top level would
//! then drop it. [`chain`] walks `source()` to the end, each level written once: what the
//! binaries print for a fatal error, and what logs carry.

use std::error::Error;
use std::fmt;

/// `error` followed by every `source()` below it, separated by `": "`.
#[must_use]
pub fn chain<'a>(error: &'a (dyn Error + 'static)) -> Chain<'a> {
    Chain(error)
}

/// The [`Display`](fmt::Display) of [`chain`].
#[derive(Debug, Clone, Copy)]
pub struct Chain<'a>(&'a (dyn Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut next = self.0.source();
        while let Some(e) = next {
            write!(f, ": {e}")?;
            next = e.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
