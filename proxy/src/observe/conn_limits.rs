//! Connection caps and the file-descriptor limit (docs/operations.md "Connection
//! limits").
//!
//! At start the soft `RLIMIT_NOFILE` is raised to the hard limit (as nginx's
//! `worker_rlimit_nofile` and HAProxy do), and the data plane's cap comes from
//! `weir_core::conn_limit::budget`: `server.max_connections`, or the limit minus a reserve for
//! everything else weir opens. The management listener has its own fixed cap,
//! [`MANAGEMENT_MAX_CONNECTIONS`], so a flood on either listener never takes the other's room.
//!
//! A listener's acceptor takes a [`ConnPermit`] *before* it calls `accept`: at the cap it stops
//! accepting, so new connections wait in the kernel's listen backlog (and are refused by the
//! kernel once that is full), instead of being accepted and closed or failing with `EMFILE`.
//! The permit lives as long as the connection (its context, parked or upgraded) and wakes the
//! acceptor when dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use event_listener::Event;
use weir_core::config::ValidConfig;
use weir_core::conn_limit::{self, ConnBudget, FdReserve};

use crate::base::exposition::Listener;

/// Connections the management listener holds at most (its own cap, out of the data plane's).
pub const MANAGEMENT_MAX_CONNECTIONS: usize = 64;

/// Descriptors kept for the process itself (stdio, listeners, signals, logs, the file a reload
/// reads, DNS lookups), plus [`FDS_PER_WORKER`] per worker thread.
pub const FIXED_FDS: u64 = 64;
/// A worker's event loop (epoll, its waker, timers).
pub const FDS_PER_WORKER: u64 = 4;

/// The most often a listener warns that it is at its cap or that `accept` fails.
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// Raise the soft `RLIMIT_NOFILE` to the hard limit; return the soft limit in force after.
/// `u64::MAX` stands for "unlimited".
pub fn raise_nofile() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let lim = getrlimit(Resource::Nofile);
    let raised = rustix::process::Rlimit {
        current: lim.maximum,
        maximum: lim.maximum,
    };
    if lim.current != lim.maximum && setrlimit(Resource::Nofile, raised).is_ok() {
        return lim.maximum.unwrap_or(u64::MAX);
    }
    lim.current.unwrap_or(u64::MAX)
}

/// What `cfg` needs besides client connections, with `workers` worker threads.
#[must_use]
pub fn reserve(cfg: &ValidConfig, workers: usize) -> FdReserve {
    let c = &cfg.config;
    let store = match c.rate_limit.storage.as_str() {
        "redis" => c.redis.pool_size,
        "postgres" => c.database.max_open_connections,
        _ => 0,
    };
    FdReserve {
        fixed: FIXED_FDS + FDS_PER_WORKER * workers as u64,
        management: if cfg.management.enabled {
            MANAGEMENT_MAX_CONNECTIONS as u64
        } else {
            0
        },
        probes: u64::from(c.health_check.max_concurrency),
        store: u64::from(store),
        idle_upstream: u64::from(c.server.upstream.max_idle_conns),
        gate: u64::from(c.server.overload.max_concurrent_requests),
    }
}

/// The data plane's cap for `cfg`, logged (with a warning when the reserve does not fit).
#[must_use]
pub fn public_budget(cfg: &ValidConfig, workers: usize, fd_limit: u64) -> ConnBudget {
    let r = reserve(cfg, workers);
    let b = conn_limit::budget(fd_limit, &r, cfg.server.max_connections);
    tracing::info!(
        max_connections = b.max_connections,
        configured = b.configured,
        fd_limit,
        reserve = r.total(),
        "data-plane connection cap"
    );
    if !b.covers_base {
        tracing::warn!(
            max_connections = b.max_connections,
            fd_limit,
            reserve = r.base(),
            "server.max_connections leaves too few file descriptors for probes, upstream \
             connections and management: raise the fd limit (LimitNOFILE) or lower the cap"
        );
    } else if !b.covers_gate {
        tracing::warn!(
            max_connections = b.max_connections,
            fd_limit,
            reserve = r.total(),
            "the fd limit cannot hold server.overload.max_concurrent_requests upstream \
             connections on top of the client connections: raise the fd limit (LimitNOFILE)"
        );
    }
    b
}

/// One listener's connection count and cap, and its counters (C-OBS-1).
#[derive(Debug)]
pub struct ConnLimit {
    listener: Listener,
    cap: usize,
    open: AtomicUsize,
    freed: Event,
    /// Times the acceptor found the cap reached and stopped accepting.
    reached: AtomicU64,
    /// `accept` failures.
    accept_errors: AtomicU64,
}

/// One connection's place under its listener's cap; dropping it frees the place.
#[derive(Debug)]
pub struct ConnPermit(Arc<ConnLimit>);

impl Drop for ConnPermit {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
        self.0.freed.notify(1);
    }
}

impl ConnLimit {
    /// A cap of `cap` (at least 1) connections on `listener`.
    #[must_use]
    pub fn new(listener: Listener, cap: usize) -> Arc<ConnLimit> {
        Arc::new(ConnLimit {
            listener,
            cap: cap.max(1),
            open: AtomicUsize::new(0),
            freed: Event::new(),
            reached: AtomicU64::new(0),
            accept_errors: AtomicU64::new(0),
        })
    }

    /// The cap.
    #[must_use]
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Connections held now.
    #[must_use]
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Times the cap was reached.
    #[must_use]
    pub fn reached(&self) -> u64 {
        self.reached.load(Ordering::Relaxed)
    }

    /// `accept` failures.
    #[must_use]
    pub fn accept_errors(&self) -> u64 {
        self.accept_errors.load(Ordering::Relaxed)
    }

    /// A place, if one is free.
    #[must_use]
    pub fn try_acquire(self: &Arc<Self>) -> Option<ConnPermit> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.cap).then_some(n + 1)
            })
            .ok()
            .map(|_| ConnPermit(Arc::clone(self)))
    }

    /// A place, waiting for a connection to close when none is free (counted once per wait).
    pub async fn acquire(self: &Arc<Self>, warn: &mut Warn) -> ConnPermit {
        if let Some(p) = self.try_acquire() {
            return p;
        }
        self.reached.fetch_add(1, Ordering::Relaxed);
        warn.at_cap(self);
        loop {
            let listener = self.freed.listen();
            if let Some(p) = self.try_acquire() {
                return p;
            }
            listener.await;
        }
    }

    /// Count an `accept` failure; `true` when it is the process (or system) running out of
    /// descriptors or memory, where the acceptor must back off.
    pub fn accept_failed(&self, e: &std::io::Error, warn: &mut Warn) -> bool {
        use rustix::io::Errno;
        self.accept_errors.fetch_add(1, Ordering::Relaxed);
        let resource = e.raw_os_error().is_some_and(|code| {
            [Errno::MFILE, Errno::NFILE, Errno::NOBUFS, Errno::NOMEM]
                .iter()
                .any(|x| x.raw_os_error() == code)
        });
        warn.accept_failed(self, e);
        resource
    }
}

/// Rate-limited warnings of one acceptor (at most one per [`WARN_EVERY`] and kind; the next
/// says how many were left out).
#[derive(Debug, Default)]
pub struct Warn {
    cap: (Option<Instant>, u64),
    accept: (Option<Instant>, u64),
}

impl Warn {
    fn due(slot: &mut (Option<Instant>, u64)) -> Option<u64> {
        let now = Instant::now();
        if slot.0.is_some_and(|t| now.duration_since(t) < WARN_EVERY) {
            slot.1 += 1;
            return None;
        }
        slot.0 = Some(now);
        Some(std::mem::take(&mut slot.1))
    }

    fn at_cap(&mut self, limit: &ConnLimit) {
        if let Some(suppressed) = Self::due(&mut self.cap) {
            tracing::warn!(
                listener = limit.listener.as_str(),
                max_connections = limit.cap,
                suppressed,
                "connection cap reached: not accepting until a connection closes (the listen \
                 backlog holds new ones)"
            );
        }
    }

    fn accept_failed(&mut self, limit: &ConnLimit, e: &std::io::Error) {
        if let Some(suppressed) = Self::due(&mut self.accept) {
            tracing::warn!(
                listener = limit.listener.as_str(),
                error = %e,
                open = limit.open(),
                suppressed,
                "accept failed"
            );
        }
    }
}

/// How long an acceptor pauses after its `n`-th resource failure in a row (n ≥ 1): 50 ms,
/// doubling up to 1 s (nginx pauses 500 ms).
#[must_use]
pub fn backoff(n: u32) -> Duration {
    Duration::from_millis(50u64 << n.saturating_sub(1).min(5)).min(Duration::from_secs(1))
}

#[cfg(test)]
mod tests;

/// The caps of both listeners.
#[derive(Debug)]
pub struct Connections {
    /// The data plane's (`server.max_connections`).
    pub public: Arc<ConnLimit>,
    /// The management listener's ([`MANAGEMENT_MAX_CONNECTIONS`]).
    pub management: Arc<ConnLimit>,
}

impl Connections {
    /// A data-plane cap of `public` connections and the management cap.
    #[must_use]
    pub fn new(public: usize) -> Connections {
        Connections {
            public: ConnLimit::new(Listener::Public, public),
            management: ConnLimit::new(Listener::Management, MANAGEMENT_MAX_CONNECTIONS),
        }
    }

    fn each(&self) -> [&ConnLimit; 2] {
        [&self.public, &self.management]
    }
}

/// The connection families of a scrape (C-OBS-1): open connections and caps per listener, times
/// the cap was reached, `accept` failures.
pub(crate) fn families(c: &Connections) -> Vec<crate::base::exposition::FamilySnapshot> {
    use crate::base::exposition::{counter, gauge, labels};
    let by = |f: &dyn Fn(&ConnLimit) -> f64| {
        c.each()
            .iter()
            .map(|l| (labels([("listener", l.listener.as_str())]), f(l)))
            .collect()
    };
    let count = |f: &dyn Fn(&ConnLimit) -> u64| {
        c.each()
            .iter()
            .map(|l| (labels([("listener", l.listener.as_str())]), f(l)))
            .collect()
    };
    vec![
        gauge(
            "load_balancer_open_connections",
            "Client connections held now, by listener.",
            by(&|l| l.open() as f64),
        ),
        gauge(
            "load_balancer_max_connections",
            "Client connections held at most, by listener (server.max_connections; management: fixed).",
            by(&|l| l.cap() as f64),
        ),
        counter(
            "load_balancer_connection_limit_reached",
            "Times a listener reached its cap and stopped accepting (new connections wait in the listen backlog).",
            count(&|l| l.reached()),
        ),
        counter(
            "load_balancer_accept_errors",
            "Failed accept calls (EMFILE, ENFILE, ...), by listener.",
            count(&|l| l.accept_errors()),
        ),
    ]
}
