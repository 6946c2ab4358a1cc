//! A probe over HTTP/2 (`protocol: h2c` or `h2`): the same `GET` as over HTTP/1.1 for modes
//! `http`/`https`, and the gRPC health call for mode `grpc` (C-GRPC-4). One connection per
//! probe, closed when the probe ends, as for HTTP/1.1.

use bytes::Bytes;
use futures_util::future::Either;
use http::header::{CONTENT_TYPE, TE, USER_AGENT};
use http::uri::{Parts, Scheme};
use http::{HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt, Full, Limited};
use weir_core::config::ProbeMode;
use weir_core::grpc::health::{self, ServingStatus};
use weir_core::health::HealthParams;

use crate::base::rt::{Io, Rt};
use crate::services::probe::ProbeTarget;
use crate::services::probe::outcome::{PROBE_USER_AGENT, ProbeOutcome};

/// The ALPN name of HTTP/2 over TLS.
pub(super) const ALPN_H2: &[u8] = b"h2";

/// Probe `target` over `io` with HTTP/2 (prior knowledge; over TLS, ALPN `h2` was agreed).
pub(super) async fn exchange(
    rt: Rt,
    io: Box<dyn Io>,
    target: &ProbeTarget,
    params: &HealthParams,
) -> ProbeOutcome {
    let handshake = hyper::client::conn::http2::Builder::new(rt)
        .timer(rt)
        .handshake::<_, Full<Bytes>>(io)
        .await;
    let (mut sender, conn) = match handshake {
        Ok(pair) => pair,
        Err(e) => return ProbeOutcome::Http(format!("http/2 handshake: {e}").into_boxed_str()),
    };
    let grpc = target.mode() == ProbeMode::Grpc;
    let request = request(target, grpc);
    let work = async move {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| ProbeOutcome::Http(e.to_string().into_boxed_str()))?;
        if !grpc {
            // The status decides; the body is never read.
            return Ok(status_outcome(response.status().as_u16(), params));
        }
        let (head, body) = response.into_parts();
        // A trailers-only answer carries the status in the head and has no body.
        let collected = Limited::new(body, health::MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| ProbeOutcome::Grpc(format!("reading the answer: {e}").into_boxed_str()))?;
        let trailers = collected.trailers().cloned();
        let body = collected.to_bytes();
        let field = |name: &str| {
            trailers
                .as_ref()
                .and_then(|t| t.get(name))
                .or_else(|| head.headers.get(name))
                .map(HeaderValue::as_bytes)
        };
        Ok(grpc_outcome(health::check_result(
            head.status.as_u16(),
            field(weir_core::grpc::STATUS),
            field(weir_core::grpc::MESSAGE),
            &body,
        )))
    };
    let mut work = std::pin::pin!(work);
    let mut conn = std::pin::pin!(conn);
    // The connection future does the IO; when it ends first (the backend closed), the
    // request's own future has its answer or its error.
    let result = match futures_util::future::select(&mut work, &mut conn).await {
        Either::Left((r, _)) => r,
        Either::Right(_) => work.await,
    };
    result.unwrap_or_else(|failed| failed)
}

fn status_outcome(status: u16, params: &HealthParams) -> ProbeOutcome {
    if params.probe_status_ok(status) {
        ProbeOutcome::Status(status)
    } else {
        ProbeOutcome::UnexpectedStatus(status)
    }
}

fn grpc_outcome(result: Result<ServingStatus, health::CheckError>) -> ProbeOutcome {
    match result {
        Ok(ServingStatus::Serving) => ProbeOutcome::Serving,
        Ok(other) => ProbeOutcome::NotServing(other),
        Err(e) => ProbeOutcome::Grpc(e.to_string().into_boxed_str()),
    }
}

/// The probe request: `GET <probe uri>`, or `POST /grpc.health.v1.Health/Check` with the
/// encoded `HealthCheckRequest`; `:scheme` follows the transport, `:authority` the URL.
fn request(target: &ProbeTarget, grpc: bool) -> Request<Full<Bytes>> {
    let body = if grpc {
        Bytes::from(health::encode_request(target.grpc_service()))
    } else {
        Bytes::new()
    };
    let mut request = Request::new(Full::new(body));
    *request.version_mut() = http::Version::HTTP_2;
    if let Some(uri) = target.uri() {
        let mut parts = Parts::from(uri.clone());
        parts.scheme = Some(if target.is_tls() {
            Scheme::HTTPS
        } else {
            Scheme::HTTP
        });
        parts.authority = target.host_header().cloned();
        if let Ok(uri) = Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
    }
    *request.method_mut() = if grpc { Method::POST } else { Method::GET };
    let headers = request.headers_mut();
    headers.insert(USER_AGENT, HeaderValue::from_static(PROBE_USER_AGENT));
    if grpc {
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static(weir_core::grpc::CONTENT_TYPE),
        );
        headers.insert(TE, HeaderValue::from_static("trailers"));
    }
    request
}
