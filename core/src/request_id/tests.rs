//! Tests for the request id (C-PATH-3).

use http::{HeaderMap, HeaderValue};
use proptest::prelude::*;

use super::*;
use crate::{Rng, WyRand};

fn headers(lines: &[&[u8]]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for l in lines {
        h.append(
            X_REQUEST_ID,
            HeaderValue::from_bytes(l).expect("test value"),
        );
    }
    h
}

fn is_generated_shape(id: &RequestId) -> bool {
    id.len() == GENERATED_LEN
        && id
            .as_bytes()
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

#[test]
fn c_path_3_table() {
    let long_ok = "a".repeat(128);
    let too_long = "a".repeat(129);
    let cases: &[(&[u8], bool)] = &[
        (b"abc", true),
        (b"A", true),
        (b"0", true),
        (b"550e8400-e29b-41d4-a716-446655440000", true),
        (b"Root:1.2_3-4", true),
        (long_ok.as_bytes(), true),
        (too_long.as_bytes(), false),
        (b"", false),
        (b"a b", false),
        (b"a/b", false),
        (b"a=b", false),
        (b"a;b", false),
        (b"\xc3\xa9", false),
        (b"a\tb", false),
        (b"<script>", false),
    ];
    for (input, valid) in cases {
        assert_eq!(
            RequestId::parse(input).is_some(),
            *valid,
            "{:?}",
            String::from_utf8_lossy(input)
        );
        if *valid {
            assert_eq!(
                RequestId::parse(input).map(|i| i.as_bytes().to_vec()),
                Some(input.to_vec())
            );
        }
    }
}

#[test]
fn c_path_3_in_force_keeps_valid_and_replaces_the_rest() {
    let mut rng = WyRand::new(1);
    let (id, origin) = request_id_in_force(&headers(&[b"req-1"]), &mut rng);
    assert_eq!((id.as_str(), origin), ("req-1", IdOrigin::Kept));

    let (id, origin) = request_id_in_force(&HeaderMap::new(), &mut rng);
    assert_eq!(origin, IdOrigin::Generated(Replaced::Absent));
    assert!(is_generated_shape(&id), "{id}");

    let (id, origin) = request_id_in_force(&headers(&[b"bad id"]), &mut rng);
    assert_eq!(origin, IdOrigin::Generated(Replaced::Invalid));
    assert!(is_generated_shape(&id));

    let (id, origin) = request_id_in_force(&headers(&[b""]), &mut rng);
    assert_eq!(origin, IdOrigin::Generated(Replaced::Invalid));
    assert!(is_generated_shape(&id));

    let (id, origin) = request_id_in_force(&headers(&[b"a", b"b"]), &mut rng);
    assert_eq!(origin, IdOrigin::Generated(Replaced::Repeated));
    assert!(is_generated_shape(&id));
    assert!(!origin.is_kept());
}

/// C-PATH-3 bounded input: a 1 MiB id is replaced by a fresh one.
#[test]
fn c_path_3_one_mebibyte_id_is_replaced() {
    let huge = vec![b'a'; 1 << 20];
    let mut rng = WyRand::new(2);
    let (id, origin) = request_id_in_force(&headers(&[&huge]), &mut rng);
    assert_eq!(origin, IdOrigin::Generated(Replaced::Invalid));
    assert!(is_generated_shape(&id));
}

#[test]
fn c_path_3_set_replaces_every_client_line() {
    let mut h = headers(&[b"x", b"y"]);
    let id = RequestId::parse(b"mine").expect("valid");
    set_request_id(&mut h, &id);
    let all: Vec<_> = h.get_all(X_REQUEST_ID).iter().collect();
    assert_eq!(all, vec![&HeaderValue::from_static("mine")]);
}

#[test]
fn c_path_3_generated_ids_differ_and_are_deterministic_per_seed() {
    let a = RequestId::generate(&mut WyRand::new(9));
    let b = RequestId::generate(&mut WyRand::new(9));
    assert_eq!(a, b);
    let mut rng = WyRand::new(9);
    let first = RequestId::generate(&mut rng);
    let second = RequestId::generate(&mut rng);
    assert_ne!(first, second);
    assert_eq!(
        format!("{first:?}"),
        format!("RequestId({:?})", first.as_str())
    );
}

fn reference_valid(bytes: &[u8]) -> bool {
    (1..=128).contains(&bytes.len())
        && bytes.iter().all(|&b| {
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-".contains(&b)
        })
}

proptest! {
    /// A generated id is its two draws in hex, most significant nibble first (`hex8` against
    /// `format!`).
    #[test]
    fn generated_id_is_the_draws_in_hex(seed in any::<u64>()) {
        let (mut a, mut b) = (WyRand::new(seed), WyRand::new(seed));
        let id = RequestId::generate(&mut a);
        let expected = format!("{:016x}{:016x}", b.next_u64(), b.next_u64());
        prop_assert_eq!(id.as_str(), expected.as_str());
    }

    /// C-PATH-3: parse accepts exactly 1–128 bytes of `[A-Za-z0-9._:-]` and keeps them verbatim.
    #[test]
    fn c_path_3_parse_accepts_exactly_the_alphabet(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let parsed = RequestId::parse(&bytes);
        prop_assert_eq!(parsed.is_some(), reference_valid(&bytes));
        if let Some(id) = parsed {
            prop_assert_eq!(id.as_bytes(), &bytes[..]);
            prop_assert_eq!(id.as_str().as_bytes(), &bytes[..]);
            let value = id.to_header_value();
            prop_assert_eq!(value.as_bytes(), &bytes[..]);
        }
    }

    /// C-PATH-3: ids drawn from the alphabet with lengths around the bounds.
    #[test]
    fn c_path_3_parse_alphabet_lengths(s in "[A-Za-z0-9._:-]{0,140}") {
        prop_assert_eq!(RequestId::parse(s.as_bytes()).is_some(), (1..=128).contains(&s.len()));
    }

    /// C-PATH-3: every generated id is 32 lower-case hex characters and is itself a valid id.
    #[test]
    fn c_path_3_generated_ids_are_valid_hex(seed in any::<u64>()) {
        let id = RequestId::generate(&mut WyRand::new(seed));
        prop_assert!(is_generated_shape(&id));
        prop_assert_eq!(RequestId::parse(id.as_bytes()), Some(id));
    }

    /// C-PATH-3: the id in force is the client's exactly when one valid line was sent.
    #[test]
    fn c_path_3_in_force_matches_reference(
        lines in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..140), 0..3),
        seed in any::<u64>(),
    ) {
        let mut h = HeaderMap::new();
        let mut sent = Vec::new();
        for l in &lines {
            if let Ok(v) = HeaderValue::from_bytes(l) {
                h.append(X_REQUEST_ID, v);
                sent.push(l.clone());
            }
        }
        let (id, origin) = request_id_in_force(&h, &mut WyRand::new(seed));
        let keep = sent.len() == 1 && reference_valid(&sent[0]);
        prop_assert_eq!(origin.is_kept(), keep);
        if keep {
            prop_assert_eq!(id.as_bytes(), &sent[0][..]);
        } else {
            prop_assert!(is_generated_shape(&id));
        }
    }
}
