//! `weir_core::h1::parse_request` (C-PATH-12): never panics; a head parsed whole is
//! parsed the same from any prefix on (a prefix is `Partial` or the same refusal); the head
//! length is within the buffer; the upstream head weir writes from it parses back with the same
//! method and framing; the parse into uninitialised storage (the proxy's, `parse_request_in`)
//! gives the same answer.

use std::net::{IpAddr, Ipv4Addr};

use weir_core::forward::Proto;
use weir_core::h1::{
    EMPTY_HEADER, Limits, Parsed, UpstreamRequest, header_slots, parse_request, parse_request_in,
    write_upstream_request,
};

pub fn run(data: &[u8]) {
    let limits = Limits {
        max_request_line: 256,
        max_head_bytes: 1024,
    };
    let mut h = [EMPTY_HEADER; 16];
    let whole = parse_request(data, &mut h, &limits);
    let mut slots = header_slots::<16>();
    assert_eq!(
        parse_request_in(data, &mut slots, &limits),
        whole,
        "uninit parse differs"
    );
    let cut = data
        .first()
        .map_or(0, |&b| usize::from(b) % (data.len() + 1));
    let mut h2 = [EMPTY_HEADER; 16];
    match (&whole, parse_request(&data[..cut], &mut h2, &limits)) {
        (_, Ok(Parsed::Partial)) => {}
        (Err(a), Err(b)) => assert_eq!(*a, b, "a prefix refused for another reason"),
        (Ok(Parsed::Complete(a)), Ok(Parsed::Complete(b))) => {
            assert_eq!((a.method, a.target, a.body), (b.method, b.target, b.body));
        }
        (w, p) => panic!("whole {w:?}, prefix {p:?}"),
    }
    if let Ok(Parsed::Complete(r)) = whole {
        assert!(r.head_len <= data.len());
        let mut out = Vec::new();
        let req = UpstreamRequest {
            target: r.target.as_bytes(),
            client: IpAddr::V4(Ipv4Addr::LOCALHOST),
            proto: Proto::Http,
            extra: &[("host", b"up")],
        };
        write_upstream_request(&r, &req, &mut out);
        let mut h3 = [EMPTY_HEADER; 32];
        let big = Limits {
            max_request_line: 4096,
            max_head_bytes: 8192,
        };
        match parse_request(&out, &mut h3, &big) {
            Ok(Parsed::Complete(back)) => {
                assert_eq!((back.method, back.body), (r.method, r.body));
                assert_eq!(back.head_len, out.len());
            }
            other => panic!("written head does not parse back: {other:?}"),
        }
    }
}
