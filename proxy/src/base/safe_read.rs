//! Reading a file (the configuration, a secret file) safely, whatever the path points at
//! (C-CONF-4, docs/operations.md "Reliability").
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
//! Deadlines around a read that hangs in `read` (a hung network or FUSE file system) are
//! [`crate::control::config_file`]'s; [`FileError`] names their failures too.

use std::io::Read as _;
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

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
/// only on a hung file system; run it under a deadline (`config_file::load_blocking`, `config_file::load_async`).
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
