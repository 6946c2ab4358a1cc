//! C-TLS: TLS on the public listener, certificate reload, and the PROXY protocol.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rustls::ProtocolVersion;

use super::expect_status;
use crate::backend::Backend;
use crate::client::{Raw, Req};
use crate::config::Config;
use crate::harness::{Binary, Proxy};
use crate::tls::{
    Cert, Client, ProxyBackend, certificates, exchange, legacy_client_hello,
    proxy_header_destination, proxy_header_source, proxy_v2,
};
use crate::util::wait_until;

/// A proxy terminating TLS with `pairs` (the first is the default).
async fn tls_proxy(
    bin: &Binary,
    b: &Backend,
    pairs: &[(std::path::PathBuf, std::path::PathBuf)],
) -> Proxy {
    Proxy::start(
        bin,
        &Config::new(&[b]).set("server.tls.certificates", certificates(pairs)),
    )
    .await
}

/// A proxy terminating TLS with one new certificate for `localhost` (written into `dir`), and
/// that certificate.
async fn localhost_proxy(bin: &Binary, dir: &Path, config: Config) -> (Proxy, Cert) {
    let cert = Cert::new(&["localhost"]);
    let pairs = [cert.write(dir, "localhost")];
    let p = Proxy::start(
        bin,
        &config.set("server.tls.certificates", certificates(&pairs)),
    )
    .await;
    (p, cert)
}

async fn get_ok(p: &Proxy, client: &Client, what: &str) -> crate::tls::Seen {
    let seen = exchange(p.public, client, Some("/t"))
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    expect_status(seen.resp.as_ref().expect("a response"), 200, what);
    seen
}

/// C-TLS-1: a request over TLS 1.2 and over TLS 1.3 reaches the backend, which is told
/// `X-Forwarded-Proto: https`.
pub async fn c_tls_1_tls12_and_tls13_handshake_and_request(bin: Binary) {
    let b = Backend::start("b-1").await;
    let dir = tempfile::tempdir().unwrap();
    let (p, cert) = localhost_proxy(&bin, dir.path(), Config::new(&[&b])).await;
    for (v, want) in [
        (&rustls::version::TLS12, ProtocolVersion::TLSv1_2),
        (&rustls::version::TLS13, ProtocolVersion::TLSv1_3),
    ] {
        let seen = get_ok(
            &p,
            &Client::new(Some("localhost")).only(v),
            &format!("{want:?}"),
        )
        .await;
        assert_eq!(seen.version, Some(want));
        assert_eq!(seen.cert, cert.der);
        let up = b.last().expect("upstream request");
        assert_eq!(
            up.header("x-forwarded-proto").as_deref(),
            Some("https"),
            "{want:?}"
        );
        assert_eq!(up.header("x-forwarded-for").as_deref(), Some("127.0.0.1"));
    }
    // Plain HTTP on a TLS listener does not get through.
    let r =
        crate::client::try_send(p.public, &Req::get("/t").timeout(Duration::from_secs(3))).await;
    assert!(r.is_err(), "plain HTTP on the TLS listener: {r:?}");
}

/// C-TLS-1: SNI picks the right certificate among three (exact before wildcard); without SNI,
/// or with an unknown name, the first one is served.
pub async fn c_tls_1_sni_picks_the_certificate(bin: Binary) {
    let b = Backend::start("b-1").await;
    let dir = tempfile::tempdir().unwrap();
    let default = Cert::new(&["default.test"]);
    let wild = Cert::new(&["*.example.test"]);
    let exact = Cert::new(&["api.example.test"]);
    let pairs = [
        default.write(dir.path(), "default"),
        wild.write(dir.path(), "wild"),
        exact.write(dir.path(), "exact"),
    ];
    let p = tls_proxy(&bin, &b, &pairs).await;
    for (sni, want, what) in [
        (Some("api.example.test"), &exact, "exact name"),
        (Some("www.example.test"), &wild, "wildcard"),
        (Some("unknown.test"), &default, "unknown name"),
        (None, &default, "no SNI"),
    ] {
        let seen = get_ok(&p, &Client::new(sni), what).await;
        assert!(
            seen.cert == want.der,
            "{what}: another certificate was served"
        );
    }
}

/// C-TLS-1: ALPN `h2` gives HTTP/2 over TLS into the same data plane.
pub async fn c_tls_1_h2_over_alpn(bin: Binary) {
    let b = Backend::start("b-1").await;
    let dir = tempfile::tempdir().unwrap();
    let (p, _) = localhost_proxy(&bin, dir.path(), Config::new(&[&b])).await;
    let seen = get_ok(&p, &Client::new(Some("localhost")).h2(), "h2").await;
    assert_eq!(seen.alpn.as_deref(), Some(&b"h2"[..]));
    let r = seen.resp.unwrap();
    assert_eq!(r.backend().as_deref(), Some("b-1"));
    let up = b.last().expect("upstream request");
    assert_eq!(up.header("x-forwarded-proto").as_deref(), Some("https"));
    // And http/1.1 when the client asks for it.
    let seen = get_ok(&p, &Client::new(Some("localhost")), "http/1.1").await;
    assert_eq!(seen.alpn.as_deref(), Some(&b"http/1.1"[..]));
}

/// C-TLS-1: a TLS 1.0 or 1.1 ClientHello gets no ServerHello, and the listener keeps serving.
pub async fn c_tls_1_tls10_and_tls11_refused(bin: Binary) {
    let b = Backend::start("b-1").await;
    let dir = tempfile::tempdir().unwrap();
    let (p, _) = localhost_proxy(&bin, dir.path(), Config::new(&[&b])).await;
    for minor in [1u8, 2] {
        let mut raw = Raw::connect(p.public).await;
        raw.write(&legacy_client_hello(minor))
            .await
            .expect("write hello");
        let got = raw
            .read_some(Duration::from_secs(5))
            .await
            .unwrap_or_default();
        // An alert record (21), or the connection closed: never a handshake record (22).
        assert!(
            got.first() != Some(&0x16),
            "TLS 1.{} hello answered with a handshake record: {got:02x?}",
            minor - 1
        );
        assert!(
            raw.wait_closed(Duration::from_secs(5)).await.is_some(),
            "closed"
        );
    }
    get_ok(&p, &Client::new(Some("localhost")), "after refusals").await;
}

/// Replace `dir/..data` (a symlink to a versioned directory) by one to a new directory holding
/// `cert`, with one rename: the Kubernetes Secret volume's way.
fn k8s_publish(dir: &Path, version: &str, cert: &Cert) {
    let v = dir.join(version);
    std::fs::create_dir(&v).unwrap();
    std::fs::write(v.join("tls.crt"), &cert.cert_pem).unwrap();
    std::fs::write(v.join("tls.key"), &cert.key_pem).unwrap();
    let tmp = dir.join("..data_tmp");
    std::os::unix::fs::symlink(version, &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
}

/// C-TLS-2: a certificate rotated by swapping a symlinked directory (the Kubernetes way) is
/// served to new connections without a signal, and no handshake fails during the swap. (The
/// watch looks every 500 ms, so this takes well under 2 s; the case waits up to 30 s, and
/// prints how long it took.)
pub async fn c_tls_2_symlinked_directory_rotation(bin: Binary) {
    let b = Backend::start("b-1").await;
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (Cert::new(&["localhost"]), Cert::new(&["localhost"]));
    k8s_publish(dir.path(), "..v1", &old);
    std::os::unix::fs::symlink("..data/tls.crt", dir.path().join("tls.crt")).unwrap();
    std::os::unix::fs::symlink("..data/tls.key", dir.path().join("tls.key")).unwrap();
    let pair = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let p = tls_proxy(&bin, &b, &[pair]).await;
    let addr = p.public;
    let seen = exchange(addr, &Client::new(Some("localhost")), None)
        .await
        .unwrap();
    assert_eq!(seen.cert, old.der);
    // Handshakes all through the swap.
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicUsize::new(0));
    let handshakes = Arc::new(AtomicUsize::new(0));
    let hammer = {
        let (stop, failures, handshakes) = (
            Arc::clone(&stop),
            Arc::clone(&failures),
            Arc::clone(&handshakes),
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if exchange(addr, &Client::new(Some("localhost")), None)
                    .await
                    .is_err()
                {
                    failures.fetch_add(1, Ordering::Relaxed);
                }
                handshakes.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            handshakes.load(Ordering::Relaxed)
        })
    };
    wait_until(
        Duration::from_secs(30),
        "handshakes before the swap",
        || handshakes.load(Ordering::Relaxed) >= 5,
    )
    .await;
    k8s_publish(dir.path(), "..v2", &new);
    let swapped = Instant::now();
    let served = loop {
        let seen = exchange(addr, &Client::new(Some("localhost")), None)
            .await
            .unwrap();
        if seen.cert == new.der {
            break swapped.elapsed();
        }
        assert!(
            swapped.elapsed() < Duration::from_secs(30),
            "the new certificate never came"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("new certificate served {served:?} after the swap");
    // Handshakes go on after the swap too, until the hammer has made a few more.
    let made = handshakes.load(Ordering::Relaxed);
    wait_until(Duration::from_secs(30), "handshakes after the swap", || {
        handshakes.load(Ordering::Relaxed) >= made + 5
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let handshakes = hammer.await.unwrap();
    assert_eq!(
        failures.load(Ordering::Relaxed),
        0,
        "failed handshakes during the swap (of {handshakes})"
    );
}

/// C-TLS-2: a certificate replaced without its key (a mismatched pair) keeps the old one in
/// force, logged; once the matching key arrives the new one is served. SIGHUP reloads too.
pub async fn c_tls_2_mismatched_pair_keeps_the_old_certificate(bin: Binary) {
    let b = Backend::start("b-1").await;
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (Cert::new(&["localhost"]), Cert::new(&["localhost"]));
    let pair = old.write(dir.path(), "site");
    let p = tls_proxy(&bin, &b, std::slice::from_ref(&pair)).await;
    std::fs::write(&pair.0, &new.cert_pem).unwrap();
    // SIGHUP reloads the mismatched pair (the watch may too): the reload fails, and the old
    // certificate stays in force after it.
    p.signal("HUP");
    wait_until(Duration::from_secs(30), "SIGHUP's failed reload", || {
        failed_reloads(&p, "signal") >= 1
    })
    .await;
    let seen = get_ok(&p, &Client::new(Some("localhost")), "mismatched pair").await;
    assert!(seen.cert == old.der, "the old certificate stays in force");
    let logs = p.logs().stdout();
    assert!(
        logs.contains("certificate reload failed") && logs.contains("mismatch"),
        "a structured error for the failed reload:\n{logs}"
    );
    std::fs::write(&pair.1, &new.key_pem).unwrap();
    let start = Instant::now();
    loop {
        let seen = get_ok(&p, &Client::new(Some("localhost")), "matching key").await;
        if seen.cert == new.der {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "new pair never served"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How many `certificates reloaded` lines from `source` (`signal` for SIGHUP) counted a failed
/// pair so far (docs/tls.md, "Reload").
fn failed_reloads(p: &Proxy, source: &str) -> usize {
    p.logs()
        .stdout()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| {
            v["target"] == "weir::tls"
                && v["fields"]["message"] == "certificates reloaded"
                && v["fields"]["source"] == source
                && v["fields"]["failed"].as_u64().is_some_and(|n| n > 0)
        })
        .count()
}

fn proxy_config(b: &Backend, mode: &str) -> Config {
    Config::new(&[b]).set("server.proxy_protocol", mode).set(
        "server.proxy_protocol_trusted",
        serde_json::json!(["127.0.0.1"]),
    )
}

/// Sends `header` then a GET on a raw connection; the response status, or `None` when the
/// proxy closed the connection without one.
async fn raw_get(addr: SocketAddr, from: Option<IpAddr>, header: &[u8]) -> Option<u16> {
    let mut raw = Raw::connect_from(addr, from).await;
    let mut bytes = header.to_vec();
    bytes.extend_from_slice(b"GET /p HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    if raw.write(&bytes).await.is_err() {
        return None;
    }
    raw.read_head(Duration::from_secs(5))
        .await
        .ok()
        .map(|h| h.status)
}

/// C-TLS-3: PROXY v1 and v2 from a trusted source set the client address; from an untrusted
/// one the connection is closed.
pub async fn c_tls_3_proxy_protocol_sets_the_client(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(&bin, &proxy_config(&b, "any")).await;
    let v1 = b"PROXY TCP4 203.0.113.7 127.0.0.1 40000 80\r\n";
    assert_eq!(raw_get(p.public, None, v1).await, Some(200), "v1");
    let up = b.last().expect("upstream");
    assert_eq!(up.header("x-forwarded-for").as_deref(), Some("203.0.113.7"));
    let v2 = proxy_v2(SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 9), 5555));
    assert_eq!(raw_get(p.public, None, &v2).await, Some(200), "v2");
    let up = b.last().expect("upstream");
    assert_eq!(
        up.header("x-forwarded-for").as_deref(),
        Some("198.51.100.9")
    );
    assert_eq!(up.header("x-real-ip").as_deref(), Some("198.51.100.9"));
    // 127.0.0.2 is not trusted to send a header: closed, nothing upstream.
    let before = b.count();
    let untrusted = Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)));
    assert_eq!(
        raw_get(p.public, untrusted, v1).await,
        None,
        "untrusted peer"
    );
    assert_eq!(b.count(), before);
    // A v1-only listener refuses v2.
    let p1 = Proxy::start(&bin, &proxy_config(&b, "v1")).await;
    assert_eq!(
        raw_get(p1.public, None, &v2).await,
        None,
        "v2 on a v1 listener"
    );
    assert_eq!(
        raw_get(p1.public, None, v1).await,
        Some(200),
        "v1 on a v1 listener"
    );
}

/// C-TLS-3: a malformed PROXY header (or none) closes the connection and the listener keeps
/// serving.
pub async fn c_tls_3_malformed_proxy_header_closes(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(&bin, &proxy_config(&b, "any")).await;
    for bad in [
        &b"PROXY TCP4 203.0.113.7 127.0.0.1 99999 80\r\n"[..],
        b"PROXY SCTP 1.2.3.4 5.6.7.8 1 2\r\n",
        b"",
        b"\r\n\r\n\0\r\nQUIT\n\x31\x11\x00\x0c",
    ] {
        assert_eq!(raw_get(p.public, None, bad).await, None, "{bad:?}");
    }
    assert_eq!(b.count(), 0, "nothing reached the backend");
    let ok = b"PROXY TCP4 203.0.113.7 127.0.0.1 40000 80\r\n";
    assert_eq!(
        raw_get(p.public, None, ok).await,
        Some(200),
        "still serving"
    );
}

/// C-TLS-3 with C-TLS-1: a PROXY v2 header and then a TLS handshake on the same connection
/// (a TCP load balancer in front of weir terminating TLS): the request's client is the address
/// the header carries, and it is told `X-Forwarded-Proto: https`.
pub async fn c_tls_3_proxy_header_then_tls_handshake(bin: Binary) {
    let b = Backend::start("b-1").await;
    let dir = tempfile::tempdir().unwrap();
    let (p, cert) = localhost_proxy(&bin, dir.path(), proxy_config(&b, "v2")).await;
    let v2 = proxy_v2(SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 23), 6000));
    let client = Client::new(Some("localhost")).proxy_header(&v2);
    let seen = get_ok(&p, &client, "PROXY v2 then TLS").await;
    assert_eq!(seen.cert, cert.der);
    let up = b.last().expect("upstream request");
    assert_eq!(
        up.header("x-forwarded-for").as_deref(),
        Some("198.51.100.23")
    );
    assert_eq!(up.header("x-forwarded-proto").as_deref(), Some("https"));
    // Over h2 too (ALPN after the header).
    get_ok(&p, &client.clone().h2(), "PROXY v2 then TLS, h2").await;
    let up = b.last().expect("upstream request");
    assert_eq!(
        up.header("x-forwarded-for").as_deref(),
        Some("198.51.100.23")
    );
    // Without the header the v2 listener closes the connection: the handshake fails.
    let r = exchange(p.public, &Client::new(Some("localhost")), Some("/t")).await;
    assert!(r.is_err(), "TLS without the PROXY header: {r:?}");
}

/// C-TLS-3 (sending): a backend with `send_proxy_protocol` gets a PROXY header naming the
/// client (the C-FWD-1 peer, here itself set by the listener's PROXY header) at the start of
/// each new connection, over HTTP/1.1 and from HTTP/2 clients; such a connection serves one
/// request and is never reused for another (nor the same) client; HTTP health probes begin
/// with a "no client" header (v1 `UNKNOWN`, v2 `LOCAL`).
pub async fn c_tls_3_send_proxy_protocol_to_backends(bin: Binary) {
    let a = SocketAddrV4::new(Ipv4Addr::new(203, 0, 113, 7), 40000);
    let b = SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 9), 5555);
    let from = |c: SocketAddrV4| proxy_v2(c);
    for (version, local) in [
        ("v1", &b"PROXY UNKNOWN\r\n"[..]),
        ("v2", &b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00"[..]),
    ] {
        let pb = ProxyBackend::start().await;
        let dir = tempfile::tempdir().unwrap();
        let config = Config::new(&[])
            .set(
                "backends",
                serde_json::json!([{"id": "pb", "url": pb.url(), "send_proxy_protocol": version}]),
            )
            .set("server.proxy_protocol", "v2")
            .set(
                "server.proxy_protocol_trusted",
                serde_json::json!(["127.0.0.1"]),
            );
        let (p, _) = localhost_proxy(&bin, dir.path(), config).await;
        // Until the first probe passed (a 503 never reaches the backend).
        let start = Instant::now();
        loop {
            let seen = exchange(
                p.public,
                &Client::new(Some("localhost")).proxy_header(&from(a)),
                Some("/t"),
            )
            .await
            .unwrap_or_else(|e| panic!("{version}: {e}"));
            if seen.resp.as_ref().is_some_and(|r| r.status == 200) {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{version}: the backend never became healthy: {:?}",
                pb.conns()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        get_ok(
            &p,
            &Client::new(Some("localhost")).proxy_header(&from(a)),
            "a again",
        )
        .await;
        get_ok(
            &p,
            &Client::new(Some("localhost")).proxy_header(&from(b)),
            "b",
        )
        .await;
        get_ok(
            &p,
            &Client::new(Some("localhost")).proxy_header(&from(b)).h2(),
            "b over h2",
        )
        .await;
        let conns = pb.conns();
        let (probes, requests): (Vec<_>, Vec<_>) = conns
            .iter()
            .filter(|c| !c.paths.is_empty())
            .partition(|c| c.paths.iter().all(|p| p == "/health"));
        assert!(!probes.is_empty(), "{version}: no probe seen");
        for c in &probes {
            assert_eq!(c.header, local, "{version}: a probe's header");
        }
        let sources: Vec<_> = requests
            .iter()
            .map(|c| {
                assert_eq!(
                    c.paths,
                    ["/t"],
                    "{version}: one request per connection: {c:?}"
                );
                proxy_header_source(&c.header)
            })
            .collect();
        let (a, b) = (Some(SocketAddr::V4(a)), Some(SocketAddr::V4(b)));
        assert_eq!(sources, [a, a, b, b], "{version}: {requests:?}");
        // The destination weir received (`proxy_v2`'s) is passed on, as the source is.
        for c in &requests {
            assert_eq!(
                proxy_header_destination(&c.header),
                Some(SocketAddr::from(([127, 0, 0, 1], 80))),
                "{version}: destination of {c:?}"
            );
        }
        assert!(
            requests
                .iter()
                .all(|c| c.header.starts_with(if version == "v1" {
                    b"PROXY TCP4 "
                } else {
                    b"\r\n\r\n"
                })),
            "{version}: header version"
        );
    }
}

/// C-TLS-3 (sending): without a PROXY header from the client, the header weir sends a backend
/// names the client's socket address as the source and the address it connected to, weir's
/// listener (address and port), as the destination.
pub async fn c_tls_3_send_proxy_protocol_names_the_listener(bin: Binary) {
    for version in ["v1", "v2"] {
        let pb = ProxyBackend::start().await;
        let config = Config::new(&[]).set(
            "backends",
            serde_json::json!([{"id": "pb", "url": pb.url(), "send_proxy_protocol": version}]),
        );
        let p = Proxy::start(&bin, &config).await;
        // Until the first probe passed (a 503 never reaches the backend).
        let start = Instant::now();
        let client = loop {
            let mut c = Raw::connect(p.public).await;
            let client = c.stream.local_addr().expect("client address");
            c.write(b"GET /t HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .await
                .expect("write");
            let head = c.read_head(Duration::from_secs(5)).await.expect("a head");
            if head.status == 200 {
                break client;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{version}: the backend never became healthy: {:?}",
                pb.conns()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let conns = pb.conns();
        let requests: Vec<_> = conns.iter().filter(|c| c.paths == ["/t"]).collect();
        assert_eq!(requests.len(), 1, "{version}: {conns:?}");
        let header = &requests[0].header;
        assert_eq!(
            proxy_header_source(header),
            Some(client),
            "{version}: source"
        );
        assert_eq!(
            proxy_header_destination(header),
            Some(p.public),
            "{version}: destination is weir's listener"
        );
    }
}
