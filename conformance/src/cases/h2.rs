//! HTTP/2 abuse (issue 21; docs/proxy.md "HTTP/2 limits"): rapid reset, CONTINUATION flood,
//! SETTINGS and PING floods, a zero-window peer. Each is bounded: the connection gets a GOAWAY
//! where RFC 9113 (or the server's abuse limits) says so, another client's request succeeds
//! during the abuse, and the proxy's RSS stays within a fixed margin. CPU time and RSS are
//! printed (`--nocapture`) for docs/benchmarks.md; no assertion is about speed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use super::{expect_status, stalled_body_config};
use crate::backend::{Backend, Mode};
use crate::client::{Req, try_send};
use crate::config::Config;
use crate::h2raw::{self, ENHANCE_YOUR_CALM, H2Raw, PROTOCOL_ERROR, kind};
use crate::harness::{Binary, Proxy};
use crate::util::{cpu_time, eventually, rss_kib, secs, stays};

/// RSS growth any one abuse may cause (the limits put it far below: docs/proxy.md).
const RSS_MARGIN_KIB: u64 = 64 * 1024;

/// Samples a process's RSS every 10 ms until stopped; reports the peak and the CPU time used.
struct Meter {
    pid: u32,
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    rss_before: u64,
    cpu_before: Duration,
    task: tokio::task::JoinHandle<()>,
}

impl Meter {
    fn start(pid: u32) -> Meter {
        let stop = Arc::new(AtomicBool::new(false));
        let rss_before = rss_kib(pid).expect("proxy RSS");
        let peak = Arc::new(AtomicU64::new(rss_before));
        let (s, p) = (Arc::clone(&stop), Arc::clone(&peak));
        let task = tokio::spawn(async move {
            while !s.load(Ordering::Relaxed) {
                if let Some(r) = rss_kib(pid) {
                    p.fetch_max(r, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        Meter {
            pid,
            stop,
            peak,
            rss_before,
            cpu_before: cpu_time(pid).unwrap_or_default(),
            task,
        }
    }

    /// Stops, prints the figures under `label` and checks the RSS bound.
    async fn finish(self, label: &str) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        let cpu = cpu_time(self.pid).unwrap_or_default() - self.cpu_before;
        let peak = self.peak.load(Ordering::Relaxed);
        eprintln!(
            "h2-abuse\t{label}\tcpu_ms={}\trss_before_kib={}\trss_peak_kib={peak}",
            cpu.as_millis(),
            self.rss_before
        );
        assert!(
            peak <= self.rss_before + RSS_MARGIN_KIB,
            "{label}: RSS grew from {} KiB to {peak} KiB",
            self.rss_before
        );
    }
}

async fn start(bin: &Binary, mode: Mode, cfg: impl FnOnce(Config) -> Config) -> (Backend, Proxy) {
    let b = Backend::start("h2-a").await;
    b.set_mode(mode);
    let p = Proxy::start(bin, &cfg(Config::new(&[&b]))).await;
    (b, p)
}

/// Another client's request is answered.
async fn expect_others_served(p: &Proxy, what: &str) {
    match try_send(p.public, &Req::get("/other")).await {
        Ok(r) => expect_status(&r, 200, what),
        Err(e) => panic!("{what}: {e}"),
    }
}

/// Issue 21 (C-PATH-12): rapid reset (CVE-2023-44487): 5,000 HEADERS + RST_STREAM pairs in
/// one burst get `GOAWAY(ENHANCE_YOUR_CALM)`; only a fraction of them reach the backend; other
/// clients are served; RSS bounded.
pub async fn c_path_12_h2_rapid_reset_gets_goaway(bin: Binary) {
    const PAIRS: u32 = 5000;
    let (b, p) = start(&bin, Mode::Ok, |c| c).await;
    let meter = Meter::start(p.pid);
    let mut c = H2Raw::connect(p.public, &[]).await.expect("connect");
    let mut burst = Vec::new();
    for i in 0..PAIRS {
        let id = 2 * i + 1;
        burst.extend(h2raw::get(id, "/reset"));
        burst.extend(h2raw::rst(id, h2raw::CANCEL));
    }
    let writer = c.flood(burst, 1);
    let seen = c.read_until_goaway(secs(15)).await;
    expect_others_served(&p, "a request during the rapid reset").await;
    meter.finish("rapid-reset").await;
    assert_eq!(
        seen.goaway,
        Some(ENHANCE_YOUR_CALM),
        "rapid reset: {seen:?}"
    );
    writer.abort();
    let reached = b.requests().iter().filter(|r| r.target == "/reset").count();
    assert!(
        reached < (PAIRS / 10) as usize,
        "{reached} of {PAIRS} reset streams reached the backend"
    );
}

/// Issue 21 (C-PATH-12): a header block that never ends (HEADERS without END_HEADERS, then
/// CONTINUATION frames of 16 KiB) gets `GOAWAY(ENHANCE_YOUR_CALM)` before 2 MiB of it
/// (`server.max_header_bytes` is 1 MiB); nothing reaches the backend; others are served.
pub async fn c_path_12_h2_continuation_flood_gets_goaway(bin: Binary) {
    let (b, p) = start(&bin, Mode::Ok, |c| c).await;
    let meter = Meter::start(p.pid);
    let mut c = H2Raw::connect(p.public, &[]).await.expect("connect");
    // A literal header with a new name and a value that never ends.
    let mut block = h2raw::get_block("/cont");
    block.extend_from_slice(&[0x00, 0x01, b'x', 0x7f, 0xff, 0xff, 0xff, 0x07]);
    c.write(&h2raw::frame(kind::HEADERS, h2raw::END_STREAM, 1, &block))
        .await
        .expect("HEADERS");
    let cont = h2raw::frame(kind::CONTINUATION, 0, 1, &[b'a'; 16 * 1024]);
    let writer = c.flood(cont, 10_000);
    let seen = c.read_until_goaway(secs(15)).await;
    expect_others_served(&p, "a request during the CONTINUATION flood").await;
    meter.finish("continuation-flood").await;
    assert_eq!(
        seen.goaway,
        Some(ENHANCE_YOUR_CALM),
        "CONTINUATION flood: {seen:?}"
    );
    let written = writer.await.unwrap_or(0);
    assert!(
        written < 10_000,
        "the server read all 160 MiB of CONTINUATION"
    );
    assert!(
        b.requests().iter().all(|r| r.target != "/cont"),
        "an unfinished header block reached the backend"
    );
}

/// One control-frame flood: 100,000 frames while the ACKs are read (every one is parsed, the
/// connection survives and still serves a request), then a flood whose ACKs are never read
/// (the server stops reading, and `idle_timeout` closes the stalled connection).
async fn control_flood(bin: Binary, label: &str, frame: Vec<u8>, ack_kind: u8) {
    let (_b, p) = start(&bin, Mode::Ok, |c| {
        c.set("server.idle_timeout", "2s")
            .set("server.read_header_timeout", "1s")
    })
    .await;
    let meter = Meter::start(p.pid);
    let mut c = H2Raw::connect(p.public, &[]).await.expect("connect");
    let writer = c.flood(frame.repeat(1000), 100);
    eventually(secs(30), "the flood written", || {
        let done = writer.is_finished();
        async move { done.then_some(()) }
    })
    .await;
    let seen = c.read_until_goaway(Duration::from_millis(500)).await;
    let acks = seen.frames[usize::from(ack_kind)];
    assert!(acks >= 1, "{label}: no ACK for 100,000 frames: {seen:?}");
    assert!(!seen.closed && seen.goaway.is_none(), "{label}: {seen:?}");
    expect_others_served(&p, label).await;

    // A peer that never reads its ACKs: once they fill its receive buffer the server stops
    // reading, the connection sits idle, and `idle_timeout` closes it; the flood's next write
    // then fails.
    let mut silent = H2Raw::connect(p.public, &[]).await.expect("connect");
    let flood = silent.flood(frame.repeat(1000), 1000);
    let written = tokio::time::timeout(secs(20), flood).await;
    expect_others_served(&p, label).await;
    meter.finish(label).await;
    match written {
        Ok(Ok(n)) => assert!(
            n < 1000,
            "{label}: the server read 1,000,000 frames never acked"
        ),
        _ => panic!("{label}: a peer that never reads was not closed within 20 s"),
    }
}

/// Issue 21 (C-PATH-12): SETTINGS flood: bounded, the connection survives while its ACKs are
/// read, a peer that never reads them is closed by `idle_timeout`; others are served.
pub async fn c_path_12_h2_settings_flood_bounded(bin: Binary) {
    control_flood(bin, "settings-flood", h2raw::settings(&[]), kind::SETTINGS).await;
}

/// Issue 21 (C-PATH-12): PING flood: as for SETTINGS.
pub async fn c_path_12_h2_ping_flood_bounded(bin: Binary) {
    let ping = h2raw::frame(kind::PING, 0, 0, &[7; 8]);
    control_flood(bin, "ping-flood", ping, kind::PING).await;
}

/// Issue 21 (C-PATH-12, C-PATH-7): a zero-window peer (`SETTINGS_INITIAL_WINDOW_SIZE` 0, never
/// a WINDOW_UPDATE) asks for 100 responses of 4 MiB: weir buffers at most 64 KiB per stream
/// (RSS bounded), others are served; a `WINDOW_UPDATE` of 0 on the connection is a
/// `GOAWAY(PROTOCOL_ERROR)` (RFC 9113 §6.9).
pub async fn c_path_12_h2_zero_window_peer_bounded(bin: Binary) {
    let (b, p) = start(&bin, Mode::Large(4 << 20), |c| c).await;
    let meter = Meter::start(p.pid);
    let mut c = H2Raw::connect(p.public, &[(0x4, 0)])
        .await
        .expect("connect");
    let mut burst = Vec::new();
    for i in 0..100u32 {
        burst.extend(h2raw::get(2 * i + 1, "/big"));
    }
    c.write(&burst).await.expect("requests");
    eventually(
        secs(10),
        "the backend answering the stalled streams",
        || {
            let n = b.count();
            async move { (n >= 100).then_some(()) }
        },
    )
    .await;
    tokio::time::sleep(secs(1)).await;
    let seen = c.read_until_goaway(Duration::from_millis(200)).await;
    assert_eq!(
        seen.frames[usize::from(kind::DATA)],
        0,
        "DATA with a zero window"
    );
    assert!(
        seen.frames[usize::from(kind::HEADERS)] >= 1,
        "no response HEADERS: {seen:?}"
    );
    let other = try_send(p.public, &Req::get("/other")).await;
    match other {
        Ok(r) => {
            expect_status(&r, 200, "a request beside the zero-window peer");
            assert_eq!(r.body.len(), 4 << 20, "the other client's body");
        }
        Err(e) => panic!("a request beside the zero-window peer: {e}"),
    }
    c.write(&h2raw::frame(
        kind::WINDOW_UPDATE,
        0,
        0,
        &0u32.to_be_bytes(),
    ))
    .await
    .expect("WINDOW_UPDATE 0");
    let seen = c.wait_closed(secs(10)).await;
    meter.finish("zero-window").await;
    assert_eq!(
        seen.goaway,
        Some(PROTOCOL_ERROR),
        "WINDOW_UPDATE 0: {seen:?}"
    );
}

/// RFC 9113 §8.3.1 (C-PATH-12 refined, C-PATH-11; docs/proxy.md "HTTP/2 requests"): an h2c
/// request whose `host` names another entity than its `:authority` is weir's JSON `400` and
/// reaches no backend (before, `host` won for routing and `X-Forwarded-Host`); the same entity
/// spelled in another case, or with the scheme's default port, passes.
pub async fn c_path_12_h2_host_must_match_authority(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(&bin, &Config::new(&[&b])).await;
    let port = p.public.port();
    let uri = format!("http://good.example:{port}/x");
    for host in [
        "evil.example".to_owned(),
        format!("good.example:{}", port + 1),
    ] {
        let r = crate::client::h2c_get(p.public, &uri, &[("host", &host)])
            .await
            .unwrap_or_else(|e| panic!("host {host}: {e}"));
        super::expect_weir_error(&r, 400, &format!("host {host} against :authority"));
    }
    assert_eq!(b.count(), 0, "a mismatched request reached the backend");

    let same = format!("GOOD.example:{port}");
    let r = crate::client::h2c_get(p.public, &uri, &[("host", &same)])
        .await
        .unwrap_or_else(|e| panic!("host {same}: {e}"));
    expect_status(&r, 200, "the same entity in another case");
    let r = crate::client::h2c_get(
        p.public,
        "http://good.example/y",
        &[("host", "good.example:80")],
    )
    .await
    .unwrap_or_else(|e| panic!("default port: {e}"));
    expect_status(&r, 200, "the scheme's default port");
    assert_eq!(b.count(), 2);
}

/// Header fields, by name and value.
type Fields<'a> = &'a [(&'a str, &'a str)];

/// The request head and `body` in one DATA frame (no END_STREAM) of a POST on `stream`.
fn post_head_and_body(stream: u32, path: &str, head: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut f = h2raw::frame(
        kind::HEADERS,
        h2raw::END_HEADERS,
        stream,
        &h2raw::post_block(path, head),
    );
    f.extend(h2raw::frame(kind::DATA, 0, stream, body));
    f
}

/// A trailer block of `fields` that ends `stream`.
fn trailers(stream: u32, fields: &[(&str, &str)]) -> Vec<u8> {
    let mut block = Vec::new();
    for (n, v) in fields {
        block.extend(h2raw::literal(n, v));
    }
    h2raw::frame(
        kind::HEADERS,
        h2raw::END_HEADERS | h2raw::END_STREAM,
        stream,
        &block,
    )
}

/// RFC 9113 §8.1 (C-PATH-12 refined; docs/proxy.md "HTTP/2 requests"): trailers that carry a
/// pseudo-header field (`:path` after the body) make the request malformed: its stream is reset
/// with `PROTOCOL_ERROR`, no response head is sent, and the backend never sees the request
/// complete, with a `Content-Length` body (whose last bytes would otherwise complete it while
/// the trailers are still to come) and without one; the connection serves the next stream.
/// The same request with clean trailers is answered `200` and reaches the backend whole.
pub async fn c_path_12_h2_pseudo_header_in_trailers_resets_the_stream(bin: Binary) {
    let (b, p) = start(&bin, Mode::Ok, |c| c).await;
    let mut c = H2Raw::connect(p.public, &[]).await.expect("connect");
    let whole = |b: &Backend| {
        b.requests()
            .iter()
            .any(|r| r.target != "/clean" && !r.body.is_empty())
    };
    let cases: [(u32, &str, Fields); 2] = [
        (1, "/sized", &[("content-length", "5")]),
        (3, "/unsized", &[]),
    ];
    for (stream, path, head) in cases {
        c.write(&post_head_and_body(stream, path, head, b"hello"))
            .await
            .expect("request");
        // The head and the body go upstream at once; the request is not complete before the
        // trailers, so the backend must not have read it whole meanwhile.
        stays(
            Duration::from_millis(300),
            "no whole request upstream",
            || !whole(&b),
        )
        .await;
        c.write(&trailers(stream, &[(":path", "/evil"), ("x-sum", "1")]))
            .await
            .expect("trailers");
        let seen = c.read_stream(stream, secs(10)).await;
        assert_eq!(
            seen.reset,
            Some(PROTOCOL_ERROR),
            "{path}: a pseudo-header in trailers: {seen:?}"
        );
        assert!(seen.headers.is_empty(), "{path}: a response head: {seen:?}");
    }
    // The connection goes on: a clean request on it is answered.
    let mut clean = post_head_and_body(5, "/clean", &[("content-length", "5")], b"hello");
    clean.extend(trailers(5, &[("x-sum", "1")]));
    c.write(&clean).await.expect("clean request");
    let seen = c.read_stream(5, secs(10)).await;
    assert_eq!(seen.reset, None, "clean trailers: {seen:?}");
    assert_eq!(
        seen.headers.first().and_then(|h| h.first()),
        Some(&0x88),
        "clean trailers: :status 200 (static index 8) first: {seen:?}"
    );
    // A backend reading a cut body records it empty; a whole one would show its bytes.
    stays(
        Duration::from_millis(300),
        "no whole malformed request upstream",
        || !whole(&b),
    )
    .await;
    let clean: Vec<_> = b
        .requests()
        .into_iter()
        .filter(|r| r.target == "/clean")
        .collect();
    assert_eq!(clean.len(), 1, "the clean request reached the backend");
    assert_eq!(&clean[0].body[..], b"hello");
}

/// C-PATH-9 over HTTP/2: a stream that sends its head and 10 of a declared 100 body bytes, then
/// nothing, is answered once `server.read_timeout` passes (access log: `408`, `body_timeout`,
/// HTTP/2), the stream ended; the attempt is the client's fault: no retry on the other backend,
/// and the backend's circuit (`failure_threshold: 1`) stays closed.
pub async fn c_path_9_h2_stalled_request_body_is_408(bin: Binary) {
    let a = Backend::start("h2-a").await;
    let b = Backend::start("h2-b").await;
    let cfg = stalled_body_config(&a, &b);
    let p = Proxy::start(&bin, &cfg).await;
    let mut c = H2Raw::connect(p.public, &[]).await.expect("connect");
    let head = [("content-length", "100")];
    c.write(&post_head_and_body(1, "/stall", &head, b"0123456789"))
        .await
        .expect("write the head and 10 of 100 bytes");
    let seen = c.read_stream(1, secs(10)).await;
    assert!(
        !seen.headers.is_empty() && seen.ended && seen.reset.is_none(),
        "an answer that ends the stream: {seen:?}"
    );
    let access = eventually(secs(5), "the access line of the stalled stream", || async {
        p.logs()
            .stdout()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["target"] == "weir::access")
    })
    .await;
    assert_eq!(access["fields"]["status"], 408, "{access}");
    assert_eq!(access["fields"]["reason"], "body_timeout", "{access}");
    assert_eq!(b.count(), 0, "a stalled client body was retried elsewhere");
    let r = try_send(p.public, &Req::get("/after"))
        .await
        .expect("a request after the stalled stream");
    expect_status(&r, 200, "after the stalled stream");
    assert_eq!(
        r.backend().as_deref(),
        Some("h2-a"),
        "h2-a's circuit opened"
    );
}
