use super::*;

#[test]
fn times_convert_to_unix_seconds() {
    assert_eq!(parse_time(UTC_TIME, b"700101000000Z"), Some(0));
    assert_eq!(parse_time(UTC_TIME, b"000301000000Z"), Some(951_868_800));
    assert_eq!(
        parse_time(GENERALIZED_TIME, b"20380119031408Z"),
        Some(2_147_483_648)
    );
    assert_eq!(parse_time(UTC_TIME, b"491231235959Z"), Some(2_524_607_999));
    assert_eq!(parse_time(UTC_TIME, b"7001010000Z"), None);
    assert_eq!(parse_time(UTC_TIME, b"701301000000Z"), None);
    assert_eq!(parse_time(GENERALIZED_TIME, b"700101000000Z"), None);
}

#[test]
fn garbage_is_none() {
    for bad in [
        &[][..],
        &[0x30],
        &[0x30, 0x85, 1, 2, 3, 4, 5],
        &[0x30, 0x05, 0x30],
    ] {
        assert_eq!(not_after(&CertificateDer::from(bad.to_vec())), None);
    }
}
