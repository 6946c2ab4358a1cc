//! The certificate directory watch (C-TLS-2; docs/tls.md "Reload").
//!
//! Every [`POLL`] the identity of each certificate directory's entries is read (name, inode,
//! size, modification time, symlink target), together with the configured files as their
//! symlinks resolve. A change is reloaded once it has held still for [`SETTLE`], so a writer
//! replacing the certificate and then the key is usually seen once both are there (and if the
//! key comes later still, the pair fails to match, keeps the old certificate, and the next
//! change reloads it). Polling rather than inotify: it needs no dependency and no file
//! descriptor per directory, it sees a Kubernetes Secret's `..data` symlink swap like any other
//! change, and a stat of a handful of entries twice a second costs nothing measurable.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::base::rt::watch::{Wake, next_or_shutdown};
use crate::base::rt::{self, watch};
use crate::services::state::ProxyState;

/// How often the directories are looked at.
pub const POLL: Duration = Duration::from_millis(500);
/// How long a change must hold still before it is reloaded.
pub const SETTLE: Duration = Duration::from_millis(200);

/// One entry's identity.
type Identity = (PathBuf, u64, u64, i64, i64, Option<PathBuf>);

/// What is watched for `proxy_state`'s certificates: each file and its directory.
fn watched(proxy_state: &ProxyState) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let Some(tls) = &proxy_state.front.tls else {
        return (Vec::new(), Vec::new());
    };
    let mut files = Vec::new();
    let mut dirs = BTreeSet::new();
    for p in &tls.settings.certificates {
        for f in [&p.cert_file, &p.key_file] {
            let path = PathBuf::from(f);
            let dir = path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
            dirs.insert(dir);
            files.push(path);
        }
    }
    (files, dirs.into_iter().collect())
}

fn identity(path: PathBuf, follow: bool) -> Identity {
    let meta = if follow {
        std::fs::metadata(&path)
    } else {
        std::fs::symlink_metadata(&path)
    };
    let link = std::fs::read_link(&path).ok();
    match meta {
        Ok(m) => (
            path,
            m.dev(),
            m.ino(),
            m.size() as i64,
            m.mtime_nsec() + m.mtime() * 1_000_000_000,
            link,
        ),
        Err(_) => (path, 0, 0, -1, 0, link),
    }
}

/// Everything that identifies the watched files now (blocking).
fn fingerprint(files: &[PathBuf], dirs: &[PathBuf]) -> Vec<Identity> {
    let mut out: Vec<Identity> = files.iter().map(|f| identity(f.clone(), true)).collect();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            out.push((dir.clone(), 0, 0, -1, 0, None));
            continue;
        };
        let mut names: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        names.sort();
        out.extend(names.into_iter().map(|p| identity(p, false)));
    }
    out
}

/// Watch until `shutdown`; reload on every settled change.
pub async fn run(proxy_state: Arc<ProxyState>, mut shutdown: watch::Receiver<bool>) {
    let rt = proxy_state.data_plane.rt;
    let (files, dirs) = watched(&proxy_state);
    if files.is_empty() {
        return;
    }
    let (files, dirs) = (Arc::new(files), Arc::new(dirs));
    let look = |files: &Arc<Vec<PathBuf>>, dirs: &Arc<Vec<PathBuf>>| {
        let (f, d) = (Arc::clone(files), Arc::clone(dirs));
        rt::unblock(rt, move || fingerprint(&f, &d))
    };
    let Some(mut last) = look(&files, &dirs).await else {
        return;
    };
    loop {
        if let Wake::Shutdown = next_or_shutdown(&mut shutdown, rt::sleep(rt, POLL)).await {
            return;
        }
        let Some(now) = look(&files, &dirs).await else {
            continue;
        };
        if now == last {
            continue;
        }
        if let Wake::Shutdown = next_or_shutdown(&mut shutdown, rt::sleep(rt, SETTLE)).await {
            return;
        }
        let Some(settled) = look(&files, &dirs).await else {
            continue;
        };
        if settled != now {
            continue; // still moving: look again at the next poll
        }
        let s = Arc::clone(&proxy_state);
        let _ = rt::unblock(rt, move || s.front.reload("watch")).await;
        last = settled;
    }
}
