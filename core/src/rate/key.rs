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
mod tests;
