//! The body of every response the data plane sends (C-PATH-7, C-POOL-6, C-LOAD-1).
//!
//! A delivered backend body streams frame by frame, as it arrives (no buffering, C-PATH-7), and
//! holds everything the request owns until it ends: the request's exchange
//! (`weir_core::exchange`, which holds the backend slot and the bulkhead permit, C-POOL-6,
//! C-LOAD-2, and the global gate slot, C-LOAD-1) and the upstream connection, which goes back to
//! the pool only when the body was read to the end. Its end is reported to the exchange exactly
//! once: `Complete` at the last frame, `Error` when the backend's body breaks or the engine's
//! `write_timeout` deadline ends it, `ClientGone` when hyper drops it early (the client went
//! away); the gate hand-off that releases is performed here. The per-try timeout never applies
//! here (C-RETRY-5).
//!
//! Every response body also counts the bytes it passes on and writes the request's pending
//! access-log line when it ends or is dropped (`effects::PendingLine`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use weir_core::exchange::{Exchange, Input, Output};
use weir_core::flow::BodyEnd;

use crate::base::rt::Deadline;
use crate::base::worker;
use crate::datapath::downstream::RequestGuard;
use crate::datapath::effects;
use crate::datapath::effects::PendingLine;
use crate::services::snapshot::Bound;
use crate::services::state::DataPlane;
use crate::services::upstream::{BoxError, Lent};

/// The response body type of the data plane.
#[derive(Debug)]
pub struct ResBody {
    kind: Kind,
    /// Marks the client connection busy until the response is done (idle timeout, shutdown).
    _request: Option<RequestGuard>,
    /// The request's access-log line, written at the end.
    line: Option<Box<PendingLine>>,
    /// Body bytes passed on so far.
    sent: u64,
}

#[derive(Debug)]
enum Kind {
    Full(Option<Bytes>),
    Upstream(Box<Delivered>),
}

impl ResBody {
    /// A body of `bytes` (synthetic responses, `/healthz`).
    #[must_use]
    pub fn full(bytes: Bytes, request: Option<RequestGuard>) -> ResBody {
        ResBody {
            kind: Kind::Full((!bytes.is_empty()).then_some(bytes)),
            _request: request,
            line: None,
            sent: 0,
        }
    }

    /// No body.
    #[must_use]
    pub fn empty(request: Option<RequestGuard>) -> ResBody {
        ResBody {
            kind: Kind::Full(None),
            _request: request,
            line: None,
            sent: 0,
        }
    }

    /// The same body, holding `request` until it ends.
    #[must_use]
    pub fn with_guard(mut self, request: RequestGuard) -> ResBody {
        self._request = Some(request);
        self
    }

    /// A backend's body, passed on as it streams.
    #[must_use]
    pub fn upstream(delivered: Delivered, request: Option<RequestGuard>) -> ResBody {
        ResBody {
            kind: Kind::Upstream(Box::new(delivered)),
            _request: request,
            line: None,
            sent: 0,
        }
    }

    /// The same body, writing `line` when it ends.
    #[must_use]
    pub fn with_line(mut self, line: Option<Box<PendingLine>>) -> ResBody {
        self.line = line;
        self
    }

    fn finish_line(&mut self) {
        if let Some(line) = self.line.take() {
            line.finish(self.sent);
        }
    }
}

impl Drop for ResBody {
    fn drop(&mut self) {
        self.finish_line();
    }
}

impl Body for ResBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let polled = match &mut this.kind {
            Kind::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Kind::Upstream(d) => Pin::new(d.as_mut()).poll_frame(cx),
        };
        match &polled {
            Poll::Pending => {}
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.sent += data.len() as u64;
                } else if let (Some(line), Some(trailers)) =
                    (this.line.as_mut(), frame.trailers_ref())
                    && let Some(v) = trailers.get(weir_core::grpc::STATUS)
                {
                    // A gRPC call's status, for its access line and request metric (C-GRPC-3).
                    line.set_grpc_status(v.as_bytes());
                }
                if this.is_end_stream() {
                    this.finish_line();
                }
            }
            Poll::Ready(_) => this.finish_line(),
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full(b) => b.is_none(),
            Kind::Upstream(d) => d.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::Upstream(d) => d.body.size_hint(),
        }
    }
}

/// A delivered backend response body and everything its request holds until it ends: the
/// request's exchange (gate slot, bulkhead permit, backend slot) and the upstream connection.
#[derive(Debug)]
pub struct Delivered {
    body: Incoming,
    exchange: Box<Bound>,
    conn: Option<Lent>,
    data_plane: Arc<DataPlane>,
    deadline: Option<Deadline>,
    done: bool,
}

impl Delivered {
    /// Stream `body`; report its end to `exchange` and perform what that releases (a gate
    /// hand-off, metrics); give `conn` back to the upstream pool when the body was read to the
    /// end. The exchange's `poll_timeout` is the body's `write_timeout` (C-PATH-7).
    #[must_use]
    pub fn new(
        body: Incoming,
        exchange: Box<Bound>,
        conn: Lent,
        data_plane: Arc<DataPlane>,
    ) -> Delivered {
        let deadline = deadline(&data_plane, &exchange);
        Delivered {
            body,
            exchange,
            conn: Some(conn),
            data_plane,
            deadline,
            done: false,
        }
    }

    fn finish(&mut self, end: BodyEnd) {
        if self.done {
            return;
        }
        self.done = true;
        let now = self.data_plane.rt.now();
        let at = self.data_plane.clock.at(now);
        worker::with_rng(|rng| self.exchange.handle_input(Input::BodyEnd(end), at, rng));
        effects::drain(&self.data_plane, &mut self.exchange, None);
        if let Some(conn) = self.conn.take()
            && end == BodyEnd::Complete
        {
            self.data_plane.upstream.release_lent(conn, now);
        }
    }

    /// The write deadline came: `true` when the engine ended the body (`Output::AbortBody`).
    fn timed_out(&mut self) -> bool {
        let at = self.data_plane.clock.now();
        worker::with_rng(|rng| self.exchange.handle_input(Input::Timeout, at, rng));
        let mut abort = false;
        while let Some(out) = self.exchange.poll_output() {
            if let Some(Output::AbortBody) =
                effects::perform(&self.data_plane, &self.exchange, out, None)
            {
                abort = true;
            }
        }
        if abort {
            self.done = true;
            self.conn = None;
        } else {
            self.deadline = deadline(&self.data_plane, &self.exchange);
        }
        abort
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.body.is_end_stream()
    }

    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if let Some(d) = self.deadline.as_mut()
            && Pin::new(d).poll(cx).is_ready()
            && self.timed_out()
        {
            return Poll::Ready(Some(Err("response write timeout".into())));
        }
        // The upstream connection has no task of its own: drive its IO, then take what it read.
        if let Some(conn) = self.conn.as_mut() {
            conn.poll_drive(cx);
        }
        match Pin::new(&mut self.body).poll_frame(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                self.finish(BodyEnd::Complete);
                Poll::Ready(None)
            }
            Poll::Ready(Some(Ok(frame))) => {
                // C-OUT-1: a gRPC call's status in its trailers, for outlier detection.
                if let Some(v) = frame
                    .trailers_ref()
                    .and_then(|t| t.get(weir_core::grpc::STATUS))
                {
                    let code = weir_core::grpc::status_code(v.as_bytes());
                    let at = self.data_plane.clock.now();
                    worker::with_rng(|rng| {
                        self.exchange.handle_input(Input::GrpcStatus(code), at, rng);
                    });
                }
                // hyper may stop polling once the body says it ended: settle now.
                if self.body.is_end_stream() {
                    self.finish(BodyEnd::Complete);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                self.finish(BodyEnd::Error);
                Poll::Ready(Some(Err(e.into())))
            }
        }
    }
}

impl Drop for Delivered {
    fn drop(&mut self) {
        if !self.done {
            let end = if self.body.is_end_stream() {
                BodyEnd::Complete
            } else {
                BodyEnd::ClientGone
            };
            self.finish(end);
        }
    }
}

/// The exchange's deadline as a runtime timer.
fn deadline(data_plane: &DataPlane, x: &Exchange) -> Option<Deadline> {
    x.poll_timeout()
        .map(|d| Deadline::new(data_plane.rt, data_plane.clock.deadline(d)))
}
