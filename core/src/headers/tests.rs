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
