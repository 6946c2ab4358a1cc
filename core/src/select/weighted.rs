//! `weighted_round_robin` (C-POOL-4): smooth weighted round robin, O(1) per pick.
//!
//! Backends get traffic in proportion to their weight (1..=100, weir's addition to the
//! reference config, reference/002), *interleaved*: weights 5, 1, 1 give `a a b a c a a`, not
//! `a a a a a b c`. The naive expansion of reference/002 (repeat each backend `weight` times)
//! sends bursts of `weight` consecutive requests to one backend; the smooth algorithm spreads
//! them out so that at every point of the sequence each backend is within about one pick of its
//! exact share (a test checks less than two for arbitrary weights; a burst is `weight` off).
//!
//! The algorithm is nginx's smooth weighted round robin (`ngx_http_upstream_get_peer`, 2012):
//! every step adds each available backend's weight to its `current` value, picks the largest
//! `current` (ties: lowest index) and subtracts the available backends' total weight from the
//! winner. nginx runs it per pick, which is O(n) and needs a lock when workers share it; weir
//! runs it when the pool snapshot is built, and again whenever the set of available backends
//! changes, and stores the resulting sequence. The sequence repeats after
//! `sum(weights) / gcd(weights)` picks, in which backend `i` appears exactly `weight_i / gcd`
//! times; with weights 1..=100 it is at most `100 × n` entries, stored as `u16` indices (`u32`
//! for pools of more than 65535 backends). A pick is then one relaxed `fetch_add` on the
//! process's one cursor and one array read, whatever the pool's size. As in
//! [`RoundRobin`](super::RoundRobin), consecutive picks from any worker walk one smooth sequence
//! (C-POOL-4), and the cursor starts at a random offset so that replicas do not walk the
//! sequence in lockstep.
//!
//! While some backends are down, the sequence is nginx's over the others (C-POOL-4: "the others
//! keep a smooth interleaving by their weights among themselves, as nginx does"): weights 5, 1, 1
//! with the 5 down alternate the two 1s; with a 1 down they give nginx's 5:1 sequence
//! `a a a b a a`. How the change is noticed and the sequence replaced without a lock, and why
//! that rather than running nginx's rule per pick or skipping the down backend's entries, is in
//! `rotation.rs`, shared with round robin.
//!
//! Building the sequence by nginx's rule costs O(n) per step. Backends of equal weight are always
//! chosen among themselves in index order (they differ only in how often they have been picked),
//! so the build keeps one queue per distinct weight and compares only queue heads: O(L × d) for a
//! sequence of length L and d ≤ 100 distinct weights, with exactly nginx's output (a test checks
//! it against the per-step rule).
//!
//! When the sequence's backend cannot be used for a passing reason (its slots full, warming and
//! passed over, already tried), the driver asks again: the policy then offers up to
//! [`FALLBACK_DRAWS`](super::smooth::FALLBACK_DRAWS) entries of the sequence at random positions (a random entry is a
//! weight-proportional random backend, so the turns it loses are spread over the others in
//! proportion to their weights), then every backend from a random start, so a pick succeeds
//! whenever any backend is available.

use super::rotation::{Rotation, Sequence};
use super::{PickContext, Policy, Visit};
use crate::backend::{Backend, PoolParams};
use crate::rng::Rng;
use crate::sync::Arc;
use crate::time::Instant;

pub(super) use super::smooth::smooth_sequence;

/// The smooth weighted round-robin policy. See the module doc.
#[derive(Debug)]
pub struct WeightedRoundRobin {
    rotation: Rotation,
}

impl WeightedRoundRobin {
    /// Precompute the smooth sequence for `backends`' weights; `rng` gives the process's one cursor
    /// its random start. Weights outside 1..=100 (which the pool rejects) are clamped.
    #[must_use]
    pub fn new(backends: &[Arc<Backend>], rng: &mut dyn Rng) -> WeightedRoundRobin {
        let weights: Vec<u32> = backends.iter().map(|b| b.weight().clamp(1, 100)).collect();
        let seq = smooth_sequence(&weights);
        let sequence = if backends.len() <= usize::from(u16::MAX) {
            // Every index is below n ≤ 65535, so it fits.
            Sequence::U16(seq.iter().map(|&i| i as u16).collect())
        } else {
            Sequence::U32(seq.into_boxed_slice())
        };
        let mut distinct = weights.clone();
        distinct.sort_unstable();
        distinct.dedup();
        WeightedRoundRobin {
            rotation: Rotation::new(backends.len(), sequence, true, distinct.len(), rng),
        }
    }

    /// The length of one period of the smooth sequence over all backends:
    /// `sum(weights) / gcd(weights)`.
    #[must_use]
    pub fn period(&self) -> usize {
        self.rotation.full().len()
    }

    /// The `pos`-th entry of the sequence over all backends (modulo its period); `None` for an
    /// empty pool.
    #[must_use]
    pub fn entry(&self, pos: usize) -> Option<usize> {
        let full = self.rotation.full();
        let len = full.len();
        (len > 0).then(|| full.get(pos % len))
    }
}

impl Policy for WeightedRoundRobin {
    fn visit(
        &self,
        backends: &[Arc<Backend>],
        _ctx: &PickContext,
        params: &PoolParams,
        now: Instant,
        rng: &mut dyn Rng,
        visit: &mut Visit<'_>,
    ) {
        self.rotation.visit(backends, params, now, rng, visit);
    }
}

#[cfg(all(test, not(loom)))]
pub(super) mod reference {
    /// nginx's smooth weighted round robin, per step and O(n), exactly as nginx runs it; the
    /// oracle for `smooth_sequence`.
    pub(crate) fn nginx(weights: &[u32], steps: usize) -> Vec<usize> {
        let total: i64 = weights.iter().map(|&w| i64::from(w)).sum();
        let mut current = vec![0i64; weights.len()];
        let mut out = Vec::with_capacity(steps);
        for _ in 0..steps {
            let mut best = 0;
            for (i, &w) in weights.iter().enumerate() {
                current[i] += i64::from(w);
                if current[i] > current[best] {
                    best = i;
                }
            }
            current[best] -= total;
            out.push(best);
        }
        out
    }
}

#[cfg(all(test, loom))]
mod loom_tests;
