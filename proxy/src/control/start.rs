//! Starting a proxy: [`start`] turns a validated configuration into a running proxy in this
//! process: it builds the runtime snapshot (`weir_core::runtime::Runtime`), runs one
//! health-check cycle (C-HEALTH-1), binds the listeners, starts the workers and returns a
//! [`ProxyHandle`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use weir_core::config::HostPort;
use weir_core::config::ValidConfig;
use weir_core::exchange::Services;
use weir_core::runtime::Runtime;

use crate::base::clock::Clock;
use crate::base::rt::{self, JoinHandle, Rt, watch};
use crate::base::worker;
use crate::control::{
    cert_watch, discovery, health, management, reload, store_recovery, store_sweep,
};
use crate::datapath::server;
use crate::observe::{events, listener_tls, metrics};
use crate::services::admission::Admission;
use crate::services::probe::HealthDriver;
use crate::services::ratelimit::{self, Limiter, RateLimiter};
use crate::services::snapshot::Snapshot;
use crate::services::state::{Control, DataPlane, ProxyState, ServerLimits};
use crate::services::upstream::{Upstream, UpstreamConfig};

/// How to start a proxy (the CLI flags of the process protocol).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Data-plane listener; default `0.0.0.0:<server.port>`.
    pub public_bind: Option<SocketAddr>,
    /// Management listener; default `management.address` (only when `management.enabled`).
    pub management_bind: Option<SocketAddr>,
    /// Worker threads; default: the number of CPUs.
    pub workers: Option<usize>,
    /// A rate limiter built by the caller (tests); default: the store `rate_limit.storage`
    /// selects, built from the configuration (C-RATE-3).
    pub rate_limiter: Option<Arc<RateLimiter>>,
}

/// Why a proxy could not start. Each message says which step failed; the underlying error is
/// the `source()` (`base::error_chain::chain` prints them all).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The runtime snapshot could not be built from the configuration.
    #[error("cannot build the runtime")]
    Runtime(#[source] weir_core::runtime::BuildError),
    /// The configuration needs a rate-limit store this runtime cannot run
    /// ([`check_runtime_support`]).
    #[error("cannot build the rate-limit store")]
    Unsupported(#[source] Unsupported),
    /// The rate-limit store could not be built (invalid store settings, or the local store
    /// could not be allocated).
    #[error("cannot build the rate-limit store")]
    RateStore(#[source] weir_storage::StoreError),
    /// The TLS client configuration (health probes, upstream TLS) could not be built.
    #[error("cannot build the TLS client configuration")]
    Tls(#[source] rustls::Error),
    /// The public listener's TLS could not be set up (a certificate pair or the client CA).
    #[error("cannot set up TLS on the public listener")]
    ListenerTls(#[source] listener_tls::ListenerTlsError),
    /// `server.upstream.tls_*` does not load (C-GRPC-5).
    #[error("cannot set up TLS to backends")]
    UpstreamTls(#[source] crate::services::upstream_tls::UpstreamTlsError),
    /// Loading the upstream TLS files panicked.
    #[error("cannot set up TLS to backends: loading the files panicked")]
    UpstreamTlsPanicked,
    /// The thread loading the listener's certificates panicked.
    #[error("cannot set up TLS on the public listener: loading the certificates panicked")]
    ListenerTlsPanicked,
    /// A listener could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: String,
        /// Why.
        #[source]
        error: std::io::Error,
    },
    /// A worker thread could not be started.
    #[error("cannot start a worker thread")]
    Worker(#[source] std::io::Error),
    /// The health checks stopped before their first cycle ended.
    #[error("the health checks stopped before the first cycle ended")]
    Health,
    /// `management.allow_insecure` with a management bind that is not loopback.
    #[error(
        "management.allow_insecure is true but the management listener would bind {0}: without a \
         token only a loopback address is allowed"
    )]
    InsecureManagement(SocketAddr),
}

/// A running proxy. [`ProxyHandle::shutdown`] starts a graceful shutdown (C-PATH-10);
/// [`ProxyHandle::wait`] returns once it is complete.
#[derive(Debug)]
pub struct ProxyHandle {
    public: SocketAddr,
    management: Option<SocketAddr>,
    proxy_state: Arc<ProxyState>,
    shutdown: watch::Sender<bool>,
    workers: Vec<std::thread::JoinHandle<()>>,
    tasks: Vec<JoinHandle<()>>,
    health: Option<HealthDriver>,
    shutdown_delay: Duration,
}

impl ProxyHandle {
    /// The data-plane address actually bound.
    #[must_use]
    pub fn public_addr(&self) -> SocketAddr {
        self.public
    }

    /// The management address actually bound, when the management listener runs.
    #[must_use]
    pub fn management_addr(&self) -> Option<SocketAddr> {
        self.management
    }

    /// The proxy's whole state (data plane, control block, connection caps, listener front).
    #[must_use]
    pub fn proxy_state(&self) -> &Arc<ProxyState> {
        &self.proxy_state
    }

    /// The health driver (for reloads).
    #[must_use]
    pub fn health(&self) -> Option<&HealthDriver> {
        self.health.as_ref()
    }

    /// The first phase of a graceful shutdown (C-PATH-10): readiness turns false at once
    /// (`/readyz` answers `503` on both listeners) while the listeners keep accepting and
    /// serving as before. The caller waits [`shutdown_delay`](Self::shutdown_delay), so that an
    /// orchestrator removes the endpoint before connections are refused, then calls
    /// [`shutdown`](Self::shutdown).
    pub fn withdraw(&self) {
        self.proxy_state.data_plane.services.begin_shutdown();
    }

    /// `server.shutdown_delay`: how long the listeners keep accepting after
    /// [`withdraw`](Self::withdraw) (C-PATH-10).
    #[must_use]
    pub fn shutdown_delay(&self) -> Duration {
        self.shutdown_delay
    }

    /// Begin a graceful shutdown (C-PATH-10): readiness turns false, the listeners close, idle
    /// connections close, in-flight requests get `server.shutdown_timeout` to finish.
    pub fn shutdown(&self) {
        self.proxy_state.data_plane.services.begin_shutdown();
        self.shutdown.send(true);
    }

    /// Wait until the proxy has stopped (after [`ProxyHandle::shutdown`]).
    pub async fn wait(mut self) {
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
        let workers = std::mem::take(&mut self.workers);
        let _ = rt::unblock(self.proxy_state.data_plane.rt, move || {
            for w in workers {
                let _ = w.join();
            }
        })
        .await;
        if let Some(h) = self.health.take() {
            h.shutdown().await;
        }
    }

    /// Re-read `path` and apply it as SIGHUP does (C-CONF-4..7); see [`reload::reload_file`].
    pub async fn reload_file(
        &self,
        path: &std::path::Path,
    ) -> Result<reload::Applied, reload::Rejected> {
        reload::reload_file(&self.proxy_state, path).await
    }

    /// [`shutdown`](Self::shutdown) and [`wait`](Self::wait).
    pub async fn stop(self) {
        self.shutdown();
        self.wait().await;
    }
}

/// Bind a listening TCP socket with a deep accept queue (non-blocking, for a runtime to
/// register).
fn listen(addr: SocketAddr) -> Result<std::net::TcpListener, StartError> {
    let bind_err = |error| StartError::Bind {
        addr: addr.to_string(),
        error,
    };
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )
    .map_err(bind_err)?;
    socket.set_reuse_address(true).map_err(bind_err)?;
    socket.set_nonblocking(true).map_err(bind_err)?;
    socket.bind(&addr.into()).map_err(bind_err)?;
    socket.listen(4096).map_err(bind_err)?;
    Ok(socket.into())
}

/// What the configuration asks for and this runtime cannot run ([`check_runtime_support`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    /// `rate_limit.storage: postgres` on a runtime other than tokio (docs/storage.md).
    #[error(
        "rate_limit.storage: postgres is not supported on the {runtime} runtime: the PostgreSQL \
         store needs a tokio runtime (tokio-postgres and deadpool-postgres); use redis or \
         local, or run the tokio binary `weir` (docs/storage.md)"
    )]
    Postgres {
        /// The runtime's name (`smol`).
        runtime: &'static str,
    },
}

/// Whether `rt` can run everything `cfg` asks for (the smol runtime has no PostgreSQL store,
/// docs/storage.md); the message names the field and why.
///
/// # Errors
/// The configuration needs what this runtime lacks.
pub fn check_runtime_support(rt: Rt, cfg: &ValidConfig) -> Result<(), Unsupported> {
    if cfg.database.is_some() && !weir_storage::postgres_supported() {
        return Err(Unsupported::Postgres { runtime: rt.name() });
    }
    Ok(())
}

/// The data-plane address of a configuration: `0.0.0.0:<server.port>`.
#[must_use]
pub fn default_public_bind(cfg: &ValidConfig) -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], cfg.server.port))
}

/// Start a proxy for `cfg` on the runtime `rt`: the acceptor, health checks and management on
/// the calling thread's executor, and `workers` worker threads (the data plane), each running
/// its own executor of `rt`. Returns once the first health-check cycle has ended and the
/// listeners are open (C-HEALTH-1).
pub async fn start(rt: Rt, cfg: ValidConfig, opts: Options) -> Result<ProxyHandle, StartError> {
    check_runtime_support(rt, &cfg).map_err(StartError::Unsupported)?;
    let shutdown_delay = cfg.server.shutdown_delay;
    let workers = opts
        .workers
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let public_bind = opts
        .public_bind
        .unwrap_or_else(|| default_public_bind(&cfg));
    let management_bind = if cfg.management.enabled {
        match opts.management_bind {
            Some(a) => Some(a),
            None => Some(resolve_bind(rt, &cfg.management.address).await?),
        }
    } else {
        None
    };
    // C-DISC-1: DNS pools get their first addresses before the first health-check cycle.
    let resolver = crate::services::dns::Resolver::new(&cfg.server.resolver);
    let mut cfg = cfg;
    let dns_pools = discovery::first_resolution(rt, &resolver, &mut cfg).await;
    discovery::first_hosts(rt, &resolver, &cfg).await;
    let (proxy_state, tls) = build_state(rt, cfg, &opts, workers, management_bind).await?;
    discovery::count_first(&proxy_state.data_plane.metrics, &dns_pools);

    // C-HEALTH-1: backends start unhealthy; one full cycle before the listeners open.
    let health = health::spawn(&proxy_state, tls);
    proxy_state.control.set_health(health.reloader());
    health.first_cycle().await.map_err(|_| StartError::Health)?;
    events::first_cycle_done(&proxy_state.data_plane.runtime());
    // C-HEALTH-4: what is available before any traffic is not ramped (docs/health.md).
    for (_, backend) in proxy_state.data_plane.runtime().backends() {
        backend.skip_initial_ramp();
    }

    let (public, public_addr) = bind(rt, public_bind)?;
    let public_addr = public_addr.map_err(|error| StartError::Bind {
        addr: public_bind.to_string(),
        error,
    })?;
    let management = match management_bind {
        Some(addr) => Some(bind(rt, addr)?),
        None => None,
    };
    let management_addr = management
        .as_ref()
        .and_then(|(_, a)| a.as_ref().ok().copied());

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let (threads, mut tasks) = spawn_all(
        &proxy_state,
        workers,
        public,
        management.map(|(l, _)| l),
        &shutdown_rx,
    )?;
    tasks.push(rt::spawn_handle(
        rt,
        discovery::run(
            Arc::clone(&proxy_state),
            resolver.clone(),
            dns_pools,
            shutdown_rx.clone(),
        ),
    ));
    tasks.push(rt::spawn_handle(
        rt,
        discovery::refresh_hosts(Arc::clone(&proxy_state), resolver, shutdown_rx.clone()),
    ));
    tracing::info!(
        public = %public_addr,
        management = management_addr.map(|a| a.to_string()),
        workers,
        runtime = rt.name(),
        "weir is listening"
    );
    Ok(ProxyHandle {
        public: public_addr,
        management: management_addr,
        proxy_state,
        shutdown: shutdown_tx,
        workers: threads,
        tasks,
        health: Some(health),
        shutdown_delay,
    })
}

/// Everything [`start`] shares between the workers, the acceptor and the management plane: the
/// runtime snapshot, the gate, the limiter (its store prepared), the upstream client, metrics,
/// the listener front. Also the TLS client configuration of the health probes.
async fn build_state(
    rt: Rt,
    cfg: ValidConfig,
    opts: &Options,
    workers: usize,
    management_bind: Option<SocketAddr>,
) -> Result<(Arc<ProxyState>, Arc<rustls::ClientConfig>), StartError> {
    let clock = Clock::new(rt);
    let mut rng = weir_core::WyRand::new(worker::entropy_seed());
    let limits = ServerLimits::from_settings(&cfg.server);
    // The soft fd limit up to the hard one, and the data plane's cap under it.
    let budget = crate::observe::conn_limits::public_budget(
        &cfg,
        workers,
        crate::observe::conn_limits::raise_nofile(),
    );
    let connections = crate::observe::conn_limits::Connections::new(
        usize::try_from(budget.max_connections).unwrap_or(usize::MAX),
    );
    let upstream_config = UpstreamConfig::from_settings(&cfg.server.upstream, workers);
    let tls = {
        let settings = cfg.server.upstream.tls.clone();
        rt::unblock(rt, move || crate::services::upstream_tls::build(&settings))
            .await
            .ok_or(StartError::UpstreamTlsPanicked)?
            .map_err(StartError::UpstreamTls)?
            .config
    };
    ratelimit::install_store_runtime(rt);
    let limiter = match opts.rate_limiter.clone() {
        Some(l) => Limiter::new(l),
        None => {
            Limiter::from_config(&cfg, worker::entropy_seed()).map_err(StartError::RateStore)?
        }
    };
    // C-RATE-5, C-RATE-7: migrations / a first connection, bounded; never fatal.
    limiter.prepare(&cfg, clock.now()).await;
    let admission = Arc::new(Admission::new(cfg.gate, clock));
    let services = Arc::new(Services::new(
        Arc::clone(admission.gate()),
        limiter.storage(),
        Arc::clone(limiter.inner().local()),
        Arc::clone(limiter.inner().circuit()),
    ));
    if let Some(addr) = management_bind
        && cfg.management.allow_insecure
        && !addr.ip().is_loopback()
    {
        return Err(StartError::InsecureManagement(addr));
    }
    if cfg.management.enabled && cfg.management.allow_insecure {
        tracing::warn!(
            "management.allow_insecure is true: the management API accepts requests without a token (C-MGMT-1)"
        );
    }
    let runtime = Runtime::build(cfg, None, clock.now(), &mut rng).map_err(StartError::Runtime)?;
    let front = {
        let server = runtime.config().server.clone();
        rt::unblock(rt, move || listener_tls::Front::build(&server))
            .await
            .ok_or(StartError::ListenerTlsPanicked)?
            .map_err(StartError::ListenerTls)?
    };
    let metrics = Arc::new(metrics::Metrics::new());
    metrics.set_backends(runtime.backend_ids());
    let snapshot = Snapshot::build(Arc::new(runtime), &metrics, None);
    let data = Arc::new(DataPlane {
        rt,
        snapshot: ArcSwap::from_pointee(snapshot),
        admission,
        limiter,
        services,
        upstream: Arc::new(Upstream::on_clock(
            clock,
            upstream_config,
            Some(Arc::clone(&tls)),
        )),
        clock,
        limits,
        metrics,
    });
    let proxy_state = Arc::new(ProxyState {
        data_plane: data,
        control: Control::new(),
        connections,
        front,
    });
    Ok((proxy_state, tls))
}

/// A listener on `addr`, registered with `rt`, and the address it actually bound.
fn bind(
    rt: Rt,
    addr: SocketAddr,
) -> Result<(Box<dyn rt::Listener>, std::io::Result<SocketAddr>), StartError> {
    let l = listen(addr)?;
    let bound = l.local_addr();
    let l = rt.listener(l).map_err(|error| StartError::Bind {
        addr: addr.to_string(),
        error,
    })?;
    Ok((l, bound))
}

/// What [`spawn_all`] started: the worker threads and the control thread's tasks.
type Running = (Vec<std::thread::JoinHandle<()>>, Vec<JoinHandle<()>>);

/// The worker threads, the acceptor, the rate-limit recovery, the certificate watch and the
/// management listener, each until `shutdown`.
fn spawn_all(
    proxy_state: &Arc<ProxyState>,
    workers: usize,
    public: Box<dyn rt::Listener>,
    management: Option<Box<dyn rt::Listener>>,
    shutdown_rx: &watch::Receiver<bool>,
) -> Result<Running, StartError> {
    let rt = proxy_state.data_plane.rt;
    let mut handles = Vec::with_capacity(workers);
    let mut threads = Vec::with_capacity(workers);
    for i in 0..workers {
        let mut h = server::spawn_worker(i, Arc::clone(proxy_state), shutdown_rx.clone())
            .map_err(StartError::Worker)?;
        if let Some(t) = h.thread.take() {
            threads.push(t);
        }
        handles.push((h.conns, h.worker));
    }
    let mut tasks = vec![rt::spawn_handle(
        rt,
        server::accept_loop(
            rt,
            public,
            handles,
            Arc::clone(&proxy_state.connections.public),
            shutdown_rx.clone(),
        ),
    )];
    tasks.push(rt::spawn_handle(
        rt,
        store_recovery::run(Arc::clone(proxy_state), shutdown_rx.clone()),
    ));
    tasks.push(rt::spawn_handle(
        rt,
        store_sweep::run(Arc::clone(proxy_state), shutdown_rx.clone()),
    ));
    // C-TLS-2: certificate directories are watched for as long as the listener runs.
    tasks.push(rt::spawn_handle(
        rt,
        cert_watch::run(Arc::clone(proxy_state), shutdown_rx.clone()),
    ));
    if let Some(listener) = management {
        tasks.push(rt::spawn_handle(
            rt,
            management::serve(listener, Arc::clone(proxy_state), shutdown_rx.clone()),
        ));
    }
    Ok((threads, tasks))
}

/// Resolve `management.address` (an empty host listens on every interface).
async fn resolve_bind(rt: Rt, addr: &HostPort) -> Result<SocketAddr, StartError> {
    let host = if addr.host.is_empty() {
        "0.0.0.0"
    } else {
        addr.host.as_str()
    };
    let err = |error| StartError::Bind {
        addr: addr.to_string(),
        error,
    };
    rt.resolve(host.to_owned(), addr.port)
        .await
        .map_err(err)?
        .into_iter()
        .next()
        .ok_or_else(|| {
            err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "management address does not resolve",
            ))
        })
}

#[cfg(test)]
mod tests;
