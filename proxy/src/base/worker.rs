//! Per-worker state on the request path: its random generator. (The selection policies keep one
//! cursor per process since C-POOL-4's refinement, so no worker index is handed to them.)
//!
//! Each worker thread owns one [`WyRand`] seeded from OS entropy (std's `RandomState` keys come
//! from the OS; docs/architecture.md: only adapters draw on entropy). A thread-local generator
//! needs no lock and no atomic: the request path draws request ids, round-robin starts, P2C
//! choices and slow-start admissions from it.

use std::cell::RefCell;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

use weir_core::WyRand;

thread_local! {
    static RNG: RefCell<WyRand> = RefCell::new(WyRand::new(entropy_seed()));
}

/// A 64-bit seed from the OS's entropy (through std's randomly keyed `RandomState`), mixed with
/// the thread's id so two threads never share a stream.
#[must_use]
pub fn entropy_seed() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(0x7765_6972);
    std::hash::Hash::hash(&std::thread::current().id(), &mut h);
    h.finish()
}

/// Runs `f` with this thread's generator. Never call it re-entrantly (it is a `RefCell`).
pub fn with_rng<R>(f: impl FnOnce(&mut WyRand) -> R) -> R {
    RNG.with(|rng| f(&mut rng.borrow_mut()))
}

#[cfg(test)]
mod tests;
