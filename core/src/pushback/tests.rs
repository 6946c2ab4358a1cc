use core::time::Duration;

use http::HeaderMap;

use super::*;

/// 1994-11-06T08:49:37Z, RFC 9110's example date.
const EXAMPLE: u64 = 784_111_777;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[test]
fn c_retry_11_delta_seconds() {
    assert_eq!(retry_after(b"2", secs(0)), Some(secs(2)));
    assert_eq!(retry_after(b" 120 ", secs(EXAMPLE)), Some(secs(120)));
    // Zero asks for nothing.
    assert_eq!(retry_after(b"0", secs(0)), None);
    // Too large for u64: as long as can be said (the pool caps it).
    assert_eq!(
        retry_after(b"99999999999999999999999", secs(0)),
        Some(secs(u64::MAX))
    );
}

#[test]
fn c_retry_11_the_three_http_date_forms() {
    for form in [
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994",
    ] {
        assert_eq!(
            http_date(form.as_bytes(), secs(EXAMPLE)),
            Some(EXAMPLE),
            "{form}"
        );
        assert_eq!(
            retry_after(form.as_bytes(), secs(EXAMPLE - 5)),
            Some(secs(5)),
            "{form}"
        );
    }
    // The wall clock's fraction of a second counts.
    assert_eq!(
        retry_after(
            b"Sun, 06 Nov 1994 08:49:37 GMT",
            secs(EXAMPLE - 1) + Duration::from_millis(250)
        ),
        Some(Duration::from_millis(750))
    );
}

#[test]
fn c_retry_11_a_date_not_in_the_future_asks_for_nothing() {
    let date = b"Sun, 06 Nov 1994 08:49:37 GMT";
    assert_eq!(retry_after(date, secs(EXAMPLE)), None);
    assert_eq!(retry_after(date, secs(EXAMPLE + 3600)), None);
}

#[test]
fn c_retry_11_rfc850_years_are_placed_near_the_wall_clock() {
    // In 2026, "94" is 1994 (2094 is more than 50 years ahead) and "30" is 2030.
    let wall = secs(1_796_000_000); // 2026-12
    assert_eq!(
        http_date(b"Sunday, 06-Nov-94 08:49:37 GMT", wall),
        Some(EXAMPLE)
    );
    let in_2030 = http_date(b"Wednesday, 06-Nov-30 08:49:37 GMT", wall).unwrap();
    assert_eq!(imf_fixdate_of(in_2030), "Wed, 06 Nov 2030 08:49:37 GMT");
}

#[test]
fn c_retry_11_malformed_values_are_ignored() {
    for bad in [
        "",
        " ",
        "-1",
        "1.5",
        "2s",
        "+2",
        "0x10",
        "Sun, 06 Nov 1994 08:49:37 UTC",
        "Sun, 6 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 94 08:49:37 GMT",
        "Sun, 31 Nov 1994 08:49:37 GMT",
        "Sun, 29 Feb 1995 08:49:37 GMT",
        "Sun, 06 Nov 1994 24:00:00 GMT",
        "Sun, 06 Nov 1994 08:60:00 GMT",
        "Sun, 06 Nov 1994 08:49:37 GMT x",
        "Xyz, 06 Nov 1994 08:49:37 GMT",
        "Sun, 06 Foo 1994 08:49:37 GMT",
        "Sunday, 06-Nov-1994 08:49:37 GMT",
        "Sun Nov 6 08:49:37 1994",
        "Sun, 01 Jan 1960 00:00:00 GMT",
    ] {
        assert_eq!(retry_after(bad.as_bytes(), secs(0)), None, "{bad:?}");
    }
    // A leap day and a leap second are dates.
    assert!(http_date(b"Thu, 29 Feb 2024 23:59:60 GMT", secs(0)).is_some());
}

#[test]
fn c_retry_11_only_a_503_pushes_back() {
    let mut h = HeaderMap::new();
    h.insert("retry-after", "3".parse().unwrap());
    assert_eq!(requested(503, &h, secs(0)), Some(secs(3)));
    for status in [200, 429, 500, 502, 504] {
        assert_eq!(requested(status, &h, secs(0)), None, "{status}");
    }
    assert_eq!(requested(503, &HeaderMap::new(), secs(0)), None);
    // The first field line is the one read.
    h.append("retry-after", "9".parse().unwrap());
    assert_eq!(requested(503, &h, secs(0)), Some(secs(3)));
}

#[test]
fn imf_fixdate_of_known_instants() {
    assert_eq!(imf_fixdate_of(0), "Thu, 01 Jan 1970 00:00:00 GMT");
    assert_eq!(imf_fixdate_of(EXAMPLE), "Sun, 06 Nov 1994 08:49:37 GMT");
    assert_eq!(imf_fixdate_of(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
}
