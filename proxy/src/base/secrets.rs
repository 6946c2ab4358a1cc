//! Secrets from the process environment and the file system (C-CONF-3): the adapter's
//! [`SecretSource`]. weir-core resolves `NAME` / `NAME_FILE` itself and never logs what it gets.

use std::sync::Mutex;

use weir_core::config::SecretSource;

/// Largest secret file read (a token or a password is a few bytes; a PEM bundle a few KiB).
pub const MAX_SECRET_BYTES: u64 = 64 << 10;

/// Reads environment variables and files, with optional fixed overrides (the demo supplies a
/// generated admin token this way when none is set).
#[derive(Debug, Default, Clone)]
pub struct EnvSecrets {
    fallback: Vec<(String, String)>,
}

impl EnvSecrets {
    /// The process environment and file system.
    #[must_use]
    pub fn new() -> EnvSecrets {
        EnvSecrets::default()
    }

    /// Use `value` for variable `name` when the environment does not set it (nor `NAME_FILE`).
    #[must_use]
    pub fn with_fallback(mut self, name: &str, value: &str) -> EnvSecrets {
        self.fallback.push((name.to_owned(), value.to_owned()));
        self
    }
}

impl SecretSource for EnvSecrets {
    fn env(&self, name: &str) -> Option<String> {
        if let Ok(v) = std::env::var(name) {
            return Some(v);
        }
        if name.ends_with("_FILE") {
            return None;
        }
        if std::env::var_os(format!("{name}_FILE")).is_some() {
            return None;
        }
        self.fallback
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }

    /// A regular file of at most 64 KiB, read without blocking on a FIFO or reading a device
    /// (`safe_read::read_bounded`).
    fn read_file(&self, path: &str) -> Result<String, String> {
        crate::base::safe_read::read_bounded(std::path::Path::new(path), MAX_SECRET_BYTES)
            .map_err(|e| e.to_string())
    }
}

/// `weir check-config` without `--strict-secrets`: the environment as
/// [`EnvSecrets`] reads it, except that a secret set neither as `NAME` nor as `NAME_FILE` resolves
/// to a placeholder and its name is recorded, so a linter without production secrets can check
/// everything else. `weir run` never uses this.
#[derive(Debug, Default)]
pub struct LenientSecrets {
    env: EnvSecrets,
    missing: Mutex<Vec<String>>,
}

impl LenientSecrets {
    /// The process environment and file system, lenient about missing secrets.
    #[must_use]
    pub fn new() -> LenientSecrets {
        LenientSecrets::default()
    }

    /// The secrets that were asked for and not set, in the order asked, each once.
    #[must_use]
    pub fn missing(&self) -> Vec<String> {
        self.missing.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

impl SecretSource for LenientSecrets {
    fn env(&self, name: &str) -> Option<String> {
        if let Some(v) = self.env.env(name).filter(|v| !v.is_empty()) {
            return Some(v);
        }
        if name.ends_with("_FILE") {
            return None;
        }
        let file = format!("{name}_FILE");
        if std::env::var_os(&file).is_some_and(|f| !f.is_empty()) {
            // The file is read, and an unreadable one stays an error.
            return None;
        }
        if let Ok(mut m) = self.missing.lock()
            && !m.iter().any(|n| n == name)
        {
            m.push(name.to_owned());
        }
        Some("unresolved-secret-placeholder".to_owned())
    }

    fn read_file(&self, path: &str) -> Result<String, String> {
        self.env.read_file(path)
    }
}
