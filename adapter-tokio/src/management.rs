//! The management listener (C-PATH-1: separate from the data plane). This is the listener and
//! its authentication (C-MGMT-1); the endpoints of C-MGMT-2..4, metrics and reload arrive with
//! issue 5 and plug in at [`route`]. Until then every authenticated request other than
//! `/healthz` and `/readyz` gets `404`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use weir_core::config::HostPort;
use weir_core::request_id::{X_REQUEST_ID, request_id_in_force};
use weir_core::response::{ManagementError, SyntheticResponse};

use crate::{Shared, StartError, worker};

/// Resolve `management.address` (an empty host listens on every interface).
pub async fn resolve_bind(addr: &HostPort) -> Result<SocketAddr, StartError> {
    let host = if addr.host.is_empty() {
        "0.0.0.0"
    } else {
        addr.host.as_str()
    };
    let err = |error| StartError::Bind {
        addr: addr.to_string(),
        error,
    };
    tokio::net::lookup_host((host, addr.port))
        .await
        .map_err(err)?
        .next()
        .ok_or_else(|| {
            err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "management address does not resolve",
            ))
        })
}

/// Serve the management listener until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(shared.limits.read_header_timeout);
    loop {
        let (stream, _peer) = tokio::select! {
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() { return; }
                continue;
            }
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(_) => continue,
            },
        };
        let shared = Arc::clone(&shared);
        let conn = builder.serve_connection(
            TokioIo::new(stream),
            service_fn(move |req| {
                let shared = Arc::clone(&shared);
                async move { Ok::<_, Infallible>(route(&shared, &req)) }
            }),
        );
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
}

/// One management request: authentication first (C-MGMT-1), then the endpoint.
fn route(shared: &Shared, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let (rid, _) = worker::with_rng(|rng| request_id_in_force(req.headers(), rng));
    let rt = shared.runtime.load();
    let m = &rt.config().management;
    let authorized = m.allow_insecure
        || m.auth_token.as_ref().is_some_and(|token| {
            req.headers()
                .get(http::header::AUTHORIZATION)
                .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
                .is_some_and(|given| token.matches(given))
        });
    if !authorized {
        return refuse(&ManagementError::Unauthorized, rid.as_str());
    }
    let (status, body): (StatusCode, &'static str) = match req.uri().path() {
        "/healthz" => (StatusCode::OK, "{\"status\":\"ok\"}"),
        "/readyz" if shared.ready() => (StatusCode::OK, "{\"status\":\"ready\"}"),
        "/readyz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "{\"status\":\"not ready\"}",
        ),
        _ => return refuse(&ManagementError::NotFound, rid.as_str()),
    };
    let mut resp = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    h.insert(X_REQUEST_ID, rid.to_header_value());
    resp
}

fn refuse(error: &ManagementError, rid: &str) -> Response<Full<Bytes>> {
    let s = SyntheticResponse::management(error, rid);
    let mut resp = Response::new(Full::new(Bytes::from(s.body())));
    *resp.status_mut() = StatusCode::from_u16(s.status()).unwrap_or(StatusCode::FORBIDDEN);
    for (name, value) in s.headers() {
        if let Some(v) = value.to_header_value() {
            resp.headers_mut().insert(HeaderName::from_static(name), v);
        }
    }
    resp
}
