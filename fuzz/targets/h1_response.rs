//! `weir_core::h1::parse_response` (C-PATH-12): never panics; prefixes agree with the
//! whole; a parsed status is 100–599; the client head weir writes parses back as a response
//! with the same status and a framing the client can follow; the parse into uninitialised
//! storage (`parse_response_in`) gives the same answer, and a head kept as places in its bytes
//! (`ResponseHead::keep`, what the proxy writes from) reads back as the parsed head.

use weir_core::h1::{
    BodyFraming, BodyOut, ClientSide, EMPTY_HEADER, Limits, Parsed, ResponseContext, Version,
    header_slots, parse_response, parse_response_in, write_response_head,
};

pub fn run(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let ctx = ResponseContext {
        head: flags & 1 != 0,
        upgrade: flags & 2 != 0,
    };
    let client = ClientSide {
        version: if flags & 4 != 0 {
            Version::Http10
        } else {
            Version::Http11
        },
        keep_alive: flags & 8 != 0,
    };
    let limits = Limits {
        max_request_line: 256,
        max_head_bytes: 1024,
    };
    let mut h = [EMPTY_HEADER; 16];
    let whole = parse_response(rest, &mut h, &limits, ctx);
    let mut slots = header_slots::<16>();
    assert_eq!(
        parse_response_in(rest, &mut slots, &limits, ctx),
        whole,
        "uninit parse differs"
    );
    if let Ok(Parsed::Complete(r)) = &whole {
        let mut storage = [EMPTY_HEADER; 16];
        let kept = r.keep::<16>().expect("16 lines fit");
        assert_eq!(
            kept.head(rest, &mut storage).as_ref(),
            Some(r),
            "kept head differs"
        );
    }
    let cut = usize::from(flags >> 4) * rest.len() / 16;
    let mut h2 = [EMPTY_HEADER; 16];
    match (&whole, parse_response(&rest[..cut], &mut h2, &limits, ctx)) {
        (_, Ok(Parsed::Partial)) => {}
        (Err(a), Err(b)) => assert_eq!(*a, b),
        (Ok(Parsed::Complete(a)), Ok(Parsed::Complete(b))) => {
            assert_eq!((a.status, a.body), (b.status, b.body));
        }
        (w, p) => panic!("whole {w:?}, prefix {p:?}"),
    }
    if let Ok(Parsed::Complete(r)) = whole {
        assert!((100..=599).contains(&r.status));
        let mut out = Vec::new();
        let d = write_response_head(&r, client, &[("x-balancer-backend", b"b")], &mut out);
        let mut h3 = [EMPTY_HEADER; 32];
        let back_ctx = ResponseContext {
            head: ctx.head,
            upgrade: true,
        };
        match parse_response(&out, &mut h3, &Limits::default(), back_ctx) {
            Ok(Parsed::Complete(back)) => {
                assert_eq!(back.status, r.status);
                assert_eq!(back.version, Version::Http11);
                let want = match d.body {
                    BodyOut::PassChunked => BodyFraming::Chunked,
                    BodyOut::DecodeChunked | BodyOut::UntilClose => BodyFraming::UntilClose,
                    BodyOut::Length(n) => BodyFraming::Length(n),
                    BodyOut::None | BodyOut::Tunnel => back.body,
                };
                assert_eq!(back.body, want);
                if d.keep_alive {
                    assert!(back.body.is_delimited(), "keep-alive without a length");
                }
            }
            other => panic!("written head does not parse back: {other:?}"),
        }
    }
}
