//! Which HTTP/2 connection to a backend an attempt's stream goes on, and when another
//! connection is opened (C-GRPC-1, `server.upstream.max_conns_per_host`).
//!
//! A backend's connections each take at most its `SETTINGS_MAX_CONCURRENT_STREAMS` streams at
//! once. A stream goes on the first connection that accepts new streams (no `GOAWAY` received,
//! not closing) and has one to spare: earlier connections are filled first, so load does not
//! keep every connection of a quiet backend warm. When every connection is full, another is
//! opened, unless the backend already has `max_conns_per_host` connections (those draining
//! after a `GOAWAY` included: they still hold a socket on the backend). At the bound the
//! backend is **full**: the attempt waits for a stream to free up, within the connect timeout,
//! as a connection being dialled would; when none frees up in time the attempt fails as a
//! connect failure would, of which nothing was sent, so the engine retries it on another
//! backend whatever its method (C-RETRY-9). This is HAProxy's server queue with `timeout
//! queue` and `option redispatch`, and Envoy's pending requests of an HTTP/2 cluster at its
//! `max_connections`.
//!
//! HTTP/1 connections carry one request each: [`may_open`] is the same bound for them (busy
//! and idle connections to the backend count).
//!
//! Pure: the adapter (weir-proxy's HTTP/2 upstream pool) and the simulator describe each
//! connection as a [`ConnLoad`] and carry out the [`Pick`].

/// One connection to a backend, as the adapter sees it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLoad {
    /// Streams weir has open on it.
    pub streams: u32,
    /// The backend's current `SETTINGS_MAX_CONCURRENT_STREAMS` for it (before the backend's
    /// first SETTINGS, what the adapter assumes).
    pub max_streams: u32,
    /// It takes new streams: no `GOAWAY` received, not closing.
    pub accepting: bool,
}

impl ConnLoad {
    /// Whether a new stream may go on it now.
    #[must_use]
    pub fn has_room(&self) -> bool {
        self.accepting && (self.streams < self.max_streams || mutated!(STREAM_LIMIT_IGNORED))
    }
}

/// Where the next stream goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// On the connection at this index of the list.
    Use(usize),
    /// On a new connection.
    Open,
    /// Nowhere yet: every connection is full and the backend has `max_conns_per_host` of them.
    /// Wait for a stream to end (within the connect timeout), then pick again.
    Full,
}

/// The place of the next stream on a backend whose connections are `conns` (in the order they
/// were opened), under `max_conns` connections per backend (`None`: unlimited). See the module
/// doc.
#[must_use]
pub fn pick(conns: &[ConnLoad], max_conns: Option<u32>) -> Pick {
    pick_in(conns.iter().copied(), max_conns)
}

/// [`pick`] over connections described one at a time, in the order they were opened: those
/// after the first with room are never looked at (the adapter reads each one's counters only
/// when it gets there, and a backend may have many connections).
#[must_use]
pub fn pick_in(conns: impl IntoIterator<Item = ConnLoad>, max_conns: Option<u32>) -> Pick {
    let mut open = 0;
    for conn in conns {
        if conn.has_room() {
            return Pick::Use(open);
        }
        open += 1;
    }
    if may_open(open, max_conns) {
        Pick::Open
    } else {
        Pick::Full
    }
}

/// Whether another connection to a backend that has `open` of them may be opened under
/// `max_conns` (`None`: unlimited).
#[must_use]
pub fn may_open(open: usize, max_conns: Option<u32>) -> bool {
    max_conns.is_none_or(|max| open < max as usize)
}

#[cfg(test)]
mod tests;
