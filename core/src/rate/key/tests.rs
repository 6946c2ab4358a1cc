use super::*;
use proptest::prelude::*;

fn kp(v4: u8, v6: u8) -> KeyParams {
    KeyParams::new(v4, v6).expect("valid prefix lengths")
}

fn v4(s: &str) -> IpAddr {
    IpAddr::V4(s.parse().expect("test address"))
}

fn v6(s: &str) -> IpAddr {
    IpAddr::V6(s.parse().expect("test address"))
}

#[test]
fn params_are_validated() {
    assert_eq!(KeyParams::new(0, 64), Err(KeyError::Ipv4PrefixBits(0)));
    assert_eq!(KeyParams::new(33, 64), Err(KeyError::Ipv4PrefixBits(33)));
    assert_eq!(KeyParams::new(32, 0), Err(KeyError::Ipv6PrefixBits(0)));
    assert_eq!(KeyParams::new(32, 129), Err(KeyError::Ipv6PrefixBits(129)));
    assert_eq!(KeyParams::new(32, 64), Ok(KeyParams::default()));
    assert!(KeyParams::new(1, 1).is_ok());
    assert!(KeyParams::new(32, 128).is_ok());
    assert_eq!(
        KeyError::Ipv6PrefixBits(129).to_string(),
        "ipv6_prefix_bits must be in 1..=128, got 129"
    );
}

#[test]
fn key_is_small() {
    assert_eq!(core::mem::size_of::<ClientKey>(), 18);
    assert_eq!(core::mem::align_of::<ClientKey>(), 1);
}

#[test]
fn c_rate_2_display_is_the_network_in_cidr_form() {
    let p = KeyParams::default();
    assert_eq!(p.key(v4("203.0.113.7")).to_string(), "203.0.113.7/32");
    assert_eq!(
        p.key(v6("2001:db8:1:2:aaaa:bbbb:cccc:dddd")).to_string(),
        "2001:db8:1:2::/64"
    );
    let p = kp(24, 48);
    assert_eq!(p.key(v4("203.0.113.7")).to_string(), "203.0.113.0/24");
    assert_eq!(
        p.key(v6("2001:db8:1:2:aaaa:bbbb:cccc:dddd")).to_string(),
        "2001:db8:1::/48"
    );
    assert_eq!(
        format!("{:?}", p.key(v4("10.1.2.3"))),
        "ClientKey(10.1.2.0/24)"
    );
    let p = kp(1, 1);
    assert_eq!(p.key(v4("203.0.113.7")).to_string(), "128.0.0.0/1");
    assert_eq!(p.key(v6("7fff::1")).to_string(), "::/1");
    let p = kp(32, 128);
    assert_eq!(p.key(v6("2001:db8::1")).to_string(), "2001:db8::1/128");
}

#[test]
fn c_rate_2_ipv4_mapped_is_unmapped() {
    let p = kp(24, 64);
    let mapped = p.key(v6("::ffff:198.51.100.9"));
    assert_eq!(mapped, p.key(v4("198.51.100.200")));
    assert!(mapped.is_ipv4());
    assert_eq!(mapped.to_string(), "198.51.100.0/24");
    // IPv4-compatible (deprecated) and NAT64 addresses stay IPv6.
    assert!(!p.key(v6("::198.51.100.9")).is_ipv4());
    assert!(!p.key(v6("64:ff9b::198.51.100.9")).is_ipv4());
}

#[test]
fn c_rate_2_families_and_prefixes_never_alias() {
    // 0.0.0.0/32 vs ::/128: same address bits (all zero), different family.
    let p = kp(32, 128);
    assert_ne!(p.key(v4("0.0.0.0")), p.key(v6("::")));
    // The same bits under different prefix lengths are different keys.
    assert_ne!(
        kp(32, 56).key(v6("2001:db8::")),
        kp(32, 64).key(v6("2001:db8::"))
    );
}

fn ipv6_not_mapped() -> impl Strategy<Value = u128> {
    any::<u128>().prop_filter("not IPv4-mapped", |a| {
        Ipv6Addr::from(*a).to_ipv4_mapped().is_none()
    })
}

fn v6key(p: &KeyParams, a: u128) -> ClientKey {
    p.key(IpAddr::V6(Ipv6Addr::from(a)))
}

fn v4key(p: &KeyParams, x: u32) -> ClientKey {
    p.key(IpAddr::V4(Ipv4Addr::from(x)))
}

proptest! {
    /// C-RATE-2: two IPv6 addresses sharing their first 64 bits are one key (the default
    /// /64); differing there, two keys.
    #[test]
    fn c_rate_2_ipv6_aggregates_to_the_64(
        a in ipv6_not_mapped(),
        host in any::<u64>(),
        flip in 0u32..64,
    ) {
        let p = KeyParams::default();
        let same_net = (a & !u128::from(u64::MAX)) | u128::from(host);
        prop_assume!(Ipv6Addr::from(same_net).to_ipv4_mapped().is_none());
        let ka = v6key(&p, a);
        prop_assert_eq!(ka, v6key(&p, same_net));
        let other_net = a ^ (1u128 << (64 + flip));
        prop_assume!(Ipv6Addr::from(other_net).to_ipv4_mapped().is_none());
        prop_assert_ne!(ka, v6key(&p, other_net));
    }

    /// C-RATE-2: for any prefix lengths, two addresses are one key iff they agree on the
    /// prefix bits, and the key's network is the address with the host bits cleared.
    /// `b` is `a` with random host bits changed and, half of the time, one prefix bit.
    #[test]
    fn c_rate_2_key_is_the_masked_prefix(
        a in ipv6_not_mapped(),
        noise in any::<u128>(),
        bits in 1u8..=128,
        v4bits in 1u8..=32,
        x in any::<u32>(),
        noise4 in any::<u32>(),
        flip_net in any::<bool>(),
        which in any::<u32>(),
    ) {
        let p = kp(v4bits, bits);
        let host = 128 - u32::from(bits);
        let host_mask = if host == 0 { 0 } else { u128::MAX >> (128 - host) };
        let mut b = a ^ (noise & host_mask);
        if flip_net {
            b ^= 1u128 << (host + which % u32::from(bits));
        }
        prop_assume!(Ipv6Addr::from(b).to_ipv4_mapped().is_none());
        let (ka, kb) = (v6key(&p, a), v6key(&p, b));
        prop_assert_eq!(ka == kb, !flip_net);
        prop_assert_eq!(ka.network(), IpAddr::V6(Ipv6Addr::from(a & !host_mask)));
        prop_assert_eq!(ka.prefix_bits(), bits);

        let host4 = 32 - u32::from(v4bits);
        let host_mask4 = if host4 == 0 { 0 } else { u32::MAX >> (32 - host4) };
        let mut y = x ^ (noise4 & host_mask4);
        if flip_net {
            y ^= 1u32 << (host4 + which % u32::from(v4bits));
        }
        let (kx, ky) = (v4key(&p, x), v4key(&p, y));
        prop_assert_eq!(kx == ky, !flip_net);
        prop_assert_eq!(kx.network(), IpAddr::V4(Ipv4Addr::from(x & !host_mask4)));
        prop_assert_eq!(kx.prefix_bits(), v4bits);
    }

    /// C-RATE-2: `::ffff:a.b.c.d` is the key of `a.b.c.d` under any prefix settings, and an
    /// IPv4 key never equals an IPv6 key.
    #[test]
    fn c_rate_2_mapped_equals_ipv4_and_families_differ(
        x in any::<u32>(),
        a in ipv6_not_mapped(),
        v4bits in 1u8..=32,
        v6bits in 1u8..=128,
    ) {
        let p = kp(v4bits, v6bits);
        let plain = Ipv4Addr::from(x);
        let k4 = p.key(IpAddr::V4(plain));
        prop_assert_eq!(p.key(IpAddr::V6(plain.to_ipv6_mapped())), k4);
        prop_assert_ne!(v6key(&p, a), k4);
        prop_assert_ne!(p.key(IpAddr::V6(plain.to_ipv6_compatible())), k4);
    }
}
