//! weir on smol: [`Smol`], the smol / async-io implementation of weir-proxy's runtime seam
//! ([`weir_proxy::rt::Runtime`]), and the `weir-smol` binary (`main.rs`).
//!
//! - Executors: each thread that calls [`Runtime::block_on`](weir_proxy::rt::Runtime::block_on)
//!   (the control thread, every worker) runs its own [`exec::Executor`] (a run queue of
//!   `async-task` runnables, parked in async-io's reactor), registered in a thread-local so
//!   that [`Runtime::spawn`](weir_proxy::rt::Runtime::spawn) lands on the current thread's
//!   executor, as tokio's current-thread runtimes do. A panicking task is caught and logged
//!   (tokio isolates task panics the same way).
//! - IO and timers: async-io's reactor (`Async<TcpStream>`); hyper's and weir's sleeps in the
//!   thread's timer wheel ([`timer`]), one async-io `Timer` per thread; streams reach hyper
//!   through [`SmolIo`] (not smol-hyper's `FuturesIo`, which zeroes hyper's whole free read
//!   buffer before every read).
//! - TLS: futures-rustls; DNS and blocking work: the `blocking` thread pool; signals:
//!   async-signal.
//!
//! No tokio runtime runs in this process (CI: scripts/check-smol-tree).

use std::any::Any;
use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs as _};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use async_io::Async;
use futures_lite::{AsyncRead, AsyncWrite, StreamExt as _};
use hyper::rt::ReadBufCursor;
use hyper::rt::Timer;
use weir_proxy::rt::{
    BoxFuture, Io, Listener, Negotiated, Rt, Signal, Signals, TcpConn, TlsAccept, TlsAccepted,
    TlsConnect,
};

pub use weir_proxy::*;

mod exec;
mod timer;

use exec::Executor;

/// The smol runtime, as weir-proxy uses it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Smol;

static SMOL: Smol = Smol;

/// The handle on [`Smol`] to give weir-proxy (`weir_proxy::start(weir_smol::rt(), ..)`).
#[must_use]
pub fn rt() -> Rt {
    Rt(&SMOL)
}

/// The process-wide fallback executor for spawns from threads without one (never the data
/// plane's), run by one thread started on first use.
fn fallback() -> &'static Executor {
    static GLOBAL: std::sync::OnceLock<Executor> = std::sync::OnceLock::new();
    GLOBAL.get_or_init(|| {
        let ex = Executor::new();
        let run = ex.clone();
        let spawned = std::thread::Builder::new()
            .name("weir-smol-fallback".into())
            .spawn(move || run.block_on(Box::pin(std::future::pending::<()>())));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the fallback executor thread");
        }
        ex
    })
}

impl weir_proxy::rt::Runtime for Smol {
    fn name(&self) -> &'static str {
        "smol"
    }

    /// The thread's timer wheel, one async-io timer per thread ([`timer::ThreadTimer`]).
    fn timer(&self) -> &'static (dyn Timer + Send + Sync) {
        static TIMER: timer::ThreadTimer = timer::ThreadTimer;
        &TIMER
    }

    fn spawn(&self, task: BoxFuture<'static, ()>) {
        match Executor::current() {
            Some(ex) => ex.spawn(task),
            None => fallback().spawn(task),
        }
    }

    fn block_on(&self, main: Pin<Box<dyn Future<Output = ()> + '_>>) -> io::Result<()> {
        Executor::new().block_on(main);
        Ok(())
    }

    fn listener(&self, listener: TcpListener) -> io::Result<Box<dyn Listener>> {
        Ok(Box::new(SmolListener(Async::new(listener)?)))
    }

    fn register(&self, stream: TcpStream) -> io::Result<Box<dyn TcpConn>> {
        Ok(Conn::boxed(Async::new(stream)?))
    }

    fn connect(&self, addr: SocketAddr) -> BoxFuture<'static, io::Result<Box<dyn TcpConn>>> {
        Box::pin(async move { Ok(Conn::boxed(Async::<TcpStream>::connect(addr).await?)) })
    }

    fn tls_connect(&self, tls: TlsConnect) -> BoxFuture<'static, io::Result<Box<dyn Io>>> {
        Box::pin(async move {
            let (config, name, tcp, alpn) = tls.into_parts::<Conn>()?;
            let stream = futures_rustls::TlsConnector::from(config)
                .connect(name, tcp.0.into_inner())
                .await
                .map_err(|e| alpn.handshake_error(e))?;
            alpn.check(stream.get_ref().1)?;
            // rustls writes one slice at a time: hyper should flatten.
            Ok(Box::new(SmolIo::new(stream, false)) as Box<dyn Io>)
        })
    }

    fn tls_accept(&self, tls: TlsAccept) -> BoxFuture<'static, io::Result<TlsAccepted>> {
        Box::pin(async move {
            let (config, tcp) = tls.into_parts::<Conn>()?;
            let stream = futures_rustls::TlsAcceptor::from(config)
                .accept(tcp.0.into_inner())
                .await?;
            let session = Negotiated::of(stream.get_ref().1);
            // rustls writes one slice at a time: hyper should flatten.
            Ok(TlsAccepted::new(
                Box::new(SmolIo::new(stream, false)),
                session,
            ))
        })
    }

    fn resolve(&self, host: String, port: u16) -> BoxFuture<'static, io::Result<Vec<SocketAddr>>> {
        Box::pin(blocking::unblock(move || {
            Ok((host.as_str(), port).to_socket_addrs()?.collect())
        }))
    }

    fn spawn_blocking(&self, work: Box<dyn FnOnce() + Send>) -> BoxFuture<'static, ()> {
        Box::pin(blocking::unblock(work))
    }

    fn signals(&self) -> io::Result<Box<dyn Signals>> {
        use async_signal::Signal as S;
        Ok(Box::new(SmolSignals(async_signal::Signals::new([
            S::Term,
            S::Int,
            S::Hup,
        ])?)))
    }
}

/// An async-io TCP connection as hyper and weir-proxy see it.
struct Conn(SmolIo<Async<TcpStream>>);

impl Conn {
    fn boxed(socket: Async<TcpStream>) -> Box<dyn TcpConn> {
        Box::new(Conn(SmolIo::new(socket, true)))
    }
}

// Shutdown ends the TCP write side (`CloseWrite`), so a tunnel's half-close reaches the other
// end (C-PATH-8).
weir_proxy::hyper_io_newtype!(Conn);

impl TcpConn for Conn {
    fn poll_peek(&self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let socket = self.0.get_ref();
        loop {
            match socket.get_ref().peek(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => return Poll::Ready(other),
            }
            match socket.poll_readable(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.0.get_ref().get_ref().set_nodelay(on)
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

/// A futures-io stream as hyper's IO.
///
/// Reads go through a per-thread scratch buffer and are copied into hyper's buffer, which may
/// be uninitialised: reading into it directly from safe code would need it zeroed first, and
/// smol-hyper's `FuturesIo` zeroes all of its free part (8 KiB and more) before every read
/// attempt, pending ones included (3.4 % of weir-smol's CPU under load, in `memset`). The copy
/// costs only the bytes that arrived.
///
/// A socket also remembers whether it may have bytes to read. async-io's reads always try the
/// system call first; a connection is polled several times per request (hyper's dispatcher,
/// weir's upstream driver), so most reads failed with `EAGAIN` (11.7 `recvfrom` per request
/// against tokio's 2). After a read that came back short (the socket is most likely drained)
/// or failed with `WouldBlock`, the next read first asks the reactor ([`Readiness`]) and makes
/// no system call until it reports the socket readable.
struct SmolIo<T> {
    io: T,
    /// Whether `poll_write_vectored` writes several slices at once (a socket's `writev`), so
    /// hyper need not flatten a response's head and body into one buffer.
    vectored: bool,
    /// Whether a read may find bytes without waiting for the reactor.
    maybe_readable: bool,
}

/// The most one read takes (like nginx's 16 KiB buffers); hyper reads again for more.
const SCRATCH: usize = 16 * 1024;

thread_local! {
    static SCRATCH_BUF: RefCell<Box<[u8]>> = RefCell::new(vec![0; SCRATCH].into_boxed_slice());
}

impl<T> SmolIo<T> {
    fn new(io: T, vectored: bool) -> SmolIo<T> {
        SmolIo {
            io,
            vectored,
            maybe_readable: true,
        }
    }

    fn get_ref(&self) -> &T {
        &self.io
    }

    fn into_inner(self) -> T {
        self.io
    }
}

/// Whether a stream's reactor has seen it readable (registering `cx` when not).
trait Readiness {
    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}

impl Readiness for Async<TcpStream> {
    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Async::poll_readable(self, cx)
    }
}

/// TLS buffers decrypted bytes the socket no longer shows: always read.
impl<S> Readiness for futures_rustls::client::TlsStream<S> {
    fn poll_readable(&self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// As for the client side.
impl<S> Readiness for futures_rustls::server::TlsStream<S> {
    fn poll_readable(&self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Ending the TCP write side (a FIN) once a stream's own close is done: async-io's `poll_close`
/// only flushes, and futures-rustls's sends `close_notify` and then calls it, so without this a
/// tunnel's half-close (C-PATH-8) would never reach the peer's TCP.
trait CloseWrite {
    fn close_write(&self) -> io::Result<()>;
}

impl CloseWrite for Async<TcpStream> {
    fn close_write(&self) -> io::Result<()> {
        self.get_ref().shutdown(std::net::Shutdown::Write)
    }
}

impl CloseWrite for futures_rustls::client::TlsStream<Async<TcpStream>> {
    fn close_write(&self) -> io::Result<()> {
        self.get_ref().0.close_write()
    }
}

impl CloseWrite for futures_rustls::server::TlsStream<Async<TcpStream>> {
    fn close_write(&self) -> io::Result<()> {
        self.get_ref().0.close_write()
    }
}

impl<T: AsyncRead + Readiness + Unpin> hyper::rt::Read for SmolIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let want = buf.remaining().min(SCRATCH);
        if want == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            if !self.maybe_readable {
                match self.io.poll_readable(cx) {
                    Poll::Ready(Ok(())) => self.maybe_readable = true,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                }
            }
            let read = SCRATCH_BUF.with(|scratch| {
                let mut scratch = scratch.borrow_mut();
                let read = Pin::new(&mut self.io).poll_read(cx, &mut scratch[..want]);
                read.map_ok(|n| {
                    buf.put_slice(&scratch[..n]);
                    n
                })
            });
            match read {
                Poll::Ready(Ok(n)) => {
                    self.maybe_readable = n == want;
                    return Poll::Ready(Ok(()));
                }
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.maybe_readable = false;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                // async-io registered the waker itself.
                Poll::Pending => {
                    self.maybe_readable = false;
                    return Poll::Pending;
                }
            }
        }
    }
}

impl<T: AsyncWrite + CloseWrite + Unpin> hyper::rt::Write for SmolIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.vectored
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(Pin::new(&mut self.io).poll_close(cx))?;
        match self.io.close_write() {
            // Already shut, or the peer reset: nothing left to end.
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Poll::Ready(Ok(())),
            other => Poll::Ready(other),
        }
    }
}

struct SmolListener(Async<TcpListener>);

impl Listener for SmolListener {
    /// The accepted socket goes back as a plain `TcpStream`, registered later
    /// ([`Runtime::register`](weir_proxy::rt::Runtime::register)): `Async::accept` would
    /// register it with the reactor here, only for it to be deregistered at once.
    fn accept(&self) -> BoxFuture<'_, io::Result<(TcpStream, SocketAddr)>> {
        Box::pin(self.0.read_with(|l| l.accept()))
    }
}

struct SmolSignals(async_signal::Signals);

impl Signals for SmolSignals {
    fn next(&mut self) -> BoxFuture<'_, Option<Signal>> {
        Box::pin(async move {
            loop {
                match self.0.next().await? {
                    Ok(async_signal::Signal::Term) => return Some(Signal::Terminate),
                    Ok(async_signal::Signal::Int) => return Some(Signal::Interrupt),
                    Ok(async_signal::Signal::Hup) => return Some(Signal::Hangup),
                    Ok(_) | Err(_) => {}
                }
            }
        })
    }
}
