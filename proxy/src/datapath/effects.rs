//! The outputs of the request engine that are pure side effects, performed the same way
//! wherever the exchange is (the handler, a streaming response body, an upgrade tunnel, the drop
//! guard of a request whose client left): hand a gate slot on ([`Output::GateWake`]), count a
//! metric ([`Output::Metric`]), write the access-log record ([`Output::Record`], C-OBS-1..3).
//! The engine decided each of them; this module copies values.
//!
//! The access-log line is written when the response body ends, so that it can say
//! how long the whole exchange took and how many body bytes went each way. The engine's
//! [`Record`] is the request's, emitted when the response head is ready: the request metric is
//! counted then, and a logged record becomes a [`PendingLine`] that the data path keeps with
//! the response body, fills with the bytes it counts ([`BodyTally`] for the request body, the
//! response body's own count) and finishes at the body's end or drop. This is the whole
//! interface a data path needs: `perform` / `drain`, `PendingLine::finish`, `BodyTally`.

use std::sync::Arc;
use std::time::Instant;

use http::Method;
use weir_core::exchange::{Exchange, Metric, Output, Record};
use weir_core::grpc::StatusSource;

use crate::base::exposition::Listener;
use crate::base::rt::Rt;
use crate::observe::access_log::Line;
use crate::services::snapshot::Bound;
use crate::services::state::DataPlane;
pub use crate::services::upstream::BodyTally;

/// What the access-log line says about the request that the engine does not keep.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The method.
    pub method: &'a Method,
    /// The URI's path (logged only when `server.access_log_include_path`).
    pub path: &'a str,
    /// The HTTP version.
    pub version: http::Version,
    /// The `Host` header, or the target's authority.
    pub host: Option<&'a str>,
}

/// The request body bytes of a pending line: known when the record was made (none, or a
/// buffered body), or counted by the stream while it runs.
#[derive(Debug)]
pub enum RequestBytes {
    /// This many (no body, or a body buffered for replay).
    Known(u64),
    /// The streamed body's tally.
    Streamed(Arc<BodyTally>),
}

impl RequestBytes {
    fn get(&self) -> u64 {
        match self {
            RequestBytes::Known(n) => *n,
            RequestBytes::Streamed(t) => t.bytes(),
        }
    }
}

/// A logged request's access-log line, waiting for the end of its response body (module doc).
/// Owned: it outlives the handler. Written by [`PendingLine::finish`], or by `Drop` with the
/// bytes counted so far if the body is dropped unfinished.
#[derive(Debug)]
pub struct PendingLine {
    record: Record,
    rt: Rt,
    /// When the request arrived, on the runtime's clock.
    arrived: Instant,
    request_id: Box<str>,
    method: Method,
    path: Box<str>,
    version: http::Version,
    scheme: &'static str,
    host: Option<Box<str>>,
    route: Option<Box<str>>,
    backend: Option<Box<str>>,
    request_bytes: RequestBytes,
    /// The request's gRPC status as known so far (C-GRPC-3: weir's own answer's; a backend's
    /// from its trailers-only head or its trailers, [`PendingLine::set_grpc_status`]).
    grpc_status: Option<u8>,
    /// The request counter waits for the gRPC status too (a backend's response to a gRPC
    /// call): counted when the line is done, logged or not.
    count: Option<Arc<crate::observe::metrics::Metrics>>,
    done: bool,
}

impl PendingLine {
    /// The line of `r` (a logged record of `x`), made when the record was emitted.
    fn new(data_plane: &DataPlane, x: &Exchange, r: &Record, request: Request<'_>) -> PendingLine {
        let mut line = PendingLine::bare(
            data_plane,
            r,
            x.request_id().as_str(),
            request,
            x.proto().as_str(),
        );
        line.route = x
            .route()
            .and_then(|i| x.runtime().config().routes.get(i))
            .map(|r| Box::from(r.prefix.as_str()));
        line.backend = r
            .backend
            .and_then(|i| x.backend(i))
            .map(|b| Box::from(b.id()));
        line
    }

    /// The line of `r` with no route and no backend (nothing but the record and the head).
    fn bare(
        data_plane: &DataPlane,
        r: &Record,
        request_id: &str,
        request: Request<'_>,
        scheme: &'static str,
    ) -> PendingLine {
        let now = data_plane.rt.now();
        PendingLine {
            record: *r,
            rt: data_plane.rt,
            arrived: now.checked_sub(r.duration).unwrap_or(now),
            request_id: Box::from(request_id),
            method: request.method.clone(),
            path: Box::from(if r.include_path { request.path } else { "" }),
            version: request.version,
            scheme,
            host: request.host.map(Box::from),
            route: None,
            backend: None,
            request_bytes: RequestBytes::Known(0),
            grpc_status: r.grpc_status.known(),
            count: (r.grpc_status == StatusSource::Response)
                .then(|| Arc::clone(&data_plane.metrics)),
            done: false,
        }
    }

    /// The backend's `grpc-status` for this gRPC call, from its trailers-only head or its
    /// trailers ([`weir_core::grpc::status_code`]).
    pub fn set_grpc_status(&mut self, value: &[u8]) {
        if self.count.is_some() {
            self.grpc_status = Some(weir_core::grpc::status_code(value));
        }
    }

    /// Where the request body's bytes come from (default: none).
    pub fn set_request_bytes(&mut self, bytes: RequestBytes) {
        self.request_bytes = bytes;
    }

    /// Write the line now: the response body ended after `response_bytes` bytes.
    pub fn finish(mut self, response_bytes: u64) {
        self.write(response_bytes);
    }

    fn write(&mut self, response_bytes: u64) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let r = &self.record;
        if let Some(metrics) = self.count.take() {
            metrics.request(Listener::Public, r.status, r.duration, self.grpc_status);
        }
        if !r.log {
            return;
        }
        let total = self.rt.now().saturating_duration_since(self.arrived);
        Line {
            request_id: &self.request_id,
            listener: Listener::Public,
            method: &self.method,
            path: &self.path,
            include_path: r.include_path,
            status: r.status,
            duration: total.max(r.duration),
            head_duration: Some(r.duration),
            backend: self.backend.as_deref(),
            attempts: r.attempts,
            client: r.client,
            endpoint: None,
            version: self.version,
            scheme: self.scheme,
            host: self.host.as_deref(),
            route: self.route.as_deref(),
            reason: r.reason,
            upstream_status: r.upstream_status,
            grpc_status: self.grpc_status,
            request_bytes: Some(self.request_bytes.get()),
            response_bytes: Some(response_bytes),
        }
        .emit();
    }
}

impl Drop for PendingLine {
    fn drop(&mut self) {
        // Never finished (a response dropped before its body was polled): what is known now.
        self.write(0);
    }
}

/// Perform `out` if it is a side effect; give it back otherwise. A logged [`Output::Record`]
/// is given back too when `request` is known: the caller makes it a [`PendingLine`] with
/// [`pending_line`] and keeps it with the response body.
pub fn perform(
    data_plane: &DataPlane,
    x: &Bound,
    out: Output,
    request: Option<Request<'_>>,
) -> Option<Output> {
    match out {
        Output::GateWake { ticket } => data_plane.admission.wake(ticket),
        Output::Metric(m) => metric(data_plane, x, m),
        Output::Outliers(events) => outliers(x, &events),
        Output::Record(r) => {
            if needs_line(&r) && request.is_some() {
                record_later(data_plane, &r);
                return Some(Output::Record(r));
            }
            record(data_plane, &r);
        }
        other => return Some(other),
    }
    None
}

/// Whether record `r` needs a [`PendingLine`]: it is logged, or its request counter waits for
/// a backend's gRPC status (the line counts it at its end, logged or not).
#[must_use]
pub fn needs_line(r: &Record) -> bool {
    r.log || r.grpc_status == StatusSource::Response
}

/// The pending access-log line of a record `r` given back by [`perform`] ([`needs_line`]).
#[must_use]
pub fn pending_line(
    data_plane: &DataPlane,
    x: &Exchange,
    r: &Record,
    request: Request<'_>,
) -> Box<PendingLine> {
    Box::new(PendingLine::new(data_plane, x, r, request))
}

/// Feed nothing, perform every queued side effect; other outputs are dropped (after the
/// response head the engine asks for nothing else but [`Output::AbortBody`], which the caller
/// handles before draining). A logged record found here has no body to wait for: its line is
/// written at once.
pub fn drain(data_plane: &DataPlane, x: &mut Bound, request: Option<Request<'_>>) {
    while let Some(out) = x.poll_output() {
        if let (Some(Output::Record(r)), Some(request)) =
            (perform(data_plane, x, out, request), request)
        {
            PendingLine::new(data_plane, x, &r, request).finish(0);
        }
    }
}

/// A record made without an exchange (`Record::refused_head`: an HTTP/1 head the codec refused)
/// goes the way an exchange's record goes: counted at once ([`record`]), and, when logged, its
/// line pending until the answer is written. `request_id` is the answer's, `scheme` the
/// connection's.
#[must_use]
pub fn record_without_exchange(
    data_plane: &DataPlane,
    r: &Record,
    request_id: &str,
    request: Request<'_>,
    scheme: &'static str,
) -> Option<PendingLine> {
    record(data_plane, r);
    r.log
        .then(|| PendingLine::bare(data_plane, r, request_id, request, scheme))
}

/// Log and count the outlier ejections and returns of `x`'s pool (what [`perform`] does with an
/// [`Output::Outliers`], C-OUT-2).
pub fn outliers(x: &Bound, events: &[weir_core::outlier::OutlierEvent]) {
    for e in events {
        if let Some(b) = x.handles(e.backend) {
            crate::observe::events::outlier(&b.metrics, e.change);
        }
    }
}

/// Count the metric `m` of `x` (what [`perform`] does with an [`Output::Metric`]).
pub fn metric(data_plane: &DataPlane, x: &Bound, m: Metric) {
    match m {
        Metric::Protection(reason) => {
            data_plane.metrics.protection(reason);
            crate::observe::events::protection(reason);
        }
        Metric::PanicSelection { backend } => {
            if let Some(b) = x.handles(backend) {
                b.metrics.panic_selection();
            }
        }
        Metric::Circuit {
            backend,
            transition,
            cause,
        } => {
            if let Some(b) = x.handles(backend) {
                crate::observe::events::circuit(x, &b.metrics, transition, cause);
            }
        }
        Metric::QueueWait(waited) => data_plane.metrics.queue_wait(waited),
        Metric::RateDecision(result) => data_plane.metrics.rate_decision(result),
        Metric::Mirror(result) => data_plane.metrics.mirror(result),
        Metric::Hedge(result) => data_plane.metrics.hedge(result),
        Metric::Store {
            storage,
            result,
            duration,
        } => data_plane.metrics.store_call(storage, result, duration),
        Metric::Attempt {
            backend,
            result,
            duration,
            ..
        } => {
            if let Some(b) = x.handles(backend) {
                b.metrics.attempt(result, duration);
            }
        }
    }
}

/// The request metric of `r` (every request, logged or not, C-OBS-2): what [`perform`] does
/// with an [`Output::Record`] besides giving a logged one back. A record whose gRPC status is
/// still to come ([`needs_line`]) is counted by its [`PendingLine`] instead: give it
/// [`record_later`] and a line.
pub fn record(data_plane: &DataPlane, r: &Record) {
    data_plane.metrics.request(
        Listener::Public,
        r.status,
        r.duration,
        r.grpc_status.known(),
    );
    data_plane.metrics.retries(r.attempts);
}

/// The part of [`record`] that does not wait for the line: a record with a [`PendingLine`]
/// has its request counted when the line is done (with a backend's gRPC status, C-GRPC-3).
pub fn record_later(data_plane: &DataPlane, r: &Record) {
    if r.grpc_status == StatusSource::Response {
        data_plane.metrics.retries(r.attempts);
    } else {
        record(data_plane, r);
    }
}
