//! Backend selection (C-POOL-4, C-POOL-5): one driver, several policies.
//!
//! A policy only says in which order it would like to try backends: it calls a visitor with
//! candidate indices, most preferred first, and must eventually offer every index. The driver
//! (`select/drive.rs`, called by [`Pool::select`](crate::pool::Pool::select)) does everything
//! else, the same way for every policy:
//!
//! - skips backends this request already tried (C-RETRY-2) and unavailable ones (C-POOL-3);
//! - applies slow start (C-HEALTH-4): a warming backend is taken with probability equal to its
//!   share, otherwise the policy's next candidate is asked; if every candidate was warming, the
//!   first one passed over is taken, so slow start never turns a request away;
//! - reserves the slot (C-POOL-6) and, when a reservation loses a race, moves on;
//! - "panic routing": when no backend is available and the only reason for some is an open
//!   circuit, the first such backend is used anyway and the slot is marked as a panic slot
//!   (counted by the adapter in `load_balancer_panic_selections_total`). Passive ejection alone
//!   never leaves a pool with nothing to serve while a healthy backend exists; this is the cap
//!   Envoy expresses as `max_ejection_percent` and its panic threshold. Backends that fail active
//!   health checks are never used: "all backends down" is a 503 (failure matrix);
//! - never blocks: with nothing to offer it returns a typed [`NoBackend`] (C-POOL-5).
//!
//! This mirrors gRPC's picker (reference/001): a picker never blocks, and reports why it could
//! not pick. Policies are an enum over structs that implement [`Policy`], so dispatch is static.

mod consistent_hash;
mod drive;
mod least_request;
mod pick_first;
mod rotation;
mod round_robin;
mod weighted;

use core::ops::ControlFlow;

pub use consistent_hash::ConsistentHash;
pub use drive::{MAX_TRIED, NoBackend, Selection, Tried};
pub(crate) use drive::{Request, drive};
pub use least_request::{InFlight, LeastRequest, LoadMetric};
pub use pick_first::PickFirst;
pub use round_robin::RoundRobin;
pub use weighted::WeightedRoundRobin;

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

/// The policy names of `balancing.policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PolicyKind {
    /// `round_robin` (the default).
    #[default]
    RoundRobin,
    /// `weighted_round_robin`: smooth weighted round robin (nginx).
    WeightedRoundRobin,
    /// `least_request`: power of two choices on in-flight requests.
    LeastRequest,
    /// `pick_first`: the first available backend in config order.
    PickFirst,
    /// `consistent_hash`: a Maglev-style lookup table keyed by [`PickContext::hash`].
    ConsistentHash,
}

impl PolicyKind {
    /// Every policy, in documentation order.
    pub const ALL: &'static [PolicyKind] = &[
        PolicyKind::RoundRobin,
        PolicyKind::WeightedRoundRobin,
        PolicyKind::LeastRequest,
        PolicyKind::PickFirst,
        PolicyKind::ConsistentHash,
    ];

    /// The configuration name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            PolicyKind::RoundRobin => "round_robin",
            PolicyKind::WeightedRoundRobin => "weighted_round_robin",
            PolicyKind::LeastRequest => "least_request",
            PolicyKind::PickFirst => "pick_first",
            PolicyKind::ConsistentHash => "consistent_hash",
        }
    }

    /// Parse a configuration name.
    #[must_use]
    pub fn from_name(name: &str) -> Option<PolicyKind> {
        PolicyKind::ALL.iter().copied().find(|k| k.as_str() == name)
    }
}

/// A built policy of any kind (static dispatch).
#[derive(Debug)]
pub enum AnyPolicy {
    /// See [`RoundRobin`].
    RoundRobin(RoundRobin),
    /// See [`WeightedRoundRobin`].
    WeightedRoundRobin(WeightedRoundRobin),
    /// See [`LeastRequest`].
    LeastRequest(LeastRequest),
    /// See [`PickFirst`].
    PickFirst(PickFirst),
    /// See [`ConsistentHash`].
    ConsistentHash(ConsistentHash),
}

impl AnyPolicy {
    /// Build the policy `kind` over `backends`; `rng` gives it its random start.
    #[must_use]
    pub fn new(kind: PolicyKind, backends: &[Arc<Backend>], rng: &mut dyn Rng) -> AnyPolicy {
        match kind {
            PolicyKind::RoundRobin => AnyPolicy::RoundRobin(RoundRobin::new(backends.len(), rng)),
            PolicyKind::WeightedRoundRobin => {
                AnyPolicy::WeightedRoundRobin(WeightedRoundRobin::new(backends, rng))
            }
            PolicyKind::LeastRequest => AnyPolicy::LeastRequest(LeastRequest::new()),
            PolicyKind::PickFirst => AnyPolicy::PickFirst(PickFirst::new()),
            PolicyKind::ConsistentHash => AnyPolicy::ConsistentHash(ConsistentHash::new(backends)),
        }
    }

    /// The kind this policy was built from.
    #[must_use]
    pub fn kind(&self) -> PolicyKind {
        match self {
            AnyPolicy::RoundRobin(_) => PolicyKind::RoundRobin,
            AnyPolicy::WeightedRoundRobin(_) => PolicyKind::WeightedRoundRobin,
            AnyPolicy::LeastRequest(_) => PolicyKind::LeastRequest,
            AnyPolicy::PickFirst(_) => PolicyKind::PickFirst,
            AnyPolicy::ConsistentHash(_) => PolicyKind::ConsistentHash,
        }
    }

    pub(crate) fn policy(&self) -> &dyn Policy {
        match self {
            AnyPolicy::RoundRobin(p) => p,
            AnyPolicy::WeightedRoundRobin(p) => p,
            AnyPolicy::LeastRequest(p) => p,
            AnyPolicy::PickFirst(p) => p,
            AnyPolicy::ConsistentHash(p) => p,
        }
    }
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

#[cfg(all(test, not(loom)))]
pub(crate) mod tests;
