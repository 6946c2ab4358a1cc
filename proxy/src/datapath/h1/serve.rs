//! One HTTP/1 client connection (C-PATH-1, C-PATH-10, C-PATH-12): one read buffer, heads parsed
//! by `weir_core::h1::parse_request`, requests answered one after the other in the order they
//! arrived (pipelining), kept alive as the request, the response and the shutdown allow.
//!
//! **Timers.** One timer per connection, armed only from `weir_core::conn_watch::ConnWatch`:
//! `read_header_timeout` from the first byte of a head (from accept for the first) to its end
//! (then the connection closes unanswered, slowloris), `idle_timeout` between requests, and
//! parking after [`PARK_AFTER`] idle. The timer is re-armed only when the watchdog's next look is
//! earlier than the one armed; a look that comes early re-arms it (at most once per
//! `PARK_AFTER`), never once per request.
//!
//! **Parking.** A connection idle for [`PARK_AFTER`] with nothing buffered gives its buffers
//! back: what is left is the socket, the task and a few words of state. Its next bytes are read
//! through a stack buffer and copied into a fresh read buffer.
//!
//! **Refusals.** A head that breaks a parsing rule (docs/proxy.md, "HTTP/1 parsing rules") is
//! answered with the codec's status (`400`, `414`, `431`) and `Connection: close`; nothing is
//! sent upstream, and the connection closes after a short lingering read, so that the client
//! reads the answer before the close (unread bytes would make the kernel reset it).

use std::future::poll_fn;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::rt::Read;
use weir_core::conn_watch::{ConnPhase, ConnWatch, WatchAction};
use weir_core::exchange::Record;
use weir_core::h1::{self, HeadError, Parsed};
use weir_core::response::SyntheticResponse;

use super::downstream_conn::{DownstreamConn, MAX_HEADERS};
use super::io::{Buf, write_all};
use super::{request, respond};
use crate::base::rt::{self, Io, watch};
use crate::datapath::downstream::DownstreamCtx;
use crate::datapath::effects;
use crate::services::park;

/// How long a keep-alive connection stays idle before it is parked (docs/proxy.md, "Idle
/// connections").
pub const PARK_AFTER: Duration = Duration::from_secs(1);

/// The most a lingering close reads and how long it waits.
const LINGER_BYTES: usize = 64 * 1024;
const LINGER: Duration = Duration::from_millis(500);

/// What the wait between heads woke up for.
enum Event {
    /// Bytes arrived (`0`: the client closed or the read failed).
    Read(usize),
    /// The timer fired.
    Timer,
    /// Shutdown began.
    Shutdown,
}

/// How an awake period of a connection ended.
enum Step {
    /// Idle for [`PARK_AFTER`]: give the buffers back and wait small.
    Park,
    /// Close (shut the write side down).
    Close,
    /// Closed already (after an answer with `Connection: close`, a refusal, a lingering read).
    Closed,
}

/// An awake period's timer: one per awake period (a parked connection has none: its worker's
/// [`park::Lot`] watches its `idle_timeout`), and whether the shutdown signal was polled.
struct Timers {
    /// The deadline `sleep` is armed for (weir-core's clock: compared with the readings the
    /// loop takes, converted only when the sleep moves).
    armed: weir_core::Instant,
    sleep: Pin<Box<dyn hyper::rt::Sleep>>,
    /// Whether the shutdown signal was polled once (registered).
    stop_armed: bool,
    /// Whether `sleep` was polled since it was made or moved and has not fired: it holds the
    /// task's waker and wakes it when it fires.
    polled: bool,
}

/// The connection watchdog of `ctx`'s listener (rebuilt where it is used rather than kept in
/// every connection's state).
fn watch_of(ctx: &DownstreamCtx) -> ConnWatch {
    let limits = &ctx.data_plane.limits;
    ConnWatch::new(
        limits.read_header_timeout,
        limits.idle_timeout,
        Some(PARK_AFTER),
    )
}

/// Serve the HTTP/1 connection `io` (its first bytes already in `buf`) until it closes.
///
/// The active part (reading heads and serving requests, whose future is large: the request's
/// exchange, its attempts, its relays; the awake period's timer and its look at the shutdown signal)
/// is boxed once per awake period, not once per request; a parked connection holds only this
/// function's small state and a place in its worker's [`park::Lot`].
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn's future keeps each argument twice (rustc 1.95), this one once"
)]
pub fn serve(
    ctx: Arc<DownstreamCtx>,
    mut io: Box<dyn Io>,
    mut buf: Buf,
    shutdown: watch::Receiver<bool>,
) -> impl Future<Output = ()> + Send {
    // An `async` block over the arguments rather than an `async fn`, whose future keeps each
    // argument twice (the argument, and the local it is moved into): 80 bytes in every
    // parked connection's task.
    async move {
        let mut phase = ConnPhase::Head {
            started: ctx.data_plane.clock.now(),
        };
        loop {
            // The awake period owns the client state (its buffers die with it); the socket and what was
            // read ahead come back.
            let c = DownstreamConn::new(io, buf, head_limits(&ctx));
            let (step, c) = Box::pin(active(&ctx, c, &mut phase, &shutdown)).await;
            (io, buf) = c.into_parts();
            match step {
                Step::Closed => return,
                Step::Close => break,
                Step::Park => {
                    // Only possible with nothing read ahead (then the awake period goes on).
                    let parked = buf.is_empty();
                    buf.release();
                    crate::base::memory::note_freed();
                    if parked && !wait_parked(&ctx, &mut io, &mut buf, &phase).await {
                        break;
                    }
                }
            }
        }
        super::io::shutdown(&mut io).await;
    }
}

/// The codec's limits under `ctx`'s listener's `max_header_bytes`.
fn head_limits(ctx: &DownstreamCtx) -> h1::Limits {
    let max = ctx.data_plane.limits.max_header_bytes;
    h1::Limits {
        max_request_line: h1::Limits::default().max_request_line.min(max),
        max_head_bytes: max,
    }
}

/// The wait of a parked connection: whether bytes arrived (then it is active again). A plain
/// poll function rather than an `async fn`: a parked connection's task holds its state, so it
/// holds the references it works on and its place in the worker's lot, nothing more (issue
/// 14). Its timeout and the shutdown signal are the lot's ([`park`]).
fn wait_parked<'a>(
    ctx: &'a Arc<DownstreamCtx>,
    io: &'a mut Box<dyn Io>,
    buf: &'a mut Buf,
    phase: &'a ConnPhase,
) -> impl Future<Output = bool> + 'a {
    let mut place = park::Place::new(&ctx.worker);
    poll_fn(move |cx| {
        let data_plane = &ctx.data_plane;
        if place.is_closing() {
            return Poll::Ready(false);
        }
        match poll_read_parked(io, buf, cx) {
            Poll::Ready(0) => return Poll::Ready(false),
            Poll::Ready(_) => return Poll::Ready(true),
            Poll::Pending => {}
        }
        let now = data_plane.clock.now();
        if let Some(WatchAction::Close | WatchAction::Idle) = watch_of(ctx).poll_action(*phase, now)
        {
            return Poll::Ready(false);
        }
        let deadline = watch_of(ctx).parked_timeout(*phase, now);
        let tick = park::tick(data_plane.limits.idle_timeout);
        if place.hold(data_plane.clock, tick, cx.waker(), deadline) {
            Poll::Pending
        } else {
            Poll::Ready(false)
        }
    })
}

/// Bytes, the timer or the shutdown signal, whichever comes first. `skip_timer`: leave the
/// timer unpolled at the first pending look, because it holds the task's waker from an earlier
/// poll and is not due (one timer poll fewer per keep-alive request); a wake-up after
/// that look polls it.
fn wait_event<'a, S: Future<Output = ()>>(
    mut read: impl FnMut(&mut Context<'_>) -> Poll<usize> + 'a,
    t: &'a mut Timers,
    signal: &'a watch::Receiver<bool>,
    mut stop: Pin<&'a mut S>,
    mut skip_timer: bool,
) -> impl Future<Output = Event> + 'a {
    poll_fn(move |cx| {
        let skip = std::mem::take(&mut skip_timer);
        poll_event(cx, &mut read, t, signal, stop.as_mut(), skip)
    })
}

/// One look at the shutdown signal, the socket (`read`) and the timer, in this order.
fn poll_event<S: Future<Output = ()>>(
    cx: &mut Context<'_>,
    mut read: impl FnMut(&mut Context<'_>) -> Poll<usize>,
    t: &mut Timers,
    signal: &watch::Receiver<bool>,
    stop: Pin<&mut S>,
    skip_timer: bool,
) -> Poll<Event> {
    if !t.stop_armed || signal.has_changed() {
        t.stop_armed = true;
        if stop.poll(cx).is_ready() {
            return Poll::Ready(Event::Shutdown);
        }
    }
    if let Poll::Ready(n) = read(cx) {
        return Poll::Ready(Event::Read(n));
    }
    if skip_timer {
        return Poll::Pending;
    }
    match t.sleep.as_mut().poll(cx) {
        Poll::Ready(()) => {
            // A fired sleep holds no waker: the next wait polls it again (after moving it).
            t.polled = false;
            Poll::Ready(Event::Timer)
        }
        Poll::Pending => {
            t.polled = true;
            Poll::Pending
        }
    }
}

/// Read and answer heads until the connection closes or parks: the awake period's timer and its
/// watch on the shutdown signal (polled once to register, then only when the lock-free check
/// says the signal moved) live as long as the awake period.
async fn active(
    ctx: &Arc<DownstreamCtx>,
    mut c: DownstreamConn,
    phase: &mut ConnPhase,
    shutdown: &watch::Receiver<bool>,
) -> (Step, DownstreamConn) {
    let (rt, clock) = (ctx.data_plane.rt, ctx.data_plane.clock);
    let armed = watch_of(ctx).poll_timeout(*phase, clock.now());
    let mut t = Timers {
        armed,
        sleep: rt.sleep_until(clock.deadline(armed)),
        stop_armed: false,
        polled: false,
    };
    let mut shutdown = shutdown.clone();
    let signal = shutdown.clone();
    let stop = pin!(async {
        loop {
            if shutdown.changed().await.is_err() || shutdown.get() {
                return;
            }
        }
    });
    let step = awake(ctx, &mut c, phase, &mut t, &signal, stop).await;
    (step, c)
}

/// The loop of [`active`].
async fn awake<S: Future<Output = ()>>(
    ctx: &Arc<DownstreamCtx>,
    c: &mut DownstreamConn,
    phase: &mut ConnPhase,
    t: &mut Timers,
    signal: &watch::Receiver<bool>,
    mut stop: Pin<&mut S>,
) -> Step {
    let data_plane = &ctx.data_plane;
    let (rt, clock) = (data_plane.rt, data_plane.clock);
    // The request timer (`drive::bounded_in`), kept across this awake period's requests.
    let mut timer: rt::TimerSlot = None;
    // The clock read when the latest request ended, for the wait that follows it (one reading
    // of the clock, not three, per keep-alive request): the response's own end when its last
    // write did not wait (`request::Served::Done`).
    let mut ended: Option<weir_core::Instant> = None;
    loop {
        if !c.buf.is_empty() {
            // Bytes to parse: the wait, if one follows, reads the clock afresh.
            ended = None;
            // A head that begins now: its exchange starts at the same reading (one reading of
            // the clock, not two, per keep-alive request); one begun earlier reads it afresh.
            let mut begun = None;
            if let ConnPhase::Idle { .. } = *phase {
                let now = clock.now();
                begun = Some(now);
                *phase = ConnPhase::Head { started: now };
            }
            let head = match take_head(c) {
                Ok(true) => match request::serve(ctx, c, &mut timer, signal, begun).await {
                    request::Served::Done(keep, at) => Ok(Some((keep, at))),
                    request::Served::Refused(e) => Err(e),
                    // A head the quick look took for whole (leading empty lines): parsed from
                    // the buffer instead.
                    request::Served::Partial => match take_whole_head(c) {
                        Ok(true) => match request::serve(ctx, c, &mut timer, signal, begun).await {
                            request::Served::Done(keep, at) => Ok(Some((keep, at))),
                            request::Served::Refused(e) => Err(e),
                            request::Served::Partial => Ok(None),
                        },
                        Ok(false) => Ok(None),
                        Err(e) => Err(e),
                    },
                },
                Ok(false) => Ok(None),
                Err(e) => Err(e),
            };
            match head {
                Ok(Some((keep, at))) => {
                    if !keep {
                        // What the client still sends (a body weir did not read, pipelined
                        // requests) must not reset the answer away.
                        linger(rt, c).await;
                        return Step::Closed;
                    }
                    if signal.get() {
                        return Step::Close;
                    }
                    let since = at.unwrap_or_else(|| clock.now());
                    *phase = ConnPhase::Idle { since };
                    ended = Some(since);
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    let started = match *phase {
                        ConnPhase::Head { started } => started,
                        _ => clock.now(),
                    };
                    refuse(ctx, c, e, clock.now() - started).await;
                    linger(rt, c).await;
                    return Step::Closed;
                }
            }
        }
        let now = ended.take().unwrap_or_else(|| clock.now());
        let next = watch_of(ctx).poll_timeout(*phase, now);
        if next < t.armed || t.armed <= now {
            t.armed = next;
            rt.reset(&mut t.sleep, clock.deadline(next));
            t.polled = false;
        }
        let skip_timer = t.polled && t.armed > now;
        let read = |cx: &mut Context<'_>| poll_read(c, cx);
        match wait_event(read, t, signal, stop.as_mut(), skip_timer).await {
            Event::Read(0) | Event::Shutdown => return Step::Close,
            Event::Read(_) => {}
            Event::Timer => match watch_of(ctx).poll_action(*phase, clock.now()) {
                Some(WatchAction::Close | WatchAction::Idle) => return Step::Close,
                Some(WatchAction::Park) => return Step::Park,
                _ => {}
            },
        }
    }
}

/// Read once while parked: through a stack buffer, so that the read buffer is taken only when
/// bytes came (`0`: end of stream or a failure).
fn poll_read_parked(io: &mut Box<dyn Io>, buf: &mut Buf, cx: &mut Context<'_>) -> Poll<usize> {
    let mut tmp = [0u8; 1024];
    let mut rb = hyper::rt::ReadBuf::new(&mut tmp);
    match Pin::new(io).poll_read(cx, rb.unfilled()) {
        Poll::Ready(Ok(())) => {
            let n = rb.filled().len();
            buf.extend(&tmp[..n]);
            Poll::Ready(n)
        }
        Poll::Ready(Err(_)) => Poll::Ready(0),
        Poll::Pending => Poll::Pending,
    }
}

/// Read once (`0`: end of stream, a failure, or a head over the limit with nothing to parse).
fn poll_read(c: &mut DownstreamConn, cx: &mut Context<'_>) -> Poll<usize> {
    let cap = c.cap();
    if c.buf.is_full(cap) {
        return Poll::Ready(0);
    }
    match c.buf.poll_fill(&mut c.io, cx, cap) {
        Poll::Ready(Ok(n)) => Poll::Ready(n),
        Poll::Ready(Err(_)) => Poll::Ready(0),
        Poll::Pending => Poll::Pending,
    }
}

/// Whether `c.buf` seems to start with a whole head (then its bytes are copied to `c.head`,
/// parsed and consumed by `request::serve`), or a refusal.
///
/// The quick look: the bytes up to the first empty CRLF line (a head is parsed once, in
/// `request::serve`; parsing a prefix that holds the whole head gives what parsing the buffer
/// gives, limits included, since a limit crossed is crossed inside the prefix too). Without one
/// (a partial head, or bare-LF line ends), the buffer itself is parsed.
fn take_head(c: &mut DownstreamConn) -> Result<bool, HeadError> {
    let bytes = c.buf.bytes();
    if let Some(i) = empty_line(bytes) {
        c.head.clear();
        c.head.extend_from_slice(&bytes[..i + 4]);
        return Ok(true);
    }
    take_whole_head(c)
}

/// Where the first `\r\n\r\n` of `bytes` starts (`memmem::find`'s answer, from the line ends:
/// a head has a few, and a searcher built for each call costs more than the search).
fn empty_line(bytes: &[u8]) -> Option<usize> {
    let mut at = 3;
    while at < bytes.len() {
        let lf = at + memchr::memchr(b'\n', &bytes[at..])?;
        if bytes[lf - 3..lf] == *b"\r\n\r" {
            return Some(lf - 3);
        }
        at = lf + 1;
    }
    None
}

/// Whether `c.buf` starts with a whole head by the codec (then copied to `c.head`), or a
/// refusal.
fn take_whole_head(c: &mut DownstreamConn) -> Result<bool, HeadError> {
    let mut headers = h1::header_slots::<MAX_HEADERS>();
    match h1::parse_request_in(c.buf.bytes(), &mut headers, &c.limits)? {
        Parsed::Partial => Ok(false),
        Parsed::Complete(head) => {
            let n = head.head_len;
            c.head.clear();
            c.head.extend_from_slice(&c.buf.bytes()[..n]);
            Ok(true)
        }
    }
}

/// Answer a refused head with weir's own error (`SyntheticResponse::refused_head`: C-PATH-11's
/// JSON shape, a fresh request id, `Connection: close`) and close. Its record
/// (`Record::refused_head`) goes the way an exchange's record goes (`effects`): counted, and
/// access-logged as every error is (C-OBS-2, C-OBS-3) on a line with the fields of any other
/// (its reason is `HeadError::reason`); the head was not read, so the line has no host, its
/// path is never logged, and its method and version are read from the request line when they
/// can be.
async fn refuse(ctx: &DownstreamCtx, c: &mut DownstreamConn, e: HeadError, waited: Duration) {
    let id = crate::base::worker::with_rng(|rng| weir_core::request_id::RequestId::generate(rng));
    let answer = SyntheticResponse::refused_head(&e, id.as_str());
    let body = answer.body();
    let (method, version) = request_line_of(c.buf.bytes());
    let record = Record::refused_head(&e, waited, ctx.peer().ip());
    let request = effects::Request {
        method: &method,
        path: "",
        version,
        host: None,
    };
    let scheme = if ctx.tls { "https" } else { "http" };
    let line =
        effects::record_without_exchange(&ctx.data_plane, &record, id.as_str(), request, scheme);
    c.out.clear();
    respond::synthetic_head(&mut c.out, &answer, body.len(), false, h1::Version::Http11);
    c.out.extend_from_slice(body.as_bytes());
    let out = std::mem::take(&mut c.out);
    let written = write_all(&mut c.io, &out).await.is_ok();
    c.out = out;
    if let Some(line) = line {
        line.finish(if written { body.len() as u64 } else { 0 });
    }
}

/// The method and version of a refused head's request line, as far as they can be read: the
/// method when the line starts with a token of at most 32 bytes (else `-`), `HTTP/1.0` when the
/// line ends so (else `HTTP/1.1`, the version weir answers with).
fn request_line_of(bytes: &[u8]) -> (http::Method, http::Version) {
    let line = &bytes[..memchr::memchr(b'\n', bytes).unwrap_or(bytes.len())];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let token = &line[..memchr::memchr(b' ', line).unwrap_or(line.len())];
    let method = (!token.is_empty() && token.len() <= 32)
        .then(|| http::Method::from_bytes(token).ok())
        .flatten()
        .unwrap_or_else(|| http::Method::from_bytes(b"-").expect("a token"));
    let version = if line.ends_with(b" HTTP/1.0") {
        http::Version::HTTP_10
    } else {
        http::Version::HTTP_11
    };
    (method, version)
}

/// End the write side, then read (and drop) what the client still sends for a moment, so that
/// the close does not reset the answer away.
pub async fn linger(rt: rt::Rt, c: &mut DownstreamConn) {
    super::io::shutdown(&mut c.io).await;
    let mut seen = 0usize;
    let drain = async {
        loop {
            c.buf.consume(c.buf.len());
            match poll_fn(|cx| c.buf.poll_fill(&mut c.io, cx, 16 * 1024)).await {
                Ok(n) if n > 0 && seen < LINGER_BYTES => seen += n,
                _ => return,
            }
        }
    };
    let _ = rt::timeout(rt, LINGER, drain).await;
}

#[cfg(test)]
mod tests;
