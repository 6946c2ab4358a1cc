//! weir on tokio: [`Tokio`], the tokio implementation of weir-proxy's runtime seam
//! ([`weir_proxy::rt::Runtime`]), and the `weir` binary (`main.rs`).
//!
//! The proxy itself (data plane, probes, management, reload, CLI) is weir-proxy's; this crate
//! only says how tokio spawns, sleeps, connects, resolves, shakes TLS hands, blocks and hears
//! signals. Each worker thread runs its own current-thread runtime
//! ([`Runtime::block_on`](weir_proxy::rt::Runtime::block_on)), like the control thread.

use std::any::Any;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::rt::Timer;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{SignalKind, signal};
use weir_proxy::rt::{
    BoxFuture, Io, Listener, Negotiated, Rt, Signal, Signals, TcpConn, TlsAccept, TlsAccepted,
    TlsConnect,
};

pub use weir_proxy::*;

/// [`weir_proxy::start`] on tokio (the current thread's runtime runs the acceptor, health checks
/// and management; each worker thread gets its own).
///
/// # Errors
/// See [`StartError`].
pub async fn start(
    cfg: weir_core::config::ValidConfig,
    opts: Options,
) -> Result<ProxyHandle, StartError> {
    weir_proxy::start(rt(), cfg, opts).await
}

/// The tokio runtime, as weir-proxy uses it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tokio;

static TOKIO: Tokio = Tokio;

/// The handle on [`Tokio`] to give weir-proxy (`weir_proxy::start(weir_tokio::rt(), ..)`).
#[must_use]
pub fn rt() -> Rt {
    Rt(&TOKIO)
}

impl weir_proxy::rt::Runtime for Tokio {
    fn name(&self) -> &'static str {
        "tokio"
    }

    /// hyper-util's: tokio's clock, so that tests pausing tokio's time move weir's too.
    fn timer(&self) -> &'static (dyn Timer + Send + Sync) {
        static TIMER: TokioClock = TokioClock;
        &TIMER
    }

    fn spawn(&self, task: BoxFuture<'static, ()>) {
        drop(tokio::spawn(task));
    }

    fn block_on(&self, main: Pin<Box<dyn Future<Output = ()> + '_>>) -> io::Result<()> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(main);
        Ok(())
    }

    fn listener(&self, listener: std::net::TcpListener) -> io::Result<Box<dyn Listener>> {
        Ok(Box::new(TokioListener(TcpListener::from_std(listener)?)))
    }

    fn register(&self, stream: std::net::TcpStream) -> io::Result<Box<dyn TcpConn>> {
        Ok(Conn::boxed(TcpStream::from_std(stream)?))
    }

    fn connect(&self, addr: SocketAddr) -> BoxFuture<'static, io::Result<Box<dyn TcpConn>>> {
        Box::pin(async move { Ok(Conn::boxed(TcpStream::connect(addr).await?)) })
    }

    fn tls_connect(&self, tls: TlsConnect) -> BoxFuture<'static, io::Result<Box<dyn Io>>> {
        Box::pin(async move {
            let (config, name, tcp, alpn) = tls.into_parts::<Conn>()?;
            let stream = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp.0.into_inner())
                .await
                .map_err(|e| alpn.handshake_error(e))?;
            alpn.check(stream.get_ref().1)?;
            Ok(Box::new(TokioIo::new(stream)) as Box<dyn Io>)
        })
    }

    fn tls_accept(&self, tls: TlsAccept) -> BoxFuture<'static, io::Result<TlsAccepted>> {
        Box::pin(async move {
            let (config, tcp) = tls.into_parts::<Conn>()?;
            let stream = tokio_rustls::TlsAcceptor::from(config)
                .accept(tcp.0.into_inner())
                .await?;
            let session = Negotiated::of(stream.get_ref().1);
            Ok(TlsAccepted::new(Box::new(TokioIo::new(stream)), session))
        })
    }

    fn resolve(&self, host: String, port: u16) -> BoxFuture<'static, io::Result<Vec<SocketAddr>>> {
        Box::pin(async move {
            Ok(tokio::net::lookup_host((host.as_str(), port))
                .await?
                .collect())
        })
    }

    fn spawn_blocking(&self, work: Box<dyn FnOnce() + Send>) -> BoxFuture<'static, ()> {
        let task = tokio::task::spawn_blocking(work);
        Box::pin(async move {
            let _ = task.await;
        })
    }

    fn signals(&self) -> io::Result<Box<dyn Signals>> {
        Ok(Box::new(TokioSignals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        }))
    }
}

/// hyper-util's [`TokioTimer`], method for method, as a plain static: `TokioTimer` cannot be
/// built in a `static` (`non_exhaustive`), and a `LazyLock` around it was checked on every
/// clock reading.
#[derive(Debug, Clone, Copy)]
struct TokioClock;

impl Timer for TokioClock {
    fn sleep(&self, duration: std::time::Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        TokioTimer::new().sleep(duration)
    }

    fn sleep_until(&self, deadline: std::time::Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        TokioTimer::new().sleep_until(deadline)
    }

    fn now(&self) -> std::time::Instant {
        TokioTimer::new().now()
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, new_deadline: std::time::Instant) {
        TokioTimer::new().reset(sleep, new_deadline);
    }
}

/// A tokio TCP connection as hyper and weir-proxy see it.
struct Conn(TokioIo<TcpStream>);

impl Conn {
    fn boxed(socket: TcpStream) -> Box<dyn TcpConn> {
        Box::new(Conn(TokioIo::new(socket)))
    }
}

weir_proxy::hyper_io_newtype!(Conn);

impl TcpConn for Conn {
    fn poll_peek(&self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let mut rb = tokio::io::ReadBuf::new(buf);
        match self.0.inner().poll_peek(cx, &mut rb) {
            Poll::Ready(Ok(n)) => Poll::Ready(Ok(n)),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.0.inner().set_nodelay(on)
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

struct TokioListener(TcpListener);

impl Listener for TokioListener {
    fn accept(&self) -> BoxFuture<'_, io::Result<(std::net::TcpStream, SocketAddr)>> {
        Box::pin(async move {
            let (s, peer) = self.0.accept().await?;
            Ok((s.into_std()?, peer))
        })
    }
}

struct TokioSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals for TokioSignals {
    fn next(&mut self) -> BoxFuture<'_, Option<Signal>> {
        Box::pin(async move {
            tokio::select! {
                s = self.term.recv() => s.map(|()| Signal::Terminate),
                s = self.int.recv() => s.map(|()| Signal::Interrupt),
                s = self.hup.recv() => s.map(|()| Signal::Hangup),
            }
        })
    }
}
