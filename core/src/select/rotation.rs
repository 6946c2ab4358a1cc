//! The walk shared by `round_robin` and `weighted_round_robin` (C-POOL-4): one process-wide
//! cursor over a sequence of backend indices, the sequence being the smooth one *for the
//! backends that are available*.
//!
//! A pick takes the next position with one relaxed `fetch_add` on a cursor that every worker
//! shares, so consecutive picks from any worker follow one sequence. For `round_robin` the
//! sequence is the rotation 0, 1, …, n − 1; for `weighted_round_robin` it is nginx's smooth
//! weighted sequence, precomputed (`weighted.rs`).
//!
//! # Unavailable backends
//!
//! C-POOL-4 asks that while some backends are unavailable, the others keep a smooth interleaving
//! by their weights among themselves, as nginx does: `ngx_http_upstream_get_peer`
//! (`ngx_http_upstream_round_robin.c`) adds each *available* peer's weight to its
//! `current_weight`, takes the largest and subtracts the total of the available peers only, so a
//! peer that is down is simply not part of the rule. Giving a down backend's turn to whoever
//! comes next instead gives that backend a double turn (round robin over a, b, c with a down went
//! b, b, c), and drawing a random replacement (what weighted round robin did) gives runs of up to
//! five (`cbbccbbcbbccbbcbcccbbccc` for b, c of equal weight). Three ways to follow nginx were
//! weighed:
//!
//! 1. **nginx's rule per pick**, on per-backend current weights. One step reads and writes every
//!    backend's current weight as one transaction; nginx does it under the upstream's lock when
//!    workers share the state, which is a lock that every request of the pool takes (C-POOL-2
//!    forbids it). Done with one atomic per backend instead (add each weight, take the largest,
//!    subtract the total from it), two concurrent picks see each other's half-done steps and can
//!    take the same backend: with weights 2, 1 three picks, two of them concurrent, can give
//!    a, a, a, so the process no longer walks one sequence. It is also O(n) atomic writes per
//!    pick, on cache lines that every worker writes.
//! 2. **Skipping** the unavailable backends' positions of the sequence of all backends. Exact
//!    for round robin (the rotation with a backend left out is the rotation of the others), but
//!    not smooth for weights: with 1, 1, 1, 3 and the third down, nginx's `d a b d c d` becomes
//!    `d a b d d`, three d's in a row across the period, where nginx's rule over the three others
//!    gives `d a d b d`.
//! 3. **Changing the sequence**: when the set of available backends changes, build nginx's
//!    sequence for that set (for round robin: the available backends in index order, which is
//!    what nginx's rule gives for equal weights) and publish it; picks index it as before.
//!
//! weir does 3, the simplest that is exact: a pick stays one `fetch_add`, one load of the
//! published view (on the cursor's cache line) and one array read, concurrent picks still get
//! distinct positions of one sequence, and among the available backends the sequence is exactly
//! nginx's. With every backend available nothing changes: the view is the sequence of all
//! backends, as before.
//!
//! "Unavailable" here means a reason that lasts: disabled, draining, failing active checks or an
//! open circuit (C-POOL-3). A full slot (C-POOL-6), a slow-start draw (C-HEALTH-4) or a retry's
//! tried set (C-RETRY-2) change from one request to the next; for those the backend keeps its
//! turns and the driver asks the policy's fallback for another candidate, as before (`round_robin`:
//! the next backends in order; `weighted_round_robin`: weight-proportional draws from the current
//! sequence, then every backend from a random start). A backend's slow-start share therefore
//! stays its share of its own turns.
//!
//! # Noticing a change
//!
//! Reading every backend on every pick would be O(n) loads of cache lines that every request
//! writes. Instead a change is noticed by the picks themselves, in O(1) each:
//!
//! - a backend that goes down is noticed when its turn comes and it turns out to be down;
//! - while some backends are left out, each pick also reads one backend, in turn (cursor value
//!   mod n), and compares it with the published set, so a backend that comes back (or goes down
//!   before its turn) is noticed within n picks.
//!
//! The pick that notices a change rebuilds: it reads the whole pool's availability once, builds
//! the new sequence into the one of two tables that is not published, and publishes it with one
//! release store of the view; the position it is serving is then taken from the new sequence.
//! Two tables, so that a published one is never written while picks may read it. Rebuilds are
//! serialised by a flag taken with a compare-and-swap that nobody waits for: a pick that loses it
//! carries on with the published sequence (and a change it missed is noticed again by a later
//! pick), so selection never waits (C-POOL-5) and takes no lock (C-POOL-2).
//!
//! A rebuild costs O(n + L × d) for a new period L and d distinct weights, and allocates: about
//! 3 ns per entry and distinct weight in a release build, as for building the snapshot (7 µs
//! for 8 backends of weights 1..=8, 0.3 ms for 64 of weights 1..=64, 18 ms for 1024 of weights
//! 1..=100; for equal weights, tens of microseconds for 1024 backends). It is rare (a
//! backend's state changes at the pace of health checks and circuits), but a start-up where
//! hundreds of backends pass their first check one after the other, or a flapping backend,
//! could ask for one per change. So the rebuilds of a pool are spaced on the engine's clock by
//! [`REBUILD_SPACING`] times an upper estimate of their cost ([`REBUILD_NS_PER_STEP`] per entry
//! and distinct weight of the full period): at most about 5 % of one core however often
//! availability changes. A change inside that gap is served by the old sequence and the
//! fallback, and rebuilt by the next pick that notices it after the gap.
//!
//! # Where the new sequence starts
//!
//! The cursor keeps counting; the new sequence is aligned so that the position that noticed the
//! change lands at the same fraction of the new period as it had in the old one (each backend
//! has then had about its share of the new period so far), moved on past the backend picked just
//! before it if that one would come next. So switching sequences never gives a backend a double
//! turn: round robin over a, b, c that finds a down goes b, c, b, c, and weights 5, 1, 1 that
//! find the 5 down go on alternating the two 1s.

use super::Visit;
use super::smooth::{FALLBACK_DRAWS, smooth_sequence};
use crate::backend::{Availability, Backend, PoolParams};
use crate::rng::Rng;
use crate::sync::Padded;
use crate::sync::{Arc, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use crate::time::Instant;

/// Rebuilds of a pool are spaced by this many times their estimated cost (see the module doc).
pub const REBUILD_SPACING: u64 = 20;

/// The estimated cost of a rebuild per entry and distinct weight of the full period, in
/// nanoseconds: about 3 measured (release build, 2-core x86_64), rounded up.
pub const REBUILD_NS_PER_STEP: u64 = 4;

/// `last_rebuild` before the first rebuild.
const NEVER: u64 = u64::MAX;

/// Largest period a table can have: the view packs it (and its base) in 31 bits.
const MAX_TABLE: usize = (1 << 31) - 1;

/// A sequence of backend indices, as compact as the pool allows.
#[derive(Debug)]
pub(super) enum Sequence {
    /// 0, 1, …, n − 1: round robin, nothing stored.
    Rotation(usize),
    U16(Box<[u16]>),
    U32(Box<[u32]>),
}

impl Sequence {
    pub(super) fn len(&self) -> usize {
        match self {
            Sequence::Rotation(n) => *n,
            Sequence::U16(s) => s.len(),
            Sequence::U32(s) => s.len(),
        }
    }

    /// The entry at `pos` (< `len()`).
    pub(super) fn get(&self, pos: usize) -> usize {
        match self {
            Sequence::Rotation(_) => pos,
            Sequence::U16(s) => usize::from(s[pos]),
            Sequence::U32(s) => s[pos] as usize,
        }
    }
}

/// Which sequence picks walk, packed into one word so that one store publishes it: bit 0 the
/// table (and excluded set) in use, bit 1 whether some backends are left out, bits 2..33 the
/// table's period (0: the sequence of all backends), bits 33..64 the base (cursor value `t` is
/// at position `(t − base) mod period`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct View(u64);

impl View {
    /// All backends, nothing left out, the cursor's value is the position: the initial view.
    const ALL: View = View(0);

    fn new(buf: usize, degraded: bool, len: usize, base: usize) -> View {
        debug_assert!(len <= MAX_TABLE && base <= MAX_TABLE);
        View(
            (buf as u64 & 1)
                | (u64::from(degraded) << 1)
                | ((len as u64) << 2)
                | ((base as u64) << 33),
        )
    }

    fn buf(self) -> usize {
        (self.0 & 1) as usize
    }

    fn degraded(self) -> bool {
        self.0 & 2 != 0
    }

    /// The table's period; 0 when the view is the sequence of all backends.
    fn table_len(self) -> usize {
        ((self.0 >> 2) & MAX_TABLE as u64) as usize
    }

    fn base(self) -> usize {
        (self.0 >> 33) as usize
    }
}

/// What every pick touches, on one cache line: the cursor it advances and the view it reads.
#[derive(Debug)]
struct Head {
    cursor: AtomicUsize,
    view: AtomicU64,
}

/// The shared walk. See the module doc.
#[derive(Debug)]
pub(super) struct Rotation {
    /// The sequence over all backends.
    full: Sequence,
    /// Weighted: rebuilds use nginx's rule and the fallback draws by weight.
    weighted: bool,
    head: Padded<Head>,
    /// Two tables of the full period's length (a period over fewer backends is never longer:
    /// the gcd of a subset of the weights is a multiple of the gcd of all of them). Empty when
    /// the period does not fit a view, in which case the policy never leaves a backend out.
    tables: [Box<[AtomicU32]>; 2],
    /// For each table, the backends it leaves out (one bit each).
    excluded: [Box<[AtomicU64]>; 2],
    building: AtomicBool,
    /// When the last rebuild was published (nanoseconds of the engine's clock), or `NEVER`.
    last_rebuild: AtomicU64,
    /// The least time between two rebuilds, in nanoseconds.
    spacing_ns: u64,
}

impl Rotation {
    /// A walk over `full` (a sequence over `n` backends with `classes` distinct weights) from
    /// a random position drawn from `rng`.
    pub(super) fn new(
        n: usize,
        full: Sequence,
        weighted: bool,
        classes: usize,
        rng: &mut dyn Rng,
    ) -> Rotation {
        let len = full.len();
        let start = rng.below(len as u64) as usize;
        let capacity = if len <= MAX_TABLE { len } else { 0 };
        let table = || (0..capacity).map(|_| AtomicU32::new(0)).collect();
        let bits = || (0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect();
        Rotation {
            full,
            weighted,
            head: Padded(Head {
                cursor: AtomicUsize::new(start),
                view: AtomicU64::new(View::ALL.0),
            }),
            tables: [table(), table()],
            excluded: [bits(), bits()],
            building: AtomicBool::new(false),
            last_rebuild: AtomicU64::new(NEVER),
            spacing_ns: (REBUILD_SPACING * REBUILD_NS_PER_STEP)
                .saturating_mul(len as u64)
                .saturating_mul(classes.max(1) as u64),
        }
    }

    /// The sequence over all backends.
    pub(super) fn full(&self) -> &Sequence {
        &self.full
    }

    /// Offer candidates for one pick (see the module doc and [`super::Policy::visit`]).
    pub(super) fn visit(
        &self,
        backends: &[Arc<Backend>],
        params: &PoolParams,
        now: Instant,
        rng: &mut dyn Rng,
        visit: &mut Visit<'_>,
    ) {
        let n = backends.len();
        if n == 0 || self.full.len() == 0 {
            return;
        }
        let t = self.head.cursor.fetch_add(1, Ordering::Relaxed);
        let mut view = self.view();
        if view.degraded() {
            // One backend per pick, in turn: has it come back (or gone down) since the published
            // set was read?
            let r = t % n;
            if self.excluded(view, r) != is_down(&backends[r], params, now) {
                self.rebuild(backends, params, now, t, view);
                view = self.view();
            }
        }
        let first = self.entry(view, t);
        // The loom models check the publication: a table is only read once it is whole.
        #[cfg(loom)]
        assert!(view.table_len() == 0 || !self.excluded(view, first));
        if visit(first, rng).is_break() || n == 1 {
            return;
        }
        let mut second = None;
        let newly_down = backends
            .get(first)
            .is_some_and(|b| !self.excluded(view, first) && is_down(b, params, now));
        if newly_down {
            self.rebuild(backends, params, now, t, view);
            let fresh = self.view();
            if fresh != view {
                // Serve this position from the new sequence: that is where the next picks go on.
                view = fresh;
                let i = self.entry(view, t);
                if i != first {
                    if visit(i, rng).is_break() {
                        return;
                    }
                    second = Some(i);
                }
            }
        }
        let offered = |i: usize| i == first || Some(i) == second;
        let sweep_from = if self.weighted {
            let len = self.len(view);
            for _ in 0..FALLBACK_DRAWS {
                let i = self.at(view, rng.below(len as u64) as usize);
                if !offered(i) && visit(i, rng).is_break() {
                    return;
                }
            }
            rng.below(n as u64) as usize
        } else {
            first + 1
        };
        let mut i = sweep_from % n;
        for _ in 0..n {
            if !offered(i) && visit(i, rng).is_break() {
                return;
            }
            i += 1;
            if i == n {
                i = 0;
            }
        }
    }

    fn view(&self) -> View {
        View(self.head.view.load(Ordering::Acquire))
    }

    /// The period of the view's sequence.
    fn len(&self, view: View) -> usize {
        match view.table_len() {
            0 => self.full.len(),
            len => len,
        }
    }

    /// The position of cursor value `t` in the view's sequence.
    fn position(&self, view: View, t: usize) -> usize {
        let len = self.len(view);
        // `base < len`: every view is built with its base reduced modulo its period.
        let (pos, base) = (t % len, view.base());
        debug_assert!(base < len);
        if pos >= base {
            pos - base
        } else {
            pos + len - base
        }
    }

    /// The view's entry at `pos` (< its period).
    fn at(&self, view: View, pos: usize) -> usize {
        match view.table_len() {
            0 => self.full.get(pos),
            _ => self.tables[view.buf()][pos].load(Ordering::Relaxed) as usize,
        }
    }

    fn entry(&self, view: View, t: usize) -> usize {
        self.at(view, self.position(view, t))
    }

    /// Whether the view leaves backend `i` out.
    fn excluded(&self, view: View, i: usize) -> bool {
        view.degraded()
            && self.excluded[view.buf()]
                .get(i / 64)
                .is_some_and(|w| (w.load(Ordering::Relaxed) >> (i % 64)) & 1 == 1)
    }

    /// Publish the sequence for the backends available now, serving cursor value `t` next, if
    /// this pick may (the spacing has passed, no other rebuild is under way) and `seen` is still
    /// the published view (otherwise another pick has just rebuilt from a fresher reading).
    fn rebuild(
        &self,
        backends: &[Arc<Backend>],
        params: &PoolParams,
        now: Instant,
        t: usize,
        seen: View,
    ) {
        if self.tables[0].is_empty() {
            return;
        }
        let at = now.as_nanos();
        let last = self.last_rebuild.load(Ordering::Relaxed);
        if last != NEVER && at < last.saturating_add(self.spacing_ns) {
            return;
        }
        if self
            .building
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let _building = Building(&self.building);
        if self.view() == seen {
            let view = self.build(backends, params, now, t, seen);
            self.head.view.store(view.0, Ordering::Release);
            self.last_rebuild.store(at, Ordering::Relaxed);
        }
    }

    /// Build the view for the backends available now into the table `seen` does not use.
    fn build(
        &self,
        backends: &[Arc<Backend>],
        params: &PoolParams,
        now: Instant,
        t: usize,
        seen: View,
    ) -> View {
        let up: Vec<bool> = backends.iter().map(|b| !is_down(b, params, now)).collect();
        let buf = seen.buf() ^ 1;
        for (w, word) in self.excluded[buf].iter().enumerate() {
            let bits = (0..64)
                .filter(|j| up.get(w * 64 + j) == Some(&false))
                .fold(0u64, |acc, j| acc | 1 << j);
            word.store(bits, Ordering::Relaxed);
        }
        let members: Vec<usize> = (0..up.len()).filter(|&i| up[i]).collect();
        let degraded = members.len() < up.len();
        // Where the old sequence was, and who it gave the position before `t` (skipping those
        // that are now down): the new sequence starts at the same fraction, past that backend.
        let old_len = self.len(seen);
        let p = self.position(seen, t);
        let last = (1..=old_len)
            .map(|back| self.at(seen, (p + old_len - back) % old_len))
            .find(|&i| up.get(i) == Some(&true));
        let align = |len: usize, entry: &dyn Fn(usize) -> usize| -> usize {
            // p < old_len and len ≤ 2^31, so the product fits in a u64.
            let k0 = (p as u64 * len as u64 / old_len as u64) as usize;
            let k = (0..len)
                .map(|d| (k0 + d) % len)
                .find(|&k| Some(entry(k)) != last)
                .unwrap_or(k0);
            (t % len + len - k) % len
        };
        let all = |k: usize| self.full.get(k);
        if !degraded || members.is_empty() {
            // Everything is up; or nothing is, and then every backend is marked as left out so
            // that its rejections ask for nothing and the recheck notices the first to return.
            return View::new(buf, degraded, 0, align(self.full.len(), &all));
        }
        let seq: Vec<u32> = if self.weighted {
            let weights: Vec<u32> = members
                .iter()
                .map(|&i| backends[i].weight().clamp(1, 100))
                .collect();
            smooth_sequence(&weights)
                .into_iter()
                .map(|j| members[j as usize] as u32)
                .collect()
        } else {
            members.iter().map(|&i| i as u32).collect()
        };
        let table = &self.tables[buf];
        if seq.is_empty() || seq.len() > table.len() {
            // Cannot happen (see `tables`); serve everything rather than a truncated table.
            return View::new(buf, degraded, 0, align(self.full.len(), &all));
        }
        for (slot, &i) in table.iter().zip(&seq) {
            slot.store(i, Ordering::Relaxed);
        }
        let base = align(seq.len(), &|k| seq[k] as usize);
        View::new(buf, true, seq.len(), base)
    }
}

/// Clears the rebuild flag when dropped, so that a rebuild that panicked (it should not) cannot
/// stop every later one: the panicking request fails, the pool keeps adapting.
#[derive(Debug)]
struct Building<'a>(&'a AtomicBool);

impl Drop for Building<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Down for a reason that lasts (see the module doc): everything but available and saturated.
fn is_down(b: &Backend, params: &PoolParams, now: Instant) -> bool {
    !matches!(
        b.availability(params, now),
        Availability::Available | Availability::Saturated
    )
}

#[cfg(all(test, loom))]
mod loom_tests;
