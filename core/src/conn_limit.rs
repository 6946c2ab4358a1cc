//! How many client connections the data plane may hold (`server.max_connections`), and what it
//! leaves of the process's file-descriptor limit to everything else (C-PATH-12's
//! client-side limits, docs/operations.md "Connection limits").
//!
//! A proxy that accepts until `accept` fails with `EMFILE` has no descriptor left for what keeps
//! it working: upstream connects fail (`502`/`503`), health probes fail and mark healthy backends
//! down, the management listener stops answering. nginx caps client connections with
//! `worker_connections` (and warns when they exceed `worker_rlimit_nofile`); HAProxy derives
//! `maxconn` from `ulimit -n` after setting aside what each connection and the process need.
//! weir does the latter: every descriptor weir can need that is *not* a client connection is
//! counted into a reserve, and the default cap is what is left.
//!
//! **The reserve.**
//! - `fixed`: descriptors that do not grow with traffic (stdio, the two listeners, each worker's
//!   event loop, signal handling, log files, the config file a reload reads, DNS lookups);
//! - `management`: the management listener's own cap (it never takes the data plane's);
//! - `probes`: `health_check.max_concurrency` (one socket per probe in flight);
//! - `store`: the rate-limit store's pool (`redis.pool_size` or `database.max_open_connections`);
//! - `idle_upstream`: `server.upstream.max_idle_conns` (pooled backend connections);
//! - `gate`: `server.overload.max_concurrent_requests`: every request in flight holds at most one
//!   upstream connection, and no more than `gate` requests are in flight.
//!
//! **The default.** With `avail` = the limit minus everything but `gate`, the default is
//! `avail - gate` when that leaves the clients at least half of `avail` (the usual case once the
//! soft limit is raised to the hard one): then no request in flight, HTTP/1 or HTTP/2, can run the
//! process out of descriptors. On a low limit it is `avail / 2`: an HTTP/1 connection holds at
//! most one upstream connection at a time, so an even split still covers every HTTP/1 request
//! (HTTP/2 streams beyond it may fail to connect, [`ConnBudget::covers_gate`] is false and the
//! process warns). Either way the cap is at least 1.

/// What the process needs besides client connections, in file descriptors (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FdReserve {
    /// Descriptors that do not grow with traffic.
    pub fixed: u64,
    /// The management listener's connection cap.
    pub management: u64,
    /// Health probes in flight at most.
    pub probes: u64,
    /// The rate-limit store's connection pool.
    pub store: u64,
    /// Idle pooled upstream connections kept at most.
    pub idle_upstream: u64,
    /// Requests in flight at most (the global gate), each with one upstream connection.
    pub gate: u64,
}

impl FdReserve {
    /// Everything but `gate`.
    #[must_use]
    pub fn base(&self) -> u64 {
        self.fixed
            .saturating_add(self.management)
            .saturating_add(self.probes)
            .saturating_add(self.store)
            .saturating_add(self.idle_upstream)
    }

    /// The whole reserve.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.base().saturating_add(self.gate)
    }
}

/// The data plane's connection cap and how it relates to the descriptor limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnBudget {
    /// Client connections the data plane holds at most (≥ 1).
    pub max_connections: u64,
    /// The cap came from `server.max_connections` (else it was derived).
    pub configured: bool,
    /// `max_connections` plus the whole reserve fit in the limit: no request in flight can run
    /// the process out of descriptors.
    pub covers_gate: bool,
    /// `max_connections` plus the reserve without `gate` fit in the limit (false: even idle
    /// connections can starve probes and management; a configured cap that is too high).
    pub covers_base: bool,
}

/// The cap for a process whose descriptor limit is `fd_limit`: `configured` when set, else the
/// default of the module doc.
#[must_use]
pub fn budget(fd_limit: u64, reserve: &FdReserve, configured: Option<u32>) -> ConnBudget {
    let avail = fd_limit.saturating_sub(reserve.base());
    let max_connections = match configured {
        Some(n) => u64::from(n).max(1),
        None => {
            let full = avail.saturating_sub(reserve.gate);
            if full >= avail / 2 {
                full.max(1)
            } else {
                (avail / 2).max(1)
            }
        }
    };
    ConnBudget {
        max_connections,
        configured: configured.is_some(),
        covers_gate: max_connections.saturating_add(reserve.total()) <= fd_limit,
        covers_base: max_connections.saturating_add(reserve.base()) <= fd_limit,
    }
}

#[cfg(test)]
mod tests;
