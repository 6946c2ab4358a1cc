//! The outputs of the request engine that are pure side effects, performed the same way
//! wherever the exchange is (the handler, a streaming response body, an upgrade tunnel, the drop
//! guard of a request whose client left): hand a gate slot on ([`Output::GateWake`]), count a
//! metric ([`Output::Metric`]), write the access-log record ([`Output::Record`], C-OBS-1..3).
//! The engine decided each of them; this module copies values.

use http::Method;
use weir_core::exchange::{Exchange, Metric, Output, Record};

use crate::Shared;
use crate::access_log::Line;
use crate::metrics::Listener;

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

/// Perform `out` if it is a side effect; give it back otherwise.
pub fn perform(
    shared: &Shared,
    x: &Exchange,
    out: Output,
    request: Option<Request<'_>>,
) -> Option<Output> {
    match out {
        Output::GateWake { ticket } => shared.admission.wake(ticket),
        Output::Metric(m) => metric(shared, x, m),
        Output::Record(r) => record(shared, x, &r, request),
        other => return Some(other),
    }
    None
}

/// Feed nothing, perform every queued side effect; other outputs are dropped (after the
/// response head the engine asks for nothing else but [`Output::AbortBody`], which the caller
/// handles before draining).
pub fn drain(shared: &Shared, x: &mut Exchange, request: Option<Request<'_>>) {
    while let Some(out) = x.poll_output() {
        let _ = perform(shared, x, out, request);
    }
}

fn metric(shared: &Shared, x: &Exchange, m: Metric) {
    match m {
        Metric::Protection(reason) => {
            shared.metrics.protection(reason);
            crate::events::protection(reason);
        }
        Metric::PanicSelection { backend } => {
            if let Some(b) = x
                .backend(backend)
                .and_then(|b| shared.metrics.backend(b.id()))
            {
                b.panic_selection();
            }
        }
        Metric::Circuit {
            backend,
            transition,
            cause,
        } => {
            if let Some(b) = x.backend(backend) {
                crate::events::circuit(shared, x, b.id(), transition, cause);
            }
        }
        Metric::Attempt {
            backend,
            result,
            duration,
        } => {
            if let Some(b) = x
                .backend(backend)
                .and_then(|b| shared.metrics.backend(b.id()))
            {
                b.attempt(result, duration);
            }
        }
    }
}

fn record(shared: &Shared, x: &Exchange, r: &Record, request: Option<Request<'_>>) {
    shared
        .metrics
        .request(Listener::Public, r.status, r.duration);
    shared.metrics.retries(r.attempts);
    let Some(request) = request.filter(|_| r.log) else {
        return;
    };
    Line {
        request_id: x.request_id().as_str(),
        listener: Listener::Public,
        method: request.method,
        path: request.path,
        include_path: r.include_path,
        status: r.status,
        duration: r.duration,
        backend: r.backend.and_then(|i| x.backend(i)).map(|b| b.id()),
        attempts: r.attempts,
        client: r.client,
        endpoint: None,
        version: request.version,
        scheme: x.proto().as_str(),
        host: request.host,
        route: x
            .route()
            .and_then(|i| x.runtime().config().routes.get(i))
            .map(|r| r.prefix.as_str()),
        reason: r.reason,
        upstream_status: r.upstream_status,
    }
    .emit();
}
