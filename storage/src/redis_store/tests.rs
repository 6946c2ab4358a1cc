use std::net::IpAddr;

use weir_core::rate::KeyParams;

use super::bucket_key;

/// C-RATE-2: the key written by hand is the key's `Display` after the prefix, for IPv4
/// networks of every digit count and prefix length, and for IPv6.
#[test]
fn c_rate_2_bucket_key_is_the_display_form() {
    let params = [
        KeyParams::default(),
        KeyParams::new(24, 64).expect("valid"),
        KeyParams::new(8, 48).expect("valid"),
        KeyParams::new(1, 1).expect("valid"),
        KeyParams::new(32, 128).expect("valid"),
    ];
    let addrs = [
        "0.0.0.0",
        "9.9.9.9",
        "10.0.0.1",
        "99.100.199.200",
        "203.0.113.77",
        "255.255.255.255",
        "::1",
        "2001:db8::1",
        "2001:db8:1:2:3:4:5:6",
        "::ffff:10.1.2.3",
    ];
    for p in &params {
        for a in addrs {
            let key = p.key(a.parse::<IpAddr>().expect("address"));
            assert_eq!(bucket_key("weir:rl:", key), format!("weir:rl:{key}"), "{a}");
            assert_eq!(bucket_key("", key), key.to_string(), "{a}");
        }
    }
}
