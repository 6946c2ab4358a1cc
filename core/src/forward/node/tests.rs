use super::*;

#[test]
fn c_fwd_1_node_forms() {
    let v4: IpAddr = "192.0.2.1".parse().expect("ip");
    let v6: IpAddr = "2001:db8::1".parse().expect("ip");
    let ok: &[(&str, IpAddr)] = &[
        ("192.0.2.1", v4),
        ("192.0.2.1:8080", v4),
        ("192.0.2.1:0", v4),
        ("192.0.2.1:65535", v4),
        ("192.0.2.1:_obf", v4),
        ("2001:db8::1", v6),
        ("[2001:db8::1]", v6),
        ("[2001:db8::1]:443", v6),
        ("[2001:db8::1]:_x.y-z", v6),
        ("::ffff:192.0.2.1", v4),
        ("[::ffff:192.0.2.1]:80", v4),
    ];
    for (text, want) in ok {
        assert_eq!(parse_node(text.as_bytes()), Some(*want), "{text}");
    }
    let bad = [
        "",
        "unknown",
        "_hidden",
        "example.com",
        "192.0.2.1:",
        "192.0.2.1:65536",
        "192.0.2.1:123456",
        "192.0.2.1:_",
        "192.0.2.1:-1",
        "[192.0.2.1]",
        "[2001:db8::1",
        "[2001:db8::1]x",
        "[2001:db8::1]:",
        "fe80::1%eth0",
        "2001:db8::1:80x",
        "1.2.3",
        "1.2.3.4.5",
        "01.2.3.4",
        " 1.2.3.4",
        "[[::1]]",
        "::ffff:1.2.3.4:80",
    ];
    for text in bad {
        assert_eq!(parse_node(text.as_bytes()), None, "{text}");
    }
    assert_eq!(parse_node(&[b'1'; 200]), None);
    assert_eq!(parse_node(b"\xff1.2.3.4"), None);
}
