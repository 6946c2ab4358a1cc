//! The runtime seam: everything the proxy needs from an async runtime, and nothing else.
//!
//! weir-proxy holds the whole proxy (data plane, probes, management, reload, CLI) and never names
//! a runtime. What differs between tokio and smol sits behind [`Runtime`], implemented once per
//! adapter (`weir-tokio`, `weir-smol`): spawning onto the current thread's executor, running a
//! thread's executor, timers, the clock, TCP, TLS client handshakes, DNS, blocking work and
//! signals. The model is quinn's `Runtime` trait: an object-safe trait used through a
//! `&'static dyn Runtime` ([`Rt`]), so no type in weir-proxy is generic over the runtime and each
//! adapter is a few hundred lines.
//!
//! **Timers are hyper's.** A runtime's timer is a [`hyper::rt::Timer`] ([`Runtime::timer`]), so
//! hyper's connection timers and weir's own deadlines use one mechanism; a weir deadline is a
//! `Pin<Box<dyn hyper::rt::Sleep>>` (one allocation: the only one the seam adds per request, for
//! the attempt's header deadline). Streams are boxed once per connection, spawned tasks once per
//! task (the runtimes box them too); dynamic dispatch on a read or write is lost in the syscall.
//!
//! Helpers on top of the trait, written once: [`timeout_at`], [`sleep`], [`spawn_handle`] (a
//! join handle that cancels on drop), [`unblock`], [`copy_bidirectional`].

use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::FutureExt as _;

mod copy;
mod duplex;
mod stream;
mod tls_io;
pub mod watch;

pub use copy::copy_bidirectional;
pub use duplex::{DuplexStream, duplex};
use futures_util::future::RemoteHandle;
use hyper::rt::{Sleep, Timer};
pub use stream::{Io, SyncIo, TcpConn};
pub use tls_io::{AlpnCheck, Negotiated, TlsAccept, TlsAccepted, TlsConnect};

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// An async runtime as the proxy uses it. Implemented by `weir_tokio::Tokio` and
/// `weir_smol::Smol`; see the module doc.
pub trait Runtime: Send + Sync + fmt::Debug + 'static {
    /// The runtime's name, for logs (`tokio`, `smol`).
    fn name(&self) -> &'static str;

    /// The runtime's timer and clock, as hyper takes them (hyper-util's `TokioTimer`,
    /// smol-hyper's `SmolTimer`).
    fn timer(&self) -> &'static (dyn Timer + Send + Sync);

    /// Run `task` on the executor of the current thread (a worker's, or the control thread's
    /// inside [`Runtime::block_on`]). The task is detached; it is dropped with its executor.
    fn spawn(&self, task: BoxFuture<'static, ()>);

    /// Run a new executor on the calling thread until `main` completes; [`Runtime::spawn`]
    /// inside it goes to that executor. Tasks still running when `main` ends are dropped.
    ///
    /// # Errors
    /// The executor could not be built.
    fn block_on(&self, main: Pin<Box<dyn Future<Output = ()> + '_>>) -> io::Result<()>;

    /// Register a bound, listening, non-blocking socket with the current thread's reactor.
    ///
    /// # Errors
    /// The reactor refused it.
    fn listener(&self, listener: std::net::TcpListener) -> io::Result<Box<dyn Listener>>;

    /// Register an accepted, non-blocking connection with the current thread's reactor.
    ///
    /// # Errors
    /// The reactor refused it.
    fn register(&self, stream: std::net::TcpStream) -> io::Result<Box<dyn TcpConn>>;

    /// Open a TCP connection to `addr` (no timeout of its own: callers bound it).
    fn connect(&self, addr: SocketAddr) -> BoxFuture<'static, io::Result<Box<dyn TcpConn>>>;

    /// A TLS client handshake ([`TlsConnect`]: over a connection of this runtime's).
    fn tls_connect(&self, tls: TlsConnect) -> BoxFuture<'static, io::Result<Box<dyn Io>>>;

    /// A TLS server handshake on an accepted connection ([`TlsAccept`]; the public listener,
    /// C-TLS-1). No timeout of its own: the caller bounds it (`server.tls.handshake_timeout`).
    fn tls_accept(&self, tls: TlsAccept) -> BoxFuture<'static, io::Result<TlsAccepted>>;

    /// Resolve `host` (a name or an address literal) with `port`.
    fn resolve(&self, host: String, port: u16) -> BoxFuture<'static, io::Result<Vec<SocketAddr>>>;

    /// Run `work` on a thread where blocking is allowed; resolves when it has run.
    fn spawn_blocking(&self, work: Box<dyn FnOnce() + Send>) -> BoxFuture<'static, ()>;

    /// Install the handlers of SIGTERM, SIGINT and SIGHUP (from then on SIGHUP no longer kills
    /// the process) and return the stream of their deliveries.
    ///
    /// # Errors
    /// A handler could not be installed.
    fn signals(&self) -> io::Result<Box<dyn Signals>>;
}

/// Implement hyper's `Read` and `Write` for a newtype `$t` over its field `.0` (which
/// implements them): each runtime's connection type is such a newtype, and the delegation is
/// written once here.
#[macro_export]
macro_rules! hyper_io_newtype {
    ($t:ty) => {
        $crate::hyper_io_newtype!($t, shutdown: |this: ::std::pin::Pin<&mut $t>, cx: &mut ::std::task::Context<'_>| {
            ::std::pin::Pin::new(&mut this.get_mut().0).poll_shutdown(cx)
        });
    };
    // `shutdown`: how the newtype ends its write side (async-io's `poll_close` only flushes).
    ($t:ty, shutdown: $shutdown:expr) => {
        impl ::hyper::rt::Read for $t {
            fn poll_read(
                mut self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
                buf: ::hyper::rt::ReadBufCursor<'_>,
            ) -> ::std::task::Poll<::std::io::Result<()>> {
                ::std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
            }
        }

        impl ::hyper::rt::Write for $t {
            fn poll_write(
                mut self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
                buf: &[u8],
            ) -> ::std::task::Poll<::std::io::Result<usize>> {
                ::std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
            }
            fn poll_write_vectored(
                mut self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
                bufs: &[::std::io::IoSlice<'_>],
            ) -> ::std::task::Poll<::std::io::Result<usize>> {
                ::std::pin::Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
            }
            fn is_write_vectored(&self) -> bool {
                ::hyper::rt::Write::is_write_vectored(&self.0)
            }
            fn poll_flush(
                mut self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<::std::io::Result<()>> {
                ::std::pin::Pin::new(&mut self.0).poll_flush(cx)
            }
            fn poll_shutdown(
                self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<::std::io::Result<()>> {
                ($shutdown)(self, cx)
            }
        }
    };
}

/// A listening socket of a runtime.
pub trait Listener: Send + Sync {
    /// The next connection, unregistered (it may be handed to another thread's reactor).
    fn accept(&self) -> BoxFuture<'_, io::Result<(std::net::TcpStream, SocketAddr)>>;
}

/// A process signal weir acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM: graceful shutdown.
    Terminate,
    /// SIGINT: graceful shutdown.
    Interrupt,
    /// SIGHUP: reload the configuration file.
    Hangup,
}

/// The deliveries of the signals [`Runtime::signals`] installed.
pub trait Signals: Send {
    /// The next signal (`None`: no more can come).
    fn next(&mut self) -> BoxFuture<'_, Option<Signal>>;
}

/// The runtime in use: a copyable handle on a `'static` [`Runtime`]. It is hyper's timer and
/// hyper's executor for the HTTP/2 server.
#[derive(Clone, Copy)]
pub struct Rt(pub &'static dyn Runtime);

impl fmt::Debug for Rt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name())
    }
}

impl std::ops::Deref for Rt {
    type Target = dyn Runtime;
    fn deref(&self) -> &Self::Target {
        self.0
    }
}

impl Timer for Rt {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Sleep>> {
        self.0.timer().sleep(duration)
    }
    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn Sleep>> {
        self.0.timer().sleep_until(deadline)
    }
    fn now(&self) -> Instant {
        self.0.timer().now()
    }
    fn reset(&self, sleep: &mut Pin<Box<dyn Sleep>>, new_deadline: Instant) {
        self.0.timer().reset(sleep, new_deadline);
    }
}

impl<F> hyper::rt::Executor<F> for Rt
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, fut: F) {
        self.0.spawn(Box::pin(async move {
            fut.await;
        }));
    }
}

impl Rt {
    /// The runtime's clock (tokio's can be paused in tests).
    #[must_use]
    pub fn now(self) -> Instant {
        self.0.timer().now()
    }

    /// A boxed sleep until `deadline`.
    #[must_use]
    pub fn sleep_until(self, deadline: Instant) -> Pin<Box<dyn Sleep>> {
        self.0.timer().sleep_until(deadline)
    }

    /// Move `sleep` (from this runtime's timer) to `deadline`, in place where the timer can.
    pub fn reset(self, sleep: &mut Pin<Box<dyn Sleep>>, deadline: Instant) {
        self.0.timer().reset(sleep, deadline);
    }

    /// Spawn `fut` detached on the current thread's executor.
    pub fn spawn(self, fut: impl Future<Output = ()> + Send + 'static) {
        self.0.spawn(Box::pin(fut));
    }
}

/// A boxed runtime sleep until an instant: hyper's `Sleep`, `Debug` and `Unpin`.
pub struct Deadline(Pin<Box<dyn Sleep>>);

impl Deadline {
    /// A sleep of `rt` until `at`.
    #[must_use]
    pub fn new(rt: Rt, at: Instant) -> Deadline {
        Deadline(rt.sleep_until(at))
    }
}

impl fmt::Debug for Deadline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Deadline")
    }
}

impl Future for Deadline {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

/// TCP connect to `host:port` (a name or an address literal), trying each resolved address in
/// turn, with `TCP_NODELAY` set (weir's upstream requests and probes are small writes).
///
/// # Errors
/// The name did not resolve, or no address accepted the connection.
pub async fn dial(rt: Rt, host: &str, port: u16) -> io::Result<Box<dyn TcpConn>> {
    let addrs = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => rt.resolve(host.to_owned(), port).await?,
    };
    let mut last = None;
    for addr in addrs {
        match rt.connect(addr).await {
            Ok(s) => {
                s.set_nodelay(true)?;
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address for host")))
}

/// Write `bytes` on a just-connected stream before anything else (a PROXY header,
/// `backends[].send_proxy_protocol`): all of them, flushed.
///
/// # Errors
/// The write failed, or the peer took nothing.
pub async fn write_preface(stream: &mut Box<dyn TcpConn>, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        let n = std::future::poll_fn(|cx| Pin::new(&mut **stream).poll_write(cx, bytes)).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        bytes = &bytes[n..];
    }
    std::future::poll_fn(|cx| Pin::new(&mut **stream).poll_flush(cx)).await
}

/// Sleep for `d`.
pub async fn sleep(rt: Rt, d: Duration) {
    rt.0.timer().sleep(d).await;
}

/// Sleep for `d` unless shutdown comes first: `true` when the sleep ended and the process is
/// not shutting down (the periodic control tasks' tick).
pub async fn tick_unless_shutdown(
    rt: Rt,
    d: Duration,
    shutdown: &mut watch::Receiver<bool>,
) -> bool {
    let tick = sleep(rt, d);
    let stop = shutdown.changed();
    if let futures_util::future::Either::Right(_) =
        futures_util::future::select(std::pin::pin!(tick), std::pin::pin!(stop)).await
    {
        return false;
    }
    !shutdown.get()
}

/// The next SIGINT or SIGTERM (SIGHUP ignored).
pub async fn wait_for_stop_signal(rt: Rt) {
    match rt.signals() {
        Ok(mut signals) => {
            while let Some(s) = signals.next().await {
                if s != Signal::Hangup {
                    return;
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot install signal handlers; stop with SIGKILL"),
    }
    std::future::pending::<()>().await;
}

/// The deadline of [`timeout_at`] passed first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("deadline has elapsed")]
pub struct Elapsed;

/// `fut`, unless `deadline` passes first.
///
/// # Errors
/// [`Elapsed`] when the deadline passed first (`fut` is dropped).
pub fn timeout_at<F: Future>(rt: Rt, deadline: Instant, fut: F) -> Timeout<F> {
    Timeout {
        fut,
        sleep: None,
        armed: false,
        rt,
        deadline,
    }
}

/// `fut`, unless `d` passes first.
///
/// # Errors
/// [`Elapsed`] when the time passed first.
pub fn timeout<F: Future>(rt: Rt, d: Duration, fut: F) -> Timeout<F> {
    timeout_at(rt, rt.now() + d, fut)
}

pin_project_lite::pin_project! {
    /// The future of [`timeout_at`]. A struct rather than an `async fn`: an `async fn` keeps
    /// its argument and the pinned copy it polls side by side, doubling the size of every
    /// future that awaits it (the request path awaits one per attempt). Its timer is made only
    /// when `fut` is not ready at the first poll.
    #[must_use = "futures do nothing unless polled"]
    pub struct Timeout<F> {
        #[pin]
        fut: F,
        sleep: TimerSlot,
        armed: bool,
        rt: Rt,
        deadline: Instant,
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let bound = (*this.rt, *this.deadline);
        poll_bounded(this.fut, this.sleep, this.armed, bound, cx)
    }
}

/// A timer slot a connection keeps across its requests: [`timeout_at_in`] arms the sleep in it
/// (made once, then moved in place), so that a bounded request does not box a timer each time;
/// with it, the deadline the sleep is armed at.
pub type TimerSlot = Option<(Pin<Box<dyn Sleep>>, Instant)>;

/// [`timeout_at`] with its sleep kept in `slot` (made on the first use, reset in place after).
///
/// # Errors
/// [`Elapsed`] when the deadline passed first (`fut` is dropped).
pub fn timeout_at_in<F: Future>(
    rt: Rt,
    deadline: Instant,
    slot: &mut TimerSlot,
    fut: F,
) -> TimeoutIn<'_, F> {
    TimeoutIn {
        fut,
        slot,
        armed: false,
        rt,
        deadline,
    }
}

pin_project_lite::pin_project! {
    /// The future of [`timeout_at_in`].
    #[must_use = "futures do nothing unless polled"]
    pub struct TimeoutIn<'s, F> {
        #[pin]
        fut: F,
        slot: &'s mut TimerSlot,
        armed: bool,
        rt: Rt,
        deadline: Instant,
    }
}

impl<F: Future> Future for TimeoutIn<'_, F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let bound = (*this.rt, *this.deadline);
        poll_bounded(this.fut, this.slot, this.armed, bound, cx)
    }
}

/// The poll of [`Timeout`] and [`TimeoutIn`]: `fut`, else the sleep in `slot` until the
/// deadline of `(rt, deadline)`, armed at the first pending poll (made, or kept from an earlier
/// use).
///
/// A sleep kept from an earlier use stays where it is when it is due no later than `deadline`,
/// and is moved to `deadline` only when it fires first (a keep-alive connection's
/// requests each have a later deadline than the one before, and moving a timer in the runtime's
/// wheel on every request cost more than the rare early wake-up does).
fn poll_bounded<F: Future>(
    fut: Pin<&mut F>,
    slot: &mut TimerSlot,
    armed: &mut bool,
    (rt, deadline): (Rt, Instant),
    cx: &mut Context<'_>,
) -> Poll<Result<F::Output, Elapsed>> {
    if let Poll::Ready(v) = fut.poll(cx) {
        return Poll::Ready(Ok(v));
    }
    let (s, at) = match slot {
        Some(kept) if *armed => kept,
        Some(kept) => {
            *armed = true;
            if kept.1 > deadline {
                rt.reset(&mut kept.0, deadline);
                kept.1 = deadline;
            }
            kept
        }
        None => {
            *armed = true;
            slot.insert((rt.sleep_until(deadline), deadline))
        }
    };
    loop {
        match s.as_mut().poll(cx) {
            Poll::Ready(()) if *at < deadline => {
                rt.reset(s, deadline);
                *at = deadline;
            }
            Poll::Ready(()) => return Poll::Ready(Err(Elapsed)),
            Poll::Pending => return Poll::Pending,
        }
    }
}

/// A spawned task's result. Dropping the handle cancels the task (unlike tokio's, which
/// detaches): keep it for as long as the task should run.
#[derive(Debug)]
#[must_use = "dropping a JoinHandle cancels its task"]
pub struct JoinHandle<T>(RemoteHandle<std::thread::Result<T>>);

/// The task behind a [`JoinHandle`] panicked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the task panicked")]
pub struct JoinError;

impl<T: Send + 'static> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0)
            .poll(cx)
            .map(|r| r.map_err(|_| JoinError))
    }
}

/// Spawn `fut` on the current thread's executor and return a handle to its output; a panic in
/// it is caught and reported as [`JoinError`].
pub fn spawn_handle<T: Send + 'static>(
    rt: Rt,
    fut: impl Future<Output = T> + Send + 'static,
) -> JoinHandle<T> {
    let (task, handle) = std::panic::AssertUnwindSafe(fut)
        .catch_unwind()
        .remote_handle();
    rt.spawn(task);
    JoinHandle(handle)
}

/// Run `f` where blocking is allowed and return its result (`None`: it panicked).
pub async fn unblock<T: Send + 'static>(
    rt: Rt,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let slot = Arc::new(std::sync::Mutex::new(None));
    let out = Arc::clone(&slot);
    rt.0.spawn_blocking(Box::new(move || {
        let v = f();
        if let Ok(mut s) = out.lock() {
            *s = Some(v);
        }
    }))
    .await;
    slot.lock().ok().and_then(|mut s| s.take())
}
