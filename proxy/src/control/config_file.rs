//! Reading the configuration file (and secret files) safely, whatever the path points at
//! (C-CONF-4, docs/operations.md "Reliability").
//!
//! The file itself is read by [`crate::base::safe_read::read_bounded`] (stat, open without blocking,
//! fstat, at most `limit + 1` bytes; its module doc says why).
//!
//! A regular file on a hung network or FUSE file system can still block in `read`. So the
//! caller runs the whole load (read, parse, validate, secret files) on a detached thread of its
//! own under a deadline ([`READ_TIMEOUT`], [`load_blocking`], [`load_async`]): when the deadline
//! passes the caller gets [`FileError::TimedOut`] and goes on; the thread is left behind (it holds
//! no lock and nothing waits for it, so neither a later reload nor the process exit does). At
//! most [`MAX_PENDING_READS`] such threads may be stuck at once; a reload beyond that is
//! rejected at once ([`FileError::Busy`]) instead of piling up threads.

use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use weir_core::config::{ConfigErrors, MAX_CONFIG_BYTES, ValidConfig};

use crate::base::rt::{self, Rt};
use crate::base::safe_read::{FileError, read_bounded};
use crate::base::secrets::EnvSecrets;

#[cfg(test)]
mod tests;

/// How long reading, parsing and validating a configuration file may take (the file and every
/// secret file it names). A local file takes microseconds; this only ever fires on a hung file
/// system.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Most loads that may be running (stuck) on their own threads at once. A read of a local file
/// ends in microseconds, so only reads stuck on a hung file system ever fill this; it is large
/// enough that a burst of SIGHUPs is never refused for it.
pub const MAX_PENDING_READS: usize = 32;

/// Why a configuration file did not load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// The file could not be read (see [`FileError`]).
    File(FileError),
    /// The file was read; the configuration in it is invalid (every error).
    Invalid(ConfigErrors),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::File(e) => write!(f, "{e}"),
            LoadError::Invalid(e) => write!(f, "{e}"),
        }
    }
}

/// Read `path` ([`read_bounded`], at most [`MAX_CONFIG_BYTES`]) and validate it, resolving its
/// secrets from the environment and secret files, on the calling thread.
///
/// # Errors
/// The file cannot be read, or the configuration in it is invalid.
pub fn load(path: &Path) -> Result<ValidConfig, LoadError> {
    load_with(path, &EnvSecrets::new())
}

/// [`load`] with the secrets of `secrets` (`weir check-config` passes
/// [`LenientSecrets`](crate::base::secrets::LenientSecrets)).
///
/// # Errors
/// As [`load`].
pub fn load_with(
    path: &Path,
    secrets: &dyn weir_core::config::SecretSource,
) -> Result<ValidConfig, LoadError> {
    let text = read_bounded(path, MAX_CONFIG_BYTES as u64).map_err(LoadError::File)?;
    weir_core::config::load(&text, secrets).map_err(LoadError::Invalid)
}

/// Work run on detached threads under a deadline, at most [`MAX_PENDING_READS`] at once
/// (module doc). [`READERS`] is the process's.
#[derive(Debug, Default)]
pub struct Readers {
    pending: AtomicUsize,
}

/// The process's [`Readers`] (start-up, reloads).
pub static READERS: Readers = Readers {
    pending: AtomicUsize::new(0),
};

/// Counts a thread of [`Readers`] while it runs.
struct PendingGuard<'a>(&'a AtomicUsize);

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Readers {
    /// How many threads are running (stuck or not) now.
    #[must_use]
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    /// Run `work` (which reads `path`) on a detached thread that hands its result to `deliver`.
    fn spawn<T: Send + 'static>(
        &'static self,
        path: &Path,
        work: impl FnOnce() -> T + Send + 'static,
        deliver: impl FnOnce(T) + Send + 'static,
    ) -> Result<(), FileError> {
        let pending = self.pending.fetch_add(1, Ordering::AcqRel);
        let guard = PendingGuard(&self.pending);
        if pending >= MAX_PENDING_READS {
            return Err(FileError::Busy {
                path: path.to_owned(),
                pending,
            });
        }
        std::thread::Builder::new()
            .name("weir-config-read".into())
            .spawn(move || {
                let _guard = guard;
                deliver(work());
            })
            .map(drop)
            .map_err(|e| FileError::Io {
                path: path.to_owned(),
                error: format!("cannot start a thread to read it: {e}"),
            })
    }

    /// `work` (which reads `path`) under `timeout`, for a caller that may block (the command
    /// line, before any runtime runs). Past the deadline the thread is left behind.
    ///
    /// # Errors
    /// [`FileError::TimedOut`], [`FileError::Busy`], or no thread could be started.
    pub fn run_blocking<T: Send + 'static>(
        &'static self,
        path: &Path,
        timeout: Duration,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, FileError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.spawn(path, work, move |r| {
            let _ = tx.send(r);
        })?;
        rx.recv_timeout(timeout).map_err(|_| FileError::TimedOut {
            path: path.to_owned(),
            timeout,
        })
    }

    /// `work` (which reads `path`) under `timeout` without blocking the executor of `rt` (a
    /// reload). Past the deadline the thread is left behind.
    ///
    /// # Errors
    /// As [`Readers::run_blocking`].
    pub async fn run_async<T: Send + 'static>(
        &'static self,
        rt: Rt,
        path: &Path,
        timeout: Duration,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, FileError> {
        let (tx, rx) = async_channel::bounded(1);
        self.spawn(path, work, move |r| {
            let _ = tx.send_blocking(r);
        })?;
        let deadline = rt.now() + timeout;
        match rt::timeout_at(rt, deadline, rx.recv()).await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(_closed)) => Err(FileError::Io {
                path: path.to_owned(),
                error: "the reading thread ended without a result".into(),
            }),
            Err(_elapsed) => Err(FileError::TimedOut {
                path: path.to_owned(),
                timeout,
            }),
        }
    }
}

/// [`load`] under `timeout` on a thread of [`READERS`], for the command line.
///
/// # Errors
/// As [`load`], and [`FileError::TimedOut`] / [`FileError::Busy`].
pub fn load_blocking(path: &Path, timeout: Duration) -> Result<ValidConfig, LoadError> {
    let owned = path.to_owned();
    READERS
        .run_blocking(path, timeout, move || load(&owned))
        .map_err(LoadError::File)?
}

/// [`load`] under `timeout` on a thread of [`READERS`], without blocking the executor of `rt`
/// (a reload).
///
/// # Errors
/// As [`load_blocking`].
pub async fn load_async(rt: Rt, path: &Path, timeout: Duration) -> Result<ValidConfig, LoadError> {
    let owned = path.to_owned();
    READERS
        .run_async(rt, path, timeout, move || load(&owned))
        .await
        .map_err(LoadError::File)?
}
