use proptest::prelude::*;

use super::*;

/// A response body: prefix and `status = n` (left out when 0, as proto3 encoders do).
fn response(n: u64) -> Vec<u8> {
    let mut m = Vec::new();
    if n != 0 {
        m.push(0x08); // field 1, varint
        put_varint(&mut m, n);
    }
    let mut out = vec![0];
    out.extend_from_slice(&(m.len() as u32).to_be_bytes());
    out.extend_from_slice(&m);
    out
}

#[test]
fn c_grpc_4_request_for_the_whole_server_is_an_empty_message() {
    assert_eq!(encode_request(""), vec![0, 0, 0, 0, 0]);
}

#[test]
fn c_grpc_4_request_names_the_service_in_field_1() {
    let body = encode_request("pkg.Echo");
    assert_eq!(&body[..5], &[0, 0, 0, 0, 10]);
    assert_eq!(body[5], 0x0A);
    assert_eq!(body[6], 8);
    assert_eq!(&body[7..], b"pkg.Echo");
    // A name of 200 bytes takes a two-byte varint length.
    let long = "s".repeat(200);
    let body = encode_request(&long);
    assert_eq!(&body[5..8], &[0x0A, 0xC8, 0x01]);
    assert_eq!(
        u32::from_be_bytes([body[1], body[2], body[3], body[4]]),
        203
    );
}

#[test]
fn c_grpc_4_each_serving_status_decodes() {
    for (n, want) in [
        (0, ServingStatus::Unknown),
        (1, ServingStatus::Serving),
        (2, ServingStatus::NotServing),
        (3, ServingStatus::ServiceUnknown),
        (300, ServingStatus::Other(300)),
    ] {
        let body = response(n);
        assert_eq!(check_result(200, Some(b"0"), None, &body), Ok(want), "{n}");
    }
}

#[test]
fn c_grpc_4_only_serving_with_grpc_status_ok_is_a_success() {
    let serving = response(1);
    assert_eq!(
        check_result(200, Some(b" 0 "), None, &serving),
        Ok(ServingStatus::Serving)
    );
    assert_eq!(
        check_result(503, Some(b"0"), None, &serving),
        Err(CheckError::HttpStatus(503))
    );
    // Trailers-only UNIMPLEMENTED: a server without the health service.
    assert_eq!(
        check_result(200, Some(b"12"), Some(b"unknown%20service"), &[]),
        Err(CheckError::GrpcStatus {
            code: 12,
            message: Some("unknown%20service".to_owned())
        })
    );
    assert_eq!(
        check_result(200, None, None, &serving),
        Err(CheckError::MissingGrpcStatus)
    );
    assert_eq!(
        check_result(200, Some(b"ok"), None, &serving),
        Err(CheckError::BadGrpcStatus)
    );
    assert_eq!(
        check_result(200, Some(b"0"), None, &[]),
        Err(CheckError::Frame(FrameError::Empty))
    );
}

#[test]
fn c_grpc_4_framing_errors() {
    assert_eq!(unframe(&[0, 0, 0]), Err(FrameError::Truncated));
    assert_eq!(unframe(&[0, 0, 0, 0, 2, 8]), Err(FrameError::Truncated));
    assert_eq!(unframe(&[0, 0, 0, 0, 1, 8, 1]), Err(FrameError::Trailing));
    assert_eq!(unframe(&[1, 0, 0, 0, 2, 8, 1]), Err(FrameError::Compressed));
    assert_eq!(unframe(&[0, 0, 0, 0, 2, 8, 1]), Ok(&[8u8, 1][..]));
}

#[test]
fn c_grpc_4_unknown_fields_are_skipped_and_the_last_status_wins() {
    // field 2 varint, field 3 bytes, field 4 fixed64, field 5 fixed32, then status 1.
    let m = [
        0x10, 0x96, 0x01, // 2: varint 150
        0x1A, 0x02, b'h', b'i', // 3: "hi"
        0x21, 1, 2, 3, 4, 5, 6, 7, 8, // 4: fixed64
        0x2D, 1, 2, 3, 4, // 5: fixed32
        0x08, 0x02, // status NOT_SERVING
        0x08, 0x01, // status SERVING (the last one wins)
    ];
    assert_eq!(decode_response(&m), Ok(ServingStatus::Serving));
}

#[test]
fn c_grpc_4_malformed_messages_are_errors() {
    assert_eq!(decode_response(&[0x08]), Err(DecodeError::Varint));
    assert_eq!(decode_response(&[0x08, 0x80]), Err(DecodeError::Varint));
    assert_eq!(
        decode_response(&[0x0A, 0x01, 0x01]),
        Err(DecodeError::StatusType)
    );
    assert_eq!(
        decode_response(&[0x1A, 0x05, b'a']),
        Err(DecodeError::Truncated)
    );
    assert_eq!(decode_response(&[0x21, 1, 2]), Err(DecodeError::Truncated));
    assert_eq!(decode_response(&[0x1B]), Err(DecodeError::WireType(3)));
    assert_eq!(decode_response(&[0x1E]), Err(DecodeError::WireType(6)));
    // An 11-byte varint.
    let long = [
        0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01,
    ];
    assert_eq!(decode_response(&long), Err(DecodeError::Varint));
}

proptest! {
    /// Network bytes never panic the decoder.
    #[test]
    fn c_grpc_4_any_body_decodes_or_errs(body in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = check_result(200, Some(b"0"), None, &body);
    }

    /// Every status number round-trips through the wire format.
    #[test]
    fn c_grpc_4_status_round_trips(n in any::<u64>()) {
        prop_assert_eq!(
            check_result(200, Some(b"0"), None, &response(n)),
            Ok(ServingStatus::from_number(n))
        );
    }

    /// The request's length prefix is the message's length, and the name is its tail.
    #[test]
    fn c_grpc_4_request_prefix_matches(service in "[a-zA-Z0-9._]{0,300}") {
        let body = encode_request(&service);
        let message = unframe(&body).expect("one message");
        prop_assert!(message.ends_with(service.as_bytes()));
    }
}
