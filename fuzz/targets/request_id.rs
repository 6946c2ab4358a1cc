//! C-PATH-3: request-id validation and the id in force, on arbitrary bytes.

use http::{HeaderMap, HeaderValue};
use weir_core::WyRand;
use weir_core::request_id::{self, RequestId};

pub fn run(data: &[u8]) {
    let valid = !data.is_empty()
        && data.len() <= 128
        && data
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(b));
    let parsed = RequestId::parse(data);
    assert_eq!(
        parsed.is_some(),
        valid,
        "parse accepts exactly the valid ids"
    );
    if let Some(id) = parsed {
        assert_eq!(id.as_bytes(), data);
    }
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_bytes(data) {
        headers.insert("x-request-id", v);
    }
    let (id, origin) =
        request_id::request_id_in_force(&headers, &mut WyRand::new(data.len() as u64));
    assert!(
        RequestId::parse(id.as_bytes()).is_some(),
        "the id in force is always valid"
    );
    if origin.is_kept() {
        assert_eq!(id.as_bytes(), data);
    } else {
        assert_eq!(id.len(), 32);
    }
}
