//! One client connection as its requests see it: the context they share ([`ConnCtx`]), the
//! phase an HTTP/2 watchdog reads ([`ConnState`]), and the guard a request holds while it lives
//! ([`RequestGuard`]). [`crate::server`] creates these at accept; the protocol loops
//! ([`crate::h1`], `server::h2`), the handler ([`crate::proxy`]) and response bodies
//! ([`crate::body`]) use them, without depending on the server that accepts.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};

use crate::Data;
use crate::limits::ConnPermit;
use crate::park::Worker;

/// Tells the worker a connection (or a tunnel it upgraded into) is still alive: the worker
/// waits until every clone is dropped (C-PATH-10).
pub type Alive = async_channel::Sender<()>;

/// Connection phases, kept in [`ConnState::phase`] (HTTP/2's watchdog).
pub(crate) const IDLE: u8 = 0;
pub(crate) const BUSY: u8 = 2;

/// What the accept point knows of a connection besides its bytes.
#[derive(Debug, Clone, Copy)]
pub struct ConnInfo {
    /// The client address (the socket peer, or the PROXY protocol's address, C-TLS-3).
    pub peer: SocketAddr,
    /// The connection came over TLS.
    pub tls: bool,
}

/// What an HTTP/2 connection's watchdog and handler know about it.
#[derive(Debug)]
pub struct ConnState {
    pub(crate) phase: AtomicU8,
    in_flight: AtomicU32,
    /// When the connection last became idle.
    last_idle: AtomicU64,
}

/// One client connection, shared by its requests (and by tunnels it upgrades into). The worker
/// waits for every `ConnCtx` to be dropped before it ends (C-PATH-10).
#[derive(Debug)]
pub struct ConnCtx {
    /// Process-wide state.
    pub shared: Arc<Data>,
    /// The client: the socket peer, or the PROXY protocol's source (C-TLS-3).
    pub peer: SocketAddr,
    /// The connection came over weir's TLS (C-TLS-1).
    pub tls: bool,
    /// Phase and timers (HTTP/2).
    pub state: ConnState,
    /// Dropped with the last reference: tells the worker this connection is done.
    _alive: Alive,
    /// This worker's open connections (for the acceptor's choice) and parked ones.
    pub(crate) worker: Arc<Worker>,
    /// The connection's place under `server.max_connections` (`None`: in-process).
    _permit: Option<ConnPermit>,
}

impl Drop for ConnCtx {
    fn drop(&mut self) {
        self.worker.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ConnCtx {
    pub(crate) fn new(
        shared: Arc<Data>,
        info: ConnInfo,
        alive: Alive,
        worker: Arc<Worker>,
        permit: Option<ConnPermit>,
    ) -> ConnCtx {
        let now = shared.clock.now().as_nanos();
        ConnCtx {
            shared,
            peer: info.peer,
            tls: info.tls,
            state: ConnState {
                phase: AtomicU8::new(IDLE),
                in_flight: AtomicU32::new(0),
                last_idle: AtomicU64::new(now),
            },
            _alive: alive,
            worker,
            _permit: permit,
        }
    }

    /// When the idle connection closes: `idle_timeout` after the end of its last response.
    pub(crate) fn idle_since(&self) -> weir_core::Instant {
        weir_core::Instant::from_nanos(self.state.last_idle.load(Ordering::Relaxed))
    }

    /// A sender that keeps the worker waiting while a tunnel outlives its connection.
    #[must_use]
    pub fn alive(&self) -> Alive {
        self._alive.clone()
    }
}

/// Marks its connection busy for as long as one request (its response body included) lives.
#[derive(Debug)]
pub struct RequestGuard {
    ctx: Arc<ConnCtx>,
}

impl RequestGuard {
    /// The request on `ctx` has started (its head is complete).
    #[must_use]
    pub fn new(ctx: &Arc<ConnCtx>) -> RequestGuard {
        ctx.state.in_flight.fetch_add(1, Ordering::Relaxed);
        ctx.state.phase.store(BUSY, Ordering::Relaxed);
        RequestGuard {
            ctx: Arc::clone(ctx),
        }
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let s = &self.ctx.state;
        if s.in_flight.fetch_sub(1, Ordering::Relaxed) == 1 {
            s.last_idle
                .store(self.ctx.shared.clock.now().as_nanos(), Ordering::Relaxed);
            s.phase.store(IDLE, Ordering::Relaxed);
        }
    }
}
