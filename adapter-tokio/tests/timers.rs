//! The request timer a keep-alive connection keeps across its requests (`rt::timeout_at_in`):
//! a sleep armed for an earlier request's deadline is kept when the next deadline is
//! later and moved only when it fires; a deadline earlier than the kept one moves it at once.
//! Either way each bound ends at its own deadline, never at a kept one. Tokio's paused clock:
//! the times are exact.

use std::time::Duration;

use weir_proxy::rt::{self, TimerSlot};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// `d` after the paused clock's `t0`, as the runtime's instant.
fn after(t0: tokio::time::Instant, d: Duration) -> std::time::Instant {
    (t0 + d).into_std()
}

#[tokio::test(start_paused = true)]
async fn a_kept_timer_due_earlier_than_the_next_deadline_does_not_end_the_next_bound() {
    let rt = weir_tokio::rt();
    let t0 = tokio::time::Instant::now();
    let mut slot: TimerSlot = None;
    // The first request arms the slot at t0 + 1 s and is answered after 100 ms.
    let first = rt::timeout_at_in(rt, after(t0, secs(1)), &mut slot, async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        7
    });
    assert_eq!(first.await.ok(), Some(7));
    // The next one is bounded at t0 + 5 s and never answered: the kept sleep fires at t0 + 1 s,
    // is moved, and the bound ends at t0 + 5 s.
    let second = rt::timeout_at_in(
        rt,
        after(t0, secs(5)),
        &mut slot,
        std::future::pending::<()>(),
    );
    assert!(second.await.is_err(), "the bound must end at its deadline");
    assert_eq!(tokio::time::Instant::now() - t0, secs(5));
}

#[tokio::test(start_paused = true)]
async fn a_deadline_earlier_than_the_kept_timer_moves_it() {
    let rt = weir_tokio::rt();
    let t0 = tokio::time::Instant::now();
    let mut slot: TimerSlot = None;
    let first = rt::timeout_at_in(rt, after(t0, secs(30)), &mut slot, async {
        tokio::time::sleep(Duration::from_millis(10)).await;
    });
    assert!(first.await.is_ok());
    let second = rt::timeout_at_in(
        rt,
        after(t0, secs(2)),
        &mut slot,
        std::future::pending::<()>(),
    );
    assert!(second.await.is_err());
    assert_eq!(tokio::time::Instant::now() - t0, secs(2));
}

#[tokio::test(start_paused = true)]
async fn a_future_ready_before_its_kept_timer_fires_is_not_cut_short() {
    let rt = weir_tokio::rt();
    let t0 = tokio::time::Instant::now();
    let mut slot: TimerSlot = None;
    let first = rt::timeout_at_in(rt, after(t0, secs(1)), &mut slot, async {
        tokio::time::sleep(Duration::from_millis(10)).await;
    });
    assert!(first.await.is_ok());
    // Bounded at t0 + 10 s, answered at t0 + 3 s: the kept sleep (t0 + 1 s) fires in between
    // and must not end it.
    let second = rt::timeout_at_in(rt, after(t0, secs(10)), &mut slot, async {
        tokio::time::sleep_until(t0 + secs(3)).await;
        "answered"
    });
    assert_eq!(second.await.ok(), Some("answered"));
    assert_eq!(tokio::time::Instant::now() - t0, secs(3));
}
