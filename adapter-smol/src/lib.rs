//! weir on smol: [`Smol`], the smol / async-io implementation of weir-proxy's runtime seam
//! ([`weir_proxy::rt::Runtime`]), and the `weir-smol` binary (`main.rs`).
//!
//! - Executors: each thread that calls [`Runtime::block_on`](weir_proxy::rt::Runtime::block_on)
//!   (the control thread, every worker) runs its own `async_executor::Executor`, registered in a
//!   thread-local so that [`Runtime::spawn`](weir_proxy::rt::Runtime::spawn) lands on the
//!   current thread's executor, as tokio's current-thread runtimes do. A panicking task is
//!   caught and logged (tokio isolates task panics the same way).
//! - IO and timers: async-io's reactor (`Async<TcpStream>`, `async_io::Timer` through
//!   smol-hyper's `SmolTimer`); streams reach hyper through smol-hyper's `FuturesIo`.
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
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use async_executor::Executor;
use async_io::Async;
use futures_lite::{FutureExt as _, StreamExt as _};
use hyper::rt::{Sleep, Timer};
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use smol_hyper::rt::{FuturesIo, SmolTimer};
use weir_proxy::rt::{BoxFuture, Io, Listener, Rt, Signal, Signals, TcpConn};

pub use weir_proxy::*;

/// The smol runtime, as weir-proxy uses it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Smol;

static SMOL: Smol = Smol;

/// The handle on [`Smol`] to give weir-proxy (`weir_proxy::start(weir_smol::rt(), ..)`).
#[must_use]
pub fn rt() -> Rt {
    Rt(&SMOL)
}

thread_local! {
    /// The executor of the thread's `block_on`, if one runs.
    static CURRENT: RefCell<Option<Arc<Executor<'static>>>> = const { RefCell::new(None) };
}

/// The process-wide fallback executor for spawns from threads without one (never the data
/// plane's), run by one thread started on first use.
fn fallback() -> &'static Executor<'static> {
    static GLOBAL: std::sync::OnceLock<Executor<'static>> = std::sync::OnceLock::new();
    GLOBAL.get_or_init(|| {
        let spawned = std::thread::Builder::new()
            .name("weir-smol-fallback".into())
            .spawn(|| async_io::block_on(fallback().run(std::future::pending::<()>())));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the fallback executor thread");
        }
        Executor::new()
    })
}

impl Timer for Smol {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Sleep>> {
        SmolTimer::new().sleep(duration)
    }
    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn Sleep>> {
        SmolTimer::new().sleep_until(deadline)
    }
    fn reset(&self, sleep: &mut Pin<Box<dyn Sleep>>, new_deadline: Instant) {
        SmolTimer::new().reset(sleep, new_deadline);
    }
}

impl weir_proxy::rt::Runtime for Smol {
    fn name(&self) -> &'static str {
        "smol"
    }

    fn spawn(&self, task: BoxFuture<'static, ()>) {
        let task = async move {
            if std::panic::AssertUnwindSafe(task)
                .catch_unwind()
                .await
                .is_err()
            {
                tracing::error!("a task panicked; it was dropped");
            }
        };
        let local = CURRENT.with(|c| c.borrow().as_ref().map(Arc::clone));
        match local {
            Some(ex) => ex.spawn(task).detach(),
            None => fallback().spawn(task).detach(),
        }
    }

    fn block_on(&self, main: Pin<Box<dyn Future<Output = ()> + '_>>) -> io::Result<()> {
        let ex = Arc::new(Executor::new());
        let previous = CURRENT.with(|c| c.replace(Some(Arc::clone(&ex))));
        async_io::block_on(ex.run(main));
        CURRENT.with(|c| *c.borrow_mut() = previous);
        Ok(())
    }

    fn listener(&self, listener: TcpListener) -> io::Result<Box<dyn Listener>> {
        Ok(Box::new(SmolListener(Async::new(listener)?)))
    }

    fn register(&self, stream: TcpStream) -> io::Result<Box<dyn TcpConn>> {
        Ok(Box::new(Conn(FuturesIo::new(Async::new(stream)?))))
    }

    fn connect(&self, addr: SocketAddr) -> BoxFuture<'static, io::Result<Box<dyn TcpConn>>> {
        Box::pin(async move {
            let s = Async::<TcpStream>::connect(addr).await?;
            Ok(Box::new(Conn(FuturesIo::new(s))) as Box<dyn TcpConn>)
        })
    }

    fn tls_connect(
        &self,
        config: Arc<ClientConfig>,
        name: ServerName<'static>,
        tcp: Box<dyn TcpConn>,
    ) -> BoxFuture<'static, io::Result<Box<dyn Io>>> {
        Box::pin(async move {
            let Ok(conn) = tcp.into_any().downcast::<Conn>() else {
                return Err(io::Error::other("not a smol connection"));
            };
            let connector = futures_rustls::TlsConnector::from(config);
            let tls = connector.connect(name, conn.0.into_inner()).await?;
            Ok(Box::new(FuturesIo::new(tls)) as Box<dyn Io>)
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
struct Conn(FuturesIo<Async<TcpStream>>);

// async-io's `poll_close` only flushes: end the write side with a real TCP shutdown, so that
// a tunnel's half-close reaches the other end (C-PATH-8).
weir_proxy::hyper_io_newtype!(Conn, shutdown: |this: Pin<&mut Conn>, _cx: &mut Context<'_>| {
    Poll::Ready(this.0.get_ref().get_ref().shutdown(std::net::Shutdown::Write))
});

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

struct SmolListener(Async<TcpListener>);

impl Listener for SmolListener {
    fn accept(&self) -> BoxFuture<'_, io::Result<(TcpStream, SocketAddr)>> {
        Box::pin(async move {
            let (s, peer) = self.0.accept().await?;
            Ok((s.into_inner()?, peer))
        })
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
