//! Sending a request's mirror (C-MIRROR-1), for both client protocols: the engine decided it
//! and reserved a backend of the mirror pool (`weir_core::mirror`); this module sends the copy
//! on a task of its own, through the runtime seam (`rt::Rt::spawn`, so it runs on tokio and
//! smol alike), reads the answer to its end and throws it away, and finishes the mirror with its
//! outcome, which feeds only the mirror pool's backend (breaker, outlier counts) and that
//! backend's attempt metrics.
//!
//! The primary never waits for it: the copy is made from headers and body bytes the request
//! already holds (the body is buffered before the first attempt), the task is spawned and
//! forgotten, and nothing of the mirror is fed back to the request's exchange. The mirror is
//! bounded by its own head deadline (the earlier of `per_try_timeout` and
//! `response_header_timeout` from its sending) and then by the same deadline for its body, so a
//! shadow that hangs holds its in-flight place (`mirror_max_in_flight`) no longer than that.
//! It is never retried, takes no rate-limit token and no gate slot, and is not access-logged
//! (counted in `load_balancer_mirror_requests_total` instead; a failure is a `debug` event).

use std::sync::Arc;
use std::task::Poll;

use bytes::Bytes;
use http::header::HOST;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri};
use hyper::body::Body as _;
use weir_core::exchange::{AttemptResult, MirrorSend};
use weir_core::mirror::{MirrorEnd, shadow_host};
use weir_core::response::header;

use crate::base::rt;
use crate::base::uri::upstream_uri;
use crate::services::snapshot::Bound;
use crate::services::state::DataPlane;
use crate::services::upstream::{DownstreamEnds, SendError, UpBody};

/// The request a mirror copies: method, origin-form target, the headers as the primary's
/// attempts carry them (hop-by-hop lines removed, forwarding lines and `X-Request-ID` set), and
/// the buffered body.
#[derive(Debug)]
pub struct Copy<'a> {
    /// The method.
    pub method: &'a Method,
    /// The client's target (origin form, or absolute).
    pub uri: &'a Uri,
    /// The upstream headers.
    pub headers: HeaderMap,
    /// The buffered body (empty: none).
    pub body: Bytes,
    /// The client's connection (for a backend's PROXY header).
    pub client: DownstreamEnds,
}

/// Send the mirror `send` of `x` (announced by `Output::Mirror`) on its own task. Returns at
/// once.
pub fn spawn(data_plane: &Arc<DataPlane>, x: &mut Bound, send: MirrorSend, copy: Copy<'_>) {
    let Some(mut mirror) = x.take_mirror() else {
        return;
    };
    let snapshot = Arc::clone(x.snapshot());
    if let Some(events) = mirror.take_outlier_events() {
        for e in &events {
            if let Some(b) = snapshot.backend(send.pool, e.backend) {
                crate::observe::events::outlier(&b.metrics, e.change);
            }
        }
    }
    let Some(handles) = snapshot.backend(send.pool, send.backend) else {
        return;
    };
    let metrics = Arc::clone(&handles.metrics);
    let rt_core = Arc::clone(snapshot.core());
    let policy = Arc::clone(rt_core.retry());
    let Some(target) = handles.target.clone() else {
        let now = data_plane.clock.now();
        let _ = mirror.finish(MirrorEnd::Connect, &policy, now);
        metrics.attempt(AttemptResult::ConnectError, std::time::Duration::ZERO);
        return;
    };
    let Ok(uri) = upstream_uri(target.base(), copy.method, copy.uri) else {
        // A target too long for this backend: nothing was sent, nothing is known of the backend.
        return;
    };
    let mut headers = copy.headers;
    let host = headers
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .map(shadow_host)
        .unwrap_or_else(|| shadow_host(target.host_header().to_str().unwrap_or_default()));
    if let Ok(v) = HeaderValue::from_str(&host) {
        headers.insert(HOST, v);
    }
    headers.insert(
        HeaderName::from_static(header::BACKEND_ATTEMPT),
        target.id_value().clone(),
    );
    let mut req = Request::new(UpBody::full(copy.body));
    *req.method_mut() = copy.method.clone();
    *req.uri_mut() = uri;
    *req.headers_mut() = headers;
    let header_timeout = rt_core.config().server.upstream.response_header_timeout;
    let deadline = data_plane
        .clock
        .deadline(mirror.deadline(&policy, header_timeout));
    let data_plane = Arc::clone(data_plane);
    let client = copy.client;
    data_plane.rt.spawn(async move {
        let begun = data_plane.rt.now();
        let rt = data_plane.rt;
        let upstream = &data_plane.upstream;
        let sent = rt::timeout_at(
            rt,
            deadline,
            upstream.send_lent(&target, Some(&metrics), req, begun, client),
        )
        .await;
        let (end, result) = match sent {
            Ok(Ok((resp, mut lent))) => {
                let status = resp.status().as_u16();
                let mut body = resp.into_body();
                // Read to the end and discard, driving the connection, within the same
                // deadline: a shadow that never ends its body is cut.
                let read = std::future::poll_fn(|cx| {
                    lent.poll_drive(cx);
                    loop {
                        match std::pin::Pin::new(&mut body).poll_frame(cx) {
                            Poll::Ready(Some(Ok(_))) => {}
                            Poll::Ready(Some(Err(_))) => return Poll::Ready(false),
                            Poll::Ready(None) => return Poll::Ready(true),
                            Poll::Pending => return Poll::Pending,
                        }
                    }
                });
                if let Ok(true) = rt::timeout_at(rt, deadline, read).await {
                    upstream.release_lent(lent, rt.now());
                }
                let result = if policy.is_retryable_status(status) {
                    AttemptResult::FailureStatus
                } else {
                    AttemptResult::Success
                };
                (MirrorEnd::Status(status), result)
            }
            Ok(Err(e)) => {
                tracing::debug!(backend = target.id(), error = %e, "mirror attempt failed");
                match e {
                    SendError::Connect(_) => (MirrorEnd::Connect, AttemptResult::ConnectError),
                    _ => (MirrorEnd::Transport, AttemptResult::TransportError),
                }
            }
            Err(_) => (MirrorEnd::Timeout, AttemptResult::Timeout),
        };
        metrics.attempt(result, rt.now().saturating_duration_since(begun));
        let now = data_plane.clock.now();
        if let Some(t) = mirror.finish(end, &policy, now) {
            metrics.circuit_transition(matches!(t, weir_core::breaker::Transition::Opened { .. }));
            tracing::warn!(
                target: "weir::health",
                backend = target.id(),
                event = if matches!(t, weir_core::breaker::Transition::Opened { .. }) {
                    "circuit_open"
                } else {
                    "circuit_closed"
                },
                "mirror backend circuit changed"
            );
        }
    });
}
