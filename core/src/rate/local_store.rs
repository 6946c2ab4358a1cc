//! The bounded, sharded, per-process bucket store (C-RATE-3 `local`, C-RATE-4).
//!
//! Keys are spread over `shards` (default 64) mutex-guarded shards by a seeded foldhash, so
//! concurrent requests of different clients rarely meet on a lock, and a critical section is one
//! hash lookup and one GCRA step. Each shard owns a fixed slot array allocated once in
//! [`LocalStore::new`]; a new key takes the slot under the shard's FIFO cursor, evicting that
//! slot's previous key, and the cursor moves on. Insert and evict are O(1): no scan for the
//! least recently used or an idle bucket, no linked list to maintain on every hit, no allocation
//! after construction. The store as a whole is "approximately FIFO": exactly FIFO within a
//! shard, and shards fill at the rate their keys arrive.
//!
//! Evicting a busy bucket early refills it (a key that is not stored is a new, full bucket), so
//! eviction can only make the limiter more lenient for that client, never stricter; with the
//! default 100 000 buckets a client is only evicted after ~1 500 newer clients hit its shard.

use core::fmt;
use core::hash::BuildHasher;
use std::collections::HashMap;

use foldhash::quality::FixedState;

use crate::bucket::{BucketParams, Take};
use crate::rate::key::ClientKey;
use crate::sync::{Padded, SpinLock, spin_lock};
use crate::time::Instant;

/// Errors in local store parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalStoreError {
    /// `local_shards` must be in 1..=4096
    Shards(usize),
    /// `local_max_buckets` must be in 1..=16777216
    MaxBuckets(usize),
    /// the slot arrays and indexes could not be allocated
    OutOfMemory,
}

impl fmt::Display for LocalStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LocalStoreError::Shards(n) => {
                write!(
                    f,
                    "local_shards must be in 1..={}, got {n}",
                    LocalStoreParams::MAX_SHARDS
                )
            }
            LocalStoreError::MaxBuckets(n) => write!(
                f,
                "local_max_buckets must be in 1..={}, got {n}",
                LocalStoreParams::MAX_BUCKETS
            ),
            LocalStoreError::OutOfMemory => {
                write!(f, "could not allocate the local rate-limit store")
            }
        }
    }
}

impl std::error::Error for LocalStoreError {}

/// Size of the local store: `local_shards` and `local_max_buckets` (C-RATE-4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LocalStoreParams {
    /// Number of independently locked shards, 1..=4096 (default 64).
    pub shards: usize,
    /// Most buckets held by the whole store, 1..=16 777 216 (default 100 000).
    pub max_buckets: usize,
}

impl Default for LocalStoreParams {
    fn default() -> LocalStoreParams {
        LocalStoreParams {
            shards: Self::DEFAULT_SHARDS,
            max_buckets: Self::DEFAULT_MAX_BUCKETS,
        }
    }
}

impl LocalStoreParams {
    /// Default shard count.
    pub const DEFAULT_SHARDS: usize = 64;
    /// Default bucket bound.
    pub const DEFAULT_MAX_BUCKETS: usize = 100_000;
    /// Largest shard count.
    pub const MAX_SHARDS: usize = 4096;
    /// Largest bucket bound: 2^24 buckets, about 1.5 GiB of tables (the contract sets no upper
    /// bound; this one keeps a typo from reserving all memory at start).
    pub const MAX_BUCKETS: usize = 1 << 24;

    /// Check the ranges.
    pub fn validate(&self) -> Result<(), LocalStoreError> {
        if !(1..=Self::MAX_SHARDS).contains(&self.shards) {
            return Err(LocalStoreError::Shards(self.shards));
        }
        if !(1..=Self::MAX_BUCKETS).contains(&self.max_buckets) {
            return Err(LocalStoreError::MaxBuckets(self.max_buckets));
        }
        Ok(())
    }
}

/// One shard: a fixed slot array, written in FIFO order, and the index of the keys in it.
#[derive(Debug)]
struct Shard {
    /// Slot `i`'s key; `None` until the cursor first reaches it.
    keys: Box<[Option<ClientKey>]>,
    /// Slot `i`'s bucket state (GCRA theoretical arrival time, see `bucket`).
    tats: Box<[u64]>,
    /// Key -> slot. Reserved in `new` with room for twice the slots, so it never reallocates.
    index: HashMap<ClientKey, u32, FixedState>,
    /// Occupied slots (grows to `keys.len()`, then stays).
    len: u32,
    /// The next slot to fill: the oldest key once the shard is full.
    cursor: u32,
    /// Keys evicted from this shard.
    evictions: u64,
    /// Latest `now` a take saw, so time going backwards is clamped, not punished.
    latest_ns: u64,
    /// `index.capacity()` right after construction (for `heap_bytes` and the no-growth tests).
    index_capacity: usize,
}

impl Shard {
    fn new(slots: u32, hasher: FixedState) -> Result<Shard, LocalStoreError> {
        let n = slots as usize;
        let mut keys = Vec::new();
        keys.try_reserve_exact(n)
            .map_err(|_| LocalStoreError::OutOfMemory)?;
        keys.resize(n, None);
        let mut tats = Vec::new();
        tats.try_reserve_exact(n)
            .map_err(|_| LocalStoreError::OutOfMemory)?;
        tats.resize(n, 0u64);
        // hashbrown (std's HashMap) frees a removed entry's control byte as a tombstone when
        // its probe group is full; tombstones use up `growth_left`, and an insert that finds
        // none left rehashes: in place when `items + 1 <= capacity / 2`, otherwise into a new,
        // larger allocation. We hold at most `n` items and remove before we insert, so a
        // capacity of `2 * (n + 1)` keeps every rehash in place (no allocation) and keeps the
        // load factor at or below ~1/2, where full probe groups, and so tombstones, are rare.
        let mut index = HashMap::with_hasher(hasher);
        index
            .try_reserve(2 * (n + 1))
            .map_err(|_| LocalStoreError::OutOfMemory)?;
        let index_capacity = index.capacity();
        Ok(Shard {
            keys: keys.into_boxed_slice(),
            tats: tats.into_boxed_slice(),
            index,
            len: 0,
            cursor: 0,
            evictions: 0,
            latest_ns: 0,
            index_capacity,
        })
    }

    fn clamp(&self, now: Instant) -> Instant {
        Instant::from_nanos(now.as_nanos().max(self.latest_ns))
    }

    /// Put a key that is not in the shard into the slot under the cursor (O(1)).
    fn insert(&mut self, key: ClientKey, tat: u64) {
        let slots = self.keys.len() as u32;
        let slot = self.cursor as usize;
        // Remove before insert: the index never holds more than `slots` keys (see `new`).
        if let Some(old) = self.keys[slot].take() {
            self.index.remove(&old);
            self.evictions += 1;
        } else {
            self.len += 1;
        }
        self.keys[slot] = Some(key);
        self.tats[slot] = tat;
        self.index.insert(key, self.cursor);
        self.cursor = if self.cursor + 1 == slots {
            0
        } else {
            self.cursor + 1
        };
    }
}

/// The per-process bucket store: at most `max_buckets` GCRA buckets in `shards` locked shards,
/// approximately FIFO eviction through fixed slot arrays (C-RATE-4).
///
/// Kinds: a shared, internally synchronised table. `take` is the per-request command; `peek`,
/// `len`, `evictions`, `capacity` and `heap_bytes` are getters; `reset` is an operator command.
/// Neither takes nor anything else allocates after [`LocalStore::new`].
///
/// Bucket shape ([`BucketParams`]) is an argument, not part of the store, so a reload that
/// changes capacity or refill applies at the next take without touching stored state.
pub struct LocalStore {
    /// Each on cache lines of its own: neighbouring shards' locks are taken by different
    /// threads at once.
    shards: Box<[Padded<SpinLock<Shard>>]>,
    /// Chooses the shard of a key.
    shard_hasher: FixedState,
    max_buckets: usize,
}

impl fmt::Debug for LocalStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalStore")
            .field("shards", &self.shards.len())
            .field("max_buckets", &self.max_buckets)
            .finish_non_exhaustive()
    }
}

/// Any fixed odd constant works: it only makes the index hash independent of the shard hash
/// (keys of one shard share the shard hash's high bits, which hashbrown uses for its tags).
const INDEX_SEED_SALT: u64 = 0x9E37_79B9_7F4A_7C15;

impl LocalStore {
    /// Allocate the whole store: every slot array and index, once.
    ///
    /// `hash_seed` seeds the shard and index hashes (pass a seed from the process's RNG so that
    /// clients cannot aim their addresses at one shard; tests pass a constant).
    ///
    /// The `max_buckets` slots are split over the shards as evenly as possible (the shard
    /// capacities are `ceil` or `floor` of `max_buckets / shards` and sum to exactly
    /// `max_buckets`); with fewer buckets than shards, only `max_buckets` shards are used.
    pub fn new(params: LocalStoreParams, hash_seed: u64) -> Result<LocalStore, LocalStoreError> {
        params.validate()?;
        let n = params.shards.min(params.max_buckets);
        let base = params.max_buckets / n;
        let extra = params.max_buckets % n;
        let index_hasher = FixedState::with_seed(hash_seed ^ INDEX_SEED_SALT);
        let mut shards = Vec::new();
        shards
            .try_reserve_exact(n)
            .map_err(|_| LocalStoreError::OutOfMemory)?;
        for i in 0..n {
            let slots = base + usize::from(i < extra);
            // slots <= MAX_BUCKETS = 2^24, checked by validate(): fits in u32.
            let slots = u32::try_from(slots).map_err(|_| LocalStoreError::MaxBuckets(slots))?;
            shards.push(Padded(SpinLock::new(Shard::new(
                slots,
                index_hasher.clone(),
            )?)));
        }
        Ok(LocalStore {
            shards: shards.into_boxed_slice(),
            shard_hasher: FixedState::with_seed(hash_seed),
            max_buckets: params.max_buckets,
        })
    }

    /// The shard a key lives in: multiply-shift of a seeded foldhash (no modulo bias to speak of,
    /// no division).
    pub(crate) fn shard_of(&self, key: &ClientKey) -> usize {
        let h = self.shard_hasher.hash_one(key);
        ((u128::from(h) * self.shards.len() as u128) >> 64) as usize
    }

    /// Take one token from `key`'s bucket at `now` (C-RATE-1). An unknown key is a new, full
    /// bucket; it is stored (evicting its shard's oldest key if the shard is full). A `now`
    /// earlier than one the shard already saw counts as that later instant.
    pub fn take(&self, key: ClientKey, params: &BucketParams, now: Instant) -> Take {
        let mut shard = spin_lock(&self.shards[self.shard_of(&key)]);
        let now = shard.clamp(now);
        shard.latest_ns = now.as_nanos();
        match shard.index.get(&key) {
            Some(&slot) => {
                // Invariant: the index only holds slots < keys.len() == tats.len().
                let slot = slot as usize;
                let (take, tat) = params.take(shard.tats[slot], now);
                shard.tats[slot] = tat;
                take
            }
            None => {
                let (take, tat) = params.take(0, now);
                // A new bucket is full and capacity >= 1: this take is always allowed, and the
                // bucket now carries information (one token spent), so it is stored.
                shard.insert(key, tat);
                take
            }
        }
    }

    /// Tokens in `key`'s bucket at `now`, in thousandths, without taking one or storing the key
    /// (the status endpoint's read; C-MGMT-4). An unknown key reads as full.
    #[must_use]
    pub fn peek(&self, key: ClientKey, params: &BucketParams, now: Instant) -> u64 {
        let shard = spin_lock(&self.shards[self.shard_of(&key)]);
        let now = shard.clamp(now);
        let tat = shard
            .index
            .get(&key)
            .map_or(0, |&slot| shard.tats[slot as usize]);
        params.tokens_milli(tat, now)
    }

    /// Refill `key`'s bucket: it becomes full (the management `limit` command; C-MGMT-4).
    /// The key keeps its slot, so FIFO order is unchanged; an unknown key is already full.
    pub fn reset(&self, key: ClientKey) {
        let mut shard = spin_lock(&self.shards[self.shard_of(&key)]);
        if let Some(&slot) = shard.index.get(&key) {
            shard.tats[slot as usize] = 0;
        }
    }

    /// Whether `key` has a stored bucket.
    #[must_use]
    pub fn contains(&self, key: ClientKey) -> bool {
        spin_lock(&self.shards[self.shard_of(&key)])
            .index
            .contains_key(&key)
    }

    /// Buckets held (`load_balancer_rate_limit_local_buckets`); never above [`Self::capacity`].
    /// Locks each shard in turn: a metrics read, not a per-request one.
    #[must_use]
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| spin_lock(s).len as usize).sum()
    }

    /// Whether no bucket is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys evicted so far (`load_balancer_rate_limit_local_evictions_total`).
    #[must_use]
    pub fn evictions(&self) -> u64 {
        self.shards.iter().map(|s| spin_lock(s).evictions).sum()
    }

    /// Most buckets the store holds: `max_buckets`.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.max_buckets
    }

    /// Number of shards in use (`min(shards, max_buckets)`).
    #[must_use]
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Estimated heap bytes of the store, from the allocated capacities: shard array, slot
    /// arrays, and each index's hashbrown table (buckets × (entry + control byte) + one group).
    /// Constant after construction.
    #[must_use]
    pub fn heap_bytes(&self) -> usize {
        let mut total = self.shards.len() * size_of::<Padded<SpinLock<Shard>>>();
        for s in &*self.shards {
            let s = spin_lock(s);
            total += s.keys.len() * size_of::<Option<ClientKey>>();
            total += s.tats.len() * size_of::<u64>();
            total += index_table_bytes(s.index_capacity);
        }
        total
    }

    #[cfg(all(test, not(loom)))]
    fn index_capacities(&self) -> Vec<(usize, usize)> {
        self.shards
            .iter()
            .map(|s| {
                let s = spin_lock(s);
                (s.index.capacity(), s.index_capacity)
            })
            .collect()
    }

    #[cfg(all(test, not(loom)))]
    fn shard_slots(&self, shard: usize) -> usize {
        spin_lock(&self.shards[shard]).keys.len()
    }
}

/// hashbrown's allocation for a table whose `capacity()` is `capacity` right after allocation:
/// `buckets` is a power of two with capacity `buckets - 1` below 8 buckets, `buckets * 7 / 8`
/// from 8 on; the allocation is the entries (padded to the group alignment), one control byte
/// per bucket, and one trailing group of control bytes (16 on SSE2).
fn index_table_bytes(capacity: usize) -> usize {
    const GROUP_WIDTH: usize = 16;
    if capacity == 0 {
        return 0;
    }
    let buckets = if capacity < 8 {
        (capacity + 1).next_power_of_two()
    } else {
        (capacity / 7 * 8).next_power_of_two()
    };
    let entries = (buckets * size_of::<(ClientKey, u32)>()).next_multiple_of(GROUP_WIDTH);
    entries + buckets + GROUP_WIDTH
}

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;
