//! weir's own HTTP/1 codec: parse + rewrite of a typical request head and of a
//! typical response head, and the whole keep-alive GET head path. Numbers are reported (see
//! docs/benchmarks.md), never asserted.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};

use criterion::{Criterion, criterion_group, criterion_main};
use weir_benches::{H1_GET, H1_RESPONSE, h1_head_path};
use weir_core::forward::Proto;
use weir_core::h1::{
    ClientSide, EMPTY_HEADER, Limits, Parsed, ResponseContext, UpstreamRequest, Version,
    parse_request, parse_response, write_response_head, write_upstream_request,
};

fn request_head(c: &mut Criterion) {
    let mut out = Vec::with_capacity(1024);
    c.bench_function("h1/request_parse_rewrite", |b| {
        b.iter(|| {
            let mut h = [EMPTY_HEADER; 32];
            let Ok(Parsed::Complete(r)) =
                parse_request(black_box(H1_GET), &mut h, &Limits::default())
            else {
                unreachable!()
            };
            out.clear();
            let req = UpstreamRequest {
                target: r.target.as_bytes(),
                client: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 9)),
                proto: Proto::Http,
                extra: &[("x-request-id", b"0123456789abcdef0123456789abcdef")],
            };
            write_upstream_request(&r, &req, &mut out);
            black_box(out.len())
        });
    });
}

fn response_head(c: &mut Criterion) {
    let mut out = Vec::with_capacity(1024);
    c.bench_function("h1/response_parse_rewrite", |b| {
        b.iter(|| {
            let mut h = [EMPTY_HEADER; 32];
            let parsed = parse_response(
                black_box(H1_RESPONSE),
                &mut h,
                &Limits::default(),
                ResponseContext::default(),
            );
            let Ok(Parsed::Complete(r)) = parsed else {
                unreachable!()
            };
            out.clear();
            let client = ClientSide {
                version: Version::Http11,
                keep_alive: true,
            };
            black_box(write_response_head(
                &r,
                client,
                &[("x-balancer-backend", b"b1")],
                &mut out,
            ))
        });
    });
}

fn head_path(c: &mut Criterion) {
    let (mut up, mut down) = (Vec::with_capacity(1024), Vec::with_capacity(1024));
    c.bench_function("h1/keep_alive_get_head_path", |b| {
        b.iter(|| {
            black_box(h1_head_path(
                black_box(H1_GET),
                H1_RESPONSE,
                &mut up,
                &mut down,
            ))
        });
    });
}

criterion_group!(benches, request_head, response_head, head_path);
criterion_main!(benches);
