//! One probe: connect, optionally TLS, optionally `GET`, all within one deadline (C-HEALTH-1,
//! C-HEALTH-6).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::Either;
use http::header::{CONNECTION, HOST, USER_AGENT};
use http::{HeaderValue, Method, Request};
use http_body_util::Empty;
use hyper::rt::{Read, Write};
use rustls::ClientConfig;
use weir_core::config::ProbeMode;
use weir_core::health::HealthParams;

use super::target::ProbeTarget;
use crate::base::rt::{self, Rt};

mod h2;

use super::outcome::{PROBE_USER_AGENT, ProbeOutcome};

/// Probes `target` once, giving up after `timeout` (C-HEALTH-1). `tls` is used for targets that
/// speak TLS ([`tls::native_client_config`](super::client_tls::native_client_config) in production);
/// `params` says which statuses count as success.
pub async fn probe(
    rt: Rt,
    target: &ProbeTarget,
    tls: &Arc<ClientConfig>,
    params: &HealthParams,
    timeout: Duration,
) -> ProbeOutcome {
    let deadline = rt
        .now()
        .checked_add(timeout)
        .unwrap_or_else(|| crate::base::clock::Clock::new(rt).far_future());
    probe_until(rt, target, tls, params, deadline).await
}

/// Probes `target` once, giving up at `deadline`: a backend that accepts and never answers is a
/// [`ProbeOutcome::TimedOut`] failure at the deadline, not later (C-HEALTH-6). Everything the
/// probe opened is closed when this returns, or when the future is dropped.
pub async fn probe_until(
    rt: Rt,
    target: &ProbeTarget,
    tls: &Arc<ClientConfig>,
    params: &HealthParams,
    deadline: std::time::Instant,
) -> ProbeOutcome {
    rt::timeout_at(rt, deadline, attempt(rt, target, tls, params))
        .await
        .unwrap_or(ProbeOutcome::TimedOut)
}

async fn attempt(
    rt: Rt,
    target: &ProbeTarget,
    tls: &Arc<ClientConfig>,
    params: &HealthParams,
) -> ProbeOutcome {
    // `dial` sets TCP_NODELAY: probes send one small request.
    let (host, port) = target.addr();
    let mut stream = match crate::services::dns::dial(rt, host, port).await {
        Ok(s) => s,
        Err(e) => return ProbeOutcome::Connect(e.kind()),
    };
    if target.uri().is_none() {
        // TCP mode: the connect is the probe; dropping the stream closes it.
        return ProbeOutcome::Connected;
    }
    if target.mode() == ProbeMode::Grpc && !target.protocol().is_h2() {
        // The configuration refuses this (gRPC is HTTP/2 only); a target made by hand says so.
        return ProbeOutcome::Grpc(Box::from(
            "grpc needs an HTTP/2 backend (protocol h2c or h2)",
        ));
    }
    if let Some(v) = target.send_proxy() {
        let header = weir_core::proxy_proto::encode_local(v);
        if let Err(e) = rt::write_preface(&mut stream, header.as_bytes()).await {
            return ProbeOutcome::Http(format!("PROXY header: {e}").into_boxed_str());
        }
    }
    let h2 = target.protocol().is_h2();
    let io: Box<dyn rt::Io> = match target.server_name() {
        None => stream,
        Some(name) => {
            let config = if h2 { h2_config(tls) } else { Arc::clone(tls) };
            let mut connect = rt::TlsConnect::new(config, name.clone(), stream);
            if h2 {
                connect = connect.require_alpn(h2::ALPN_H2);
            }
            match rt.tls_connect(connect).await {
                Ok(tls_stream) => tls_stream,
                Err(e) => return ProbeOutcome::Tls(tls_error_text(&e)),
            }
        }
    };
    if h2 {
        return h2::exchange(rt, io, target, params).await;
    }
    match exchange(io, target).await {
        Ok(s) if params.probe_status_ok(s) => ProbeOutcome::Status(s),
        Ok(s) => ProbeOutcome::UnexpectedStatus(s),
        Err(e) => ProbeOutcome::Http(e.to_string().into_boxed_str()),
    }
}

/// `tls` offering ALPN `h2` only: an `h2` backend must agree on HTTP/2 (C-GRPC-5). Made per
/// probe of such a backend (a few `Arc` clones every `interval`), so the driver keeps one
/// configuration.
fn h2_config(tls: &Arc<ClientConfig>) -> Arc<ClientConfig> {
    let mut c = ClientConfig::clone(tls);
    c.alpn_protocols = vec![h2::ALPN_H2.to_vec()];
    Arc::new(c)
}

/// The message of a TLS handshake error: rustls's own error when it is one.
fn tls_error_text(e: &io::Error) -> Box<str> {
    match e.get_ref() {
        Some(inner) => inner.to_string().into_boxed_str(),
        None => e.to_string().into_boxed_str(),
    }
}

/// Sends `GET <probe uri>` over `io` (HTTP/1.1, `Connection: close`) and returns the status of
/// the response. The body is not read: the status decides, and dropping the response and the
/// connection closes the socket.
async fn exchange<T>(io: T, target: &ProbeTarget) -> Result<u16, hyper::Error>
where
    T: Read + Write + Unpin,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
    let request = probe_request(target);
    let mut conn = std::pin::pin!(conn);
    let response = std::pin::pin!(sender.send_request(request));
    let mut response = response;
    // The connection future must be polled for the request to progress. When it ends first
    // (the server closed), the response, if one arrived, is already waiting in `response`.
    let result = match futures_util::future::select(&mut response, &mut conn).await {
        Either::Left((r, _)) => r,
        Either::Right(_) => response.await,
    };
    result.map(|r| r.status().as_u16())
}

fn probe_request(target: &ProbeTarget) -> Request<Empty<Bytes>> {
    let mut request = Request::new(Empty::new());
    *request.method_mut() = Method::GET;
    // Origin-form target: hyper's http1 client sends the URI as given.
    if let Some(pq) = target.uri().and_then(http::Uri::path_and_query)
        && let Ok(origin) = pq.as_str().parse()
    {
        *request.uri_mut() = origin;
    }
    let headers = request.headers_mut();
    if let Some(host) = target.host_header()
        && let Ok(v) = HeaderValue::from_str(host.as_str())
    {
        headers.insert(HOST, v);
    }
    headers.insert(USER_AGENT, HeaderValue::from_static(PROBE_USER_AGENT));
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    request
}
