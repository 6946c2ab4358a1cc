//! Listeners, workers and client connections (C-PATH-1, C-PATH-10, C-PATH-12).
//!
//! **Workers.** The data plane runs `workers` threads, each with its own single-threaded executor
//! of the runtime ([`Runtime::block_on`](crate::rt::Runtime::block_on)), like nginx's worker processes: a connection lives on one worker from accept to close,
//! and so do the upstream connections its requests use (`upstream.rs` keeps one pool per worker).
//! Nothing on the request path crosses threads, so a request costs no cross-thread wake-up and
//! touches no lock shared with other workers. One acceptor task hands each new connection to the
//! worker with the fewest open connections.
//!
//! **Protocol.** HTTP/1.1, and HTTP/2 over cleartext with prior knowledge (h2c): the first bytes
//! are read (peeked) under a deadline before the connection is given to hyper's HTTP/1 or
//! HTTP/2 server, so a client that connects and sends nothing is closed after
//! `read_header_timeout` too (hyper-util's auto builder waits forever in that case, hyper#3962).
//! Before that, the listener's front runs ([`crate::tls::conn::prepare`]): a PROXY protocol
//! header and a TLS handshake when configured (C-TLS-1, C-TLS-3); over TLS, ALPN chooses between
//! HTTP/1.1 and HTTP/2 instead of the sniff, and HTTP/1.1 connections are not parked.
//!
//! **Timeouts (C-PATH-12), per connection, Go's `net/http` semantics:**
//! - `read_header_timeout` runs from the first byte of a request (from accept, for the first
//!   request) until its head is complete; past it the connection is closed (slowloris);
//! - `idle_timeout` runs while a keep-alive connection has no request in progress (from the end of
//!   the last response); past it the connection is closed;
//! - `max_header_bytes` bounds the request line plus headers: hyper answers `431` and closes.
//!
//! hyper's own HTTP/1 `header_read_timeout` starts when the connection becomes idle, which would
//! close idle keep-alive connections after `read_header_timeout` instead of `idle_timeout`; it is
//! off, and one watchdog per connection enforces both deadlines from the connection's phase
//! (idle / reading a head / busy), which the IO wrapper and the requests keep up to date. The
//! watchdog re-arms its timer at most once per `read_header_timeout`, never per request.
//!
//! **Request framing (C-PATH-12).** hyper's reading of a head hides what a smuggling guard
//! needs (a request with both `Content-Length` and `Transfer-Encoding` is read the RFC 9112 §6.3
//! way, the length dropped), so every byte an HTTP/1 client sends also passes through weir-core's
//! [`RequestFraming`], whatever the connection's phase: it follows the message boundaries across
//! reads (a header name split over two segments, requests pipelined behind a body) and queues one
//! verdict per head, which the handler takes in order ([`ConnCtx::framing_verdict`]) and turns a
//! rejection into `400` with `Connection: close` before anything else happens.
//!
//! **Shutdown (C-PATH-10).** The acceptor stops (the listener closes: new connections are
//! refused), every connection is told to shut down gracefully (idle HTTP/1 connections close at
//! once, busy ones after their response; HTTP/2 sends GOAWAY), and each worker waits for its
//! connections, their requests and tunnels, at most `shutdown_timeout`.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use std::mem::MaybeUninit;
use std::time::Instant;

use futures_util::future::Either;
use hyper::rt::{Read, ReadBuf, ReadBufCursor, Write};

use weir_core::conn_watch::{ConnPhase, ConnWatch, WatchAction};
use weir_core::framing::{FramingError, RequestFraming, Verdict};

use crate::Shared;
use crate::limits::{ConnLimit, ConnPermit};
use crate::rt::{self, Listener, Rt, TcpConn, watch};

pub(crate) mod accept;
pub mod h2;

/// Tells the worker a connection (or a tunnel it upgraded into) is still alive: the worker
/// waits until every clone is dropped (C-PATH-10).
pub type Alive = async_channel::Sender<()>;

/// The HTTP/2 connection preface (RFC 9113 §3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Connection phases, kept in [`ConnState::phase`].
const IDLE: u8 = 0;
const HEAD: u8 = 1;
const BUSY: u8 = 2;
/// Idle long enough to be parked: hyper is being told to let go of the socket (see `serve`).
const PARKING: u8 = 3;

/// How long an HTTP/1 keep-alive connection stays idle before it is parked: its hyper
/// connection (read and write buffers, the handler's box; ≈ 25 KiB) is dropped and only the
/// socket is kept, watched for the next request (docs/proxy.md, "Idle connections").
const PARK_AFTER: Duration = Duration::from_secs(1);

/// Client-side limits of `server.*` (restart-only, C-CONF-7).
#[derive(Debug, Clone)]
pub struct ServerLimits {
    /// `read_header_timeout`.
    pub read_header_timeout: Duration,
    /// `read_timeout`: the whole request, body included (`None`: none).
    pub read_timeout: Option<Duration>,
    /// `write_timeout`: the whole response (`None`: none, C-PATH-7).
    pub write_timeout: Option<Duration>,
    /// `idle_timeout`.
    pub idle_timeout: Duration,
    /// `shutdown_timeout`.
    pub shutdown_timeout: Duration,
    /// `max_header_bytes`.
    pub max_header_bytes: usize,
}

impl ServerLimits {
    /// The limits of `server`.
    #[must_use]
    pub fn from_settings(s: &weir_core::config::ServerSettings) -> ServerLimits {
        ServerLimits {
            read_header_timeout: s.read_header_timeout,
            read_timeout: s.read_timeout,
            write_timeout: s.write_timeout,
            idle_timeout: s.idle_timeout,
            shutdown_timeout: s.shutdown_timeout,
            max_header_bytes: usize::try_from(s.max_header_bytes).unwrap_or(usize::MAX),
        }
    }
}

/// What a connection's watchdog and handler know about it.
#[derive(Debug)]
pub struct ConnState {
    phase: AtomicU8,
    in_flight: AtomicU32,
    /// When the current head started arriving (weir-core nanoseconds).
    head_started: AtomicU64,
    /// When the connection last became idle.
    last_idle: AtomicU64,
}

/// One client connection, shared by its requests (and by tunnels it upgrades into). The worker
/// waits for every `ConnCtx` to be dropped before it ends (C-PATH-10).
#[derive(Debug)]
pub struct ConnCtx {
    /// Process-wide state.
    pub shared: Arc<Shared>,
    /// The client: the socket peer, or the PROXY protocol's source (C-TLS-3).
    pub peer: SocketAddr,
    /// The connection came over weir's TLS (C-TLS-1).
    pub tls: bool,
    /// Phase and timers.
    pub state: ConnState,
    /// HTTP/1 (true) or HTTP/2.
    pub h1: bool,
    /// The framing verdicts of an HTTP/1 client's heads (`None`: HTTP/2, or weir's own
    /// in-process requests).
    framing: Option<std::sync::Mutex<RequestFraming>>,
    /// The socket, while its hyper connection is being dropped to park it (HTTP/1).
    parked: Parked,
    /// Dropped with the last reference: tells the worker this connection is done.
    _alive: Alive,
    /// Open connections of this worker (for the acceptor's choice).
    open: Arc<AtomicUsize>,
    /// The connection's place under `server.max_connections` (`None`: in-process).
    _permit: Option<ConnPermit>,
}

impl Drop for ConnCtx {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ConnCtx {
    /// When the idle connection closes: `idle_timeout` after the end of its last response.
    fn idle_due(&self, limits: &ServerLimits) -> weir_core::Instant {
        self.idle_since() + limits.idle_timeout
    }

    /// When the connection last became idle.
    fn idle_since(&self) -> weir_core::Instant {
        weir_core::Instant::from_nanos(self.state.last_idle.load(Ordering::Relaxed))
    }

    /// The framing verdict on the request being handled (C-PATH-12): taken once per request,
    /// in the order the heads arrived. A head with no verdict (the tracker stopped following
    /// the connection) is refused: the guard fails closed.
    pub fn framing_verdict(&self) -> Verdict {
        let Some(framing) = &self.framing else {
            return Ok(());
        };
        lock(framing)
            .poll_verdict()
            .unwrap_or(Err(FramingError::Untracked))
    }

    /// The connection switched protocols: what the client sends from now on is not HTTP/1.
    pub fn framing_upgraded(&self) {
        if let Some(framing) = &self.framing {
            lock(framing).handle_upgrade();
        }
    }

    /// A sender that keeps the worker waiting while a tunnel outlives its connection.
    #[must_use]
    pub fn alive(&self) -> Alive {
        self._alive.clone()
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The slot a parked connection's socket passes through while its hyper connection is dropped.
#[derive(Default)]
struct Parked(std::sync::Mutex<Option<Box<dyn TcpConn>>>);

impl Parked {
    fn put(&self, stream: Box<dyn TcpConn>) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(stream);
    }

    fn take(&self) -> Option<Box<dyn TcpConn>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

impl std::fmt::Debug for Parked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Parked")
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

/// The client socket, noting the start of each request head and, in HTTP/1 heads, the framing
/// header names (see the module doc).
struct ClientIo {
    /// `None` only after `Drop` handed it to [`ConnCtx::parked`].
    stream: Option<Box<dyn TcpConn>>,
    ctx: Arc<ConnCtx>,
}

impl ClientIo {
    fn new(stream: Box<dyn TcpConn>, ctx: &Arc<ConnCtx>) -> ClientIo {
        ClientIo {
            stream: Some(stream),
            ctx: Arc::clone(ctx),
        }
    }

    fn parking(&self) -> bool {
        self.ctx.state.phase.load(Ordering::Relaxed) == PARKING
    }

    /// The socket (present until drop).
    fn stream(&mut self) -> Pin<&mut Box<dyn TcpConn>> {
        match &mut self.stream {
            Some(s) => Pin::new(s),
            None => unreachable!("the client socket is only taken when the connection is dropped"),
        }
    }
}

impl Drop for ClientIo {
    /// A parked connection's socket outlives its hyper connection: hand it back to `serve`.
    fn drop(&mut self) {
        if self.parking()
            && let Some(stream) = self.stream.take()
        {
            self.ctx.parked.put(stream);
        }
    }
}

/// How much one HTTP/1 read takes (a stack buffer; see `poll_read`).
const READ_CHUNK: usize = 8 * 1024;

impl ClientIo {
    /// Note bytes read from an HTTP/1 client: the start of a head for the watchdog, and every
    /// byte for the framing verdicts.
    fn observe(&self, new: &[u8]) {
        let s = &self.ctx.state;
        if s.phase.load(Ordering::Relaxed) == IDLE {
            s.head_started
                .store(self.ctx.shared.clock.now().as_nanos(), Ordering::Relaxed);
            s.phase.store(HEAD, Ordering::Relaxed);
        }
        if let Some(framing) = &self.ctx.framing {
            lock(framing).handle_bytes(new);
        }
    }
}

impl Read for ClientIo {
    /// HTTP/2 reads go straight into hyper's buffer. HTTP/1 reads go through a stack buffer
    /// that is observed and copied on (hyper's `ReadBufCursor` does not show what was written
    /// into it): every byte of an HTTP/1 client passes the framing tracker, bodies included, so
    /// that the boundary of the next pipelined head is known. One small copy per read, no
    /// `unsafe`.
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let phase = this.ctx.state.phase.load(Ordering::Relaxed);
        if this.ctx.framing.is_none() {
            return this.stream().poll_read(cx, buf);
        }
        if phase == PARKING {
            // hyper is letting go of an idle connection: it reads an end of stream, and
            // whatever the client sends next stays in the socket for the next connection.
            return Poll::Ready(Ok(()));
        }
        let mut tmp = [MaybeUninit::<u8>::uninit(); READ_CHUNK];
        let room = buf.remaining().min(READ_CHUNK);
        let mut rb = ReadBuf::uninit(&mut tmp[..room]);
        let r = this.stream().poll_read(cx, rb.unfilled());
        if let Poll::Ready(Ok(())) = r {
            let new = rb.filled();
            if !new.is_empty() {
                this.observe(new);
                buf.put_slice(new);
            }
        }
        r
    }
}

impl Write for ClientIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().stream().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().stream().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.as_ref().is_some_and(|s| s.is_write_vectored())
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().stream().poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.parking() {
            // Parking keeps the connection open: no FIN.
            return Poll::Ready(Ok(()));
        }
        this.stream().poll_shutdown(cx)
    }
}

/// The protocol a connection speaks, from its first bytes.
enum Proto {
    H1,
    H2,
}

/// Wait (at most until `deadline`) for enough of the first bytes to tell HTTP/2's preface from
/// an HTTP/1 request. `None`: closed, failed or too slow.
async fn sniff(rt: Rt, stream: &dyn TcpConn, deadline: Instant) -> Option<Proto> {
    let mut buf = [0u8; 24];
    loop {
        let peek = std::future::poll_fn(|cx| stream.poll_peek(cx, &mut buf));
        let n = match rt::timeout_at(rt, deadline, peek).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return None,
            Ok(Ok(n)) => n,
        };
        if buf[..n] != H2_PREFACE[..n] {
            return Some(Proto::H1);
        }
        if n == H2_PREFACE.len() {
            return Some(Proto::H2);
        }
        // A prefix of the preface: wait for more (peek returns at once while data is there).
        rt::sleep(rt, Duration::from_millis(2)).await;
        if rt.now() >= deadline {
            return None;
        }
    }
}

/// The hyper builders of one worker.
struct Builders {
    h1: http1::Builder,
    h2: http2::Builder<Rt>,
}

impl Builders {
    fn new(rt: Rt, limits: &ServerLimits) -> Builders {
        let mut h1 = http1::Builder::new();
        h1.timer(rt)
            .header_read_timeout(None)
            .keep_alive(true)
            .max_header_size(limits.max_header_bytes)
            .max_buf_size(limits.max_header_bytes.saturating_add(4096).max(8192));
        Builders {
            h1,
            h2: h2::builder(rt, limits),
        }
    }
}

/// Serve one client connection to its end.
async fn serve(
    builders: Arc<Builders>,
    stream: Box<dyn TcpConn>,
    ctx_parts: (Arc<Shared>, SocketAddr, Alive, Arc<AtomicUsize>, ConnPermit),
    mut shutdown: watch::Receiver<bool>,
) {
    let (shared, peer, alive, open, permit) = ctx_parts;
    let rt = shared.rt;
    let clock = shared.clock;
    let limits = shared.limits.clone();
    // The front (C-TLS-1, C-TLS-3): a PROXY header and a TLS handshake, when configured.
    let prepared = next_or_shutdown(
        &mut shutdown,
        crate::tls::conn::prepare(&shared, stream, peer),
    )
    .await;
    let Wake::Next(Some((stream, info))) = prepared else {
        open.fetch_sub(1, Ordering::Relaxed);
        return;
    };
    let accepted = clock.now();
    let first_deadline = rt.now() + limits.read_header_timeout;
    // Over TLS, ALPN says which protocol follows (a TLS stream cannot be peeked).
    let proto = match info.tls {
        Some(t) => Some(if t.h2 { Proto::H2 } else { Proto::H1 }),
        None => match futures_util::future::select(
            std::pin::pin!(sniff(rt, &*stream, first_deadline)),
            std::pin::pin!(shutdown.changed()),
        )
        .await
        {
            Either::Left((p, _)) => p,
            Either::Right(_) => None,
        },
    };
    let Some(proto) = proto else {
        open.fetch_sub(1, Ordering::Relaxed);
        return;
    };
    let h1 = matches!(proto, Proto::H1);
    let ctx = Arc::new(ConnCtx {
        shared,
        peer: info.peer,
        tls: info.tls.is_some(),
        state: ConnState {
            phase: AtomicU8::new(if h1 { HEAD } else { IDLE }),
            in_flight: AtomicU32::new(0),
            head_started: AtomicU64::new(accepted.as_nanos()),
            last_idle: AtomicU64::new(accepted.as_nanos()),
        },
        h1,
        framing: h1.then(|| std::sync::Mutex::new(RequestFraming::new())),
        parked: Parked::default(),
        _alive: alive,
        open,
        _permit: Some(permit),
    });
    let watchdog = Watchdog {
        ctx: &ctx,
        limits: &limits,
        // A TLS connection is never parked: its session lives in the stream.
        park: h1 && info.tls.is_none(),
    };
    if shutdown.get() {
        return;
    }
    if !h1 {
        let svc_ctx = Arc::clone(&ctx);
        let svc = service_fn(move |req| crate::proxy::handle(Arc::clone(&svc_ctx), req));
        // Boxed, like HTTP/1's below: a task's size is that of its largest state, and every
        // connection's task would otherwise carry room for an HTTP/2 session.
        let mut conn = Box::pin(
            builders
                .h2
                .serve_connection(ClientIo::new(stream, &ctx), svc),
        );
        drive(conn.as_mut(), &watchdog, &mut shutdown, |c| {
            c.graceful_shutdown()
        })
        .await;
        drop(conn);
        crate::memory::note_freed();
        return;
    }
    // HTTP/1: one hyper connection per activity period. A connection idle for PARK_AFTER is
    // parked: hyper lets go of the socket (it reads an end of stream and its shutdown is
    // skipped, see `ClientIo`), its buffers are freed, and the socket alone waits for the next
    // request, which a new hyper connection then reads. The boxed hyper connection keeps this
    // task small while parked.
    let mut stream = stream;
    loop {
        let svc_ctx = Arc::clone(&ctx);
        let svc = service_fn(move |req| crate::proxy::handle(Arc::clone(&svc_ctx), req));
        let mut conn = Box::pin(
            builders
                .h1
                .serve_connection(ClientIo::new(stream, &ctx), svc)
                .with_upgrades(),
        );
        drive(conn.as_mut(), &watchdog, &mut shutdown, |c| {
            c.graceful_shutdown()
        })
        .await;
        drop(conn);
        // Parked or closed: hyper's buffers are free now.
        crate::memory::note_freed();
        let Some(parked) = ctx.parked.take() else {
            return;
        };
        if shutdown.get() || !wait_parked(&ctx, &*parked, &limits, &mut shutdown).await {
            return;
        }
        // The next request's head starts now (C-PATH-12's read_header_timeout).
        let s = &ctx.state;
        s.head_started
            .store(ctx.shared.clock.now().as_nanos(), Ordering::Relaxed);
        s.phase.store(HEAD, Ordering::Relaxed);
        stream = parked;
    }
}

/// Wait for a parked connection's next request: `true` once bytes are there to read; `false`
/// when the client closed, the socket failed, `idle_timeout` passed (counted from the end of
/// the last response, as for any idle connection) or shutdown began.
async fn wait_parked(
    ctx: &ConnCtx,
    stream: &dyn TcpConn,
    limits: &ServerLimits,
    shutdown: &mut watch::Receiver<bool>,
) -> bool {
    let rt = ctx.shared.rt;
    let clock = &ctx.shared.clock;
    let deadline = clock.deadline(ctx.idle_due(limits));
    let mut byte = [0u8; 1];
    let peek = std::future::poll_fn(|cx| stream.poll_peek(cx, &mut byte));
    matches!(
        next_or_shutdown(shutdown, rt::timeout_at(rt, deadline, peek)).await,
        Wake::Next(Ok(Ok(n))) if n > 0
    )
}

/// Serve one in-process HTTP/1.1 connection `io` with the data-plane handler, as if it came
/// from `peer`: the management plane's synthetic request (C-MGMT-4) passes the same gate, client
/// address resolution, limiter, routing and flow as any request. No watchdog: the caller bounds
/// the exchange.
pub(crate) async fn serve_in_process<I>(shared: Arc<Shared>, peer: SocketAddr, io: I)
where
    I: Read + Write + Unpin + Send + 'static,
{
    let rt = shared.rt;
    let (alive, _unused) = async_channel::bounded(1);
    let now = shared.clock.now().as_nanos();
    let ctx = Arc::new(ConnCtx {
        shared,
        peer,
        tls: false,
        state: ConnState {
            phase: AtomicU8::new(BUSY),
            in_flight: AtomicU32::new(0),
            head_started: AtomicU64::new(now),
            last_idle: AtomicU64::new(now),
        },
        h1: true,
        framing: None,
        parked: Parked::default(),
        _alive: alive,
        // Its own count, so the acceptor's balance is untouched (Drop takes the one off).
        open: Arc::new(AtomicUsize::new(1)),
        _permit: None,
    });
    let svc = service_fn(move |req| crate::proxy::handle(Arc::clone(&ctx), req));
    let mut builder = http1::Builder::new();
    builder.timer(rt);
    let _ = builder.serve_connection(io, svc).await;
}

/// The per-connection deadlines (module doc).
struct Watchdog<'a> {
    ctx: &'a Arc<ConnCtx>,
    limits: &'a ServerLimits,
    /// Park the connection after `PARK_AFTER` idle (HTTP/1).
    park: bool,
}

enum Check {
    /// Sleep until then and look again.
    Until(Instant),
    /// Close the connection now (head too slow).
    Close,
    /// Idle too long: shut down gracefully.
    Idle,
    /// Idle for `PARK_AFTER`: park (HTTP/1).
    Park,
}

impl Watchdog<'_> {
    /// The connection's phase and core's watchdog decision on it (`weir_core::conn_watch`).
    fn check(&self) -> Check {
        let clock = &self.ctx.shared.clock;
        let now = clock.now();
        let s = &self.ctx.state;
        let phase = match s.phase.load(Ordering::Relaxed) {
            HEAD => ConnPhase::Head {
                started: weir_core::Instant::from_nanos(s.head_started.load(Ordering::Relaxed)),
            },
            IDLE => ConnPhase::Idle {
                since: self.ctx.idle_since(),
            },
            PARKING => ConnPhase::Parking,
            _ => ConnPhase::Busy,
        };
        let watch = ConnWatch::new(
            self.limits.read_header_timeout,
            self.limits.idle_timeout,
            self.park.then_some(PARK_AFTER),
        );
        match watch.poll_action(phase, now) {
            Some(WatchAction::Close) => Check::Close,
            Some(WatchAction::Idle) => Check::Idle,
            Some(WatchAction::Park) => Check::Park,
            None => Check::Until(clock.deadline(watch.poll_timeout(phase, now))),
        }
    }
}

/// Poll a hyper connection, its watchdog and the shutdown signal until the connection ends.
async fn drive<C, F>(
    mut conn: Pin<&mut C>,
    watchdog: &Watchdog<'_>,
    shutdown: &mut watch::Receiver<bool>,
    graceful: F,
) where
    C: std::future::Future,
    F: Fn(Pin<&mut C>),
{
    let rt = watchdog.ctx.shared.rt;
    let first = match watchdog.check() {
        Check::Until(t) => t,
        _ => rt.now(),
    };
    let mut sleep = rt.sleep_until(first);
    // Shutdown is watched by its own future until it fires once; then the connection drains.
    // Polled once to register its listener, then only when the lock-free check says the
    // signal changed (its listener's lock is shared by every connection of every worker).
    let mut draining = false;
    let signal = shutdown.clone();
    let mut stop_armed = false;
    let mut stop = std::pin::pin!(async {
        loop {
            if shutdown.changed().await.is_err() || shutdown.get() {
                return;
            }
        }
    });
    std::future::poll_fn(|cx| {
        loop {
            if conn.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
            if !draining && (!stop_armed || signal.has_changed()) {
                stop_armed = true;
                if stop.as_mut().poll(cx).is_ready() {
                    draining = true;
                    graceful(conn.as_mut());
                    continue;
                }
            }
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            match watchdog.check() {
                Check::Until(t) => rt.reset(&mut sleep, t),
                Check::Close => return Poll::Ready(()),
                Check::Park => {
                    if draining {
                        rt.reset(&mut sleep, rt.now() + watchdog.limits.read_header_timeout);
                        continue;
                    }
                    draining = true;
                    watchdog.ctx.state.phase.store(PARKING, Ordering::Relaxed);
                    // An idle HTTP/1 connection ends at once (no bytes read since its last
                    // response, so hyper holds no part of a next request).
                    graceful(conn.as_mut());
                    rt.reset(&mut sleep, rt.now() + watchdog.limits.read_header_timeout);
                }
                Check::Idle => {
                    if draining {
                        return Poll::Ready(());
                    }
                    draining = true;
                    graceful(conn.as_mut());
                    // An idle HTTP/1 connection closes at once; give HTTP/2 a moment.
                    rt.reset(&mut sleep, rt.now() + watchdog.limits.read_header_timeout);
                }
            }
        }
    })
    .await;
}

/// An accepted connection on its way to a worker, with its place under the cap.
pub(crate) type Accepted = (std::net::TcpStream, SocketAddr, ConnPermit);

/// Where the acceptor hands a connection to a worker.
pub(crate) type ConnSender = async_channel::Sender<Accepted>;

/// A worker thread's handle.
#[derive(Debug)]
pub(crate) struct WorkerHandle {
    pub(crate) conns: ConnSender,
    pub(crate) open: Arc<AtomicUsize>,
    pub(crate) thread: Option<std::thread::JoinHandle<()>>,
}

/// Start worker `index`: a thread with its own executor serving the connections it is handed
/// until `shutdown` turns true, then draining them for at most `shutdown_timeout`.
pub(crate) fn spawn_worker(
    index: usize,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
) -> io::Result<WorkerHandle> {
    let (tx, rx) = async_channel::unbounded();
    let open = Arc::new(AtomicUsize::new(0));
    let open2 = Arc::clone(&open);
    let thread = std::thread::Builder::new()
        .name(format!("weir-worker-{index}"))
        .spawn(move || {
            let rt = shared.rt;
            let main = worker_main(Arc::clone(&shared), rx, open2, shutdown);
            if let Err(e) = rt.block_on(Box::pin(main)) {
                tracing::error!(error = %e, worker = index, "cannot build the worker's executor");
            }
            shared.upstream.clear();
        })?;
    Ok(WorkerHandle {
        conns: tx,
        open,
        thread: Some(thread),
    })
}

/// What a worker's loop or the acceptor woke up for.
pub(crate) enum Wake<T> {
    Shutdown,
    Next(T),
}

/// Wait for `next` or for `shutdown` to turn true, whichever comes first (shutdown first when
/// both are ready).
pub(crate) async fn next_or_shutdown<T>(
    shutdown: &mut watch::Receiver<bool>,
    next: impl std::future::Future<Output = T>,
) -> Wake<T> {
    let stop = async {
        loop {
            if shutdown.changed().await.is_err() || shutdown.get() {
                return;
            }
        }
    };
    match futures_util::future::select(std::pin::pin!(stop), std::pin::pin!(next)).await {
        Either::Left(_) => Wake::Shutdown,
        Either::Right((v, _)) => Wake::Next(v),
    }
}

async fn worker_main(
    shared: Arc<Shared>,
    conns: async_channel::Receiver<Accepted>,
    open: Arc<AtomicUsize>,
    mut shutdown: watch::Receiver<bool>,
) {
    let rt = shared.rt;
    let builders = Arc::new(Builders::new(rt, &shared.limits));
    let (alive_tx, alive_rx) = async_channel::bounded::<()>(1);
    let sweep_every = shared
        .upstream
        .config()
        .idle_conn_timeout
        .map_or(Duration::from_secs(30), |t| {
            (t / 2).max(Duration::from_millis(500))
        });
    let sweeper = {
        let shared = Arc::clone(&shared);
        rt::spawn_handle(rt, async move {
            loop {
                rt::sleep(rt, sweep_every).await;
                shared.upstream.sweep();
            }
        })
    };
    // Freed memory back to the OS after connections park or close (`memory` module doc).
    let collector = crate::memory::has_collect().then(|| {
        rt::spawn_handle(rt, async move {
            loop {
                rt::sleep(rt, crate::memory::TICK).await;
                crate::memory::tick();
            }
        })
    });
    while !shutdown.get() {
        let Wake::Next(next) = next_or_shutdown(&mut shutdown, conns.recv()).await else {
            break;
        };
        let Ok((std_stream, peer, permit)) = next else {
            break;
        };
        let stream = match rt.register(std_stream) {
            Ok(s) => s,
            Err(e) => {
                open.fetch_sub(1, Ordering::Relaxed);
                tracing::debug!(error = %e, "cannot register an accepted connection");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let parts = (
            Arc::clone(&shared),
            peer,
            alive_tx.clone(),
            Arc::clone(&open),
            permit,
        );
        rt.spawn(serve(
            Arc::clone(&builders),
            stream,
            parts,
            shutdown.clone(),
        ));
    }
    // Connections handed over but not yet taken are closed (they were never served).
    conns.close();
    while let Ok((s, _, _)) = conns.try_recv() {
        open.fetch_sub(1, Ordering::Relaxed);
        drop(s);
    }
    drop(alive_tx);
    shared.upstream.clear();
    let grace = shared.limits.shutdown_timeout;
    // Every sender gone: `recv` errs (closed).
    if rt::timeout(rt, grace, alive_rx.recv()).await.is_err() {
        tracing::warn!(
            open = open.load(Ordering::Relaxed),
            "shutdown_timeout passed with requests in flight; closing them"
        );
    }
    drop(sweeper);
    drop(collector);
}

/// Accept connections on `listener` and hand each to the least busy worker, until `shutdown`.
/// At most `limit` connections are held: at the cap the acceptor stops (the listen backlog holds
/// new connections) until one closes (`limits` module doc). Returning drops the listener: new
/// connections are refused from then on (C-PATH-10).
pub(crate) async fn accept_loop(
    rt: Rt,
    listener: Box<dyn Listener>,
    workers: Vec<(ConnSender, Arc<AtomicUsize>)>,
    limit: Arc<ConnLimit>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut next = 0usize;
    let mut acceptor = accept::Acceptor::new(rt, &*listener, limit);
    while let Some((std_stream, peer, permit)) = acceptor.next(&mut shutdown).await {
        // Least open connections; ties go round-robin.
        let n = workers.len();
        let mut best = next % n;
        let mut best_open = usize::MAX;
        for k in 0..n {
            let i = (next + k) % n;
            let o = workers[i].1.load(Ordering::Relaxed);
            if o < best_open {
                best = i;
                best_open = o;
            }
        }
        next = next.wrapping_add(1);
        workers[best].1.fetch_add(1, Ordering::Relaxed);
        if workers[best]
            .0
            .try_send((std_stream, peer, permit))
            .is_err()
        {
            workers[best].1.fetch_sub(1, Ordering::Relaxed);
        }
    }
}
