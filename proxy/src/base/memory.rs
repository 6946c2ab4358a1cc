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
//!
//! **Transparent huge pages are off for the process** ([`limit_huge_pages`]). mimalloc
//! asks for huge pages on its arenas (`madvise(MADV_HUGEPAGE)`), and with THP `always` the
//! kernel uses them for any large aligned region anyway. A 2 MiB page is resident as a whole:
//! after a burst of connections, one live allocation keeps its 2 MiB resident, a purge of 64 KiB
//! in it frees nothing until the page is split, and khugepaged (`max_ptes_none` 511 by default)
//! collapses sparsely used ranges back into huge pages, filling them with zeros. Measured
//! (docs/benchmarks.md, "Reliability"): with huge pages 30 MiB idle, 162 MiB holding 17,000
//! connections, 139 MiB a minute after they closed; without, 15 → 47 → 24 MiB (1.6× the
//! baseline). `prctl(PR_SET_THP_DISABLE)` at start keeps
//! the process on 4 KiB pages, so purged memory leaves RSS; nginx and HAProxy use small pages
//! too. `WEIR_THP=on` leaves the kernel's policy in force (for measuring, or for a host tuned
//! for huge pages).

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::Duration;

/// How often a worker looks (the allocator's purge delay is 1 s, so collecting more often would
/// find nothing new to purge).
pub const TICK: Duration = Duration::from_secs(1);

/// Ticks after the last park or close that still collect: enough for mimalloc's delayed purge
/// (1 s) to come due and run. The last of them forces the purge (`collect(true)`): mimalloc
/// extends its delay as more is freed, and without the forced call about 4 MiB freed at the
/// parks of 10,000 connections could stay resident for longer (400 B per connection measured,
/// gone with `MIMALLOC_PURGE_DELAY=0`; docs/benchmarks.md, "What an idle connection holds").
pub const TRAILING_TICKS: u32 = 3;

static COLLECT: OnceLock<fn(bool)> = OnceLock::new();

thread_local! {
    /// Connections parked or closed on this thread since its last tick.
    static FREED: Cell<u64> = const { Cell::new(0) };
    /// Ticks left that collect (refilled by activity).
    static TRAILING: Cell<u32> = const { Cell::new(0) };
}

/// Turn transparent huge pages off for this process (module doc) unless the environment
/// variable `WEIR_THP` is `on`. Call first thing in `main`; returns whether THP is off.
pub fn limit_huge_pages() -> bool {
    if std::env::var_os("WEIR_THP").is_some_and(|v| v == "on") {
        return false;
    }
    rustix::thread::disable_transparent_huge_pages(true).is_ok()
}

/// Register the allocator's collection: a function that, called on a thread, returns that
/// thread's freed memory to the OS as far as the allocator's purge policy allows (with `true`:
/// all of it, whatever the policy's delay). Called once by
/// the binary before it starts the proxy; later calls are ignored.
pub fn set_collect(collect: fn(bool)) {
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

fn tick_with(collect: Option<fn(bool)>) -> bool {
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
            // The last trailing tick (activity stopped): purge what is left, delay or not.
            collect(freed == 0 && left == 1);
            true
        }
        _ => false,
    }
}

/// mimalloc as the global allocator (both binaries): per-thread heaps suit the per-worker
/// runtimes, where a request allocates and frees on one thread.
///
/// Unlike the `mimalloc` crate's allocator, which sends every request through mimalloc's
/// aligned entry points, layouts with an alignment of at most 8 (nearly all of them) take the
/// plain ones: every mimalloc block is at least 8-aligned (its size classes are multiples of the
/// word size), and the plain path is mimalloc's fastest. callgrind put the aligned path at 3.8 %
/// of a proxied request's instructions.
#[cfg(feature = "mimalloc")]
#[derive(Debug, Clone, Copy, Default)]
pub struct MiMalloc;

/// The alignment every mimalloc block has.
#[cfg(feature = "mimalloc")]
const WORD_ALIGN: usize = 8;

#[cfg(feature = "mimalloc")]
#[allow(unsafe_code)]
// SAFETY (the impl): each method forwards to the mimalloc function with the contract the
// `GlobalAlloc` method needs: a block of at least `size` bytes aligned to `layout.align()` (or
// null), freed with `mi_free`, resized keeping the alignment.
unsafe impl std::alloc::GlobalAlloc for MiMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: plain or aligned allocation of `layout.size()` bytes (see the impl's comment).
        unsafe {
            if layout.align() <= WORD_ALIGN {
                libmimalloc_sys::mi_malloc(layout.size()).cast()
            } else {
                libmimalloc_sys::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: as `alloc`, zeroed.
        unsafe {
            if layout.align() <= WORD_ALIGN {
                libmimalloc_sys::mi_zalloc(layout.size()).cast()
            } else {
                libmimalloc_sys::mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: std::alloc::Layout) {
        // SAFETY: `ptr` came from one of this allocator's mimalloc calls.
        unsafe { libmimalloc_sys::mi_free(ptr.cast()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout`; the new block keeps its alignment.
        unsafe {
            if layout.align() <= WORD_ALIGN {
                libmimalloc_sys::mi_realloc(ptr.cast(), new_size).cast()
            } else {
                libmimalloc_sys::mi_realloc_aligned(ptr.cast(), new_size, layout.align()).cast()
            }
        }
    }
}

/// mimalloc's purge delay weir runs with, in milliseconds (mimalloc v3's default: 1,000).
///
/// A page freed at the parks of a burst of connections is handed back 100 ms after it was
/// freed instead of a second (or more: mimalloc extends the delay while more is freed), so
/// what a burst left behind leaves RSS while the workers still make the allocator calls that
/// purge it; the forced collection of [`tick`] catches the rest. Measured (docs/benchmarks.md,
/// "What an idle connection holds"): 1,263–1,296 B per idle connection at 1,000 ms on a quiet
/// machine, ≈ 870–890 B at 100 ms and 0 ms. A page reused within the delay is not purged, so
/// steady traffic, which reuses what it frees, pays nothing; `MIMALLOC_PURGE_DELAY` in the
/// environment still wins (for measuring).
#[cfg(feature = "mimalloc")]
pub const PURGE_DELAY_MS: i64 = 100;

/// mimalloc's option number of `purge_delay` (`mi_option_purge_delay` in v3's `mimalloc.h`;
/// the sys crate names only some options).
#[cfg(feature = "mimalloc")]
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Set mimalloc's options for a proxy ([`PURGE_DELAY_MS`]) unless the environment sets them.
/// Call first thing in `main`.
#[cfg(feature = "mimalloc")]
#[allow(unsafe_code)]
pub fn tune_mimalloc() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: `mi_option_set` takes plain integers and may be called at any time.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS as _) }
}

/// mimalloc's purge delay in force, in milliseconds.
#[cfg(feature = "mimalloc")]
#[allow(unsafe_code)]
#[must_use]
pub fn purge_delay_ms() -> i64 {
    // SAFETY: `mi_option_get` takes a plain integer and may be called at any time.
    let delay: std::ffi::c_long = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
    #[allow(
        clippy::useless_conversion,
        reason = "c_long is i64 on 64-bit Unix, not everywhere"
    )]
    i64::from(delay)
}

/// The collector to register with [`set_collect`] when [`MiMalloc`] is the global allocator:
/// hands this thread's freed pages to mimalloc's purge schedule and purges those whose delay
/// (1 s) has passed, or (`force`) all of them.
#[cfg(feature = "mimalloc")]
#[allow(unsafe_code)]
pub fn mimalloc_collect(force: bool) {
    // SAFETY: `mi_collect` takes no pointers and may be called on any thread at any time.
    unsafe { libmimalloc_sys::mi_collect(force) }
}

#[cfg(test)]
mod tests;
