//! The policy interface: what a request offers ([`PickContext`]), the visitor candidates go to
//! ([`Visit`]), the [`Policy`] trait every policy implements, and the stable affinity hash
//! ([`hash_key`]) keyed policies read.

use core::ops::ControlFlow;

use crate::backend::{Backend, PoolParams};
use crate::rng::Rng;
use crate::sync::Arc;
use crate::time::Instant;

/// What a request offers the policy: the request's hash for `consistent_hash`, and the worker it
/// runs on (no policy keeps per-worker state since the rotation became one per process,
/// C-POOL-4; the field goes once the request engine builds every context).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PickContext {
    /// The hash of the request's affinity key (header, cookie or client address), if any.
    pub hash: Option<u64>,
}

/// The visitor a policy offers candidates to: return `Break` to stop.
pub type Visit<'a> = dyn FnMut(usize, &mut dyn Rng) -> ControlFlow<()> + 'a;

/// A selection policy: the order in which backends are offered. See the module doc.
pub trait Policy: core::fmt::Debug + Send + Sync {
    /// Offer candidate indices into `backends` to `visit`, most preferred first, until it breaks.
    /// Every index must be offered at least once if `visit` never breaks. Must not block or
    /// allocate.
    fn visit(
        &self,
        backends: &[Arc<Backend>],
        ctx: &PickContext,
        params: &PoolParams,
        now: Instant,
        rng: &mut dyn Rng,
        visit: &mut Visit<'_>,
    );
}

/// Hash affinity-key bytes (a header value, a cookie value, the client address) into the value
/// adapters put in [`PickContext::hash`] for `consistent_hash` (C-POOL-4).
///
/// The function is FNV-1a (64-bit) over the bytes followed by MurmurHash3's `fmix64` finaliser,
/// both written out here. Consistent hashing only works if every replica, every restart and
/// every build maps a key to the same value, so the hash must never change under a dependency
/// bump or across platforms: foldhash explicitly does not promise stable output across versions
/// or platforms, so it is not used here. FNV-1a alone mixes its last bytes poorly into the high
/// bits; `fmix64` (a bijection) gives full avalanche, which the lookup needs because it maps
/// the value onto the table with a multiply-high. Not a keyed hash: affinity keys choose a
/// backend, they are not a security boundary (bounded load caps what one hot key can do).
#[must_use]
pub const fn hash_key(bytes: &[u8]) -> u64 {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = FNV_OFFSET;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(FNV_PRIME);
        i += 1;
    }
    fmix64(h)
}

/// MurmurHash3's 64-bit finaliser (Austin Appleby, public domain): a bijection with full
/// avalanche. Part of [`hash_key`]; also mixes salted probes in `consistent_hash`.
pub(crate) const fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}
