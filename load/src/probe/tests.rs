use super::*;

#[test]
fn reads_status_and_rate_limit_headers() {
    let a = parse_head(
        "HTTP/1.1 429 Too Many Requests\r\nX-RateLimit-Storage: local\r\nx-ratelimit-degraded: true",
    );
    assert_eq!(
        (a.status, a.storage.as_str(), a.degraded.as_str()),
        (429, "local", "true")
    );
    let none = parse_head("");
    assert_eq!((none.status, none.storage.as_str()), (0, "-"));
}
