//! One client connection as its requests see it: the context they share ([`DownstreamCtx`]), the
//! phase an HTTP/2 watchdog reads ([`DownstreamState`], an HTTP/2 connection's own: an HTTP/1
//! connection keeps its phase in its loop), and the guard an HTTP/2 request holds while it lives
//! ([`RequestGuard`]). [`crate::datapath::server`] creates these at accept; the protocol loops
//! ([`crate::datapath::h1`], `server::h2`), the handler ([`crate::datapath::h2::handler`]) and response bodies
//! ([`crate::datapath::response_body`]) use them, without depending on the server that accepts.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};

use crate::observe::conn_limits::ConnPermit;
use crate::services::park::Worker;
use crate::services::state::DataPlane;
use crate::services::upstream::DownstreamEnds;

/// Tells the worker a connection (or a tunnel it upgraded into) is still alive: the worker
/// waits until every clone is dropped (C-PATH-10).
pub type Alive = async_channel::Sender<()>;

/// Connection phases, kept in [`DownstreamState::phase`] (HTTP/2's watchdog).
pub(crate) const IDLE: u8 = 0;
pub(crate) const BUSY: u8 = 2;

/// What the accept point knows of a connection besides its bytes.
#[derive(Debug, Clone, Copy)]
pub struct DownstreamInfo {
    /// The client address (the socket peer, or the PROXY protocol's address, C-TLS-3).
    pub peer: SocketAddr,
    /// The address the client connected to: the listener's (the socket's local address), or
    /// the PROXY protocol's destination (C-TLS-3).
    pub local: SocketAddr,
    /// The connection came over TLS.
    pub tls: bool,
}

/// The two ends of a client connection, packed: addresses and ports apart, without an IPv6
/// address's flow label and scope (nothing reads them). Two `SocketAddr`s would take 64 bytes;
/// these take 38, which keeps [`DownstreamCtx`], held by every parked connection, in its
/// allocator size class (docs/benchmarks.md "What an idle connection holds").
#[derive(Debug, Clone, Copy)]
struct Ends {
    peer_ip: IpAddr,
    local_ip: IpAddr,
    peer_port: u16,
    local_port: u16,
}

impl Ends {
    fn new(peer: SocketAddr, local: SocketAddr) -> Ends {
        Ends {
            peer_ip: peer.ip(),
            local_ip: local.ip(),
            peer_port: peer.port(),
            local_port: local.port(),
        }
    }

    fn peer(&self) -> SocketAddr {
        SocketAddr::new(self.peer_ip, self.peer_port)
    }

    fn local(&self) -> SocketAddr {
        SocketAddr::new(self.local_ip, self.local_port)
    }
}

/// What an HTTP/2 connection's watchdog and handler know about it: not in [`DownstreamCtx`], which
/// every parked HTTP/1 connection keeps (16 bytes there moved `DownstreamCtx` into the
/// allocator's size class of the timers a connection frees when it parks, docs/benchmarks.md
/// "What an idle connection holds").
#[derive(Debug)]
pub struct DownstreamState {
    pub(crate) phase: AtomicU8,
    in_flight: AtomicU32,
    /// When the connection last became idle.
    last_idle: AtomicU64,
}

impl DownstreamState {
    /// An idle connection, idle since `now`.
    #[must_use]
    pub fn new(now: weir_core::Instant) -> DownstreamState {
        DownstreamState {
            phase: AtomicU8::new(IDLE),
            in_flight: AtomicU32::new(0),
            last_idle: AtomicU64::new(now.as_nanos()),
        }
    }

    /// When the idle connection closes: `idle_timeout` after the end of its last response.
    pub(crate) fn idle_since(&self) -> weir_core::Instant {
        weir_core::Instant::from_nanos(self.last_idle.load(Ordering::Relaxed))
    }
}

/// One client connection, shared by its requests (and by tunnels it upgrades into). The worker
/// waits for every `DownstreamCtx` to be dropped before it ends (C-PATH-10).
#[derive(Debug)]
pub struct DownstreamCtx {
    /// Process-wide state.
    pub data_plane: Arc<DataPlane>,
    /// The client (the socket peer, or the PROXY protocol's source) and the address it
    /// connected to (a backend's PROXY header names both, C-TLS-3), packed: `peer()`, `local()`.
    ends: Ends,
    /// The connection came over weir's TLS (C-TLS-1).
    pub tls: bool,
    /// Dropped with the last reference: tells the worker this connection is done.
    _alive: Alive,
    /// This worker's open connections (for the acceptor's choice) and parked ones.
    pub(crate) worker: Arc<Worker>,
    /// The connection's place under `server.max_connections` (`None`: in-process).
    _permit: Option<ConnPermit>,
}

impl Drop for DownstreamCtx {
    fn drop(&mut self) {
        self.worker.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl DownstreamCtx {
    pub(crate) fn new(
        data_plane: Arc<DataPlane>,
        info: DownstreamInfo,
        alive: Alive,
        worker: Arc<Worker>,
        permit: Option<ConnPermit>,
    ) -> DownstreamCtx {
        DownstreamCtx {
            data_plane,
            ends: Ends::new(info.peer, info.local),
            tls: info.tls,
            _alive: alive,
            worker,
            _permit: permit,
        }
    }

    /// The client: the socket peer, or the PROXY protocol's source (C-TLS-3).
    #[must_use]
    pub fn peer(&self) -> SocketAddr {
        self.ends.peer()
    }

    /// The client's connection as a backend's PROXY header names it: the client, and the
    /// address it connected to (the listener's, or the PROXY protocol's destination).
    #[must_use]
    pub fn downstream_ends(&self) -> DownstreamEnds {
        DownstreamEnds {
            peer: self.ends.peer(),
            local: self.ends.local(),
        }
    }

    /// A sender that keeps the worker waiting while a tunnel outlives its connection.
    #[must_use]
    pub fn alive(&self) -> Alive {
        self._alive.clone()
    }
}

/// Marks its HTTP/2 connection busy for as long as one request (its response body included)
/// lives.
#[derive(Debug)]
pub struct RequestGuard {
    ctx: Arc<DownstreamCtx>,
    state: Arc<DownstreamState>,
}

impl RequestGuard {
    /// The request on `ctx`, whose phase `state` holds, has started (its head is complete).
    #[must_use]
    pub fn new(ctx: &Arc<DownstreamCtx>, state: &Arc<DownstreamState>) -> RequestGuard {
        state.in_flight.fetch_add(1, Ordering::Relaxed);
        state.phase.store(BUSY, Ordering::Relaxed);
        RequestGuard {
            ctx: Arc::clone(ctx),
            state: Arc::clone(state),
        }
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let s = &self.state;
        if s.in_flight.fetch_sub(1, Ordering::Relaxed) == 1 {
            s.last_idle.store(
                self.ctx.data_plane.clock.now().as_nanos(),
                Ordering::Relaxed,
            );
            s.phase.store(IDLE, Ordering::Relaxed);
        }
    }
}
