//! Upstream connections: HTTP/1.1 to each backend over TCP or TLS, with a keep-alive pool per
//! backend and per worker (C-PATH-7, C-PATH-9, C-RETRY-5, C-RETRY-6).
//!
//! Why a pool of our own over `hyper::client::conn::http1` instead of hyper-util's legacy
//! client: the proxy runs one single-threaded runtime per worker (see `server.rs`), so each
//! worker keeps its own idle connections in a thread-local map and touches no lock and no shared
//! counter to reuse one (nginx's `upstream keepalive` is per worker in the same way). The legacy
//! client shares one mutex-protected pool between all threads and spawns a task per request to
//! return the connection; here the response body hands the connection back when it ends.
//!
//! Connections have no task of their own. hyper's connection future (the [`Driver`], which does
//! the socket IO) is polled by whoever holds the connection: the request while it waits for the
//! response head ([`Upstream::send`]), the response body while it streams
//! (`body::Delivered`), the tunnel task after an upgrade. So a proxied request's upstream IO
//! happens in the task of its client connection and never costs a wake-up of another task
//! (with a spawned driver, every request crossed two tasks through hyper's dispatch channel).
//! An idle connection in the pool is not polled; a close by the backend is noticed when it is
//! checked out (it is driven once first) or by the periodic sweep.
//!
//! Rules:
//! - a connection returns to the pool only after its response body was read to the end; a
//!   response dropped earlier (a retried `503`, C-RETRY-6; a client that left, C-PATH-9) takes
//!   its connection with it, and dropping the connection closes the socket;
//! - which idle connection is reused, kept or expired is weir-core's `idle_pool::IdlePool`:
//!   last-in first-out (the warmest socket), each for at most `idle_conn_timeout`, at most
//!   `max_idle_conns_per_host` per backend and `max_idle_conns` in total per worker *or* the
//!   backend's recent demand (connections lent at once) when that is larger, so steady load
//!   never churns connections; a connection the backend closed is skipped;
//! - a request that fails on a *reused* connection before hyper wrote any of it (the backend
//!   closed the idle socket at that moment) is sent again on a fresh connection: it never reached
//!   the backend, so it is not an attempt (hyper-util's `retry_canceled_requests`);
//! - connect (DNS, TCP within `dial_timeout`, TLS within `tls_handshake_timeout`) errors are
//!   `Connect`; every later error before the response head is `Transport` (C-RETRY-1).

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use rustls::ClientConfig;

use crate::base::rt::{self, Io, Rt};
use crate::observe::metrics::BackendMetrics;

mod body;
mod bound;
mod error;
mod h2;
mod pending;
mod resend;
use pending::Pending;
mod target;
pub use body::{BodyTally, BoxError, ClientBody, Resumable, Taken, UpBody};
pub use error::SendError;
pub use h2::BackendStream;
pub use resend::{RESEND_LIMIT, Resend};
pub use target::{DownstreamEnds, PoolKey, Target};
use weir_core::config::UpstreamSettings;
use weir_core::idle_pool::{IdleParams, IdlePool};

/// Mark `value` as one HPACK must not index (a literal "never indexed", RFC 7541 §6.2.3): a
/// value that is new on every request (the request id, a lowered `grpc-timeout`) would only
/// evict the entries that do repeat from the dynamic table, and h2's encoder compares a name's
/// indexed values one by one, so every request would walk all the ids indexed before it. The
/// value itself is unchanged; HTTP/1 ignores the mark.
pub fn unindexed(value: &mut http::HeaderValue) {
    value.set_sensitive(true);
}

/// Upstream settings the pool acts on (from `server.upstream`).
#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    /// TCP connect deadline (`dial_timeout`).
    pub dial_timeout: Duration,
    /// TLS handshake deadline (`tls_handshake_timeout`).
    pub tls_handshake_timeout: Duration,
    /// Idle connections older than this are closed (`idle_conn_timeout`); `None`: kept until
    /// the backend closes them.
    pub idle_conn_timeout: Option<Duration>,
    /// Idle connections kept per backend and worker (`max_idle_conns_per_host`).
    pub max_idle_per_host: usize,
    /// Idle connections kept per worker in total (`max_idle_conns` divided over the workers).
    pub max_idle_total: usize,
    /// How long a streamed body waits for the backend's `100 Continue` when the client's
    /// `Expect: 100-continue` is forwarded (`expect_continue_timeout`; zero: not forwarded).
    pub expect_continue_timeout: Duration,
    /// `tls_server_name`: the name every `https` backend's certificate must carry (and the
    /// SNI), instead of its URL's host (C-GRPC-5).
    pub tls_server_name: Option<rustls::pki_types::ServerName<'static>>,
    /// Connections per backend at most (`max_conns_per_host`; `None`: unlimited).
    pub max_conns_per_host: Option<u32>,
}

impl UpstreamConfig {
    /// The settings of `server.upstream`, with the total idle bound split over `workers`.
    #[must_use]
    pub fn from_settings(s: &UpstreamSettings, workers: usize) -> UpstreamConfig {
        let workers = workers.max(1);
        UpstreamConfig {
            dial_timeout: s.dial_timeout,
            tls_handshake_timeout: s.tls_handshake_timeout,
            idle_conn_timeout: s.idle_conn_timeout,
            max_idle_per_host: s.max_idle_conns_per_host as usize,
            max_idle_total: (s.max_idle_conns as usize).div_ceil(workers),
            expect_continue_timeout: s.expect_continue_timeout,
            max_conns_per_host: s.max_conns_per_host,
            // Validated by the configuration (a DNS name or an IP address).
            tls_server_name: s
                .tls
                .server_name
                .as_ref()
                .and_then(|n| rustls::pki_types::ServerName::try_from(n.clone()).ok()),
        }
    }
}

/// Connects to backends and keeps idle connections (one pool per worker thread, see the module
/// doc). Cheap to share: clone the `Arc`.
#[derive(Debug)]
pub struct Upstream {
    id: u64,
    config: UpstreamConfig,
    tls: Option<Arc<ClientConfig>>,
    /// `tls` offering ALPN `h2` only, for `protocol: h2` backends.
    tls_h2: Option<Arc<ClientConfig>>,
    h1: http1::Builder,
    /// The HTTP/2 backends' shared connections (C-GRPC-1).
    h2: h2::H2Pools,
    /// `max_conns_per_host` over the HTTP/1 connections of every worker (`None`: unlimited).
    bound: Option<Arc<bound::Bound>>,
    /// The runtime and the idle policy's clock: the process clock (`DataPlane::clock`) where the
    /// proxy runs.
    clock: crate::base::clock::Clock,
}

/// Distinguishes the pools of two `Upstream`s used on one thread (tests run several proxies).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static POOLS: RefCell<Vec<(u64, WorkerPool)>> = const { RefCell::new(Vec::new()) };
}

/// How long a backend's demand peak (connections lent at once) is remembered by the idle
/// policy: between one and two of these (`weir_core::idle_pool`, "Adaptive caps").
const DEMAND_WINDOW: Duration = Duration::from_secs(10);

/// The idle connections of one worker; which connection is kept, reused or expired is
/// weir-core's `IdlePool` decision.
struct WorkerPool {
    idle: IdlePool<Conn>,
}

/// hyper's connection future (with upgrades): it performs the connection's IO. It has no task
/// of its own: whoever uses the connection polls it (module doc).
pub type Driver = Pin<Box<dyn Future<Output = hyper::Result<()>> + Send>>;

/// A connection lent to one request; give it back with [`Upstream::release`] once the response
/// body ended, or drop it to close it. While it is lent, the borrower drives its IO with
/// [`Conn::poll_drive`].
pub struct Conn {
    tx: http1::SendRequest<UpBody>,
    /// `None` once the connection has ended.
    driver: Option<Driver>,
    target: Arc<Target>,
    /// The `Upstream` (its id) this connection is lent from, while lent: dropping a lent
    /// connection tells its pool the demand fell.
    lent: Option<u64>,
    /// Its place under `max_conns_per_host`, given back when it closes.
    _ticket: Option<bound::Ticket>,
    /// The generation of the backend host name's addresses when the connection was made
    /// (C-DISC-2: `dns::host_generation`); a pooled connection from an older one is closed.
    host_generation: u64,
}

impl Drop for Conn {
    fn drop(&mut self) {
        let Some(id) = self.lent.take() else {
            return;
        };
        // `try_*`: never panic in a drop (thread teardown, or a drop inside a pool call, which
        // cannot happen for a lent connection but costs nothing to guard).
        let _ = POOLS.try_with(|pools| {
            if let Ok(mut pools) = pools.try_borrow_mut()
                && let Some((_, pool)) = pools.iter_mut().find(|(i, _)| *i == id)
            {
                pool.idle.handle_closed(self.target.url());
            }
        });
    }
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("backend", &self.target.id())
            .field("alive", &self.driver.is_some())
            .finish()
    }
}

impl Conn {
    /// Perform the connection's pending IO (write the request, read the response, feed the
    /// body). Returns whether the connection is still alive.
    pub fn poll_drive(&mut self, cx: &mut Context<'_>) -> bool {
        if let Some(d) = self.driver.as_mut()
            && d.as_mut().poll(cx).is_ready()
        {
            self.driver = None;
        }
        self.driver.is_some()
    }

    /// Whether the connection can take the next request now (driving it once first).
    fn poll_reusable(&mut self, cx: &mut Context<'_>) -> bool {
        self.poll_drive(cx)
            && !self.tx.is_closed()
            && matches!(self.tx.poll_ready(cx), Poll::Ready(Ok(())))
    }

    /// The connection's future, for a tunnel that must run it to the upgrade (C-PATH-8).
    #[must_use]
    pub fn into_driver(mut self) -> Option<Driver> {
        self.driver.take()
    }
}

/// What an attempt holds of its backend until the response body ends: an HTTP/1 connection
/// (its IO driven by whoever holds it) or a stream of a shared HTTP/2 connection (driven by the
/// connection's own task).
#[derive(Debug)]
pub enum Lent {
    /// An HTTP/1 connection, lent whole.
    H1(Conn),
    /// A stream of an HTTP/2 connection.
    H2(BackendStream),
}

impl Lent {
    /// Perform the connection's pending IO if it is the holder's to do; whether it is alive.
    pub fn poll_drive(&mut self, cx: &mut Context<'_>) -> bool {
        match self {
            Lent::H1(c) => c.poll_drive(cx),
            Lent::H2(_) => true,
        }
    }

    /// The connection's future, for a tunnel that must run it to the upgrade (C-PATH-8); an
    /// HTTP/2 stream has none (HTTP/2 backends do not switch protocols).
    #[must_use]
    pub fn into_driver(self) -> Option<Driver> {
        match self {
            Lent::H1(c) => c.into_driver(),
            Lent::H2(_) => None,
        }
    }
}

/// Poll `fut` while driving `conn`'s IO, until `fut` completes.
pub fn drive_until<F: Future>(conn: &mut Conn, fut: F) -> DriveUntil<'_, F> {
    DriveUntil { conn, fut }
}

pin_project_lite::pin_project! {
    /// The future of [`drive_until`] (a struct, not an `async fn`, for the reason given at
    /// [`rt::Timeout`]).
    #[must_use = "futures do nothing unless polled"]
    pub struct DriveUntil<'c, F> {
        conn: &'c mut Conn,
        #[pin]
        fut: F,
    }
}

impl<F: Future> Future for DriveUntil<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        this.conn.poll_drive(cx);
        this.fut.poll(cx)
    }
}

impl Upstream {
    /// A connector with `config`; `tls` is the client configuration for `https` backends (none:
    /// connecting to one is a connect error).
    #[must_use]
    pub fn new(rt: Rt, config: UpstreamConfig, tls: Option<Arc<ClientConfig>>) -> Upstream {
        Upstream::on_clock(crate::base::clock::Clock::new(rt), config, tls)
    }

    /// [`Upstream::new`] on `clock`: the pools' times ([`Upstream::core_now`]) are the
    /// clock's, so a time the engine was fed serves the pools as it is.
    #[must_use]
    pub fn on_clock(
        clock: crate::base::clock::Clock,
        config: UpstreamConfig,
        tls: Option<Arc<ClientConfig>>,
    ) -> Upstream {
        let mut h1 = http1::Builder::new();
        // Backends may answer with any header size a browser-facing server accepts.
        h1.max_buf_size(1 << 20);
        let tls_h2 = tls.as_ref().map(|c| {
            let mut c = ClientConfig::clone(c);
            c.alpn_protocols = vec![b"h2".to_vec()];
            Arc::new(c)
        });
        let h2 = h2::H2Pools::new(clock.rt(), config.max_conns_per_host, config.dial_timeout);
        let bound = config
            .max_conns_per_host
            .map(|max| bound::Bound::new(max, config.dial_timeout));
        Upstream {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            config,
            tls,
            tls_h2,
            h1,
            h2,
            bound,
            clock,
        }
    }

    /// The settings.
    #[must_use]
    pub fn config(&self) -> &UpstreamConfig {
        &self.config
    }

    fn with_pool<R>(&self, f: impl FnOnce(&mut WorkerPool) -> R) -> R {
        POOLS.with(|pools| {
            let mut pools = pools.borrow_mut();
            let i = match pools.iter().position(|(id, _)| *id == self.id) {
                Some(i) => i,
                None => {
                    let params = self.idle_params();
                    let pool = WorkerPool {
                        idle: IdlePool::new(params),
                    };
                    pools.push((self.id, pool));
                    pools.len() - 1
                }
            };
            f(&mut pools[i].1)
        })
    }

    /// `now` on weir-core's clock (this `Upstream`'s [`Clock`](crate::base::clock::Clock)).
    #[must_use]
    pub fn core_now(&self, now: std::time::Instant) -> weir_core::Instant {
        self.clock.at(now)
    }

    /// The current time on weir-core's clock.
    #[must_use]
    pub fn now(&self) -> weir_core::Instant {
        self.clock.now()
    }

    /// The most recently idle connection to `target` that has not expired at `now`.
    fn checkout(&self, target: &Target, now: std::time::Instant) -> Option<Conn> {
        if !target.poolable() {
            return None;
        }
        let now = self.core_now(now);
        let current = crate::services::dns::host_generation(&target.host);
        loop {
            let mut conn = self.with_pool(|pool| pool.idle.checkout(target.url(), now))?;
            conn.lent = Some(self.id);
            if conn.host_generation == current {
                return Some(conn);
            }
            // C-DISC-2: the host name's addresses changed since this connection was made;
            // dropping it closes it (and tells the pool), the request takes the next one or a
            // new connection to a current address.
            drop(conn);
        }
    }

    /// Give a connection back after its response body ended at `now`. Closed connections, and
    /// any the idle policy does not keep, are dropped (closed).
    pub fn release(&self, mut conn: Conn, now: std::time::Instant) {
        if conn.driver.is_none() || conn.tx.is_closed() || !conn.target.poolable() {
            return; // dropped: the pool hears of it
        }
        if self
            .bound
            .as_ref()
            .is_some_and(|b| b.has_waiters(conn.target.pool_key()))
        {
            return; // closed: a request waits for its place (max_conns_per_host)
        }
        conn.lent = None;
        let now = self.core_now(now);
        let url = Arc::clone(&conn.target);
        let refused = self.with_pool(|pool| pool.idle.release(url.url(), conn, now));
        drop(refused);
    }

    /// Close idle connections past `idle_conn_timeout` or closed by their backend (the worker's
    /// periodic sweep; checkout does the same lazily). Idle connections have no task: the sweep
    /// drives each once (with a no-op waker) to notice a close.
    pub fn sweep(&self) {
        let now = self.now();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        self.with_pool(|pool| {
            pool.idle
                .sweep(now, |c| c.poll_drive(&mut cx) && !c.tx.is_closed());
        });
        self.h2
            .sweep(self.rt().now(), self.config.idle_conn_timeout);
    }

    /// Drop every idle connection of this worker, and the HTTP/2 connections (shutdown).
    pub fn clear(&self) {
        self.with_pool(|pool| pool.idle.clear());
        self.h2.clear();
    }

    /// HTTP/2 connections open to backends, over all workers (tests, status).
    #[must_use]
    pub fn h2_count(&self) -> usize {
        self.h2.count()
    }

    /// Send `req` to `target` in the target's protocol (C-GRPC-1): on a pooled or new HTTP/1
    /// connection ([`send`](Self::send)) or as a stream of a shared HTTP/2 connection. The
    /// response head, and what to hand back with [`release_lent`](Self::release_lent) once
    /// the body ended.
    ///
    /// # Errors
    /// As [`send`](Self::send).
    pub async fn send_lent(
        &self,
        target: &Arc<Target>,
        metrics: Option<&BackendMetrics>,
        req: Request<UpBody>,
        now: std::time::Instant,
        client: DownstreamEnds,
    ) -> Result<(Response<Incoming>, Lent), SendError> {
        self.send_lent_with(target, metrics, || req, now, client)
            .await
    }

    /// [`send_lent`](Self::send_lent) with the request made by `make` once a connection to
    /// take it exists: a connect error leaves the request unmade, its headers and body where
    /// they were, to be sent again elsewhere (C-RETRY-9).
    ///
    /// # Errors
    /// As [`send`](Self::send); a stream the HTTP/2 backend refused is [`SendError::Refused`].
    pub async fn send_lent_with(
        &self,
        target: &Arc<Target>,
        metrics: Option<&BackendMetrics>,
        make: impl FnOnce() -> Request<UpBody>,
        now: std::time::Instant,
        client: DownstreamEnds,
    ) -> Result<(Response<Incoming>, Lent), SendError> {
        if target.protocol().is_h2() {
            // Boxed: the HTTP/1 attempt's future stays the size it was.
            let tls = self.tls_h2.as_ref();
            let connect = || self.connect_io_with(target, client, tls);
            let sent = Box::pin(self.h2.send(target, metrics, make, connect)).await?;
            return Ok((sent.0, Lent::H2(sent.1)));
        }
        let (resp, conn) = self.send_with(target, metrics, make, now, client).await?;
        Ok((resp, Lent::H1(conn)))
    }

    /// Give back what [`send_lent`](Self::send_lent) lent once the response body ended at
    /// `now`: an HTTP/1 connection to its pool; an HTTP/2 stream frees its place.
    pub fn release_lent(&self, lent: Lent, now: std::time::Instant) {
        if let Lent::H1(conn) = lent {
            self.release(conn, now);
        }
    }

    /// Idle connections this worker holds (tests, status).
    #[must_use]
    pub fn idle_count(&self) -> usize {
        self.with_pool(|pool| pool.idle.idle_count())
    }

    /// Send `req` from `client` (the C-FWD-1 peer) to `target` on a pooled or new connection,
    /// from `now` (idle connections that expired by then are closed), counting it in `metrics`
    /// (opened or reused); the response head, and the connection to
    /// [`release`](Self::release) once the body ended.
    pub async fn send(
        &self,
        target: &Arc<Target>,
        metrics: Option<&BackendMetrics>,
        req: Request<UpBody>,
        now: std::time::Instant,
        client: DownstreamEnds,
    ) -> Result<(Response<Incoming>, Conn), SendError> {
        self.send_with(target, metrics, || req, now, client).await
    }

    /// [`send`](Self::send) with the request made by `make` once a connection takes it
    /// ([`send_lent_with`](Self::send_lent_with)).
    async fn send_with(
        &self,
        target: &Arc<Target>,
        metrics: Option<&BackendMetrics>,
        make: impl FnOnce() -> Request<UpBody>,
        now: std::time::Instant,
        client: DownstreamEnds,
    ) -> Result<(Response<Incoming>, Conn), SendError> {
        let mut pending = Pending::Make(make);
        let mut deadline = None;
        let ticket = loop {
            while let Some(mut conn) = self.checkout(target, now) {
                // Drive the idle connection once: a close by the backend shows now.
                if !std::future::poll_fn(|cx| Poll::Ready(conn.poll_reusable(cx))).await {
                    continue;
                }
                let fut = conn.tx.try_send_request(pending.made(|r| r));
                match drive_until(&mut conn, fut).await {
                    Ok(resp) => {
                        if let Some(m) = metrics {
                            m.upstream_connection(true);
                        }
                        return Ok((resp, conn));
                    }
                    Err(mut e) => match e.take_message() {
                        // Never written: the idle connection was closed under us. Try another.
                        Some(back) => pending = Pending::Made(back),
                        None => return Err(SendError::Transport(e.into_error())),
                    },
                }
            }
            let Some(bound) = self.bound.as_ref() else {
                break None;
            };
            match bound
                .reserve(self.rt(), target.pool_key(), &mut deadline)
                .await
            {
                Some(bound::Reserve::Ticket(t)) => break Some(t),
                // A connection closed: an idle one of this worker may be there now.
                Some(bound::Reserve::Freed) => {}
                None => return Err(SendError::Saturated),
            }
        };
        // Boxed: connecting (DNS, TLS) is a future of kilobytes that a request on a pooled
        // connection never runs; unboxed, every request's future would carry and copy it.
        let mut conn = Box::pin(self.connect(target, client, ticket)).await?;
        if let Some(m) = metrics {
            m.upstream_connection(false);
        }
        let fut = conn.tx.send_request(pending.made(|r| r));
        match drive_until(&mut conn, fut).await {
            Ok(resp) => Ok((resp, conn)),
            Err(e) => Err(SendError::Transport(e)),
        }
    }

    /// A new connection to `target`: DNS, TCP within `dial_timeout`, TLS within
    /// `tls_handshake_timeout`, then the HTTP/1.1 handshake.
    async fn connect(
        &self,
        target: &Arc<Target>,
        client: DownstreamEnds,
        ticket: Option<bound::Ticket>,
    ) -> Result<Conn, SendError> {
        let host_generation = crate::services::dns::host_generation(&target.host);
        let io = self
            .connect_io(target, client)
            .await
            .map_err(SendError::Connect)?;
        let (tx, conn) = self
            .h1
            .handshake(io)
            .await
            .map_err(|e| SendError::Connect(io::Error::other(e)))?;
        self.with_pool(|pool| pool.idle.handle_opened(target.url(), self.now()));
        Ok(Conn {
            tx,
            driver: Some(Box::pin(conn.with_upgrades())),
            target: Arc::clone(target),
            lent: Some(self.id),
            _ticket: ticket,
            host_generation,
        })
    }

    /// A new byte stream to `target` for a request from `client`: DNS, TCP within
    /// `dial_timeout`, the PROXY header when the backend wants one, TLS within
    /// `tls_handshake_timeout` for an `https` backend.
    ///
    /// # Errors
    /// The connection could not be made (all of these are connect errors, C-RETRY-1).
    pub async fn connect_io(
        &self,
        target: &Target,
        client: DownstreamEnds,
    ) -> io::Result<Box<dyn Io>> {
        self.connect_io_with(target, client, self.tls.as_ref())
            .await
    }

    /// [`connect_io`](Self::connect_io) with `tls` as the client configuration of an `https`
    /// backend.
    async fn connect_io_with(
        &self,
        target: &Target,
        client: DownstreamEnds,
        tls: Option<&Arc<ClientConfig>>,
    ) -> io::Result<Box<dyn Io>> {
        let rt = self.rt();
        let mut tcp = rt::timeout(
            rt,
            self.config.dial_timeout,
            crate::services::dns::dial(rt, &target.host, target.port),
        )
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "dial timeout"))??;
        if let Some(header) = target.preface(client) {
            rt::write_preface(&mut tcp, header.as_bytes()).await?;
        }
        let Some(url_name) = &target.tls else {
            return Ok(tcp);
        };
        let name = self.config.tls_server_name.as_ref().unwrap_or(url_name);
        let Some(config) = tls else {
            return Err(io::Error::other(
                "no TLS configuration for an https backend",
            ));
        };
        let mut handshake = rt::TlsConnect::new(Arc::clone(config), name.clone(), tcp);
        if target.protocol().is_h2() {
            // C-GRPC-5: an `h2` backend that does not agree on HTTP/2 is a connect failure
            // that names ALPN, not a confusing protocol error on the first request.
            handshake = handshake.require_alpn(b"h2");
        }
        let done = rt::timeout(
            rt,
            self.config.tls_handshake_timeout,
            rt.tls_connect(handshake),
        )
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "tls handshake timeout"))?;
        if let Err(e) = &done {
            crate::observe::events::upstream_tls_failed(target.id(), e);
        }
        done
    }

    /// This upstream's id (which of a thread's pools is its own).
    #[must_use]
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The runtime.
    #[must_use]
    pub fn rt(&self) -> Rt {
        self.clock.rt()
    }

    /// The idle policy's parameters.
    #[must_use]
    pub fn idle_params(&self) -> IdleParams {
        IdleParams {
            per_host: self.config.max_idle_per_host,
            total: self.config.max_idle_total,
            timeout: self.config.idle_conn_timeout,
            window: DEMAND_WINDOW,
        }
    }
}

#[cfg(test)]
mod tests;
