//! Listeners, workers and client connections (C-PATH-1, C-PATH-10, C-PATH-12).
//!
//! **Workers.** The data plane runs `workers` threads, each with its own single-threaded executor
//! of the runtime ([`Runtime::block_on`](crate::base::rt::Runtime::block_on)), like nginx's worker
//! processes: a connection lives on one worker from accept to close, and so do the upstream
//! connections its requests use (one pool per worker). Nothing on the request path crosses
//! threads, so a request costs no cross-thread wake-up and touches no lock shared with other
//! workers. One acceptor task hands each new connection to the worker with the fewest open
//! connections.
//!
//! **Protocol.** The first bytes are read into the connection's buffer under
//! `read_header_timeout`: HTTP/2's preface (h2c, prior knowledge) goes to hyper's HTTP/2 server
//! (`server::h2`, the bytes read handed back through a rewinding IO); anything else is HTTP/1,
//! served by weir's own codec and IO loop ([`crate::datapath::h1`]). The entry (`opening`, then `serve`) takes any
//! byte stream (`Box<dyn Io>`: TCP, or TLS over it) and a [`DownstreamInfo`].
//! Before that, the listener's front runs ([`crate::datapath::front::prepare`]): a PROXY protocol
//! header and a TLS handshake when configured (C-TLS-1, C-TLS-3); over TLS, ALPN chooses
//! between HTTP/1.1 and HTTP/2 instead of the first bytes.
//!
//! **Timeouts (C-PATH-12), per connection, Go's `net/http` semantics:**
//! - `read_header_timeout` runs from the first byte of a request (from accept, for the first
//!   request) until its head is complete; past it the connection is closed (slowloris);
//! - `idle_timeout` runs while a keep-alive connection has no request in progress (from the end of
//!   the last response); past it the connection is closed;
//! - `max_header_bytes` bounds the request line plus headers (`431`).
//!
//! HTTP/1 keeps these in its own loop (`h1::conn`); an HTTP/2 connection has one watchdog that
//! enforces them from the connection's phase (idle / busy), which its requests keep up to date.
//!
//! **Shutdown (C-PATH-10).** The acceptor stops (the listener closes: new connections are
//! refused), every connection is told to shut down gracefully (idle HTTP/1 connections close at
//! once, busy ones after their response; HTTP/2 sends GOAWAY), and each worker waits for its
//! connections, their requests and tunnels, at most `shutdown_timeout`.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;

use hyper::server::conn::http2;
use hyper::service::service_fn;
use std::time::Instant;

use futures_util::future::Either;
use hyper::rt::{Read, Write};

use weir_core::conn_watch::{ConnPhase, ConnWatch, WatchAction};

use crate::base::rt::watch::{Wake, next_or_shutdown};
use crate::base::rt::{self, Io, Listener, Rt, TcpConn, watch};
use crate::datapath::downstream::{Alive, DownstreamCtx, DownstreamInfo, DownstreamState, IDLE};
use crate::datapath::h1::io::Buf;
use crate::observe::conn_limits::{ConnLimit, ConnPermit};
use crate::services::park::Worker;
use crate::services::state::{DataPlane, ProxyState};

pub(crate) mod accept;
mod sniff;

use crate::services::state::ServerLimits;
use sniff::{Rewind, sniff};

/// The hyper builder of one worker (HTTP/2 only).
struct Builders {
    h2: http2::Builder<Rt>,
}

/// A connection whose front ran and whose protocol is known.
struct Opened {
    builders: Arc<Builders>,
    ctx: Arc<DownstreamCtx>,
    io: Box<dyn Io>,
    /// The first bytes, read to tell the protocol.
    buf: Buf,
    h2: bool,
    shutdown: watch::Receiver<bool>,
}

/// Serve one accepted client connection to its end: its opening (`opening`, boxed by the caller
/// and freed once it is done), then its protocol. A connection's task holds only this
/// function's state and the protocol loop's: an idle HTTP/1 connection's stays small (issue
/// 14; the HTTP/2 session and the opening are boxed).
async fn serve(open: Pin<Box<impl Future<Output = Option<Opened>> + Send>>) {
    let Some(Opened {
        builders,
        ctx,
        io,
        buf,
        h2,
        shutdown,
    }) = open.await
    else {
        return;
    };
    if h2 {
        // A header block may take `max_header_bytes` decoded; its encoded form may be somewhat
        // larger (Huffman), and h2 refuses larger blocks itself.
        let max_block = ctx.data_plane.limits.max_header_bytes.saturating_mul(2);
        let io = Rewind::new(buf, io, max_block);
        Box::pin(serve_h2(&builders, ctx, io, shutdown)).await;
    } else {
        drop(builders);
        crate::datapath::h1::serve::serve(ctx, io, buf, shutdown).await;
    }
    crate::base::memory::note_freed();
}

/// A connection's opening: the front (C-TLS-1, C-TLS-3: a PROXY header and a TLS handshake,
/// when configured), then the protocol (from ALPN over TLS, else from the first bytes).
async fn opening(
    builders: Arc<Builders>,
    stream: Box<dyn TcpConn>,
    (peer, local): (SocketAddr, SocketAddr),
    ctx_parts: (Arc<ProxyState>, Alive, Arc<Worker>, ConnPermit),
    mut shutdown: watch::Receiver<bool>,
) -> Option<Opened> {
    let (proxy_state, alive, worker, permit) = ctx_parts;
    let prepared = next_or_shutdown(
        &mut shutdown,
        crate::datapath::front::prepare(&proxy_state, stream, peer, local),
    )
    .await;
    let Wake::Next(Some((stream, front))) = prepared else {
        worker.open.fetch_sub(1, Ordering::Relaxed);
        return None;
    };
    let info = DownstreamInfo {
        peer: front.peer,
        local: front.local,
        tls: front.tls.is_some(),
    };
    let ctx = Arc::new(DownstreamCtx::new(
        Arc::clone(&proxy_state.data_plane),
        info,
        alive,
        worker,
        Some(permit),
    ));
    let mut io: Box<dyn Io> = stream;
    let rt = ctx.data_plane.rt;
    let first_deadline = rt.now() + ctx.data_plane.limits.read_header_timeout;
    let mut buf = Buf::new();
    // Over TLS, ALPN says which protocol follows; otherwise the first bytes do.
    let proto = match front.tls.map(|t| t.h2) {
        Some(h2) => Some(h2),
        None => match futures_util::future::select(
            std::pin::pin!(sniff(rt, &mut io, &mut buf, first_deadline)),
            std::pin::pin!(shutdown.changed()),
        )
        .await
        {
            Either::Left((p, _)) => p,
            Either::Right(_) => None,
        },
    };
    let Some(h2) = proto else {
        crate::base::memory::note_freed();
        return None;
    };
    Some(Opened {
        builders,
        ctx,
        io,
        buf,
        h2,
        shutdown,
    })
}

/// Serve an HTTP/2 connection with hyper's server and the handler of `crate::datapath::h2::handler`.
async fn serve_h2(
    builders: &Builders,
    ctx: Arc<DownstreamCtx>,
    io: Rewind,
    mut shutdown: watch::Receiver<bool>,
) {
    let limits = ctx.data_plane.limits.clone();
    let state = Arc::new(DownstreamState::new(ctx.data_plane.clock.now()));
    let watchdog = Watchdog {
        ctx: &ctx,
        state: &state,
        limits: &limits,
    };
    let (svc_ctx, svc_state) = (Arc::clone(&ctx), Arc::clone(&state));
    // Each request's future boxed once here: hyper moves the service's future into its stream
    // future, and that into the spawned task, so unboxed every request copied its whole state
    // (kilobytes: the exchange, every await's locals) several times before it first ran.
    let svc = service_fn(move |req| {
        Box::pin(crate::datapath::h2::handler::handle(
            Arc::clone(&svc_ctx),
            Arc::clone(&svc_state),
            req,
        ))
    });
    // Boxed: a task's size is that of its largest state, and every connection's task would
    // otherwise carry room for an HTTP/2 session.
    let mut conn = Box::pin(builders.h2.serve_connection(io, svc));
    drive(conn.as_mut(), &watchdog, &mut shutdown, |c| {
        c.graceful_shutdown();
    })
    .await;
}

/// Serve one in-process HTTP/1.1 connection `io` with the data-plane handler, as if it came
/// from `peer`: the management plane's synthetic request (C-MGMT-4) passes the same gate, client
/// address resolution, limiter, routing and flow as any request. The caller bounds the exchange.
pub(crate) async fn serve_in_process<I>(data: Arc<DataPlane>, peer: SocketAddr, io: I)
where
    I: Read + Write + Unpin + Send + 'static,
{
    let (alive, _unused) = async_channel::bounded(1);
    let (_never, shutdown) = watch::channel(false);
    // Its own count, so the acceptor's balance is untouched (Drop takes the one off).
    let worker = Worker::new(1, shutdown.clone());
    // A synthetic request reached no listener: no destination to name.
    let local = SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, 0));
    let info = DownstreamInfo {
        peer,
        local,
        tls: false,
    };
    let ctx = Arc::new(DownstreamCtx::new(data, info, alive, worker, None));
    crate::datapath::h1::serve::serve(ctx, Box::new(io), Buf::new(), shutdown).await;
}

/// The per-connection deadlines (module doc).
struct Watchdog<'a> {
    ctx: &'a Arc<DownstreamCtx>,
    state: &'a DownstreamState,
    limits: &'a ServerLimits,
}

enum Check {
    /// Sleep until then and look again.
    Until(Instant),
    /// Close the connection now.
    Close,
    /// Idle too long: shut down gracefully.
    Idle,
}

impl Watchdog<'_> {
    /// The connection's phase and core's watchdog decision on it (`weir_core::conn_watch`).
    fn check(&self) -> Check {
        let clock = &self.ctx.data_plane.clock;
        let now = clock.now();
        let phase = match self.state.phase.load(Ordering::Relaxed) {
            IDLE => ConnPhase::Idle {
                since: self.state.idle_since(),
            },
            _ => ConnPhase::Busy,
        };
        let watch = ConnWatch::new(
            self.limits.read_header_timeout,
            self.limits.idle_timeout,
            None,
        );
        match watch.poll_action(phase, now) {
            Some(WatchAction::Close) => Check::Close,
            Some(WatchAction::Idle | WatchAction::Park) => Check::Idle,
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
    let rt = watchdog.ctx.data_plane.rt;
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
    pub(crate) worker: Arc<Worker>,
    pub(crate) thread: Option<std::thread::JoinHandle<()>>,
}

/// Start worker `index`: a thread with its own executor serving the connections it is handed
/// until `shutdown` turns true, then draining them for at most `shutdown_timeout`.
pub(crate) fn spawn_worker(
    index: usize,
    proxy_state: Arc<ProxyState>,
    shutdown: watch::Receiver<bool>,
) -> io::Result<WorkerHandle> {
    let (tx, rx) = async_channel::unbounded();
    let worker = Worker::new(0, shutdown.clone());
    let worker2 = Arc::clone(&worker);
    let thread = std::thread::Builder::new()
        .name(format!("weir-worker-{index}"))
        .spawn(move || {
            let rt = proxy_state.data_plane.rt;
            let main = worker_main(Arc::clone(&proxy_state), rx, worker2, shutdown);
            if let Err(e) = rt.block_on(Box::pin(main)) {
                tracing::error!(error = %e, worker = index, "cannot build the worker's executor");
            }
            proxy_state.data_plane.upstream.clear();
            crate::datapath::h1::upstream_conn::clear(&proxy_state.data_plane.upstream);
        })?;
    Ok(WorkerHandle {
        conns: tx,
        worker,
        thread: Some(thread),
    })
}

async fn worker_main(
    proxy_state: Arc<ProxyState>,
    conns: async_channel::Receiver<Accepted>,
    worker: Arc<Worker>,
    mut shutdown: watch::Receiver<bool>,
) {
    let rt = proxy_state.data_plane.rt;
    let builders = Arc::new(Builders {
        h2: crate::datapath::h2::limits::builder(rt, &proxy_state.data_plane.limits),
    });
    let (alive_tx, alive_rx) = async_channel::bounded::<()>(1);
    let sweep_every = proxy_state
        .data_plane
        .upstream
        .config()
        .idle_conn_timeout
        .map_or(Duration::from_secs(30), |t| {
            (t / 2).max(Duration::from_millis(500))
        });
    let sweeper = {
        let proxy_state = Arc::clone(&proxy_state);
        rt::spawn_handle(rt, async move {
            loop {
                rt::sleep(rt, sweep_every).await;
                proxy_state.data_plane.upstream.sweep();
                crate::datapath::h1::upstream_conn::sweep(&proxy_state.data_plane.upstream);
            }
        })
    };
    // Freed memory back to the OS after connections park or close (`memory` module doc).
    let collector = crate::base::memory::has_collect().then(|| {
        rt::spawn_handle(rt, async move {
            loop {
                rt::sleep(rt, crate::base::memory::TICK).await;
                crate::base::memory::tick();
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
        // The address the client connected to, for a backend's PROXY header (C-TLS-3).
        let local = std_stream
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, 0)));
        let stream = match rt.register(std_stream) {
            Ok(s) => s,
            Err(e) => {
                worker.open.fetch_sub(1, Ordering::Relaxed);
                tracing::debug!(error = %e, "cannot register an accepted connection");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let parts = (
            Arc::clone(&proxy_state),
            alive_tx.clone(),
            Arc::clone(&worker),
            permit,
        );
        rt.spawn(serve(Box::pin(opening(
            Arc::clone(&builders),
            stream,
            (peer, local),
            parts,
            shutdown.clone(),
        ))));
    }
    // Connections handed over but not yet taken are closed (they were never served).
    conns.close();
    while let Ok((s, _, _)) = conns.try_recv() {
        worker.open.fetch_sub(1, Ordering::Relaxed);
        drop(s);
    }
    drop(alive_tx);
    proxy_state.data_plane.upstream.clear();
    crate::datapath::h1::upstream_conn::clear(&proxy_state.data_plane.upstream);
    let grace = proxy_state.data_plane.limits.shutdown_timeout;
    // Every sender gone: `recv` errs (closed).
    if rt::timeout(rt, grace, alive_rx.recv()).await.is_err() {
        tracing::warn!(
            open = worker.open.load(Ordering::Relaxed),
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
    workers: Vec<(ConnSender, Arc<Worker>)>,
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
            let o = workers[i].1.open.load(Ordering::Relaxed);
            if o < best_open {
                best = i;
                best_open = o;
            }
        }
        next = next.wrapping_add(1);
        workers[best].1.open.fetch_add(1, Ordering::Relaxed);
        if workers[best]
            .0
            .try_send((std_stream, peer, permit))
            .is_err()
        {
            workers[best].1.open.fetch_sub(1, Ordering::Relaxed);
        }
    }
}
