//! `weir demo`: three demo backends on 127.0.0.1 (the third one flaky: every third request gets
//! `503`), the proxy in front of them on the shipped configuration (config/weir.yaml, embedded,
//! with its backends replaced by the demo ones and the local rate-limit store), a few requests
//! of its own to show the spread and a retry, and what to curl next.

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;

use crate::base::error_chain::chain;
use crate::base::rt::{self, JoinHandle, Rt};
use crate::base::secrets::EnvSecrets;
use crate::control::console::TokenError;
use crate::control::start::{Options, StartError};

/// The shipped configuration, embedded.
pub const SHIPPED_CONFIG: &str = include_str!("../../../config/weir.yaml");

/// Why `weir demo` cannot start.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A demo backend cannot listen on 127.0.0.1.
    #[error("cannot start a demo backend")]
    Backend(#[source] std::io::Error),
    /// The embedded configuration does not load (a bug of the build).
    #[error("the embedded configuration is invalid")]
    Config(#[source] weir_core::config::ConfigErrors),
    /// The proxy does not start (its own message says which step).
    #[error(transparent)]
    Start(#[from] StartError),
    /// The console's token file cannot be read.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// The console would listen beyond loopback: the demo's console has no token of its own.
    #[error("{0} (weir demo's console has neither option; run `weir console`)")]
    ConsoleRefused(String),
    /// The console's listener cannot be bound.
    #[error("cannot listen on {addr} for the console")]
    Console {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        error: std::io::Error,
    },
}

/// Why one of the demo's own requests failed.
#[derive(Debug, thiserror::Error)]
enum ClientError {
    /// No connection to the proxy.
    #[error("cannot connect to {addr}")]
    Connect {
        /// The proxy's address.
        addr: SocketAddr,
        /// Why.
        #[source]
        error: std::io::Error,
    },
    /// The HTTP/1.1 handshake failed.
    #[error("HTTP/1.1 handshake")]
    Handshake(#[source] hyper::Error),
    /// The request could not be built.
    #[error("cannot build the request")]
    Build(#[source] http::Error),
    /// The exchange failed (connection closed, body cut short).
    #[error("request failed")]
    Exchange(#[source] hyper::Error),
}

/// A demo backend: answers JSON naming itself; `/health` is always `200`; a flaky one answers
/// every `flaky_every`-th other request with `503`.
#[derive(Debug)]
pub struct DemoBackend {
    /// Its id.
    pub id: String,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Requests answered (health probes excluded).
    pub served: Arc<AtomicU64>,
    /// The accept loop; dropping it stops the backend.
    _task: JoinHandle<()>,
}

/// Start a demo backend on 127.0.0.1 (any free port).
pub async fn backend(rt: Rt, id: &str, flaky_every: Option<u64>) -> std::io::Result<DemoBackend> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let listener = rt.listener(listener)?;
    let served = Arc::new(AtomicU64::new(0));
    let (id_owned, counter) = (id.to_owned(), Arc::clone(&served));
    let task = rt::spawn_handle::<()>(rt, async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let Ok(stream) = rt.register(stream) else {
                continue;
            };
            let id = id_owned.clone();
            let counter = Arc::clone(&counter);
            rt.spawn(async move {
                let svc = service_fn(move |req: Request<Incoming>| {
                    let id = id.clone();
                    let counter = Arc::clone(&counter);
                    async move {
                        Ok::<_, std::convert::Infallible>(answer(&id, &counter, flaky_every, &req))
                    }
                });
                let _ = http1::Builder::new().serve_connection(stream, svc).await;
            });
        }
    });
    Ok(DemoBackend {
        id: id.to_owned(),
        addr,
        served,
        _task: task,
    })
}

fn answer(
    id: &str,
    counter: &AtomicU64,
    flaky_every: Option<u64>,
    req: &Request<Incoming>,
) -> Response<Full<Bytes>> {
    if req.uri().path() == "/health" {
        return Response::new(Full::new(Bytes::from_static(b"ok")));
    }
    let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
    let (status, body) = match flaky_every {
        Some(k) if k > 0 && n.is_multiple_of(k) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{{\"backend\":\"{id}\",\"error\":\"flaky: every {k}th request fails\"}}\n"),
        ),
        _ => (
            StatusCode::OK,
            format!(
                "{{\"backend\":\"{id}\",\"request\":{n},\"path\":{}}}\n",
                serde_json::Value::from(req.uri().path())
            ),
        ),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

/// The shipped configuration with its `backends:` list replaced by `backends`.
#[must_use]
pub fn config_text(backends: &[(&str, SocketAddr)]) -> String {
    let head = SHIPPED_CONFIG
        .find("\nbackends:")
        .map_or(SHIPPED_CONFIG, |i| &SHIPPED_CONFIG[..=i]);
    let mut text = head.to_owned();
    text.push_str("backends:\n");
    for (id, addr) in backends {
        text.push_str(&format!("  - id: {id}\n    url: http://{addr}\n"));
    }
    text
}

/// Run the demo until SIGINT/SIGTERM; the web console listens on `console_bind`.
///
/// # Errors
/// A backend or the console cannot listen, the proxy does not start, or the token file named
/// by `BALANCER_ADMIN_TOKEN_FILE` cannot be read.
pub async fn run(rt: Rt, opts: Options, console_bind: SocketAddr) -> Result<(), DemoError> {
    let err = DemoError::Backend;
    let backends = [
        backend(rt, "demo-1", None).await.map_err(err)?,
        backend(rt, "demo-2", None).await.map_err(err)?,
        backend(rt, "demo-3-flaky", Some(3)).await.map_err(err)?,
    ];
    let list: Vec<(&str, SocketAddr)> = backends.iter().map(|b| (b.id.as_str(), b.addr)).collect();
    let token = format!("demo-{:016x}", crate::base::worker::entropy_seed());
    let secrets = EnvSecrets::new().with_fallback("BALANCER_ADMIN_TOKEN", &token);
    let cfg = weir_core::config::load(&config_text(&list), &secrets).map_err(DemoError::Config)?;
    let handle = crate::control::start::start(rt, cfg, opts).await?;
    let public = handle.public_addr();
    let mut out = std::io::stdout();
    let _ = writeln!(out, "\nweir demo: proxy on http://{public}");
    for b in &backends {
        let flaky = if b.id.contains("flaky") {
            "  (answers every 3rd request with 503)"
        } else {
            ""
        };
        let _ = writeln!(out, "  backend {:<13} http://{}{flaky}", b.id, b.addr);
    }
    if let Some(m) = handle.management_addr() {
        // The token the management API takes: the operator's own when the variable (or its
        // `_FILE`) is set, else the one generated above; the generated one is printed only then.
        let own = std::env::var_os("BALANCER_ADMIN_TOKEN").is_some()
            || std::env::var_os("BALANCER_ADMIN_TOKEN_FILE").is_some();
        let auth = if own {
            "Authorization: Bearer $BALANCER_ADMIN_TOKEN".to_owned()
        } else {
            format!("Authorization: Bearer {token}, generated: BALANCER_ADMIN_TOKEN is not set")
        };
        let _ = writeln!(out, "  management    http://{m}  ({auth})");
    }
    // The live console, with the demo's own token added server-side.
    let console = match handle.management_addr() {
        Some(addr) => {
            let token =
                crate::control::console::token_from(&secrets, crate::control::console::TOKEN_ENV)?;
            // The demo's console has no token of its own: loopback only.
            if let Some(why) = weir_core::console_guard::listen_refusal(console_bind, false, false)
            {
                return Err(DemoError::ConsoleRefused(why));
            }
            let upstream = crate::control::console::Upstream {
                addr,
                token,
                auth: None,
            };
            let (at, task) =
                crate::control::console::serve(rt, console_bind, upstream).map_err(|error| {
                    DemoError::Console {
                        addr: console_bind,
                        error,
                    }
                })?;
            let _ = writeln!(out, "  console       http://{at}  (open it in a browser)");
            Some(task)
        }
        None => None,
    };
    let _ = writeln!(out, "\nA few requests through the proxy:");
    show_requests(rt, public, 9, &mut out).await;
    let _ = writeln!(
        out,
        "\nTry:\n  curl -si http://{public}/hello | grep -iE '^(HTTP|x-balancer|x-ratelimit|x-request-id)'\n  \
         for i in $(seq 9); do curl -s -o /dev/null -D - http://{public}/ | grep -i x-balancer; done\n  \
         curl -s http://{public}/readyz\n\
         Watch: X-Balancer-Backend spreads over the backends; when demo-3-flaky answers 503 the request is\n\
         retried on another backend (X-Balancer-Attempts: 2); X-RateLimit-Remaining counts down under load.\n\
         Ctrl-C stops everything."
    );
    rt::wait_for_stop_signal(rt).await;
    drop(console);
    handle.stop().await;
    drop(backends);
    Ok(())
}

async fn show_requests(rt: Rt, public: SocketAddr, n: usize, out: &mut impl std::io::Write) {
    // One keep-alive connection: one worker serves them all, so its round-robin order shows.
    let mut client = match Client::connect(rt, public).await {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(out, "  {}", chain(&e));
            return;
        }
    };
    for i in 1..=n {
        match client.get("/demo").await {
            Ok(resp) => {
                let h = |name: &str| {
                    resp.headers()
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("-")
                        .to_owned()
                };
                let _ = writeln!(
                    out,
                    "  #{i}: {} backend={:<13} attempts={} ratelimit-remaining={}",
                    resp.status().as_u16(),
                    h("x-balancer-backend"),
                    h("x-balancer-attempts"),
                    h("x-ratelimit-remaining"),
                );
            }
            Err(e) => {
                let _ = writeln!(out, "  #{i}: {}", chain(&e));
            }
        }
    }
}

/// A minimal HTTP/1.1 client on one keep-alive connection.
struct Client {
    addr: SocketAddr,
    tx: hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
}

impl Client {
    async fn connect(rt: Rt, addr: SocketAddr) -> Result<Client, ClientError> {
        let stream = rt
            .connect(addr)
            .await
            .map_err(|error| ClientError::Connect { addr, error })?;
        let (tx, conn) = hyper::client::conn::http1::handshake(stream)
            .await
            .map_err(ClientError::Handshake)?;
        rt.spawn(async move {
            let _ = conn.await;
        });
        Ok(Client { addr, tx })
    }

    async fn get(&mut self, path: &str) -> Result<Response<Bytes>, ClientError> {
        self.tx.ready().await.map_err(ClientError::Exchange)?;
        let req = Request::builder()
            .uri(path)
            .header(http::header::HOST, self.addr.to_string())
            .body(Empty::<Bytes>::new())
            .map_err(ClientError::Build)?;
        let resp = self
            .tx
            .send_request(req)
            .await
            .map_err(ClientError::Exchange)?;
        let (parts, body) = resp.into_parts();
        let body = body
            .collect()
            .await
            .map_err(ClientError::Exchange)?
            .to_bytes();
        Ok(Response::from_parts(parts, body))
    }
}

#[cfg(test)]
mod tests;
