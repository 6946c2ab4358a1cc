//! Shared fixtures for weir-core's criterion benchmarks (`benches/`) and the allocation test
//! (`tests/alloc.rs`). Benchmarks report; they never assert a duration.

use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant};

use weir_core::Instant;
use weir_core::pool::{BackendSpec, Pool, PoolParams};
use weir_core::select::PolicyKind;
use weir_core::slow_start::SlowStart;

/// A pool of `n` healthy backends with the given policy, slow start off.
#[must_use]
pub fn healthy_pool(n: usize, kind: PolicyKind) -> Arc<Pool> {
    let specs: Vec<BackendSpec> = (0..n)
        .map(|i| {
            BackendSpec::new(
                format!("b{i}"),
                format!("http://10.0.{}.{}:80", i / 256, i % 256),
            )
        })
        .collect();
    let params = PoolParams {
        slow_start: SlowStart::off(),
        ..PoolParams::default()
    };
    let pool = Pool::new(
        &specs,
        kind,
        params,
        None,
        Instant::ZERO,
        &mut weir_core::WyRand::new(7),
    )
    .expect("valid pool");
    for b in pool.backends() {
        b.set_healthy(true, Instant::ZERO);
    }
    Arc::new(pool)
}

/// Run `op` `iters` times split over `threads` OS threads and return the wall time: divided by
/// `iters` this is ns/op in the sense of Go's `b.RunParallel` (aggregate throughput).
pub fn run_parallel<F>(threads: usize, iters: u64, op: F) -> Duration
where
    F: Fn(usize, u64) + Sync,
{
    let per = iters.div_ceil(threads as u64);
    let start = StdInstant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let op = &op;
            s.spawn(move || op(t, per));
        }
    });
    start.elapsed()
}

/// A keep-alive GET as a browser sends it (the HTTP/1 codec's bench and allocation count).
pub const H1_GET: &[u8] = b"GET /api/items?page=2 HTTP/1.1\r\nHost: example.test\r\n\
User-Agent: Mozilla/5.0\r\nAccept: text/html\r\nAccept-Encoding: gzip, br\r\n\
Accept-Language: en\r\nCookie: a=b\r\nConnection: keep-alive\r\nX-Forwarded-For: 192.0.2.1\r\n\r\n";

/// A typical backend response head to it.
pub const H1_RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Tue, 01 Dec 2026 21:00:00 GMT\r\n\
Content-Type: text/html\r\nContent-Length: 100\r\nConnection: keep-alive\r\nCache-Control: no-cache\r\n\r\n";

/// The keep-alive GET head path of weir's HTTP/1 codec: parse the client's head, write the
/// upstream head, parse the upstream's response head, write the client's. `up` and `down` are
/// the connection's reused output buffers (cleared here). Returns the bytes written.
///
/// # Panics
/// If either head does not parse (the constants above always do).
pub fn h1_head_path(
    request: &[u8],
    response: &[u8],
    up: &mut Vec<u8>,
    down: &mut Vec<u8>,
) -> usize {
    use std::net::{IpAddr, Ipv4Addr};
    use weir_core::forward::Proto;
    use weir_core::h1::{
        ClientSide, EMPTY_HEADER, Limits, Parsed, ResponseContext, UpstreamRequest, parse_request,
        parse_response, write_response_head, write_upstream_request,
    };
    let limits = Limits::default();
    let mut h = [EMPTY_HEADER; 32];
    let Ok(Parsed::Complete(req)) = parse_request(request, &mut h, &limits) else {
        panic!("request head");
    };
    up.clear();
    let extra: [(&str, &[u8]); 2] = [
        ("x-request-id", b"0123456789abcdef0123456789abcdef"),
        ("x-balancer-backend-attempt", b"b1"),
    ];
    write_upstream_request(
        &req,
        &UpstreamRequest {
            target: req.target.as_bytes(),
            client: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 9)),
            proto: Proto::Http,
            extra: &extra,
        },
        up,
    );
    let mut rh = [EMPTY_HEADER; 32];
    let ctx = ResponseContext {
        head: req.is_head(),
        upgrade: req.upgrade(),
    };
    let Ok(Parsed::Complete(res)) = parse_response(response, &mut rh, &limits, ctx) else {
        panic!("response head");
    };
    down.clear();
    let extra: [(&str, &[u8]); 3] = [
        ("x-balancer-backend", b"b1"),
        ("x-balancer-attempts", b"1"),
        ("x-request-id", b"0123456789abcdef0123456789abcdef"),
    ];
    let client = ClientSide {
        version: req.version,
        keep_alive: req.keep_alive(),
    };
    let out = write_response_head(&res, client, &extra, down);
    assert!(out.keep_alive);
    up.len() + down.len()
}
