//! Request bodies on the HTTP/1 path (issue 14): a malformed chunked body streamed upstream is
//! the client's `400`, `Expect: 100-continue` is answered once and not forwarded, and a backend
//! that answers before it has read the body gets its response relayed while the body is still
//! being sent (full duplex: an early `413`, a streaming echo). The backends are raw sockets, so
//! the test sees exactly which bytes reached them and when weir closed their connection.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use crate::backend::lock;
use crate::client::Raw;
use crate::config::Config;
use crate::harness::{Binary, Proxy, StartOptions};
use crate::util::{secs, wait_until};

/// What a [`RawBackend`] does with a `POST` (a `GET` other than the probe's is `200 ok`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Script {
    /// Reads (and records) everything until the connection closes; never answers.
    Silent,
    /// Answers `413` with a 4-byte body as soon as the head is in, then reads nothing until
    /// [`RawBackend::drain`], then reads until the connection closes.
    Early,
    /// Answers `200` chunked at once, then echoes the (chunked) body bytes as they arrive;
    /// the response ends with the body's last chunk.
    Echo,
    /// Sends `100 Continue` (asked for or not), reads the `Content-Length` body, answers `200`.
    Continue,
}

/// One connection a [`RawBackend`] accepted.
#[derive(Debug, Default)]
struct RawConn {
    /// Every byte received.
    bytes: Mutex<Vec<u8>>,
    /// The targets of the requests it carried (probes not included).
    targets: Mutex<Vec<String>>,
    /// The heads of those requests.
    heads: Mutex<Vec<String>>,
    /// The peer closed it (end of stream or an error).
    closed: AtomicBool,
}

/// A backend on a raw socket following a [`Script`]; answers `GET /health` with `200`.
struct RawBackend {
    addr: SocketAddr,
    conns: Arc<Mutex<Vec<Arc<RawConn>>>>,
    drain: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl RawBackend {
    async fn start(script: Script) -> RawBackend {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let conns = Arc::new(Mutex::new(Vec::new()));
        let drain = Arc::new(Notify::new());
        let (list, d) = (Arc::clone(&conns), Arc::clone(&drain));
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let conn = Arc::new(RawConn::default());
                lock(&list).push(Arc::clone(&conn));
                tokio::spawn(serve_raw(stream, conn, script, Arc::clone(&d)));
            }
        });
        RawBackend {
            addr,
            conns,
            drain,
            task,
        }
    }

    fn config(&self) -> Config {
        Config::new(&[]).set(
            "backends",
            json!([{"id": "raw", "url": format!("http://{}", self.addr)}]),
        )
    }

    /// The connections that carried a request other than a probe, in accept order.
    fn data_conns(&self) -> Vec<Arc<RawConn>> {
        lock(&self.conns)
            .iter()
            .filter(|c| !lock(&c.targets).is_empty())
            .cloned()
            .collect()
    }

    /// Every byte the data connections received, in accept order.
    fn received(&self) -> Vec<u8> {
        self.data_conns()
            .iter()
            .flat_map(|c| lock(&c.bytes).clone())
            .collect()
    }

    /// Let every [`Script::Early`] connection read again.
    fn drain(&self) {
        self.drain.notify_waiters();
        self.drain.notify_one();
    }
}

impl Drop for RawBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Reads once into `buf` (recorded on `conn`): `false` when the peer closed.
async fn fill(stream: &mut TcpStream, conn: &RawConn, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 16 * 1024];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => {
            conn.closed.store(true, Ordering::SeqCst);
            false
        }
        Ok(n) => {
            lock(&conn.bytes).extend_from_slice(&chunk[..n]);
            buf.extend_from_slice(&chunk[..n]);
            true
        }
    }
}

async fn read_to_end(stream: &mut TcpStream, conn: &RawConn, buf: &mut Vec<u8>) {
    while fill(stream, conn, buf).await {
        buf.clear();
    }
}

async fn serve_raw(mut stream: TcpStream, conn: Arc<RawConn>, script: Script, drain: Arc<Notify>) {
    let mut buf = Vec::new();
    loop {
        let end = loop {
            if let Some(p) = find(&buf, b"\r\n\r\n") {
                break p;
            }
            if !fill(&mut stream, &conn, &mut buf).await {
                return;
            }
        };
        let head = String::from_utf8_lossy(&buf[..end + 4]).into_owned();
        buf.drain(..end + 4);
        let mut words = head.split(' ');
        let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        if target == "/health" {
            if stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                .await
                .is_err()
            {
                return;
            }
            continue;
        }
        lock(&conn.targets).push(target.to_owned());
        lock(&conn.heads).push(head.clone());
        let lower = head.to_ascii_lowercase();
        if method != "POST" {
            if stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n")
                .await
                .is_err()
            {
                return;
            }
            continue;
        }
        match script {
            Script::Silent => return read_to_end(&mut stream, &conn, &mut buf).await,
            Script::Early => {
                let _ = stream
                    .write_all(b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 4\r\n\r\nbig\n")
                    .await;
                drain.notified().await;
                return read_to_end(&mut stream, &conn, &mut buf).await;
            }
            Script::Echo => {
                if !echo_chunked(&mut stream, &conn, &mut buf).await {
                    return;
                }
            }
            Script::Continue => {
                if !continue_then_ok(&mut stream, &conn, &mut buf, &lower).await {
                    return;
                }
            }
        }
    }
}

/// `Script::Echo`: a chunked `200` whose body is the request's chunked body as received.
/// `false`: the connection ended.
async fn echo_chunked(stream: &mut TcpStream, conn: &RawConn, buf: &mut Vec<u8>) -> bool {
    if stream
        .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        .await
        .is_err()
    {
        return false;
    }
    // weir's own chunked framing (canonical, no trailers) is echoed as the response's: it
    // ends with the last chunk.
    let mut body = Vec::new();
    loop {
        if !buf.is_empty() {
            if stream.write_all(buf).await.is_err() {
                return false;
            }
            body.append(buf);
        }
        if body == b"0\r\n\r\n" || body.ends_with(b"\r\n0\r\n\r\n") {
            return true;
        }
        if !fill(stream, conn, buf).await {
            return false;
        }
    }
}

/// `Script::Continue`: `100 Continue`, the body of the head's (`lower`, lowercased)
/// `content-length`, then `200 ok`. `false`: the connection ended.
async fn continue_then_ok(
    stream: &mut TcpStream,
    conn: &RawConn,
    buf: &mut Vec<u8>,
    lower: &str,
) -> bool {
    if stream
        .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
        .await
        .is_err()
    {
        return false;
    }
    let len = lower
        .split("\r\n")
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    while buf.len() < len {
        if !fill(stream, conn, buf).await {
            return false;
        }
    }
    buf.drain(..len);
    stream
        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n")
        .await
        .is_ok()
}

/// Reads from `c` until the bytes read contain `needle`: all of them.
async fn read_until(c: &mut Raw, needle: &[u8], what: &str) -> Vec<u8> {
    let mut got = Vec::new();
    while find(&got, needle).is_none() {
        match c.read_some(secs(5)).await {
            Ok(b) if !b.is_empty() => got.extend_from_slice(&b),
            other => panic!(
                "{what}: {other:?} before {:?}; got {:?}",
                String::from_utf8_lossy(needle),
                String::from_utf8_lossy(&got)
            ),
        }
    }
    got
}

/// C-PATH-12 (issue 14): a chunked request body that breaks the chunked coding while weir
/// streams it upstream is answered with weir's `400` (not a `502`) and the client connection
/// closed; nothing after the defect reaches the backend, and the upstream connection it was
/// written to is closed, not reused. (Only `Content-Length` bodies are buffered for replay:
/// a chunked body is always streamed, so this is the only path a chunked defect can take.)
pub async fn c_path_12_malformed_chunked_request_body_is_400(bin: Binary) {
    let raw = RawBackend::start(Script::Silent).await;
    let p = Proxy::start(&bin, &raw.config()).await;
    let mut c = Raw::connect(p.public).await;
    c.write(b"POST /bad HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        .await
        .expect("write the head and a good chunk");
    wait_until(secs(5), "the first chunk streamed upstream", || {
        find(&raw.received(), b"hello").is_some()
    })
    .await;
    c.write(b"zz\r\nMORE\r\n0\r\n\r\n")
        .await
        .expect("write the bad chunk");
    let (head, body) = c
        .read_response(secs(5))
        .await
        .expect("an answer to the malformed body");
    assert_eq!(
        head.status,
        400,
        "{head:?} {:?}",
        String::from_utf8_lossy(&body)
    );
    assert_eq!(
        head.header("connection").as_deref(),
        Some("close"),
        "{head:?}"
    );
    let v: serde_json::Value = serde_json::from_slice(&body).expect("a JSON body");
    assert_eq!(v["code"], 400, "{v}");
    assert_eq!(
        v["request_id"].as_str(),
        head.header("x-request-id").as_deref(),
        "{v}"
    );
    assert!(
        c.wait_closed(secs(5)).await.is_some(),
        "client connection left open after the 400"
    );
    let conns = raw.data_conns();
    assert_eq!(conns.len(), 1, "one upstream connection carried /bad");
    wait_until(secs(5), "the upstream connection closed", || {
        conns[0].closed.load(Ordering::SeqCst)
    })
    .await;
    let got = raw.received();
    assert!(
        find(&got, b"zz").is_none() && find(&got, b"MORE").is_none(),
        "bytes after the defect reached the backend: {:?}",
        String::from_utf8_lossy(&got)
    );
}

/// C-PATH-7 (docs/proxy.md "Expect: 100-continue"): a body buffered for replay
/// (`POST` made retryable) is weir's to accept: weir answers the client's
/// `Expect: 100-continue` itself, once, and does not forward `Expect`; a `100` the backend
/// sends anyway is not relayed as a second one.
pub async fn c_path_7_expect_continue_answered_once_not_forwarded(bin: Binary) {
    let raw = RawBackend::start(Script::Continue).await;
    let cfg = raw
        .config()
        .set("server.retry.methods", json!(["GET", "POST"]));
    let p = Proxy::start(&bin, &cfg).await;
    let mut c = Raw::connect(p.public).await;
    for i in 0..2 {
        c.write(
            format!(
                "POST /e{i} HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .expect("write the head");
        let interim = c.read_head(secs(5)).await.expect("weir's 100 Continue");
        assert_eq!(interim.status, 100, "{interim:?}");
        c.write(b"hello").await.expect("write the body");
        let (head, body) = c.read_response(secs(5)).await.expect("the final response");
        assert_eq!(
            head.status, 200,
            "one 100, then the final response: {head:?}"
        );
        assert_eq!(body, b"ok\n");
    }
    let conns = raw.data_conns();
    let heads: Vec<String> = conns.iter().flat_map(|c| lock(&c.heads).clone()).collect();
    assert_eq!(heads.len(), 2, "{heads:?}");
    for h in &heads {
        assert!(
            !h.to_ascii_lowercase().contains("\r\nexpect:"),
            "Expect forwarded upstream: {h:?}"
        );
    }
}

/// C-PATH-7 (docs/proxy.md "Expect: 100-continue"): for a body that streams, the client's
/// `Expect: 100-continue` is passed on and the body held until the backend decides
/// (`server.upstream.expect_continue_timeout`): the backend's `100` is relayed once; a backend
/// that answers at once is answered to the client before it sends a byte of the body; a backend
/// that says nothing gets the body once the timeout has passed and weir sent its own `100`.
pub async fn c_path_7_expect_continue_forwarded_for_a_streamed_body(bin: Binary) {
    const HEAD: &[u8] =
        b"POST /up HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n";
    // The backend's own `100`, relayed once, then its answer.
    let raw = RawBackend::start(Script::Continue).await;
    let p = Proxy::start(&bin, &raw.config()).await;
    let mut c = Raw::connect(p.public).await;
    c.write(HEAD).await.expect("write the head");
    let interim = c.read_head(secs(5)).await.expect("the backend's 100");
    assert_eq!(interim.status, 100, "{interim:?}");
    c.write(b"hello").await.expect("write the body");
    let (head, body) = c.read_response(secs(5)).await.expect("the final response");
    assert_eq!(
        (head.status, body.as_slice()),
        (200, &b"ok\n"[..]),
        "{head:?}"
    );
    let heads: Vec<String> = raw
        .data_conns()
        .iter()
        .flat_map(|c| lock(&c.heads).clone())
        .collect();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(
        heads[0]
            .to_ascii_lowercase()
            .contains("\r\nexpect: 100-continue\r\n"),
        "Expect not passed on: {heads:?}"
    );
    drop(p);
    // A backend that refuses at once: its answer, no `100`, and no body byte sent.
    let raw = RawBackend::start(Script::Early).await;
    let p = Proxy::start(&bin, &raw.config()).await;
    let mut c = Raw::connect(p.public).await;
    c.write(HEAD).await.expect("write the head");
    let (head, body) = c
        .read_response(secs(5))
        .await
        .expect("the backend's refusal");
    assert_eq!(
        (head.status, body.as_slice()),
        (413, &b"big\n"[..]),
        "{head:?}"
    );
    raw.drain();
    drop(p);
    // A backend that says nothing: weir's own `100` once the timeout passed, then the body.
    let raw = RawBackend::start(Script::Silent).await;
    let cfg = raw
        .config()
        .set("server.upstream.expect_continue_timeout", "200ms")
        .set("server.retry.per_try_timeout", "30s");
    let p = Proxy::start(&bin, &cfg).await;
    let mut c = Raw::connect(p.public).await;
    c.write(HEAD).await.expect("write the head");
    let interim = c
        .read_head(secs(5))
        .await
        .expect("weir's 100 after the timeout");
    assert_eq!(interim.status, 100, "{interim:?}");
    c.write(b"hello").await.expect("write the body");
    wait_until(secs(5), "the body to reach the silent backend", || {
        find(&raw.received(), b"hello").is_some()
    })
    .await;
}

/// C-PATH-7 (issue 14, full duplex): a backend that answers `413` before reading a large body
/// gets its answer to the client while the client is still sending the body; weir then stops
/// sending the body, closes that upstream connection (not reused) and the client's.
pub async fn c_path_7_early_response_relayed_while_body_is_sent(bin: Binary) {
    const DECLARED: usize = 16 * 1024 * 1024;
    let raw = RawBackend::start(Script::Early).await;
    let p = Proxy::start(&bin, &raw.config()).await;
    let mut c = Raw::connect(p.public).await;
    c.write(
        format!("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: {DECLARED}\r\n\r\n")
            .as_bytes(),
    )
    .await
    .expect("write the head");
    c.write(&vec![b'x'; 256 * 1024])
        .await
        .expect("write the first 256 KiB of 16 MiB");
    let (head, body) = c
        .read_response(secs(5))
        .await
        .expect("the backend's early answer while the body is incomplete");
    assert_eq!(head.status, 413, "{head:?}");
    assert_eq!(body, b"big\n");
    assert!(
        c.wait_closed(secs(5)).await.is_some(),
        "client connection left open with its body unread"
    );
    raw.drain();
    let conns = raw.data_conns();
    assert_eq!(conns.len(), 1);
    wait_until(
        secs(5),
        "the upstream connection closed, not reused",
        || conns[0].closed.load(Ordering::SeqCst),
    )
    .await;
    assert!(raw.received().len() < DECLARED, "the whole body was sent");
    let mut c = Raw::connect(p.public).await;
    c.write(b"GET /after HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let (head, _) = c.read_response(secs(5)).await.expect("GET /after");
    assert_eq!(head.status, 200, "{head:?}");
    assert_eq!(
        raw.data_conns().len(),
        2,
        "/after on a new upstream connection"
    );
}

/// C-PATH-7 (issue 14, full duplex): a backend that echoes the body as it reads it streams its
/// response while the client is still sending: each piece comes back before the next is sent.
/// The head, written before the body's end, says `Connection: close` (weir does not promise a
/// connection whose request body it has not read whole); with both ends complete, the upstream
/// connection is reused by the next request.
pub async fn c_path_7_streaming_echo_is_full_duplex(bin: Binary) {
    let raw = RawBackend::start(Script::Echo).await;
    let cfg = raw.config();
    // One worker: idle upstream connections are kept per worker.
    let opts = StartOptions {
        workers: Some(1),
        ..StartOptions::for_config(&cfg)
    };
    let p = Proxy::start_config(&bin, &cfg, opts).await;
    let mut c = Raw::connect(p.public).await;
    c.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        .await
        .expect("write the head and the first piece");
    let head = c
        .read_head(secs(5))
        .await
        .expect("the response head while the body is incomplete");
    assert_eq!(head.status, 200, "{head:?}");
    assert_eq!(
        head.header("connection").as_deref(),
        Some("close"),
        "{head:?}"
    );
    read_until(&mut c, b"hello", "the first piece echoed").await;
    c.write(b"6\r\n world\r\n").await.expect("second piece");
    read_until(&mut c, b" world", "the second piece echoed").await;
    c.write(b"0\r\n\r\n").await.expect("last chunk");
    read_until(&mut c, b"0\r\n\r\n", "the response's end").await;
    assert!(
        c.wait_closed(secs(5)).await.is_some(),
        "client connection left open after Connection: close"
    );
    let mut c = Raw::connect(p.public).await;
    c.write(b"GET /after HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let (head, body) = c.read_response(secs(5)).await.expect("GET /after");
    assert_eq!(head.status, 200, "{head:?}");
    assert_eq!(body, b"ok\n");
    let conns = raw.data_conns();
    assert_eq!(conns.len(), 1, "one upstream connection for both");
    assert_eq!(*lock(&conns[0].targets), ["/echo", "/after"]);
}
