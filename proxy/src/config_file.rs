//! Reading the configuration file (and secret files) safely, whatever the path points at
//! (C-CONF-4; issue 21, docs/operations.md "Reliability").
//!
//! A careless operator or an attacker with write access to the config directory can put
//! anything where the file was: a named pipe (an `open` for reading blocks until a writer
//! comes, forever), `/dev/zero` or a file that keeps growing (a plain `read_to_string` reads
//! until memory runs out), a directory, a socket. So a file is read in four steps, each of which
//! fails with an error that names the path and what was wrong:
//!
//! 1. `stat` (following symlinks): only a regular file goes on. This keeps weir from even
//!    opening a device (opening some has side effects).
//! 2. `open` with `O_NONBLOCK | O_NOCTTY | O_CLOEXEC`: opening a FIFO that was swapped in after
//!    step 1 returns at once instead of waiting for a writer.
//! 3. `fstat` of the *opened* descriptor: the thing actually opened must be a regular file, so a
//!    swap between step 1 and step 2 cannot fool the check (the classic time-of-check /
//!    time-of-use race).
//! 4. read at most `limit + 1` bytes: one byte over the limit proves the file too large without
//!    ever holding more than `limit + 1` bytes, even if the file grows while it is read.
//!
//! A regular file on a hung network or FUSE file system can still block in `read`. So the
//! caller runs the whole load (read, parse, validate, secret files) on a detached thread of its
//! own under a deadline ([`READ_TIMEOUT`], [`load_blocking`], [`load_async`]): when the deadline
//! passes the caller gets [`FileError::TimedOut`] and goes on; the thread is left behind (it holds
//! no lock and nothing waits for it, so neither a later reload nor the process exit does). At
//! most [`MAX_PENDING_READS`] such threads may be stuck at once; a reload beyond that is
//! rejected at once ([`FileError::Busy`]) instead of piling up threads.

use std::fmt;
use std::io::Read as _;
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use weir_core::config::{ConfigErrors, MAX_CONFIG_BYTES, ValidConfig};

use crate::rt::{self, Rt};
use crate::secrets::EnvSecrets;

#[cfg(test)]
mod tests;

/// How long reading, parsing and validating a configuration file may take (the file and every
/// secret file it names). A local file takes microseconds; this only ever fires on a hung file
/// system.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest secret file read (a token or a password is a few bytes; a PEM bundle a few KiB).
pub const MAX_SECRET_BYTES: u64 = 64 << 10;

/// Most loads that may be running (stuck) on their own threads at once. A read of a local file
/// ends in microseconds, so only reads stuck on a hung file system ever fill this; it is large
/// enough that a burst of SIGHUPs is never refused for it.
pub const MAX_PENDING_READS: usize = 32;

/// Why a file was not read. Every message names the path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    /// `stat`, `open` or `read` failed.
    #[error("cannot read {path}: {error}")]
    Io {
        /// The path as given.
        path: PathBuf,
        /// The system's error.
        error: String,
    },
    /// The path (after symlinks) is not a regular file.
    #[error(
        "cannot read {path}: it is {kind}, not a regular file (only a regular file, or a symlink to one, is read)"
    )]
    NotRegular {
        /// The path as given.
        path: PathBuf,
        /// What it is instead (`a named pipe (FIFO)`, `a character device`, ...).
        kind: &'static str,
    },
    /// The file holds more than `limit` bytes.
    #[error("cannot read {path}: it is larger than {limit} bytes")]
    TooLarge {
        /// The path as given.
        path: PathBuf,
        /// The limit in bytes.
        limit: u64,
    },
    /// The file is not UTF-8 text.
    #[error("cannot read {path}: it is not UTF-8 text")]
    NotUtf8 {
        /// The path as given.
        path: PathBuf,
    },
    /// Reading did not finish within the deadline.
    #[error(
        "cannot read {path}: reading it did not finish within {timeout:?} (a hung file system?)"
    )]
    TimedOut {
        /// The path as given.
        path: PathBuf,
        /// The deadline.
        timeout: Duration,
    },
    /// Too many earlier reads are still stuck.
    #[error(
        "cannot read {path}: {pending} earlier reads of configuration files are still stuck; not starting another"
    )]
    Busy {
        /// The path as given.
        path: PathBuf,
        /// How many are stuck.
        pending: usize,
    },
}

/// What a file type is, in words, for [`FileError::NotRegular`].
fn kind(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a named pipe (FIFO)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Read `path` as UTF-8 text of at most `limit` bytes, safely (module doc, steps 1–4). Blocks
/// only on a hung file system; run it under a deadline ([`load_blocking`], [`load_async`]).
///
/// # Errors
/// See [`FileError`]; nothing is read from anything but a regular file.
pub fn read_bounded(path: &Path, limit: u64) -> Result<String, FileError> {
    let io = |e: std::io::Error| FileError::Io {
        path: path.to_owned(),
        error: e.to_string(),
    };
    let regular = |m: &std::fs::Metadata| {
        if m.file_type().is_file() {
            Ok(())
        } else {
            Err(FileError::NotRegular {
                path: path.to_owned(),
                kind: kind(m.file_type()),
            })
        }
    };
    regular(&std::fs::metadata(path).map_err(io)?)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    regular(&meta)?;
    let too_large = || FileError::TooLarge {
        path: path.to_owned(),
        limit,
    };
    if meta.len() > limit {
        return Err(too_large());
    }
    // The size from fstat is a hint (the file may change while it is read); the `take` bounds it.
    let hint = usize::try_from(meta.len().min(limit)).unwrap_or(0);
    let mut bytes = Vec::with_capacity(hint.saturating_add(1));
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    String::from_utf8(bytes).map_err(|_| FileError::NotUtf8 {
        path: path.to_owned(),
    })
}

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
/// [`LenientSecrets`](crate::secrets::LenientSecrets)).
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
