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
