//! The gate's FIFO of waiters: plain single-threaded data, always used under the gate's mutex.
//!
//! Each waiter is a record `{id, deadline, state}` in a `VecDeque` ordered by id. Ids increase
//! with every push and deadlines never decrease (every waiter waits the same `queue_timeout` from
//! a clamped `now`), so:
//! - the waiters that have expired are always a prefix of those still waiting, and one cursor
//!   (`scan`) that only moves forward finds the next waiter to admit in amortised O(1);
//! - a waiter leaving from the middle (`settle`) is found by binary search on the id in O(log n)
//!   and becomes a tombstone (`Gone`) instead of shifting its neighbours; tombstones are popped
//!   when they reach the front and compacted away when the deque is full, so the capacity
//!   reserved at construction is never outgrown in steady state.
//!
//! A record outlives the wait: an `Admitted` or `Expired` record stays until its owner settles it,
//! which is how `settle` can still tell a task whose timer raced a hand-off that it owns a slot.

use std::collections::VecDeque;

use crate::time::Instant;

/// Where a queued request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// Waiting for a slot; counts towards `queued`.
    Waiting,
    /// A leaving request handed it its slot; its owner has not settled yet.
    Admitted,
    /// Its deadline passed before a slot was free; its owner has not settled yet.
    Expired,
    /// Settled (tombstone).
    Gone,
}

#[derive(Debug, Clone, Copy)]
struct Waiter {
    id: u64,
    deadline: Instant,
    state: State,
}

#[derive(Debug)]
pub(super) struct Queue {
    entries: VecDeque<Waiter>,
    next_id: u64,
    /// Latest `now` seen; earlier instants are clamped to it.
    last_now: Instant,
    /// Entries in state `Waiting`.
    live: usize,
    /// Entries in state `Gone` still stored.
    gone: usize,
    /// No entry before this index is `Waiting`.
    scan: usize,
    /// `Expired` entries in `notify..scan` have not been reported by `report_expired` yet.
    notify: usize,
    /// Number of those unreported `Expired` entries.
    unreported: usize,
    /// A deadline at or before that of every unreported `Expired` entry (valid while `unreported > 0`).
    unreported_since: Instant,
}

impl Queue {
    /// An empty queue with room for `capacity` records before it must compact or grow.
    pub(super) fn with_capacity(capacity: usize) -> Queue {
        Queue {
            entries: VecDeque::with_capacity(capacity),
            next_id: 0,
            last_now: Instant::ZERO,
            live: 0,
            gone: 0,
            scan: 0,
            notify: 0,
            unreported: 0,
            unreported_since: Instant::ZERO,
        }
    }

    /// Clamp `now` to the latest instant seen (time never goes backwards here).
    pub(super) fn observe(&mut self, now: Instant) -> Instant {
        self.last_now = self.last_now.max(now);
        self.last_now
    }

    /// Waiters still waiting (for tests: the gate's word mirrors it).
    #[cfg(all(test, not(loom)))]
    pub(super) fn live(&self) -> usize {
        self.live
    }

    /// Records stored, tombstones included (for tests).
    #[cfg(all(test, not(loom)))]
    pub(super) fn stored(&self) -> usize {
        self.entries.len()
    }

    /// Capacity of the record deque (for tests: it must not grow in steady state).
    #[cfg(all(test, not(loom)))]
    pub(super) fn capacity(&self) -> usize {
        self.entries.capacity()
    }

    /// Append a waiter with `deadline`; returns its id.
    pub(super) fn push(&mut self, deadline: Instant) -> u64 {
        if self.entries.len() == self.entries.capacity() && self.gone > 0 {
            self.compact();
        }
        let id = self.next_id;
        self.next_id += 1;
        self.entries.push_back(Waiter {
            id,
            deadline,
            state: State::Waiting,
        });
        self.live += 1;
        id
    }

    /// Mark every waiter whose deadline is at or before `now` as expired; returns how many.
    pub(super) fn advance(&mut self, now: Instant) -> usize {
        let mut expired = 0;
        while let Some(w) = self.entries.get_mut(self.scan) {
            if w.state == State::Waiting {
                if w.deadline > now || mutated!(GATE_NEVER_EXPIRES) {
                    break;
                }
                w.state = State::Expired;
                if self.unreported == 0 {
                    self.unreported_since = w.deadline;
                }
                self.unreported += 1;
                self.live -= 1;
                expired += 1;
            }
            self.scan += 1;
        }
        expired
    }

    /// Hand a slot to the first waiter (call [`Queue::advance`] first so it has not expired).
    pub(super) fn admit_head(&mut self) -> Option<u64> {
        while let Some(w) = self.entries.get_mut(self.scan) {
            self.scan += 1;
            if w.state == State::Waiting {
                w.state = State::Admitted;
                self.live -= 1;
                return Some(w.id);
            }
        }
        None
    }

    /// Settle the record of `id`: returns the state it was in (`None` if unknown or settled).
    pub(super) fn settle(&mut self, id: u64) -> Option<State> {
        let index = self.entries.binary_search_by_key(&id, |w| w.id).ok()?;
        let w = &mut self.entries[index];
        let was = w.state;
        match was {
            State::Gone => return None,
            State::Waiting => self.live -= 1,
            State::Expired if index >= self.notify => self.unreported -= 1,
            State::Expired | State::Admitted => {}
        }
        w.state = State::Gone;
        self.gone += 1;
        self.trim_front();
        Some(was)
    }

    /// Call `f` with the id of every expired waiter not reported before; returns how many.
    pub(super) fn report_expired(&mut self, mut f: impl FnMut(u64)) -> usize {
        let mut reported = 0;
        if self.unreported > 0 {
            // notify <= scan <= len always holds; the clamps only make that visible locally.
            let end = self.scan.min(self.entries.len());
            for w in self.entries.range(self.notify.min(end)..end) {
                if w.state == State::Expired {
                    f(w.id);
                    reported += 1;
                }
            }
        }
        self.notify = self.scan;
        self.unreported = 0;
        reported
    }

    /// The next instant at which `advance` will expire someone, or an instant already past when
    /// expired waiters wait to be reported.
    pub(super) fn next_deadline(&mut self) -> Option<Instant> {
        if self.unreported > 0 {
            return Some(self.unreported_since);
        }
        // Moving `scan` past settled records keeps its invariant and saves later scans.
        while let Some(w) = self.entries.get(self.scan) {
            if w.state == State::Waiting {
                return Some(w.deadline);
            }
            self.scan += 1;
        }
        None
    }

    /// Pop tombstones off the front.
    fn trim_front(&mut self) {
        while self.entries.front().is_some_and(|w| w.state == State::Gone) {
            self.entries.pop_front();
            self.gone -= 1;
            self.scan = self.scan.saturating_sub(1);
            self.notify = self.notify.saturating_sub(1);
        }
    }

    /// Drop every tombstone, keeping order and the cursors' meaning. O(n), no allocation. It runs
    /// only when the deque is full; with twice `max_queue` reserved and at most `max_queue`
    /// waiting, that frees about half the deque, so the cost is amortised O(1) per settlement as
    /// long as owners settle their records promptly.
    fn compact(&mut self) {
        let (scan, notify) = (self.scan, self.notify);
        let (mut index, mut new_scan, mut new_notify) = (0, 0, 0);
        self.entries.retain(|w| {
            let keep = w.state != State::Gone;
            if keep {
                new_scan += usize::from(index < scan);
                new_notify += usize::from(index < notify);
            }
            index += 1;
            keep
        });
        self.scan = new_scan;
        self.notify = new_notify;
        self.gone = 0;
    }
}
