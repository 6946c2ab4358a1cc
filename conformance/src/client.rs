//! Clients: a real HTTP/1.1 client (hyper 1 over a TCP socket whose local address the test
//! chooses, e.g. 127.0.0.2 for trusted-proxy cases) and a raw TCP client for requests no
//! well-behaved client would send.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::backend::TestBody;

/// Default bound on one client exchange.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);

/// Connects to `addr` from `local` (port chosen by the OS), or from the default address.
pub async fn connect(addr: SocketAddr, local: Option<IpAddr>) -> io::Result<TcpStream> {
    let stream = match local {
        None => TcpStream::connect(addr).await?,
        Some(ip) => {
            let sock = if ip.is_ipv4() {
                TcpSocket::new_v4()?
            } else {
                TcpSocket::new_v6()?
            };
            sock.bind(SocketAddr::new(ip, 0))?;
            sock.connect(addr).await?
        }
    };
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// A request body.
#[derive(Debug, Clone)]
pub enum ReqBody {
    /// No body.
    Empty,
    /// A body with `Content-Length`.
    Full(Bytes),
    /// A body sent with `Transfer-Encoding: chunked`, in these chunks.
    Chunked(Vec<Bytes>),
}

/// A request to send through the proxy.
#[derive(Debug, Clone)]
pub struct Req {
    /// Method.
    pub method: Method,
    /// Request target, sent as is (path and query).
    pub target: String,
    /// Header lines, in order. A `Host` line here replaces the default one.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: ReqBody,
    /// Local address to send from (`None`: the OS default, 127.0.0.1 for loopback).
    pub from: Option<IpAddr>,
    /// Bound on the whole exchange (head and body).
    pub timeout: Duration,
}

impl Req {
    /// `method target`.
    pub fn new(method: &str, target: &str) -> Req {
        Req {
            method: Method::from_bytes(method.as_bytes()).expect("valid method"),
            target: target.to_string(),
            headers: Vec::new(),
            body: ReqBody::Empty,
            from: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }
    /// `GET target`.
    pub fn get(target: &str) -> Req {
        Req::new("GET", target)
    }
    /// `POST target` with a body.
    pub fn post(target: &str, body: &str) -> Req {
        Req::new("POST", target).body(body)
    }
    /// Adds a header line.
    pub fn header(mut self, name: &str, value: &str) -> Req {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
    /// Sets a `Content-Length` body.
    pub fn body(mut self, body: &str) -> Req {
        self.body = ReqBody::Full(Bytes::from(body.to_string()));
        self
    }
    /// Sets a chunked body.
    pub fn chunked(mut self, chunks: &[&str]) -> Req {
        self.body = ReqBody::Chunked(chunks.iter().map(|c| Bytes::from(c.to_string())).collect());
        self
    }
    /// Sends from this local address.
    pub fn from_ip(mut self, ip: IpAddr) -> Req {
        self.from = Some(ip);
        self
    }
    /// Sends from 127.0.0.2.
    pub fn from_127_0_0_2(self) -> Req {
        self.from_ip(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)))
    }
    /// Bounds the exchange.
    pub fn timeout(mut self, t: Duration) -> Req {
        self.timeout = t;
        self
    }

    fn build(&self, addr: SocketAddr) -> Request<TestBody> {
        let body = match &self.body {
            ReqBody::Empty => TestBody::Full(None),
            ReqBody::Full(b) => TestBody::Full(Some(b.clone())),
            ReqBody::Chunked(chunks) => {
                let (tx, rx) = mpsc::channel(chunks.len().max(1));
                for c in chunks {
                    let _ = tx.try_send(c.clone());
                }
                TestBody::Channel(rx)
            }
        };
        let mut b = Request::builder()
            .method(self.method.clone())
            .uri(self.target.as_str());
        if !self
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("host"))
        {
            b = b.header("host", addr.to_string());
        }
        for (n, v) in &self.headers {
            b = b.header(n.as_str(), v.as_str());
        }
        if let ReqBody::Full(bytes) = &self.body
            && !self
                .headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        {
            b = b.header("content-length", bytes.len().to_string());
        }
        b.body(body).expect("valid request")
    }
}

/// A complete response.
#[derive(Debug, Clone)]
pub struct Resp {
    /// Status code.
    pub status: u16,
    /// Headers.
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
    /// From sending the request to the end of the body.
    pub elapsed: Duration,
}

impl Resp {
    /// The first value of header `name`, if any.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    }
    /// Every value of header `name`.
    pub fn header_all(&self, name: &str) -> Vec<String> {
        self.headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect()
    }
    /// `X-Balancer-Backend`.
    pub fn backend(&self) -> Option<String> {
        self.header("x-balancer-backend")
    }
    /// `X-Balancer-Attempts` as a number.
    pub fn attempts(&self) -> Option<u32> {
        self.header("x-balancer-attempts")
            .and_then(|v| v.trim().parse().ok())
    }
    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    /// The body as JSON (panics with the body when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.text()))
    }
    /// A one-line summary for failure messages.
    pub fn summary(&self) -> String {
        format!(
            "{} backend={:?} attempts={:?} budget={:?} body={:?}",
            self.status,
            self.backend(),
            self.attempts(),
            self.header("x-balancer-retry-budget"),
            self.text().chars().take(200).collect::<String>()
        )
    }
}

/// A keep-alive HTTP/1.1 connection to the proxy.
#[derive(Debug)]
pub struct Conn {
    addr: SocketAddr,
    sender: SendRequest<TestBody>,
    task: JoinHandle<()>,
    /// Local address of the connection.
    pub local: SocketAddr,
}

impl Conn {
    /// Opens a connection to `addr` from `from`.
    pub async fn open(addr: SocketAddr, from: Option<IpAddr>) -> io::Result<Conn> {
        let stream = connect(addr, from).await?;
        let local = stream.local_addr()?;
        let (sender, conn) = http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(io::Error::other)?;
        let task = tokio::spawn(async move {
            let _ = conn.with_upgrades().await;
        });
        Ok(Conn {
            addr,
            sender,
            task,
            local,
        })
    }

    /// Sends `req` and returns the response head with its streaming body.
    pub async fn send_head(&mut self, req: &Req) -> Result<Response<Incoming>, String> {
        let r = req.build(self.addr);
        let fut = async {
            self.sender
                .ready()
                .await
                .map_err(|e| format!("connection not ready: {e}"))?;
            self.sender
                .send_request(r)
                .await
                .map_err(|e| format!("request failed: {e:?}"))
        };
        match tokio::time::timeout(req.timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(format!("no response head within {:?}", req.timeout)),
        }
    }

    /// Sends `req` and reads the whole response.
    pub async fn send(&mut self, req: &Req) -> Result<Resp, String> {
        let start = Instant::now();
        let deadline = start + req.timeout;
        let resp = self.send_head(req).await?;
        let (parts, body) = resp.into_parts();
        let left = deadline.saturating_duration_since(Instant::now());
        let body = match tokio::time::timeout(left, body.collect()).await {
            Ok(Ok(b)) => b.to_bytes(),
            Ok(Err(e)) => return Err(format!("body failed after status {}: {e:?}", parts.status)),
            Err(_) => return Err(format!("body not complete within {:?}", req.timeout)),
        };
        Ok(Resp {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
            elapsed: start.elapsed(),
        })
    }

    /// Whether the connection is closed (the proxy closed it, or it broke).
    pub fn is_closed(&self) -> bool {
        self.sender.is_closed() || self.task.is_finished()
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Sends `req` to `addr` on a new connection and reads the whole response.
pub async fn try_send(addr: SocketAddr, req: &Req) -> Result<Resp, String> {
    let mut conn = tokio::time::timeout(req.timeout, Conn::open(addr, req.from))
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| format!("connect to {addr} failed: {e}"))?;
    conn.send(req).await
}

/// Like [`try_send`], panicking on a transport error.
pub async fn send(addr: SocketAddr, req: &Req) -> Resp {
    match try_send(addr, req).await {
        Ok(r) => r,
        Err(e) => panic!("{} {} via {addr}: {e}", req.method, req.target),
    }
}

/// `GET target` on a new connection.
pub async fn get(addr: SocketAddr, target: &str) -> Resp {
    send(addr, &Req::get(target)).await
}

/// Sends `GET uri` (absolute: its authority becomes `:authority`) over HTTP/2 with prior
/// knowledge (h2c) on a new connection, with extra `headers`, and reads the whole response.
pub async fn h2c_get(
    addr: SocketAddr,
    uri: &str,
    headers: &[(&str, &str)],
) -> Result<Resp, String> {
    let start = Instant::now();
    let fut = async {
        let stream = connect(addr, None)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let (mut sender, conn) =
            hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                .handshake::<_, TestBody>(TokioIo::new(stream))
                .await
                .map_err(|e| format!("h2 handshake: {e}"))?;
        let task = tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut b = Request::builder().method(Method::GET).uri(uri);
        for (n, v) in headers {
            b = b.header(*n, *v);
        }
        let req = b
            .body(TestBody::Full(None))
            .map_err(|e| format!("request: {e}"))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| format!("h2 request: {e:?}"))?;
        let (parts, body) = resp.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| format!("h2 body: {e}"))?
            .to_bytes();
        task.abort();
        Ok(Resp {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
            elapsed: start.elapsed(),
        })
    };
    tokio::time::timeout(DEFAULT_TIMEOUT, fut)
        .await
        .map_err(|_| "h2c request timed out".to_string())?
}

/// The head of a response read off a raw connection.
#[derive(Debug, Clone)]
pub struct RawHead {
    /// Status code.
    pub status: u16,
    /// Header lines (names lower-case).
    pub headers: Vec<(String, String)>,
}

impl RawHead {
    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    }
}

/// A raw TCP connection for hand-written requests.
#[derive(Debug)]
pub struct Raw {
    /// The socket.
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    /// Connects from the default local address.
    pub async fn connect(addr: SocketAddr) -> Raw {
        Raw::connect_from(addr, None).await
    }

    /// Connects from `from`.
    pub async fn connect_from(addr: SocketAddr, from: Option<IpAddr>) -> Raw {
        let stream = tokio::time::timeout(DEFAULT_TIMEOUT, connect(addr, from))
            .await
            .expect("raw connect timed out")
            .expect("raw connect");
        Raw {
            stream,
            buf: Vec::new(),
        }
    }

    /// Writes bytes (errors are returned: the proxy may already have closed).
    pub async fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes).await?;
        self.stream.flush().await
    }

    async fn fill(&mut self, deadline: Instant) -> io::Result<usize> {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut tmp = [0u8; 8192];
        match tokio::time::timeout(left, self.stream.read(&mut tmp)).await {
            Ok(Ok(n)) => {
                self.buf.extend_from_slice(&tmp[..n]);
                Ok(n)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "read timed out")),
        }
    }

    /// Reads a response head (the bytes after it stay buffered).
    pub async fn read_head(&mut self, timeout: Duration) -> io::Result<RawHead> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(pos) = find(&self.buf, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.buf[..pos]).into_owned();
                self.buf.drain(..pos + 4);
                let mut lines = head.split("\r\n");
                let status_line = lines.next().unwrap_or_default();
                let status = status_line
                    .split_whitespace()
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| io::Error::other(format!("bad status line {status_line:?}")))?;
                let headers = lines
                    .filter_map(|l| l.split_once(':'))
                    .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
                    .collect();
                return Ok(RawHead { status, headers });
            }
            if self.fill(deadline).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "closed before a response head; got {:?}",
                        String::from_utf8_lossy(&self.buf)
                    ),
                ));
            }
        }
    }

    /// Reads a whole response: head, then a body by `Content-Length` or chunked (none for 101,
    /// 204 and 304).
    pub async fn read_response(&mut self, timeout: Duration) -> io::Result<(RawHead, Vec<u8>)> {
        let deadline = Instant::now() + timeout;
        let head = self.read_head(timeout).await?;
        if matches!(head.status, 101 | 204 | 304) {
            return Ok((head, Vec::new()));
        }
        if let Some(len) = head
            .header("content-length")
            .and_then(|v| v.parse::<usize>().ok())
        {
            while self.buf.len() < len {
                if self.fill(deadline).await? == 0 {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "body cut short",
                    ));
                }
            }
            let body = self.buf.drain(..len).collect();
            return Ok((head, body));
        }
        if head
            .header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
        {
            let mut body = Vec::new();
            loop {
                let line_end = loop {
                    if let Some(p) = find(&self.buf, b"\r\n") {
                        break p;
                    }
                    if self.fill(deadline).await? == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "chunk cut short",
                        ));
                    }
                };
                let line = String::from_utf8_lossy(&self.buf[..line_end]).into_owned();
                let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
                    .map_err(|_| io::Error::other(format!("bad chunk size {line:?}")))?;
                self.buf.drain(..line_end + 2);
                if size == 0 {
                    // trailers until an empty line
                    loop {
                        if let Some(p) = find(&self.buf, b"\r\n") {
                            let empty = p == 0;
                            self.buf.drain(..p + 2);
                            if empty {
                                return Ok((head, body));
                            }
                        } else if self.fill(deadline).await? == 0 {
                            return Ok((head, body));
                        }
                    }
                }
                while self.buf.len() < size + 2 {
                    if self.fill(deadline).await? == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "chunk cut short",
                        ));
                    }
                }
                body.extend(self.buf.drain(..size));
                self.buf.drain(..2);
            }
        }
        // No framing: read until close.
        loop {
            if self.fill(deadline).await? == 0 {
                return Ok((head, std::mem::take(&mut self.buf)));
            }
        }
    }

    /// Reads whatever arrives within `timeout` (at least one read), returning buffered bytes too.
    pub async fn read_some(&mut self, timeout: Duration) -> io::Result<Vec<u8>> {
        if self.buf.is_empty() {
            self.fill(Instant::now() + timeout).await?;
        }
        Ok(std::mem::take(&mut self.buf))
    }

    /// Reads exactly `n` bytes within `timeout`.
    pub async fn read_exact(&mut self, n: usize, timeout: Duration) -> io::Result<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        while self.buf.len() < n {
            if self.fill(deadline).await? == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed"));
            }
        }
        Ok(self.buf.drain(..n).collect())
    }

    /// Reads (discarding data) until the peer closes or resets the connection: `Some(elapsed)`
    /// when it did within `timeout`, `None` if it was still open.
    pub async fn wait_closed(&mut self, timeout: Duration) -> Option<Duration> {
        let start = Instant::now();
        let deadline = start + timeout;
        loop {
            match self.fill(deadline).await {
                Ok(0) => return Some(start.elapsed()),
                Ok(_) => {
                    self.buf.clear();
                }
                Err(e) if e.kind() == io::ErrorKind::TimedOut => return None,
                Err(_) => return Some(start.elapsed()),
            }
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
