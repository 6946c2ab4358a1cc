//! Client keys: which bucket a client address draws from (C-RATE-2).
//!
//! A key is the client's network, not its address: the address is masked to
//! `ipv4_prefix_bits` (default 32) or `ipv6_prefix_bits` (default 64). A /64 is one IPv6 subnet
//! (RFC 4291 interface ids are its low 64 bits; RFC 6177 hands end sites a /48 to /56 of them),
//! and hosts rotate their interface ids freely (RFC 8981 temporary addresses), so keying on the
//! full IPv6 address would mint a fresh, full bucket per rotation.
//!
//! An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, what a dual-stack socket reports for an IPv4
//! peer) is unmapped first, so one client is one key whichever socket accepted it. IPv4 and
//! IPv6 keys carry a family tag and can never collide, and the prefix length is part of the
//! key, so keys minted under different prefix settings never alias either.

use core::fmt;
use core::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Errors in key parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyError {
    /// `ipv4_prefix_bits` must be in 1..=32
    Ipv4PrefixBits(u8),
    /// `ipv6_prefix_bits` must be in 1..=128
    Ipv6PrefixBits(u8),
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Ipv4PrefixBits(b) => {
                write!(f, "ipv4_prefix_bits must be in 1..=32, got {b}")
            }
            KeyError::Ipv6PrefixBits(b) => {
                write!(f, "ipv6_prefix_bits must be in 1..=128, got {b}")
            }
        }
    }
}

impl std::error::Error for KeyError {}

/// How client addresses aggregate into keys (C-RATE-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyParams {
    ipv4_prefix_bits: u8,
    ipv6_prefix_bits: u8,
}

impl Default for KeyParams {
    /// `/32` for IPv4 (one address), `/64` for IPv6 (one subscriber network).
    fn default() -> KeyParams {
        KeyParams {
            ipv4_prefix_bits: 32,
            ipv6_prefix_bits: 64,
        }
    }
}

impl KeyParams {
    /// Default IPv4 prefix length.
    pub const DEFAULT_IPV4_PREFIX_BITS: u8 = 32;
    /// Default IPv6 prefix length.
    pub const DEFAULT_IPV6_PREFIX_BITS: u8 = 64;

    /// Aggregate IPv4 clients to `/ipv4_prefix_bits` (1..=32) and IPv6 clients to
    /// `/ipv6_prefix_bits` (1..=128).
    pub fn new(ipv4_prefix_bits: u8, ipv6_prefix_bits: u8) -> Result<KeyParams, KeyError> {
        if !(1..=32).contains(&ipv4_prefix_bits) {
            return Err(KeyError::Ipv4PrefixBits(ipv4_prefix_bits));
        }
        if !(1..=128).contains(&ipv6_prefix_bits) {
            return Err(KeyError::Ipv6PrefixBits(ipv6_prefix_bits));
        }
        Ok(KeyParams {
            ipv4_prefix_bits,
            ipv6_prefix_bits,
        })
    }

    /// IPv4 prefix length.
    #[must_use]
    pub const fn ipv4_prefix_bits(&self) -> u8 {
        self.ipv4_prefix_bits
    }

    /// IPv6 prefix length.
    #[must_use]
    pub const fn ipv6_prefix_bits(&self) -> u8 {
        self.ipv6_prefix_bits
    }

    /// The key of a client address: unmap IPv4-mapped IPv6, then mask to the prefix.
    #[must_use]
    pub fn key(&self, addr: IpAddr) -> ClientKey {
        ClientKey::new(addr, self)
    }
}

/// Address family tag of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
enum Family {
    V4 = 4,
    V6 = 6,
}

/// The bucket key of a client: its network, tagged with the address family and prefix length
/// (C-RATE-2). `Display` prints it in CIDR form (`203.0.113.0/24`, `2001:db8:1:2::/64`) for logs
/// and status; the host part of the address is never in it.
///
/// 18 bytes, alignment 1 (16 address bytes + prefix + family): a `u128` of address plus the two
/// tags that a `u128` alone cannot hold next to a full IPv6 /128. Kept byte-aligned so that a
/// store's `(key, slot)` index entry packs into 24 bytes. `repr(C)` puts the address bytes
/// first, so the hash's two 8-byte reads of a key just copied onto the stack fall inside the
/// copy's 16-byte store (with the tags first they straddled it and stalled store forwarding).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(C)]
pub struct ClientKey {
    /// The masked network in network byte order; IPv4 keys use the last four bytes.
    octets: [u8; 16],
    prefix_bits: u8,
    family: Family,
}

impl ClientKey {
    /// The key of `addr` under `params`: see [`KeyParams::key`].
    #[must_use]
    pub fn new(addr: IpAddr, params: &KeyParams) -> ClientKey {
        let addr = match addr {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(v6),
            },
            v4 => v4,
        };
        match addr {
            IpAddr::V4(v4) => {
                let bits = params.ipv4_prefix_bits;
                // bits is in 1..=32 (validated), so the shift is in 0..=31.
                let mask = u32::MAX << (32 - u32::from(bits));
                let net = u32::from(v4) & mask;
                let mut octets = [0u8; 16];
                octets[12..].copy_from_slice(&net.to_be_bytes());
                ClientKey {
                    octets,
                    prefix_bits: bits,
                    family: Family::V4,
                }
            }
            IpAddr::V6(v6) => {
                let bits = params.ipv6_prefix_bits;
                // bits is in 1..=128 (validated), so the shift is in 0..=127.
                let mask = u128::MAX << (128 - u32::from(bits));
                let net = u128::from(v6) & mask;
                ClientKey {
                    octets: net.to_be_bytes(),
                    prefix_bits: bits,
                    family: Family::V6,
                }
            }
        }
    }

    /// The network address (host bits zero), IPv4 for IPv4 keys.
    #[must_use]
    pub fn network(&self) -> IpAddr {
        match self.family {
            Family::V4 => {
                let [a, b, c, d] = [
                    self.octets[12],
                    self.octets[13],
                    self.octets[14],
                    self.octets[15],
                ];
                IpAddr::V4(Ipv4Addr::new(a, b, c, d))
            }
            Family::V6 => IpAddr::V6(Ipv6Addr::from(self.octets)),
        }
    }

    /// Prefix length of the network.
    #[must_use]
    pub const fn prefix_bits(&self) -> u8 {
        self.prefix_bits
    }

    /// Whether this is an IPv4 key (IPv4-mapped IPv6 clients included).
    #[must_use]
    pub const fn is_ipv4(&self) -> bool {
        matches!(self.family, Family::V4)
    }
}

impl Hash for ClientKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Two integer writes instead of a length-prefixed byte slice: the key sits on the
        // per-request path (shard choice and index lookup).
        state.write_u128(u128::from_ne_bytes(self.octets));
        state.write_u16(u16::from(self.prefix_bits) << 8 | self.family as u16);
    }
}

impl fmt::Display for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network(), self.prefix_bits)
    }
}

impl fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClientKey({self})")
    }
}

#[cfg(test)]
mod tests {
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
}
