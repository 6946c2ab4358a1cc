use core::time::Duration;

use proptest::prelude::*;

use super::*;

#[test]
fn c_grpc_2_grpc_timeout_reads_every_unit() {
    assert_eq!(parse(b"1H"), Ok(Duration::from_secs(3600)));
    assert_eq!(parse(b"2M"), Ok(Duration::from_secs(120)));
    assert_eq!(parse(b"3S"), Ok(Duration::from_secs(3)));
    assert_eq!(parse(b"300m"), Ok(Duration::from_millis(300)));
    assert_eq!(parse(b"5u"), Ok(Duration::from_micros(5)));
    assert_eq!(parse(b"99999999n"), Ok(Duration::from_nanos(99_999_999)));
    assert_eq!(parse(b"0S"), Ok(Duration::ZERO));
    assert_eq!(parse(b"00000001m"), Ok(Duration::from_millis(1)));
    assert_eq!(
        parse(b" 10S\t"),
        Ok(Duration::from_secs(10)),
        "OWS is no part of it"
    );
    assert_eq!(
        parse(b"99999999H"),
        Ok(Duration::from_secs(99_999_999 * 3600))
    );
}

#[test]
fn c_grpc_2_a_malformed_grpc_timeout_is_refused() {
    assert_eq!(parse(b""), Err(TimeoutError::Unit));
    assert_eq!(parse(b"  "), Err(TimeoutError::Unit));
    assert_eq!(parse(b"10"), Err(TimeoutError::Unit));
    assert_eq!(
        parse(b"10s"),
        Err(TimeoutError::Unit),
        "units are case-sensitive"
    );
    assert_eq!(parse(b"10ms"), Err(TimeoutError::Unit));
    assert_eq!(parse(b"S"), Err(TimeoutError::Digits));
    assert_eq!(parse(b"123456789S"), Err(TimeoutError::Digits), "9 digits");
    assert_eq!(parse(b"-1S"), Err(TimeoutError::NotADigit));
    assert_eq!(parse(b"+1S"), Err(TimeoutError::NotADigit));
    assert_eq!(parse(b"1.5S"), Err(TimeoutError::NotADigit));
    assert_eq!(parse(b"1 S"), Err(TimeoutError::NotADigit));
    assert_eq!(parse("１S".as_bytes()), Err(TimeoutError::NotADigit));
}

#[test]
fn c_grpc_2_the_remaining_time_is_written_in_the_finest_unit_that_fits() {
    let s = |d: Duration| encode(d).to_string();
    assert_eq!(s(Duration::from_nanos(1)), "1n");
    assert_eq!(s(Duration::from_millis(99)), "99000000n");
    assert_eq!(s(Duration::from_nanos(99_999_999)), "99999999n");
    assert_eq!(s(Duration::from_millis(100)), "100000u");
    assert_eq!(
        s(Duration::from_nanos(299_123_999)),
        "299123u",
        "rounded down"
    );
    assert_eq!(s(Duration::from_secs(5)), "5000000u");
    assert_eq!(s(Duration::from_secs(100)), "100000m");
    assert_eq!(s(Duration::from_secs(100_000)), "100000S");
    assert_eq!(s(Duration::from_secs(100_000_000)), "1666666M");
    assert_eq!(s(Duration::from_secs(6_000_000_000)), "1666666H");
    assert_eq!(s(Duration::ZERO), "0n");
    assert_eq!(s(Duration::MAX), "99999999H");
}

proptest! {
    /// Any value of the wire format parses to digits × unit, and nothing that breaks it does.
    #[test]
    fn c_grpc_2_parse_reads_exactly_the_wire_format(
        digits in "[0-9]{1,8}",
        unit_byte in proptest::sample::select(b"HMSmun".to_vec()),
    ) {
        let n: u64 = digits.parse().unwrap_or(0);
        let mut v = digits.clone().into_bytes();
        v.push(unit_byte);
        let per = unit(unit_byte).unwrap_or(Duration::ZERO);
        prop_assert_eq!(parse(&v), Ok(per * u32::try_from(n).unwrap_or(0)));
        let mut long = v.clone();
        long.insert(0, b'1');
        if digits.len() == 8 {
            prop_assert_eq!(parse(&long), Err(TimeoutError::Digits));
        }
    }

    /// Arbitrary bytes never panic, and whatever parses is within 99,999,999 hours.
    #[test]
    fn c_grpc_2_parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..16)) {
        if let Ok(d) = parse(&bytes) {
            prop_assert!(d <= Duration::from_secs(99_999_999 * 3600));
        }
    }

    /// The value sent never says more than remains, is zero only when nothing remains, fits 8
    /// digits, and reads back as what it says.
    #[test]
    fn c_grpc_2_the_value_sent_never_exceeds_what_remains(nanos in any::<u64>(), secs in 0u64..(1 << 38)) {
        for remaining in [Duration::from_nanos(nanos), Duration::new(secs, 0), Duration::new(secs, (nanos % 1_000_000_000) as u32)] {
            let t = encode(remaining);
            prop_assert!(t.duration() <= remaining, "{} for {:?}", t, remaining);
            prop_assert_eq!(t.value() == 0, remaining.is_zero());
            let text = t.to_string();
            let bytes = t.to_bytes();
            prop_assert_eq!(bytes.as_bytes(), text.as_bytes());
            prop_assert!(text.len() <= 9, "{}", text);
            prop_assert_eq!(parse(text.as_bytes()), Ok(t.duration()));
            // Rounded down in its unit, and no finer unit would have fitted: so within one unit
            // of what remains.
            let per = unit(t.unit()).unwrap_or(Duration::ZERO);
            prop_assert!(remaining - t.duration() < per, "{} for {:?}", t, remaining);
        }
    }
}
