//! The per-request header rewrite of the data plane (C-PATH-6, C-FWD-2): the hop-by-hop strip
//! and the forwarding rewrite of an upstream request, and the strip of a response, on a
//! minimal request (`Host` only, as wrk sends) and a browser-like one (eight headers, one
//! `Connection` and one `X-Forwarded-For` to remove). The map clone is part of each iteration,
//! as the proxy takes the parsed map once per request.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};

use criterion::{Criterion, criterion_group, criterion_main};
use http::{HeaderMap, HeaderValue, header};
use weir_core::forward::{Proto, rewrite_forwarding, strip_hop_by_hop};

fn request(browser: bool) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(header::HOST, HeaderValue::from_static("example.test"));
    if browser {
        h.insert(header::USER_AGENT, HeaderValue::from_static("Mozilla/5.0"));
        h.insert(header::ACCEPT, HeaderValue::from_static("text/html"));
        h.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("gzip, br"),
        );
        h.insert(header::ACCEPT_LANGUAGE, HeaderValue::from_static("en"));
        h.insert(header::COOKIE, HeaderValue::from_static("a=b"));
        h.insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
        h.insert("x-forwarded-for", HeaderValue::from_static("192.0.2.1"));
    }
    h
}

fn bench_headers(c: &mut Criterion) {
    let client = IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3));
    let mut group = c.benchmark_group("upstream_headers");
    for (name, browser) in [("minimal", false), ("browser", true)] {
        let h = request(browser);
        group.bench_function(format!("request/{name}"), |b| {
            b.iter(|| {
                let mut m = h.clone();
                strip_hop_by_hop(&mut m, false);
                let host = m.get(header::HOST).cloned();
                rewrite_forwarding(&mut m, client, host, Proto::Http);
                black_box(m)
            });
        });
        group.bench_function(format!("response_strip/{name}"), |b| {
            b.iter(|| {
                let mut m = h.clone();
                strip_hop_by_hop(&mut m, false);
                black_box(m)
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench_headers);
criterion_main!(benches);
