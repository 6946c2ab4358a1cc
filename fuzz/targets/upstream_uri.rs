//! C-PATH-5: upstream URI building from a backend base URL and a raw request target.

use http::Method;
use weir_core::upstream::BackendBase;

pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (base, target) = text
        .split_once('\u{0}')
        .unwrap_or(("http://127.0.0.1:8080", text));
    let Ok(base) = BackendBase::parse(base) else {
        return;
    };
    for method in [Method::GET, Method::OPTIONS] {
        let Ok(uri) = base.upstream_uri(&method, target) else {
            continue;
        };
        if target.starts_with('/') && !target.contains('#') {
            let pq = uri.path_and_query().map_or("", |p| p.as_str());
            assert!(
                pq.ends_with(target),
                "{pq:?} does not keep {target:?} byte for byte"
            );
            assert!(pq.starts_with(base.path_prefix()));
        }
    }
}
