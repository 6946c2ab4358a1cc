//! The synchronisation facade for shared hot-path state.
//!
//! Every type that is shared between request tasks (round-robin cursors, per-backend slots,
//! breaker state, the retry budget, bucket shards) is written against these re-exports. Under
//! `--cfg loom` they become loom's model-checked versions, and each protocol has a `loom` model
//! (`RUSTFLAGS="--cfg loom" cargo test -p weir-core --release loom`). This is tokio's
//! `src/loom/mod.rs` pattern.

#![allow(unused_imports, dead_code)] // each item is used by some machine, not all by each

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Mutex, MutexGuard};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};

/// Lock a mutex, recovering the data if a previous holder panicked. Every critical section in
/// core leaves its data consistent at each step, so a poisoned lock holds valid state and one
/// panicking task must not wedge every later request.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// A spin-then-yield lock for short, bounded critical sections on the per-request path (the
/// local rate-limit store's shards). Unlocking is one release store, not a second locked
/// read-modify-write as with `std::sync::Mutex` (which must check for sleeping waiters).
///
/// Only for sections that are O(1), never allocate, never block and never call out: then a
/// holder runs to its unlock within nanoseconds unless the OS preempts it, and a waiter that
/// finds the lock still taken after a short spin yields its time slice to let the holder
/// finish ([`SpinThenYield`]). There is no poisoning, which is what [`lock`] does for `std`
/// mutexes anyway. Under loom this is loom's model-checked mutex.
#[cfg(not(loom))]
pub(crate) type SpinLock<T> = spin::mutex::SpinMutex<T, SpinThenYield>;
#[cfg(loom)]
pub(crate) type SpinLock<T> = loom::sync::Mutex<T>;

/// Lock a [`SpinLock`].
#[cfg(not(loom))]
pub(crate) fn spin_lock<T>(m: &SpinLock<T>) -> spin::mutex::SpinMutexGuard<'_, T> {
    m.lock()
}
/// Lock a [`SpinLock`].
#[cfg(loom)]
pub(crate) fn spin_lock<T>(m: &SpinLock<T>) -> MutexGuard<'_, T> {
    lock(m)
}

/// The waiting strategy of [`SpinLock`]: a burst of spin-loop hints (a critical section is tens
/// of nanoseconds), then a yield, since a lock still held after the burst means its holder was
/// preempted and spinning on would only burn the core it needs.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct SpinThenYield;

#[cfg(not(loom))]
impl spin::RelaxStrategy for SpinThenYield {
    fn relax() {
        for _ in 0..64 {
            core::hint::spin_loop();
        }
        std::thread::yield_now();
    }
}

/// A value alone on its cache line(s), so that values written by different threads (per-worker
/// cursors, neighbouring store shards) never share one (false sharing). 128 bytes: adjacent-line
/// prefetching pairs lines on x86.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

impl<T> core::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}
