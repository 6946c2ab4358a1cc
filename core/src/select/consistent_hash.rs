//! `consistent_hash` (C-POOL-4): requests with the same affinity key go to the same backend,
//! and when a backend leaves, only the keys it owned move.
//!
//! The adapter hashes the key (a header, a cookie or the client address) with
//! [`hash_key`](super::hash_key) into [`PickContext::hash`]; the policy maps the hash onto a
//! lookup table of prime size `M` whose entries are backend indices, built once per pool
//! snapshot. A pick is one multiply-high and one array read: O(1), whatever the pool's size.
//!
//! ## The table
//!
//! The table is Maglev's (Eisenbud et al., "Maglev: A Fast and Reliable Software Network Load
//! Balancer", NSDI 2016): each backend has a permutation of the `M` slots,
//! `offset + j × skip (mod M)`, with `offset` and `skip` derived from a fixed-seed hash of the
//! backend's *id* (never its index or url), so every replica, every restart and every config
//! order builds the same table for the same ids (C-POOL-1 ids are stable by contract).
//!
//! weir fills the table by *preference rank*: slot `s` belongs to the backend in whose
//! permutation `s` comes earliest (ties between backends broken by the id's hash, then the id).
//! Maglev's own population instead lets each backend in turn take its next *still empty*
//! preferred slot. That gives near-perfect balance, but removing a backend then also moves a
//! share of *other* backends' slots (with 50 backends, about 1.2 % of all keys move besides the
//! removed backend's 2 %, measured while designing this), which C-POOL-4 forbids: "when a
//! backend leaves, only the keys it owned move". With ranks, a slot's owner is the minimum of
//! per-backend ranks, so removing a non-owner can never change it, and adding a backend only
//! takes slots (this is rendezvous hashing, Thaler and Ravishankar 1998, compiled into a
//! Maglev table). The price is balance: a backend owns a binomial share of slots rather than
//! exactly `M / n`, a relative deviation of about `sqrt(n / M)`. `M` is therefore the smallest
//! prime ≥ max(65537, 256 × n) (capped near 2^24 slots), which keeps one standard deviation at
//! or below 1/16 of a backend's share (1.2 % for 10 backends), and bounded load (below) caps
//! what any imbalance or hot key can do to in-flight load. Filling by rank visits about
//! `M × ln M` (backend, slot) pairs; entries are `u16` (`u32` for pools of more than 65535).
//!
//! ## Unavailable backends
//!
//! The table does not change when a backend is unhealthy, ejected, drained or saturated: the
//! owner is offered first, and when the driver passes it over (C-POOL-3) the policy re-hashes the
//! key with successive salts into the table ([`PROBES`] times), so the keys of an unavailable
//! backend spread over the others in proportion to their table shares, while the keys of every
//! available backend stay where they are. After the probes, every backend is offered from a start
//! derived from the key, so a pick succeeds whenever any backend is available and a retry
//! (C-RETRY-2) still finds the untried ones.
//!
//! ## Bounded load
//!
//! Consistent hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam, SODA 2018; Envoy's
//! `hash_balance_factor`): a candidate whose in-flight count would exceed
//! `ceil(1.25 × (total_in_flight + 1) / serving)` is not offered in its turn but only after every
//! backend under the bound, so one hot key cannot pile up on its owner. `serving` counts the
//! backends that are available or merely saturated (those that could be serving now); with all
//! healthy it is `n`. The total is an O(n) sum, computed at most once per pick and only when the
//! candidate's own count could exceed the bound (a candidate with less than the bound computed
//! from its own load alone is under it whatever the total), so an idle pool picks in O(1).
//!
//! ## No key
//!
//! The adapter always passes a hash: a request without its header or cookie is hashed by its
//! client address (`Runtime::pick_context`). A caller that passes none (`hash == None`: the
//! simulator, tests) gets a random hash from the injected rng: it lands on a backend in
//! proportion to table shares, with the same fallbacks and bound.

use super::{PickContext, Policy, Visit, fmix64, hash_key};
use crate::backend::{Availability, Backend, PoolParams};
use crate::rng::Rng;
use crate::sync::Arc;
use crate::time::Instant;

/// The smallest table: Maglev's 65537 (a prime), ample for small pools.
pub const MIN_TABLE_SIZE: usize = 65_537;

/// Table slots per backend for larger pools (before rounding up to a prime).
pub const SLOTS_PER_BACKEND: usize = 256;

/// The largest target size, so a huge pool cannot ask for an unbounded table.
const MAX_TABLE_TARGET: usize = 1 << 24;

/// Salted re-hashes tried (after the owner) before every backend is offered in turn.
pub const PROBES: u64 = 16;

/// The bounded-load factor in percent (Envoy's `hash_balance_factor`, 125 = 1.25).
pub const BALANCE_FACTOR_PERCENT: u64 = 125;

/// Fixed seeds of the per-backend permutation (offset, skip) and of the probe salts. Changing
/// any of them remaps every key: they are part of the wire behaviour across replicas.
const SEED_OFFSET: u64 = 0x6d61_676c_6576_5f6f; // "maglev_o"
const SEED_SKIP: u64 = 0x6d61_676c_6576_5f73; // "maglev_s"
const PROBE_SALT: u64 = 0x9e37_79b9_7f4a_7c15; // 2^64 / golden ratio
const START_SALT: u64 = 0x7374_6172_745f_6b65; // "start_ke"

/// `x` mapped uniformly onto `0..m` with a multiply-high (Lemire), no division.
fn reduce(x: u64, m: usize) -> usize {
    ((u128::from(x) * m as u128) >> 64) as usize
}

fn is_prime(x: usize) -> bool {
    if x < 2 {
        return false;
    }
    if x.is_multiple_of(2) {
        return x == 2;
    }
    let mut d = 3;
    while d * d <= x {
        if x.is_multiple_of(d) {
            return false;
        }
        d += 2;
    }
    true
}

/// The table size for a pool of `n` backends: the smallest prime ≥ max(65537, 256 × n), with the
/// 256 × n target capped at 2^24 (and never below `n`).
#[must_use]
pub fn table_size(n: usize) -> usize {
    let target = n
        .saturating_mul(SLOTS_PER_BACKEND)
        .clamp(MIN_TABLE_SIZE, MAX_TABLE_TARGET)
        .max(n);
    let mut m = target;
    while !is_prime(m) {
        m += 1;
    }
    m
}

/// The lookup table, as compact as the pool allows.
#[derive(Debug)]
enum Table {
    U16(Box<[u16]>),
    U32(Box<[u32]>),
}

impl Table {
    fn len(&self) -> usize {
        match self {
            Table::U16(t) => t.len(),
            Table::U32(t) => t.len(),
        }
    }

    fn get(&self, slot: usize) -> usize {
        match self {
            Table::U16(t) => usize::from(t[slot]),
            Table::U32(t) => t[slot] as usize,
        }
    }
}

/// The consistent-hash policy. See the module doc.
#[derive(Debug)]
pub struct ConsistentHash {
    table: Table,
}

impl ConsistentHash {
    /// Build the lookup table for `backends` from their ids (the order of `backends` only
    /// decides which index a slot stores, not which backend owns it).
    #[must_use]
    pub fn new(backends: &[Arc<Backend>]) -> ConsistentHash {
        let n = backends.len();
        if n == 0 {
            return ConsistentHash {
                table: Table::U16(Box::new([])),
            };
        }
        let m = table_size(n);
        struct Walker<'a> {
            rank: u64,
            id: &'a str,
            index: u32,
            pos: usize,
            skip: usize,
        }
        let mut walkers: Vec<Walker<'_>> = backends
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let h = hash_key(b.id().as_bytes());
                Walker {
                    rank: h,
                    id: b.id(),
                    // Pools hold far fewer than u32::MAX backends; the table size caps n too.
                    index: u32::try_from(i).unwrap_or(u32::MAX),
                    pos: reduce(fmix64(h ^ SEED_OFFSET), m),
                    skip: 1 + reduce(fmix64(h ^ SEED_SKIP), m - 1),
                }
            })
            .collect();
        // Ties within one rank go to the lower (hash, id): independent of config order.
        walkers.sort_by(|a, b| a.rank.cmp(&b.rank).then_with(|| a.id.cmp(b.id)));
        const EMPTY: u32 = u32::MAX;
        let mut table = vec![EMPTY; m];
        let mut filled = 0;
        // Round j: each backend claims the j-th slot of its permutation if nobody ranked it
        // earlier. Every permutation covers all M slots (M prime, 1 ≤ skip < M), so this ends
        // within M rounds; in expectation after about (M / n) × ln M.
        while filled < m {
            for w in &mut walkers {
                let slot = &mut table[w.pos];
                if *slot == EMPTY {
                    *slot = w.index;
                    filled += 1;
                }
                w.pos += w.skip;
                if w.pos >= m {
                    w.pos -= m;
                }
            }
        }
        let table = if n <= usize::from(u16::MAX) {
            // Every entry is an index below n ≤ 65535.
            Table::U16(table.iter().map(|&i| i as u16).collect())
        } else {
            Table::U32(table.into_boxed_slice())
        };
        ConsistentHash { table }
    }

    /// The number of slots in the lookup table (0 for an empty pool).
    #[must_use]
    pub fn table_len(&self) -> usize {
        self.table.len()
    }

    /// The backend index that owns `hash` in the table, regardless of availability.
    #[must_use]
    pub fn owner(&self, hash: u64) -> Option<usize> {
        self.probe(hash, 0)
    }

    /// The `k`-th candidate for `hash`: the owner for `k == 0`, then salted re-hashes.
    fn probe(&self, hash: u64, k: u64) -> Option<usize> {
        let m = self.table.len();
        (m > 0).then(|| {
            self.table
                .get(reduce(fmix64(hash ^ k.wrapping_mul(PROBE_SALT)), m))
        })
    }
}

/// `ceil(factor × (total + 1) / serving)`: the in-flight count a backend may reach with the new
/// request counted (Mirrokni et al.'s capacity with `c = 1.25`).
#[must_use]
pub fn load_bound(total_in_flight: u64, serving: u64) -> u64 {
    let num = u128::from(BALANCE_FACTOR_PERCENT) * (u128::from(total_in_flight) + 1);
    let den = 100 * u128::from(serving.max(1));
    u64::try_from(num.div_ceil(den)).unwrap_or(u64::MAX)
}

/// The bounded-load check for one pick; sums the pool at most once.
struct Bound<'a> {
    backends: &'a [Arc<Backend>],
    params: &'a PoolParams,
    now: Instant,
    /// (total in flight, serving backends), once computed.
    pool: Option<(u64, u64)>,
}

impl Bound<'_> {
    /// Whether backend `i` can take one more request within the bound.
    fn admits(&mut self, i: usize) -> bool {
        let load = u64::from(self.backends[i].in_flight());
        // total ≥ load and serving ≤ n, so the bound is at least this: no need for the sum.
        if load < load_bound(load, self.backends.len() as u64) {
            return true;
        }
        let (total, serving) = *self.pool.get_or_insert_with(|| {
            self.backends.iter().fold((0, 0), |(t, s), b| {
                let serving = matches!(
                    b.availability(self.params, self.now),
                    Availability::Available | Availability::Saturated
                );
                (t + u64::from(b.in_flight()), s + u64::from(serving))
            })
        });
        load < load_bound(total, serving)
    }
}

impl Policy for ConsistentHash {
    fn visit(
        &self,
        backends: &[Arc<Backend>],
        ctx: &PickContext,
        params: &PoolParams,
        now: Instant,
        rng: &mut dyn Rng,
        visit: &mut Visit<'_>,
    ) {
        let n = backends.len();
        if n == 0 || self.table.len() == 0 {
            return;
        }
        let hash = ctx.hash.unwrap_or_else(|| rng.next_u64());
        if n == 1 {
            let _ = visit(0, rng);
            return;
        }
        let mut bound = Bound {
            backends,
            params,
            now,
            pool: None,
        };
        for k in 0..PROBES {
            let Some(i) = self.probe(hash, k) else { return };
            // A table built for another snapshot cannot be passed in, but stay in bounds.
            if i < n && bound.admits(i) && visit(i, rng).is_break() {
                return;
            }
        }
        let start = reduce(fmix64(hash ^ START_SALT), n);
        for under_bound_only in [true, false] {
            let mut i = start;
            for _ in 0..n {
                if (!under_bound_only || bound.admits(i)) && visit(i, rng).is_break() {
                    return;
                }
                i += 1;
                if i == n {
                    i = 0;
                }
            }
        }
    }
}
