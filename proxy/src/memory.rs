//! Handing memory back to the OS after connections park or close (docs/proxy.md "Idle
//! connections").
//!
//! A parked or closed connection frees its buffers on its worker thread, but an allocator with
//! per-thread heaps (mimalloc, which both binaries use) returns freed pages to the OS only
//! lazily, from inside later allocator calls and only after a purge delay (mimalloc v3: 1 s).
//! A worker whose connections all went idle makes no more allocator calls, so without help its
//! RSS stays at the peak of the burst that opened them (measured: 17 KiB instead of 3.5 KiB per
//! idle connection at 10,000 connections).
//!
//! The allocator is the binary's choice, so the binary registers how to collect
//! ([`set_collect`]); weir-proxy only decides *when*: each worker counts the connections it
//! parked or closed ([`note_freed`]), and a once-a-second tick ([`tick`]) calls the collector on
//! that worker while there was such activity in the last [`TRAILING_TICKS`] ticks: the first
//! calls hand the freed pages to the allocator's purge schedule, the later ones (after its
//! delay) purge them. A worker with no such activity never calls it; under steady traffic on
//! long-lived connections nothing is collected.

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::Duration;

/// How often a worker looks (the allocator's purge delay is 1 s, so collecting more often would
/// find nothing new to purge).
pub const TICK: Duration = Duration::from_secs(1);

/// Ticks after the last park or close that still collect: enough for mimalloc's delayed purge
/// (1 s) to come due and run.
pub const TRAILING_TICKS: u32 = 3;

static COLLECT: OnceLock<fn()> = OnceLock::new();

thread_local! {
    /// Connections parked or closed on this thread since its last tick.
    static FREED: Cell<u64> = const { Cell::new(0) };
    /// Ticks left that collect (refilled by activity).
    static TRAILING: Cell<u32> = const { Cell::new(0) };
}

/// Register the allocator's collection: a function that, called on a thread, returns that
/// thread's freed memory to the OS as far as the allocator's purge policy allows. Called once by
/// the binary before it starts the proxy; later calls are ignored.
pub fn set_collect(collect: fn()) {
    let _ = COLLECT.set(collect);
}

/// Whether a collector is registered (workers run the tick only then).
#[must_use]
pub fn has_collect() -> bool {
    COLLECT.get().is_some()
}

/// A connection on this thread parked or closed (its buffers were, or are about to be, freed).
pub fn note_freed() {
    FREED.with(|f| f.set(f.get() + 1));
}

/// One tick on this worker thread: calls the collector when connections parked or closed within
/// the last [`TRAILING_TICKS`] ticks. Returns whether it did.
pub fn tick() -> bool {
    tick_with(COLLECT.get().copied())
}

fn tick_with(collect: Option<fn()>) -> bool {
    let freed = FREED.with(|f| f.replace(0));
    let left = TRAILING.with(|t| {
        let left = if freed > 0 {
            TRAILING_TICKS
        } else {
            t.get().saturating_sub(1)
        };
        t.set(left);
        left
    });
    match collect {
        Some(collect) if freed > 0 || left > 0 => {
            collect();
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static CALLS: AtomicUsize = AtomicUsize::new(0);

    fn count() {
        CALLS.fetch_add(1, Ordering::Relaxed);
    }

    /// Runs on its own thread: the counters are thread-local.
    fn calls_over(ticks: &[u64]) -> Vec<bool> {
        let ticks = ticks.to_vec();
        std::thread::spawn(move || {
            ticks
                .iter()
                .map(|&freed| {
                    for _ in 0..freed {
                        note_freed();
                    }
                    tick_with(Some(count))
                })
                .collect()
        })
        .join()
        .unwrap_or_default()
    }

    #[test]
    fn c_path_12_collects_only_after_parks_and_for_the_trailing_ticks() {
        // Nothing parked: never collects.
        assert_eq!(calls_over(&[0, 0, 0]), [false, false, false]);
        // A burst of parks: collects on that tick and the next TRAILING_TICKS - 1, then stops.
        assert_eq!(
            calls_over(&[5, 0, 0, 0, 0, 0]),
            [true, true, true, false, false, false]
        );
        // New activity refills the window.
        assert_eq!(
            calls_over(&[1, 0, 1, 0, 0, 0]),
            [true, true, true, true, true, false]
        );
        let before = CALLS.load(Ordering::Relaxed);
        assert_eq!(calls_over(&[2, 0]), [true, true]);
        assert!(CALLS.load(Ordering::Relaxed) >= before + 2);
    }

    #[test]
    fn without_a_collector_nothing_is_called() {
        let r = std::thread::spawn(|| {
            note_freed();
            tick_with(None)
        })
        .join();
        assert_eq!(r.ok(), Some(false));
    }
}
