//! How a test backend answers: the request recorded, then the behaviour of its [`Mode`].

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

use super::{ConnCtl, End, Inner, MeterGuard, Mode, ProbeRecord, Recorded, lock};

/// A response body: all at once, or chunks from a channel fed by a producer task.
#[derive(Debug)]
pub enum TestBody {
    /// One chunk (or none), with an exact size.
    Full(Option<Bytes>),
    /// Chunks as the producer sends them; ends when the producer drops its sender.
    Channel(mpsc::Receiver<Bytes>),
}

impl Body for TestBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            TestBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            TestBody::Channel(rx) => rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, TestBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            TestBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            TestBody::Full(None) => SizeHint::with_exact(0),
            TestBody::Channel(_) => SizeHint::default(),
        }
    }
}

/// Holds an in-flight request; records `Cancelled` if dropped before [`ReqGuard::complete`].
struct ReqGuard {
    inner: Arc<Inner>,
    rec: Arc<Recorded>,
}

impl ReqGuard {
    fn new(inner: Arc<Inner>, rec: Arc<Recorded>) -> ReqGuard {
        let n = inner.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        inner.max_in_flight.fetch_max(n, Ordering::SeqCst);
        ReqGuard { inner, rec }
    }
    fn complete(self) {
        let mut end = lock(&self.rec.end);
        if end.is_none() {
            *end = Some((End::Completed, Instant::now()));
        }
    }
}

impl Drop for ReqGuard {
    fn drop(&mut self) {
        {
            let mut end = lock(&self.rec.end);
            if end.is_none() {
                *end = Some((End::Cancelled, Instant::now()));
            }
        }
        self.inner.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

struct ProbeGuard {
    inner: Arc<Inner>,
    _meters: Vec<MeterGuard>,
}
impl Drop for ProbeGuard {
    fn drop(&mut self) {
        self.inner.probes_in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

fn response(
    status: u16,
    body: TestBody,
    id: &str,
    extra: &[(String, String)],
) -> Response<TestBody> {
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = HeaderValue::from_str(id) {
        resp.headers_mut().insert("x-test-backend", v);
    }
    for (n, v) in extra {
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(n.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            resp.headers_mut().append(n, v);
        }
    }
    resp
}

/// What `handle` read of the backend's state for one request.
struct Ctx {
    inner: Arc<Inner>,
    id: String,
    extra: Vec<(String, String)>,
}

pub(super) async fn handle(
    inner: Arc<Inner>,
    ctl: Arc<ConnCtl>,
    conn: u64,
    mut req: Request<Incoming>,
) -> Result<Response<TestBody>, Infallible> {
    let (mode, health_path, extra) = {
        let st = lock(&inner.state);
        (
            st.mode.clone(),
            st.health_path.clone(),
            st.extra_headers.clone(),
        )
    };
    let target = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| req.uri().to_string());
    if req.method() == http::Method::GET && req.uri().path() == health_path {
        return Ok(probe(inner, target).await);
    }
    let upgrade = req.headers().contains_key(http::header::UPGRADE);
    let on_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
    let guard = record(&inner, conn, target, req).await;
    let id = inner.id.clone();
    let cx = Ctx { inner, id, extra };
    Ok(answer(mode, cx, ctl, guard, on_upgrade).await)
}

/// A health probe: recorded, answered with the probe status after the probe delay.
async fn probe(inner: Arc<Inner>, target: String) -> Response<TestBody> {
    let (health_status, health_delay, meters) = {
        let st = lock(&inner.state);
        (st.health_status, st.health_delay, st.meters.clone())
    };
    let id = inner.id.clone();
    let n = inner.probes_in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    inner.max_probes_in_flight.fetch_max(n, Ordering::SeqCst);
    let _guard = ProbeGuard {
        inner: inner.clone(),
        _meters: meters.iter().map(|m| m.enter()).collect(),
    };
    lock(&inner.state).probes.push(ProbeRecord {
        target,
        at: Instant::now(),
        status: health_status,
    });
    if !health_delay.is_zero() {
        tokio::time::sleep(health_delay).await;
    }
    let body = TestBody::Full(Some(Bytes::from(format!("health {id} {health_status}\n"))));
    response(health_status, body, &id, &[])
}

/// Record an ordinary request (its whole body read) and hold it in flight.
async fn record(inner: &Arc<Inner>, conn: u64, target: String, req: Request<Incoming>) -> ReqGuard {
    let method = req.method().to_string();
    let headers: Vec<(String, Vec<u8>)> = req
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec()))
        .collect();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let rec = {
        let mut st = lock(&inner.state);
        let rec = Arc::new(Recorded {
            seq: st.requests.len(),
            conn,
            method,
            target,
            headers,
            body,
            at: Instant::now(),
            end: Mutex::new(None),
        });
        st.requests.push(rec.clone());
        rec
    };
    ReqGuard::new(inner.clone(), rec)
}

/// The `200` with `backend <id>` of the modes that answer at once.
fn named_ok(cx: &Ctx) -> Response<TestBody> {
    let body = TestBody::Full(Some(Bytes::from(format!("backend {}\n", cx.id))));
    response(200, body, &cx.id, &cx.extra)
}

/// A streamed response: `produce` feeds the channel, then the request completes.
fn streamed<F, Fut>(status: u16, cx: &Ctx, guard: ReqGuard, produce: F) -> Response<TestBody>
where
    F: FnOnce(mpsc::Sender<Bytes>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Bytes>(1);
    tokio::spawn(async move {
        // `produce` says whether the body ended as planned (false: the proxy went away).
        if produce(tx).await {
            guard.complete();
        }
    });
    response(status, TestBody::Channel(rx), &cx.id, &cx.extra)
}

async fn answer(
    mode: Mode,
    cx: Ctx,
    ctl: Arc<ConnCtl>,
    guard: ReqGuard,
    on_upgrade: Option<hyper::upgrade::OnUpgrade>,
) -> Response<TestBody> {
    let release = cx.inner.release.subscribe();
    let generation = *release.borrow();
    let id = cx.id.clone();
    match mode {
        Mode::Ok => match on_upgrade {
            Some(on) => upgrade_echo(on, guard, &id),
            None => {
                guard.complete();
                named_ok(&cx)
            }
        },
        Mode::EveryOther(_) if guard.rec.seq % 2 == 1 => {
            guard.complete();
            named_ok(&cx)
        }
        Mode::Status(s) | Mode::EveryOther(s) => {
            guard.complete();
            let body = Bytes::from(format!("backend {id} status {s}\n"));
            response(s, TestBody::Full(Some(body)), &id, &cx.extra)
        }
        Mode::StatusThenHang(s) => {
            let (tx, rx) = mpsc::channel::<Bytes>(1);
            tokio::spawn(async move {
                let _ = tx
                    .send(Bytes::from(format!("backend {id} status {s} begins\n")))
                    .await;
                tx.closed().await;
                drop(guard);
            });
            response(s, TestBody::Channel(rx), &cx.inner.id, &cx.extra)
        }
        Mode::SlowHeaders(d) => {
            tokio::time::sleep(d).await;
            guard.complete();
            named_ok(&cx)
        }
        Mode::Workers(d) => {
            let worker = cx.inner.workers.acquire().await;
            tokio::time::sleep(d).await;
            drop(worker);
            guard.complete();
            named_ok(&cx)
        }
        Mode::SlowBody { chunks, interval } => streamed(200, &cx, guard, move |tx| async move {
            for i in 0..chunks {
                tokio::time::sleep(interval).await;
                if tx.send(Bytes::from(format!("chunk {i}\n"))).await.is_err() {
                    return false;
                }
            }
            true
        }),
        Mode::Large(total) => streamed(200, &cx, guard, move |tx| async move {
            let chunk = Bytes::from(vec![b'x'; 16 * 1024]);
            let mut left = total;
            while left > 0 {
                let n = left.min(chunk.len());
                if tx.send(chunk.slice(..n)).await.is_err() {
                    return false;
                }
                left -= n;
            }
            true
        }),
        Mode::Sse { events, interval } => sse(&cx, guard, events, interval),
        Mode::Hold => {
            wait_release(release, generation).await;
            guard.complete();
            named_ok(&cx)
        }
        Mode::HoldBody => streamed(200, &cx, guard, move |tx| async move {
            if tx.send(Bytes::from_static(b"first\n")).await.is_err() {
                return false;
            }
            tokio::select! {
                _ = wait_release(release, generation) => {}
                _ = tx.closed() => return false,
            }
            tx.send(Bytes::from_static(b"last\n")).await.is_ok()
        }),
        Mode::Reset => {
            ctl.reset().await;
            drop(guard);
            std::future::pending().await
        }
        Mode::CloseWithoutAnswer => {
            ctl.close().await;
            drop(guard);
            std::future::pending().await
        }
    }
}

/// `Mode::Sse`: `events` server-sent events, one every `interval`.
fn sse(cx: &Ctx, guard: ReqGuard, events: usize, interval: Duration) -> Response<TestBody> {
    let mut resp = streamed(200, cx, guard, move |tx| async move {
        for i in 0..events {
            tokio::time::sleep(interval).await;
            if tx
                .send(Bytes::from(format!("data: {i}\n\n")))
                .await
                .is_err()
            {
                return false;
            }
        }
        true
    });
    let h = resp.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    resp
}

/// `Mode::Ok` with `Upgrade`: a `101`, then every byte echoed back until the proxy closes.
fn upgrade_echo(on: hyper::upgrade::OnUpgrade, guard: ReqGuard, id: &str) -> Response<TestBody> {
    let proto = guard
        .rec
        .header("upgrade")
        .unwrap_or_else(|| "websocket".into());
    tokio::spawn(async move {
        if let Ok(up) = on.await {
            let mut io = TokioIo::new(up);
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match io.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if io.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        let _ = io.flush().await;
                    }
                }
            }
            let _ = io.shutdown().await;
            guard.complete();
        }
    });
    let mut resp = response(101, TestBody::Full(None), id, &[]);
    let h = resp.headers_mut();
    h.insert(
        http::header::CONNECTION,
        HeaderValue::from_static("upgrade"),
    );
    if let Ok(v) = HeaderValue::from_str(&proto) {
        h.insert(http::header::UPGRADE, v);
    }
    h.insert(
        "sec-websocket-accept",
        HeaderValue::from_static("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
    );
    resp
}

async fn wait_release(mut rx: watch::Receiver<u64>, generation: u64) {
    let _ = rx.wait_for(|g| *g > generation).await;
}
