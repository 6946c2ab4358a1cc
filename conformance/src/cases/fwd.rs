//! C-FWD: client address, trusted proxies and the forwarding headers weir writes.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use super::expect_status;
use crate::backend::{Backend, Recorded};
use crate::client::{Req, send};
use crate::config::Config;
use crate::harness::{Binary, Proxy, StartOptions};

async fn upstream(p: &Proxy, b: &Backend, req: Req) -> std::sync::Arc<Recorded> {
    let what = format!(
        "{} {} {:?} from {:?}",
        req.method, req.target, req.headers, req.from
    );
    let r = send(p.public, &req).await;
    expect_status(&r, 200, &what);
    b.last().expect("upstream request")
}

#[track_caller]
fn expect_client(up: &Recorded, client: &str, what: &str) {
    assert_eq!(
        up.header_all("x-forwarded-for"),
        [client],
        "{what}: X-Forwarded-For"
    );
    assert_eq!(up.header_all("x-real-ip"), [client], "{what}: X-Real-IP");
}

/// C-FWD-1: an untrusted peer is the client, whatever its headers say.
pub async fn c_fwd_1_untrusted_peer_is_the_client(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(
        &bin,
        &Config::new(&[&b]).trusted(&["127.0.0.2/32", "10.0.0.0/8"]),
    )
    .await;
    let up = upstream(
        &p,
        &b,
        Req::get("/u").header("x-forwarded-for", "203.0.113.7"),
    )
    .await;
    expect_client(&up, "127.0.0.1", "untrusted peer with X-Forwarded-For");
    let up = upstream(
        &p,
        &b,
        Req::get("/u").header("forwarded", "for=203.0.113.7"),
    )
    .await;
    expect_client(&up, "127.0.0.1", "untrusted peer with Forwarded");
    let up = upstream(&p, &b, Req::get("/u").header("x-real-ip", "203.0.113.7")).await;
    expect_client(&up, "127.0.0.1", "untrusted peer with X-Real-IP");
}

/// C-FWD-1: behind a trusted peer the chain is walked from the right, skipping trusted hops.
pub async fn c_fwd_1_trusted_chain_walked_from_the_right(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(
        &bin,
        &Config::new(&[&b]).trusted(&["127.0.0.2/32", "10.0.0.0/8"]),
    )
    .await;
    let cases: Vec<(Req, &str)> = vec![
        (
            Req::get("/t").header("x-forwarded-for", "203.0.113.7"),
            "203.0.113.7",
        ),
        (
            Req::get("/t").header("x-forwarded-for", "6.6.6.6, 203.0.113.7, 10.1.2.3"),
            "203.0.113.7",
        ),
        (
            Req::get("/t")
                .header("x-forwarded-for", "6.6.6.6")
                .header("x-forwarded-for", "203.0.113.9, 10.0.0.5"),
            "203.0.113.9",
        ),
        (
            Req::get("/t").header("forwarded", "for=\"[2001:db8::17]:4711\", for=10.0.0.2"),
            "2001:db8::17",
        ),
        (
            Req::get("/t").header("forwarded", "for=198.51.100.4;proto=http"),
            "198.51.100.4",
        ),
        (Req::get("/t"), "127.0.0.2"),
    ];
    for (req, want) in cases {
        let what = format!("{:?}", req.headers);
        let up = upstream(&p, &b, req.from_127_0_0_2()).await;
        expect_client(&up, want, &what);
    }
}

/// C-FWD-2: incoming forwarding headers are replaced by weir's own; `Host` is kept.
pub async fn c_fwd_2_forwarding_headers_rewritten(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(&bin, &Config::new(&[&b]).trusted(&["127.0.0.2/32"])).await;
    let req = Req::get("/f")
        .header("host", "app.example:8443")
        .header("forwarded", "for=1.2.3.4;proto=https;host=evil.example")
        .header("x-forwarded-for", "1.2.3.4")
        .header("x-forwarded-proto", "https")
        .header("x-forwarded-host", "evil.example")
        .header("x-real-ip", "1.2.3.4");
    let up = upstream(&p, &b, req.clone()).await;
    expect_client(&up, "127.0.0.1", "untrusted client");
    assert!(
        !up.has_header("forwarded"),
        "Forwarded passed upstream: {:?}",
        up.header_all("forwarded")
    );
    assert_eq!(up.header_all("x-forwarded-host"), ["app.example:8443"]);
    assert_eq!(
        up.header_all("x-forwarded-proto"),
        ["http"],
        "untrusted peer cannot claim https"
    );
    assert_eq!(up.header_all("host"), ["app.example:8443"], "Host is kept");

    let up = upstream(&p, &b, req.from_127_0_0_2()).await;
    expect_client(&up, "1.2.3.4", "trusted proxy");
    assert_eq!(
        up.header_all("x-forwarded-proto"),
        ["https"],
        "trusted proxy said https"
    );
    assert!(!up.has_header("forwarded"));
    assert_eq!(up.header_all("x-forwarded-host"), ["app.example:8443"]);

    let req = Req::get("/f")
        .header("x-forwarded-for", "203.0.113.7")
        .header("x-forwarded-proto", "https, http")
        .from_127_0_0_2();
    let up = upstream(&p, &b, req).await;
    assert_eq!(
        up.header_all("x-forwarded-proto"),
        ["http"],
        "the rightmost (trusted) value wins"
    );
}

/// C-FWD-3: malformed chains never fail the request and fall back to the peer; an all-trusted
/// chain resolves to its leftmost element.
pub async fn c_fwd_3_malformed_chains_fall_back(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(
        &bin,
        &Config::new(&[&b]).trusted(&["127.0.0.2/32", "10.0.0.0/8"]),
    )
    .await;
    let huge = "x,".repeat(30_000);
    let cases: Vec<(Req, &str)> = vec![
        (
            Req::get("/m").header("x-forwarded-for", "203.0.113.7, garbage"),
            "127.0.0.2",
        ),
        (
            Req::get("/m").header("x-forwarded-for", "not-an-ip"),
            "127.0.0.2",
        ),
        (
            Req::get("/m").header("x-forwarded-for", "garbage, 203.0.113.7"),
            "203.0.113.7",
        ),
        (
            Req::get("/m").header("x-forwarded-for", "10.0.0.3, 10.0.0.2"),
            "10.0.0.3",
        ),
        (
            Req::get("/m").header("forwarded", "for=unknown"),
            "127.0.0.2",
        ),
        (
            Req::get("/m").header("forwarded", "for=\"unterminated"),
            "127.0.0.2",
        ),
        (Req::get("/m").header("x-forwarded-for", &huge), "127.0.0.2"),
    ];
    for (req, want) in cases {
        let what: String = format!("{:?}", req.headers).chars().take(120).collect();
        let up = upstream(&p, &b, req.from_127_0_0_2()).await;
        expect_client(&up, want, &what);
    }
}

/// C-FWD-3: an IPv4-mapped IPv6 peer is unmapped before trust checks and in what is written.
pub async fn c_fwd_3_ipv4_mapped_peer_is_unmapped(bin: Binary) {
    let mapped: SocketAddr = SocketAddr::new(
        IpAddr::V6(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0x7f00, 1)),
        0,
    );
    if std::net::TcpListener::bind(mapped).is_err() {
        eprintln!("skipped: this host cannot listen on an IPv4-mapped IPv6 address");
        return;
    }
    let b = Backend::start("b-1").await;
    let cfg = Config::new(&[&b]).trusted(&["127.0.0.1/32"]);
    let opts = StartOptions {
        public_bind: mapped.to_string(),
        backends: vec![b.clone()],
        ..StartOptions::default()
    };
    let p = match Proxy::start_with(&bin, &cfg.yaml(), opts).await {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    };
    let r = send(
        p.public,
        &Req::get("/mapped").header("x-forwarded-for", "203.0.113.7"),
    )
    .await;
    expect_status(&r, 200, "request through a dual-stack listener");
    let up = b.last().expect("upstream request");
    expect_client(
        &up,
        "203.0.113.7",
        "mapped peer ::ffff:127.0.0.1 is trusted as 127.0.0.1",
    );
    let r = send(p.public, &Req::get("/mapped")).await;
    expect_status(&r, 200, "no header");
    expect_client(
        &b.last().expect("upstream"),
        "127.0.0.1",
        "mapped peer written unmapped",
    );
}

/// C-FWD-2 over h2c: an HTTP/2 (prior knowledge) request takes the same path; its
/// `:authority` is the inbound host (`X-Forwarded-Host`, and `Host` upstream).
pub async fn c_fwd_2_h2c_authority_is_the_inbound_host(bin: Binary) {
    let b = Backend::start("b-1").await;
    let p = Proxy::start(&bin, &Config::new(&[&b])).await;
    let uri = format!("http://app.example:{}/h2/x?q=1", p.public.port());
    let r = match crate::client::h2c_get(p.public, &uri, &[("x-request-id", "h2-1")]).await {
        Ok(r) => r,
        Err(e) => panic!("h2c request failed: {e}"),
    };
    expect_status(&r, 200, "h2c request");
    assert_eq!(r.backend().as_deref(), Some("b-1"));
    assert_eq!(r.header("x-request-id").as_deref(), Some("h2-1"));
    let up = b.last().expect("upstream request");
    assert_eq!(up.target, "/h2/x?q=1");
    let authority = format!("app.example:{}", p.public.port());
    assert_eq!(
        up.header_all("x-forwarded-host"),
        std::slice::from_ref(&authority),
        "X-Forwarded-Host from :authority"
    );
    assert_eq!(
        up.header_all("host"),
        [authority],
        "Host upstream from :authority"
    );
    expect_client(&up, "127.0.0.1", "h2c client");
}
