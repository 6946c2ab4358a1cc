use super::*;

#[derive(Debug, thiserror::Error)]
#[error("cannot build the store")]
struct Outer(#[source] Middle);

#[derive(Debug, thiserror::Error)]
#[error("redis")]
struct Middle(#[source] std::io::Error);

#[test]
fn every_level_once_in_order() {
    let e = Outer(Middle(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        "connection refused",
    )));
    assert_eq!(
        chain(&e).to_string(),
        "cannot build the store: redis: connection refused"
    );
}

#[test]
fn an_error_without_a_source_is_itself() {
    let e = std::io::Error::other("alone");
    assert_eq!(chain(&e).to_string(), "alone");
}
