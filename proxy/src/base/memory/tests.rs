use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};

static CALLS: AtomicUsize = AtomicUsize::new(0);
static FORCED: AtomicUsize = AtomicUsize::new(0);

fn count(force: bool) {
    CALLS.fetch_add(1, Ordering::Relaxed);
    if force {
        FORCED.fetch_add(1, Ordering::Relaxed);
    }
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
    // The last trailing tick forces the purge; the others do not.
    let forced = FORCED.load(Ordering::Relaxed);
    assert_eq!(calls_over(&[1, 0]), [true, true]);
    assert_eq!(
        FORCED.load(Ordering::Relaxed),
        forced,
        "activity, one quiet tick"
    );
    assert_eq!(calls_over(&[1, 0, 0, 0]), [true, true, true, false]);
    assert!(
        FORCED.load(Ordering::Relaxed) > forced,
        "the last trailing tick"
    );
}

/// The process-wide THP switch is set (and reads back as set).
#[test]
fn huge_pages_are_turned_off() {
    if std::env::var_os("WEIR_THP").is_some() {
        return;
    }
    assert!(limit_huge_pages());
    assert_eq!(
        rustix::thread::transparent_huge_pages_are_disabled().ok(),
        Some(true)
    );
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

/// weir runs with a 100 ms purge delay (mimalloc v3's default is 1,000 ms;
/// reading the default first checks that the option number is `purge_delay`'s).
#[cfg(feature = "mimalloc")]
#[test]
fn the_purge_delay_is_shortened() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    assert_eq!(purge_delay_ms(), 1000, "mimalloc v3's default purge delay");
    tune_mimalloc();
    assert_eq!(purge_delay_ms(), PURGE_DELAY_MS);
}
