//! The console's server side (docs/console.md): `weir console` and `weir demo` serve
//! the console's static bundle, embedded in the binary at build time (`build.rs`), on a listener
//! of their own, and forward `/api/dashboard/*` and `/api/openapi.json` to the management
//! listener with the bearer token **added here** (from `BALANCER_ADMIN_TOKEN` or
//! `BALANCER_ADMIN_TOKEN_FILE`), so the token never reaches the browser (C-MGMT-1, C-CONF-3).
//!
//! What is forwarded: the method, path and query, the body (at most `mgmt::MAX_BODY_BYTES + 1`
//! bytes: the management plane answers `413` beyond), and only the headers the management
//! guards read (`Content-Type`, `X-Balancer-CSRF`, `Sec-Fetch-Site`: C-MGMT-2) plus the tracing
//! and representation ones `/api/dashboard/request` passes on. A browser's own `Authorization`
//! or `Cookie` is never forwarded. Every answer carries `Content-Security-Policy:
//! default-src 'self'; frame-ancestors 'none'` and friends.

use std::convert::Infallible;
use std::io::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use weir_core::config::{Secret, SecretSource};

use crate::base::rt::{self, JoinHandle, Rt};

mod assets {
    include!(concat!(env!("OUT_DIR"), "/console_assets.rs"));
}

/// The variable the token is read from (and `<it>_FILE`), as the management section's default.
pub const TOKEN_ENV: &str = "BALANCER_ADMIN_TOKEN";

/// How long one forwarded management call may take.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a request body may take to arrive (the header read has its own 10 s).
const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// The policy every answer carries: only this origin's files, no framing, no plugins.
pub const CSP: &str = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; \
                       form-action 'none'; object-src 'none'";

/// Request headers passed to the management plane (everything else is dropped).
const FORWARDED: [&str; 9] = [
    "content-type",
    "x-balancer-csrf",
    "sec-fetch-site",
    "x-request-id",
    "accept",
    "accept-language",
    "user-agent",
    "traceparent",
    "tracestate",
];

/// Response headers passed back to the browser.
const RETURNED: [&str; 5] = [
    "content-type",
    "cache-control",
    "x-request-id",
    "allow",
    "www-authenticate",
];

/// Why `weir console` cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// `--management` is not `http://…`.
    #[error(
        "--management {0:?}: expected http://HOST:PORT (the management listener speaks plain HTTP)"
    )]
    Scheme(String),
    /// `--management` has a path.
    #[error("--management {0:?}: expected http://HOST:PORT, without a path")]
    Path(String),
    /// `--management` has no port, or one that is not a number.
    #[error("--management {0:?}: expected http://HOST:PORT")]
    HostPort(String),
    /// The host of `--management` could not be resolved.
    #[error("--management {url:?}: cannot resolve the host")]
    Resolve {
        /// `--management` as given.
        url: String,
        /// Why.
        #[source]
        error: std::io::Error,
    },
    /// The host of `--management` resolves to no address.
    #[error("--management {0:?}: the host does not resolve")]
    NoAddress(String),
    /// The token file cannot be read.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// `--auth-token-env VAR` names a variable that is not set, nor `VAR_FILE`.
    #[error(
        "--auth-token-env {0}: neither {0} nor {0}_FILE is set (the console's own token, which \
         every request must carry)"
    )]
    NoToken(String),
    /// A listen address beyond loopback without `--allow-remote` or the console's own token
    /// (the message names the safe options).
    #[error("{0}")]
    Refused(String),
    /// The console's listener cannot be bound.
    #[error("cannot listen on {addr}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        error: std::io::Error,
    },
}

/// `NAME_FILE` names a file that cannot be read ([`token_from`]).
#[derive(Debug, thiserror::Error)]
#[error("{var} names a file that cannot be read")]
pub struct TokenError {
    /// The variable (`BALANCER_ADMIN_TOKEN_FILE`).
    pub var: String,
    /// Why: the reason `SecretSource::read_file` gives, which weir-core's trait passes as text.
    #[source]
    pub reason: Box<dyn std::error::Error + Send + Sync>,
}

/// Where the console forwards to, and with what token.
#[derive(Clone)]
pub struct Upstream {
    /// The management listener.
    pub addr: SocketAddr,
    /// The bearer token (`None`: sent without one, for `management.allow_insecure`).
    pub token: Option<String>,
    /// The console's own token (`--auth-token-env`): every request must carry it as
    /// `Authorization: Bearer`, or gets `401` and nothing is served or forwarded.
    pub auth: Option<Secret>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("addr", &self.addr)
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .field("auth", &self.auth)
            .finish()
    }
}

/// The OpenAPI 3.1 document of the management API (committed; served at [`OPENAPI_PATH`] on the
/// management listener, behind the same bearer token as every endpoint, C-MGMT-1).
pub const OPENAPI: &str = include_str!("../openapi.json");

/// Where the management listener serves [`OPENAPI`].
pub const OPENAPI_PATH: &str = "/api/openapi.json";

/// Whether a management request asks for the OpenAPI document.
#[must_use]
pub fn is_openapi(method: &Method, path: &str) -> bool {
    path == OPENAPI_PATH && (method == Method::GET || method == Method::HEAD)
}

/// The OpenAPI document as a management answer.
#[must_use]
pub fn openapi_response(rid: &str) -> Response<Full<Bytes>> {
    let mut resp = json_response(StatusCode::OK, Bytes::from_static(OPENAPI.as_bytes()));
    if let Ok(v) = HeaderValue::from_str(rid) {
        resp.headers_mut()
            .insert(weir_core::request_id::X_REQUEST_ID, v);
    }
    resp
}

/// A JSON answer that no cache keeps (the management API's answers too, C-MGMT-2).
pub(crate) fn json_response(status: StatusCode, body: Bytes) -> ConsoleResponse {
    let mut resp = Response::new(Full::new(body));
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
    resp
}

/// Whether this binary carries a built console bundle.
#[must_use]
pub fn bundle_embedded() -> bool {
    !assets::ASSETS.is_empty()
}

/// The token from `NAME` (non-empty) or the file `NAME_FILE` names, one trailing newline
/// removed, as the management section resolves it (C-CONF-3).
///
/// # Errors
/// `NAME_FILE` names a file that cannot be read.
pub fn token_from(source: &dyn SecretSource, name: &str) -> Result<Option<String>, TokenError> {
    if let Some(v) = source.env(name).filter(|v| !v.is_empty()) {
        return Ok(Some(v));
    }
    let file_var = format!("{name}_FILE");
    let Some(path) = source.env(&file_var).filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    let mut text = source.read_file(&path).map_err(|reason| TokenError {
        var: file_var,
        reason: reason.into(),
    })?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Ok(Some(text))
}

/// `http://host:port` (the only form: the management listener speaks plain HTTP) to an address.
///
/// # Errors
/// Another scheme, a path, or a host that does not resolve.
pub async fn resolve_management(rt: Rt, url: &str) -> Result<SocketAddr, ConsoleError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| ConsoleError::Scheme(url.to_owned()))?;
    let hostport = rest.trim_end_matches('/');
    if hostport.contains('/') {
        return Err(ConsoleError::Path(url.to_owned()));
    }
    let (host, port) = hostport
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
        .ok_or_else(|| ConsoleError::HostPort(url.to_owned()))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    rt.resolve(host.to_owned(), port)
        .await
        .map_err(|error| ConsoleError::Resolve {
            url: url.to_owned(),
            error,
        })?
        .into_iter()
        .next()
        .ok_or_else(|| ConsoleError::NoAddress(url.to_owned()))
}

/// Bind `listen` and serve the console until the returned handle is dropped.
///
/// # Errors
/// The address cannot be bound.
pub fn serve(
    rt: Rt,
    listen: SocketAddr,
    upstream: Upstream,
) -> std::io::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = std::net::TcpListener::bind(listen)?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let listener = rt.listener(listener)?;
    let task = rt::spawn_handle::<()>(rt, async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                rt::sleep(rt, Duration::from_millis(50)).await;
                continue;
            };
            let Ok(stream) = rt.register(stream) else {
                continue;
            };
            let upstream = upstream.clone();
            rt.spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let upstream = upstream.clone();
                    async move { Ok::<_, Infallible>(handle(rt, &upstream, req).await) }
                });
                let _ = http1::Builder::new()
                    .timer(rt)
                    .header_read_timeout(Duration::from_secs(10))
                    .serve_connection(stream, svc)
                    .await;
            });
        }
    });
    Ok((addr, task))
}

/// How `weir console` may be reached beyond loopback (docs/console.md).
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// `--allow-remote`: the operator vouches for an authenticating proxy in front.
    pub allow_remote: bool,
    /// `--auth-token-env VAR`: the console's own bearer token comes from `VAR` (or the file
    /// `VAR_FILE` names).
    pub auth_token_env: Option<String>,
}

/// `weir console`: read the tokens, refuse a listener beyond loopback that nothing protects
/// (`weir_core::console_guard::listen_refusal`), resolve the management address, serve until
/// SIGINT/SIGTERM.
///
/// # Errors
/// A listener refused, a bad `--management`, a token that is not set or an unreadable token
/// file, or a listener that cannot be bound.
pub async fn run(
    rt: Rt,
    listen: SocketAddr,
    management: &str,
    access: Access,
) -> Result<(), ConsoleError> {
    let secrets = crate::base::secrets::EnvSecrets::new();
    let auth = match &access.auth_token_env {
        None => None,
        Some(var) => match token_from(&secrets, var)? {
            Some(t) if !t.is_empty() => Some(Secret::new(t)),
            _ => {
                return Err(ConsoleError::NoToken(var.clone()));
            }
        },
    };
    if let Some(why) =
        weir_core::console_guard::listen_refusal(listen, access.allow_remote, auth.is_some())
    {
        return Err(ConsoleError::Refused(why));
    }
    if auth.is_none() && !listen.ip().to_canonical().is_loopback() {
        tracing::warn!(
            listen = %listen,
            "the console listens beyond loopback without a token of its own (--allow-remote): \
             anyone who reaches it acts with the admin token, so only an authenticating proxy \
             may reach it (docs/console.md)"
        );
    }
    let addr = resolve_management(rt, management).await?;
    let token = token_from(&secrets, TOKEN_ENV)?;
    if token.is_none() {
        tracing::warn!(
            "neither {TOKEN_ENV} nor {TOKEN_ENV}_FILE is set: API calls go without a token \
             (the management plane answers 401 unless management.allow_insecure is true)"
        );
    }
    let (bound, task) = serve(rt, listen, Upstream { addr, token, auth }).map_err(|error| {
        ConsoleError::Listen {
            addr: listen,
            error,
        }
    })?;
    let _ = writeln!(
        std::io::stdout(),
        "weir console: http://{bound} (management http://{addr})"
    );
    rt::wait_for_stop_signal(rt).await;
    drop(task);
    Ok(())
}

type ConsoleResponse = Response<Full<Bytes>>;

/// One console request: an API call forwarded, or a file of the bundle; refused first when it
/// was not addressed to this console or comes from another site
/// (`weir_core::console_guard::refusal`).
pub async fn handle(rt: Rt, upstream: &Upstream, req: Request<Incoming>) -> ConsoleResponse {
    // The console's own token first: without it nothing is served, the bundle included (a
    // browser reaches such a console through a proxy that adds the header; docs/console.md).
    if let Some(auth) = &upstream.auth
        && !weir_core::console_guard::authenticated(req.headers(), auth)
    {
        let mut resp = json_error(
            StatusCode::UNAUTHORIZED,
            "the console requires its bearer token (Authorization: Bearer, --auth-token-env)",
        );
        resp.headers_mut().insert(
            http::header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"weir console\""),
        );
        secure(resp.headers_mut());
        return resp;
    }
    let path = req.uri().path();
    let api = path.starts_with("/api/dashboard/") || path == OPENAPI_PATH;
    let target = req.uri().authority().map(http::uri::Authority::as_str);
    let mut resp = if let Some(no) = weir_core::console_guard::refusal(req.headers(), target, api) {
        json_error(no.status, no.message)
    } else if api {
        forward(rt, upstream, req).await
    } else {
        file(req.method(), path)
    };
    secure(resp.headers_mut());
    resp
}

fn json_error(status: StatusCode, message: &str) -> ConsoleResponse {
    let body = serde_json::json!({"code": status.as_u16(), "message": message}).to_string();
    json_response(status, Bytes::from(body))
}

fn secure(h: &mut HeaderMap) {
    h.insert("content-security-policy", HeaderValue::from_static(CSP));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
}

fn text(status: StatusCode, body: &'static str, content_type: &'static str) -> ConsoleResponse {
    let mut resp = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    resp.headers_mut().insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    resp
}

const NOT_BUILT: &str = "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<title>weir console: not built</title></head><body><main><h1>The console is not built into this binary</h1>\
<p>This weir was compiled without <code>frontend/dist</code>. Build the bundle and then the binary:</p>\
<pre>cd frontend &amp;&amp; npm ci &amp;&amp; npm run build &amp;&amp; cd .. &amp;&amp; cargo build --release</pre>\
<p>The management API itself works: <code>/api/dashboard/status</code> is forwarded with the token.</p>\
</main></body></html>";

/// A file of the embedded bundle (`/` is `index.html`); `GET` and `HEAD` only.
fn file(method: &Method, path: &str) -> ConsoleResponse {
    if method != Method::GET && method != Method::HEAD {
        let mut r = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed\n",
            "text/plain; charset=utf-8",
        );
        r.headers_mut()
            .insert(http::header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let path = if path == "/" { "/index.html" } else { path };
    if !bundle_embedded() && path == "/index.html" {
        return text(StatusCode::OK, NOT_BUILT, "text/html; charset=utf-8");
    }
    let Some((name, bytes)) = assets::ASSETS.iter().find(|(p, _)| *p == path) else {
        return text(
            StatusCode::NOT_FOUND,
            "not found\n",
            "text/plain; charset=utf-8",
        );
    };
    let mut resp = Response::new(Full::new(Bytes::from_static(bytes)));
    let h = resp.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(name)),
    );
    // Vite names assets by content hash: they never change; index.html always revalidates.
    let cache = if name.starts_with("/assets/") {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    h.insert(http::header::CACHE_CONTROL, HeaderValue::from_static(cache));
    resp
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map_or("", |(_, e)| e) {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "wasm" => "application/wasm",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

fn bad_gateway(message: String) -> ConsoleResponse {
    json_error(StatusCode::BAD_GATEWAY, &message)
}

/// Forward one API call to the management listener with the token (module doc).
async fn forward(rt: Rt, upstream: &Upstream, req: Request<Incoming>) -> ConsoleResponse {
    let (parts, body) = req.into_parts();
    let read = read_bounded(body, weir_core::mgmt::MAX_BODY_BYTES + 1);
    let body = match rt::timeout(rt, BODY_TIMEOUT, read).await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => return bad_gateway(format!("the request body could not be read: {e}")),
        Err(_) => {
            return json_error(
                StatusCode::REQUEST_TIMEOUT,
                "the request body did not arrive in time",
            );
        }
    };
    let target = parts
        .uri
        .path_and_query()
        .map_or("/", http::uri::PathAndQuery::as_str)
        .to_owned();
    let mut out = Request::new(Full::new(body));
    *out.method_mut() = parts.method.clone();
    match target.parse() {
        Ok(uri) => *out.uri_mut() = uri,
        Err(_) => return bad_gateway("the request target is invalid".to_owned()),
    }
    let h = out.headers_mut();
    for name in FORWARDED {
        for v in parts.headers.get_all(name) {
            h.append(HeaderName::from_static(name), v.clone());
        }
    }
    if let Ok(host) = HeaderValue::from_str(&upstream.addr.to_string()) {
        h.insert(http::header::HOST, host);
    }
    if let Some(token) = &upstream.token
        && let Ok(mut v) = HeaderValue::from_str(&format!("Bearer {token}"))
    {
        v.set_sensitive(true);
        h.insert(http::header::AUTHORIZATION, v);
    }
    let addr = upstream.addr;
    let call = async move {
        let stream = rt.connect(addr).await.map_err(|e| e.to_string())?;
        let (mut tx, conn) = hyper::client::conn::http1::handshake(stream)
            .await
            .map_err(|e| e.to_string())?;
        let conn = rt::spawn_handle(rt, conn);
        let resp = tx.send_request(out).await.map_err(|e| e.to_string())?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        drop(conn);
        Ok::<_, String>((parts, body))
    };
    let (rparts, rbody) = match rt::timeout(rt, UPSTREAM_TIMEOUT, call).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return bad_gateway(format!("the management listener {addr}: {e}")),
        Err(_) => return bad_gateway(format!("the management listener {addr} timed out")),
    };
    let mut resp = Response::new(Full::new(rbody));
    *resp.status_mut() = rparts.status;
    for name in RETURNED {
        for v in rparts.headers.get_all(name) {
            resp.headers_mut()
                .append(HeaderName::from_static(name), v.clone());
        }
    }
    resp
}

async fn read_bounded(mut body: Incoming, limit: usize) -> Result<Bytes, hyper::Error> {
    let mut out = BytesMut::new();
    while out.len() < limit {
        match body.frame().await {
            None => break,
            Some(frame) => {
                if let Ok(data) = frame?.into_data() {
                    let room = limit - out.len();
                    out.extend_from_slice(&data[..data.len().min(room)]);
                }
            }
        }
    }
    Ok(out.freeze())
}

#[cfg(test)]
mod tests;
