//! C-POOL: the HTTP/1 idle pools' backend key.

use super::*;

/// Keys are equal exactly when their URLs are, whether or not they share the allocation (a
/// reload builds new targets for the same backends): the pools keyed by [`PoolKey`] group
/// connections as the pools keyed by the URL string did.
#[test]
fn pool_keys_are_equal_exactly_when_the_urls_are() {
    let urls = [
        "http://a:80",
        "http://a:81",
        "http://b:80",
        "https://a:80",
        "http://a:80/x",
        "",
    ];
    for x in urls {
        for y in urls {
            let (kx, ky) = (PoolKey::new(x), PoolKey::new(y));
            assert_eq!(kx == ky, x == y, "{x:?} {y:?}");
            let copy = PoolKey::from(&ky);
            assert_eq!(kx == copy, x == y, "{x:?} {y:?}");
        }
        let k = PoolKey::new(x);
        assert_eq!(PoolKey::from(&k), k);
    }
    let mut pool =
        weir_core::idle_pool::IdlePool::<u32, PoolKey>::new(weir_core::idle_pool::IdleParams {
            per_host: 4,
            total: 16,
            timeout: None,
            window: Duration::from_secs(10),
        });
    let now = weir_core::Instant::ZERO;
    pool.handle_opened(&PoolKey::new("http://a:80"), now);
    assert_eq!(pool.release(&PoolKey::new("http://a:80"), 1, now), None);
    assert_eq!(pool.checkout(&PoolKey::new("http://a:81"), now), None);
    assert_eq!(pool.checkout(&PoolKey::new("http://a:80"), now), Some(1));
}
