//! Test backends: hyper 1 HTTP/1.1 servers on `127.0.0.1:0` inside the test process.
//!
//! Each backend records every request it receives (method, raw path and query, headers in order,
//! body) and how it ended (completed, or cancelled because the proxy dropped it), and every health
//! probe (a `GET` of its health path, `/health` unless changed). Its behaviour for ordinary
//! requests is a [`Mode`] that a test switches at run time; probes answer with their own status
//! (200 unless changed) and delay, so traffic and health can fail independently. [`Backend::down`]
//! closes the listener (new connections are refused) and resets every open connection, like a
//! killed process; [`Backend::up`] listens again on the same port.

use std::collections::HashMap;
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::util::wait_until;

mod handle;

pub use handle::TestBody;
use handle::handle;

/// Locks a mutex, ignoring poisoning (a panicking test must still be able to print its records).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a backend does with an ordinary (non-probe) request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// `200` with the body `backend <id>\n` (and `101` + echo for `Upgrade` requests).
    Ok,
    /// This status at once, with the body `backend <id> status <n>\n`.
    Status(u16),
    /// This status's headers at once, then a body that never finishes (until the proxy drops it).
    StatusThenHang(u16),
    /// Every other request (the 1st, 3rd, …) answered with this status at once, the others as
    /// [`Mode::Ok`]: a backend failing half its requests.
    EveryOther(u16),
    /// Sleeps this long before sending `200` headers.
    SlowHeaders(Duration),
    /// `200` headers at once, then `chunks` body chunks `chunk <i>\n`, one every `interval`.
    SlowBody {
        /// number of chunks
        chunks: usize,
        /// pause before each chunk
        interval: Duration,
    },
    /// Server-sent events: `text/event-stream` headers at once, then `events` events
    /// `data: <i>\n\n`, one every `interval`.
    Sse {
        /// number of events
        events: usize,
        /// pause before each event
        interval: Duration,
    },
    /// `200` with a body of this many bytes (`x`), sent in 16 KiB chunks as fast as the proxy
    /// takes them.
    Large(usize),
    /// Waits until [`Backend::release_all`] before sending `200` headers.
    Hold,
    /// `200` headers and the chunk `first\n` at once, then waits until [`Backend::release_all`]
    /// before sending `last\n` and ending the body.
    HoldBody,
    /// Reads the request, then resets the connection (TCP RST, `SO_LINGER` 0) without answering.
    Reset,
    /// Reads the request, then closes the connection (FIN) without answering.
    CloseWithoutAnswer,
    /// A server of finite capacity: `200` after this long, serving at most
    /// [`Backend::set_workers`] requests at a time; the others wait their turn (FIFO).
    Workers(Duration),
}

/// How a recorded request ended, seen from the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The whole response (or the upgraded connection) was handed to the connection.
    Completed,
    /// The proxy went away first: the connection closed while the request or its body was pending.
    Cancelled,
}

/// One request a backend received.
#[derive(Debug)]
pub struct Recorded {
    /// 0-based arrival number at this backend.
    pub seq: usize,
    /// Which connection (accept order at this backend) carried it.
    pub conn: u64,
    /// The request method.
    pub method: String,
    /// The request target exactly as received (path and query).
    pub target: String,
    /// Header lines in received order (names lower-case), values as bytes.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The request body as received.
    pub body: Bytes,
    /// When it arrived (after its body was read).
    pub at: Instant,
    end: Mutex<Option<(End, Instant)>>,
}

impl Recorded {
    /// The first value of header `name` (case-insensitive) as a string, if any.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }

    /// Every value of header `name`, in order.
    pub fn header_all(&self, name: &str) -> Vec<String> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .collect()
    }

    /// Whether header `name` is present at all.
    pub fn has_header(&self, name: &str) -> bool {
        self.headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name))
    }

    /// How and when it ended, once it has.
    pub fn end(&self) -> Option<(End, Instant)> {
        *lock(&self.end)
    }
}

/// One health probe a backend received.
#[derive(Debug, Clone)]
pub struct ProbeRecord {
    /// The target probed (path and query).
    pub target: String,
    /// When it arrived.
    pub at: Instant,
    /// The status the backend answered with.
    pub status: u16,
}

/// Counts probes in flight across several backends (for `health_check.max_concurrency`).
#[derive(Debug, Default)]
pub struct ProbeMeter {
    now: AtomicUsize,
    max: AtomicUsize,
}

impl ProbeMeter {
    /// A new meter, shared by passing the `Arc` to [`Backend::set_probe_meter`].
    pub fn new() -> Arc<ProbeMeter> {
        Arc::new(ProbeMeter::default())
    }
    /// The most probes that were in flight at once.
    pub fn max(&self) -> usize {
        self.max.load(Ordering::SeqCst)
    }
    fn enter(self: &Arc<Self>) -> MeterGuard {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(n, Ordering::SeqCst);
        MeterGuard(self.clone())
    }
}

struct MeterGuard(Arc<ProbeMeter>);
impl Drop for MeterGuard {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Debug)]
struct State {
    mode: Mode,
    health_status: u16,
    health_delay: Duration,
    health_path: String,
    extra_headers: Vec<(String, String)>,
    requests: Vec<Arc<Recorded>>,
    probes: Vec<ProbeRecord>,
    meters: Vec<Arc<ProbeMeter>>,
    up: bool,
}

#[derive(Debug)]
struct ConnCtl {
    dup: Mutex<Option<std::net::TcpStream>>,
    abort: OnceLock<AbortHandle>,
}

impl ConnCtl {
    async fn wait_abort(&self) -> AbortHandle {
        loop {
            if let Some(h) = self.abort.get() {
                return h.clone();
            }
            tokio::task::yield_now().await;
        }
    }
    /// TCP RST: linger 0, then every descriptor of the socket closes.
    async fn reset(&self) {
        let dup = lock(&self.dup).take();
        if let Some(dup) = dup {
            let _ = socket2::SockRef::from(&dup).set_linger(Some(Duration::ZERO));
            drop(dup);
        }
        self.wait_abort().await.abort();
    }
    /// FIN without an answer.
    async fn close(&self) {
        let dup = lock(&self.dup).take();
        if let Some(dup) = dup {
            let _ = dup.shutdown(Shutdown::Both);
        }
        self.wait_abort().await.abort();
    }
}

#[derive(Debug)]
struct Inner {
    id: String,
    addr: SocketAddr,
    state: Mutex<State>,
    release: watch::Sender<u64>,
    accept: Mutex<Option<AbortHandle>>,
    conns: Mutex<HashMap<u64, Arc<ConnCtl>>>,
    next_conn: AtomicU64,
    accepted: AtomicU64,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    probes_in_flight: AtomicUsize,
    max_probes_in_flight: AtomicUsize,
    /// The workers of [`Mode::Workers`] (none until [`Backend::set_workers`]).
    workers: tokio::sync::Semaphore,
}

/// A test backend (cheap to clone; every clone is the same server).
#[derive(Debug, Clone)]
pub struct Backend {
    inner: Arc<Inner>,
}

impl Backend {
    /// Starts a backend with id `id` in [`Mode::Ok`], healthy, on `127.0.0.1:0`.
    pub async fn start(id: &str) -> Backend {
        Backend::start_at(id, "127.0.0.1:0".parse().expect("address"))
            .await
            .expect("bind test backend")
    }

    /// Like [`Backend::start`], listening on `addr` (a loopback alias such as `127.0.0.2:port`:
    /// Linux routes all of 127/8 to the loopback interface).
    pub async fn start_at(id: &str, addr: SocketAddr) -> std::io::Result<Backend> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr().expect("backend address");
        let (release, _) = watch::channel(0u64);
        let inner = Arc::new(Inner {
            id: id.to_string(),
            addr,
            state: Mutex::new(State {
                mode: Mode::Ok,
                health_status: 200,
                health_delay: Duration::ZERO,
                health_path: "/health".to_string(),
                extra_headers: Vec::new(),
                requests: Vec::new(),
                probes: Vec::new(),
                meters: Vec::new(),
                up: true,
            }),
            release,
            accept: Mutex::new(None),
            conns: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            probes_in_flight: AtomicUsize::new(0),
            max_probes_in_flight: AtomicUsize::new(0),
            workers: tokio::sync::Semaphore::new(0),
        });
        let task = tokio::spawn(accept_loop(inner.clone(), listener));
        *lock(&inner.accept) = Some(task.abort_handle());
        Ok(Backend { inner })
    }

    /// Starts `n` backends with ids `<prefix>-1` .. `<prefix>-n`.
    pub async fn start_many(prefix: &str, n: usize) -> Vec<Backend> {
        let mut v = Vec::with_capacity(n);
        for i in 1..=n {
            v.push(Backend::start(&format!("{prefix}-{i}")).await);
        }
        v
    }

    /// The backend's id (what the proxy config names it, and what `X-Balancer-Backend` should say).
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// Its listening address.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.inner.addr)
    }

    /// Gives [`Mode::Workers`] `n` more workers.
    pub fn set_workers(&self, n: usize) {
        self.inner.workers.add_permits(n);
    }

    /// Switches what ordinary requests get from now on (requests already running keep theirs).
    pub fn set_mode(&self, mode: Mode) {
        lock(&self.inner.state).mode = mode;
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        lock(&self.inner.state).mode.clone()
    }

    /// Status answered to health probes (200 at start).
    pub fn set_health(&self, status: u16) {
        lock(&self.inner.state).health_status = status;
    }

    /// Delay before answering a health probe (0 at start).
    pub fn set_health_delay(&self, delay: Duration) {
        lock(&self.inner.state).health_delay = delay;
    }

    /// The path (without query) that counts as a health probe (`/health` at start).
    pub fn set_health_path(&self, path: &str) {
        lock(&self.inner.state).health_path = path.to_string();
    }

    /// Counts this backend's probes in `meter` too.
    pub fn set_probe_meter(&self, meter: Arc<ProbeMeter>) {
        lock(&self.inner.state).meters.push(meter);
    }

    /// Extra headers added to every `Ok`/`Status`/streaming response from now on.
    pub fn set_response_headers(&self, headers: &[(&str, &str)]) {
        lock(&self.inner.state).extra_headers = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
    }

    /// Lets every request currently waiting in [`Mode::Hold`] or [`Mode::HoldBody`] go on.
    pub fn release_all(&self) {
        self.inner.release.send_modify(|g| *g += 1);
    }

    /// Stops listening (new connections are refused) and resets every open connection.
    pub async fn down(&self) {
        lock(&self.inner.state).up = false;
        if let Some(h) = lock(&self.inner.accept).take() {
            h.abort();
        }
        let conns: Vec<Arc<ConnCtl>> = lock(&self.inner.conns).values().cloned().collect();
        for c in conns {
            c.reset().await;
        }
        // The accept task owns the listener; wait until the port really refuses connections.
        let addr = self.inner.addr;
        let mut refused = false;
        for _ in 0..200 {
            match TcpStream::connect(addr).await {
                Err(_) => {
                    refused = true;
                    break;
                }
                Ok(s) => {
                    let _ = s.set_zero_linger();
                    drop(s);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
        assert!(
            refused,
            "backend {} still accepts connections after down()",
            self.inner.id
        );
        // A connection accepted just before the accept task stopped may have registered after
        // the first sweep.
        let conns: Vec<Arc<ConnCtl>> = lock(&self.inner.conns).values().cloned().collect();
        for c in conns {
            c.reset().await;
        }
        // An aborted connection task may still be running on another thread (recording a
        // request it had read); once every one has ended, nothing more is received.
        let what = format!(
            "backend {}'s connections to end after down()",
            self.inner.id
        );
        wait_until(Duration::from_secs(30), &what, || {
            lock(&self.inner.conns).is_empty()
        })
        .await;
    }

    /// Listens again on the same address.
    pub async fn up(&self) {
        let mut last = None;
        for _ in 0..200 {
            match TcpListener::bind(self.inner.addr).await {
                Ok(listener) => {
                    lock(&self.inner.state).up = true;
                    let task = tokio::spawn(accept_loop(self.inner.clone(), listener));
                    *lock(&self.inner.accept) = Some(task.abort_handle());
                    return;
                }
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "backend {} could not listen again on {}: {last:?}",
            self.inner.id, self.inner.addr
        );
    }

    /// Whether it is listening.
    pub fn is_up(&self) -> bool {
        lock(&self.inner.state).up
    }

    /// Every ordinary request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Arc<Recorded>> {
        lock(&self.inner.state).requests.clone()
    }

    /// The number of ordinary requests received so far.
    pub fn count(&self) -> usize {
        lock(&self.inner.state).requests.len()
    }

    /// The last ordinary request received, if any.
    pub fn last(&self) -> Option<Arc<Recorded>> {
        lock(&self.inner.state).requests.last().cloned()
    }

    /// Every health probe received so far.
    pub fn probes(&self) -> Vec<ProbeRecord> {
        lock(&self.inner.state).probes.clone()
    }

    /// The number of health probes received so far.
    pub fn probe_count(&self) -> usize {
        lock(&self.inner.state).probes.len()
    }

    /// Connections accepted so far (probes and traffic).
    pub fn connections_accepted(&self) -> u64 {
        self.inner.accepted.load(Ordering::SeqCst)
    }

    /// Ordinary requests in flight now (from arrival until their response, body or upgraded
    /// connection ended).
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.load(Ordering::SeqCst)
    }

    /// The most ordinary requests that were in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.inner.max_in_flight.load(Ordering::SeqCst)
    }

    /// The most health probes that were in flight at once at this backend.
    pub fn max_probes_in_flight(&self) -> usize {
        self.inner.max_probes_in_flight.load(Ordering::SeqCst)
    }

    /// Waits until this backend has received at least `n` ordinary requests.
    pub async fn wait_requests(&self, n: usize, timeout: Duration) {
        let what = format!("backend {} to receive {n} request(s)", self.inner.id);
        wait_until(timeout, &what, || self.count() >= n).await;
    }

    /// Waits until at least `n` requests are in flight at this backend.
    pub async fn wait_in_flight(&self, n: usize, timeout: Duration) {
        let what = format!("{n} request(s) in flight at backend {}", self.inner.id);
        wait_until(timeout, &what, || self.in_flight() >= n).await;
    }

    /// Waits until at least `n` probes have been received.
    pub async fn wait_probes(&self, n: usize, timeout: Duration) {
        let what = format!("backend {} to receive {n} probe(s)", self.inner.id);
        wait_until(timeout, &what, || self.probe_count() >= n).await;
    }

    /// A one-line summary for failure messages.
    pub fn summary(&self) -> String {
        let st = lock(&self.inner.state);
        let reqs: Vec<String> = st
            .requests
            .iter()
            .rev()
            .take(8)
            .rev()
            .map(|r| {
                format!(
                    "#{} {} {} end={:?}",
                    r.seq,
                    r.method,
                    r.target,
                    r.end().map(|e| e.0)
                )
            })
            .collect();
        format!(
            "backend {} ({}) mode={:?} up={} health={} requests={} probes={} in_flight={} last: [{}]",
            self.inner.id,
            self.inner.addr,
            st.mode,
            st.up,
            st.health_status,
            st.requests.len(),
            st.probes.len(),
            self.in_flight(),
            reqs.join("; ")
        )
    }
}

async fn accept_loop(inner: Arc<Inner>, listener: TcpListener) {
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        };
        inner.accepted.fetch_add(1, Ordering::SeqCst);
        let Ok(std) = stream.into_std() else { continue };
        let Ok(dup) = std.try_clone() else { continue };
        let Ok(stream) = TcpStream::from_std(std) else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let id = inner.next_conn.fetch_add(1, Ordering::SeqCst);
        let ctl = Arc::new(ConnCtl {
            dup: Mutex::new(Some(dup)),
            abort: OnceLock::new(),
        });
        lock(&inner.conns).insert(id, ctl.clone());
        let task = tokio::spawn(serve_conn(inner.clone(), ctl.clone(), id, stream));
        let _ = ctl.abort.set(task.abort_handle());
    }
}

struct ConnGuard {
    inner: Arc<Inner>,
    id: u64,
}
impl Drop for ConnGuard {
    fn drop(&mut self) {
        lock(&self.inner.conns).remove(&self.id);
    }
}

async fn serve_conn(inner: Arc<Inner>, ctl: Arc<ConnCtl>, id: u64, stream: TcpStream) {
    let _guard = ConnGuard {
        inner: inner.clone(),
        id,
    };
    let svc = service_fn(move |req| handle(inner.clone(), ctl.clone(), id, req));
    let _ = http1::Builder::new()
        .serve_connection(TokioIo::new(stream), svc)
        .with_upgrades()
        .await;
}
