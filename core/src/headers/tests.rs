use super::HeaderLines;
use crate::h1::Header;
use http::{HeaderMap, HeaderName, HeaderValue};

/// Both sides of the seam give the same lines for the same head.
#[test]
fn a_flat_list_reads_like_a_map() {
    let list = [
        Header {
            name: "Host",
            value: b"a",
        },
        Header {
            name: "X-Forwarded-For",
            value: b"1.1.1.1",
        },
        Header {
            name: "x-forwarded-for",
            value: b"2.2.2.2, 3.3.3.3",
        },
    ];
    let mut map = HeaderMap::new();
    for h in &list {
        map.append(
            HeaderName::from_bytes(h.name.as_bytes()).unwrap(),
            HeaderValue::from_bytes(h.value).unwrap(),
        );
    }
    let xff = HeaderName::from_static("x-forwarded-for");
    let flat: Vec<&[u8]> = list[..].lines(&xff).collect();
    let mapped: Vec<&[u8]> = map.lines(&xff).collect();
    assert_eq!(flat, mapped);
    assert_eq!(flat, [&b"1.1.1.1"[..], b"2.2.2.2, 3.3.3.3"]);
    let rev: Vec<&[u8]> = list[..].lines(&xff).rev().collect();
    assert_eq!(rev, [&b"2.2.2.2, 3.3.3.3"[..], b"1.1.1.1"]);
    let host = HeaderName::from_static("host");
    assert_eq!(list[..].first_line(&host), Some(&b"a"[..]));
    assert_eq!(map.first_line(&host), Some(&b"a"[..]));
    let absent = HeaderName::from_static("x-request-id");
    assert_eq!(list[..].first_line(&absent), None);
    assert_eq!(map.first_line(&absent), None);
}

/// `is_name` answers as `eq_ignore_ascii_case` for every name weir compares with it: each
/// byte of the name replaced by each of the 256 byte values, any case, other lengths.
#[test]
fn is_name_is_eq_ignore_ascii_case() {
    fn check<const N: usize>(lower: &[u8; N]) {
        assert!(
            lower
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-'),
            "{lower:?}"
        );
        let mut name = *lower;
        for i in 0..N {
            for b in 0..=255u8 {
                name[i] = b;
                assert_eq!(
                    super::is_name(&name, lower),
                    name.eq_ignore_ascii_case(lower),
                    "{name:?}"
                );
            }
            name[i] = lower[i].to_ascii_uppercase();
        }
        assert!(super::is_name(&name, lower), "{name:?}");
        assert!(!super::is_name(&name[..N - 1], lower));
        assert!(!super::is_name(&[lower.as_slice(), b"x"].concat(), lower));
    }
    check(b"host");
    check(b"expect");
    check(b"upgrade");
    check(b"connection");
    check(b"content-length");
    check(b"transfer-encoding");
    check(b"te");
    check(b"trailer");
    check(b"keep-alive");
    check(b"http2-settings");
    check(b"proxy-connection");
}
