//! The admission gate's waiting (C-LOAD-1), on tokio. The gate's protocol (enter, cancel,
//! leave) is the request engine's (`weir_core::exchange`, tested in core and end to end by the
//! conformance suite's C-LOAD-1 cases); weir-proxy's `Admission` only parks a queued request
//! until the slot is handed to it or its deadline comes. These tests follow the engine's
//! protocol by hand around that waiting.

use std::sync::Arc;
use std::time::Duration;

use weir_core::admission::{Cancel, Entry, GateParams};
use weir_tokio::base::clock::Clock;
use weir_tokio::services::admission::Admission;

fn admission(max: u32, wait: Duration) -> (Arc<Admission>, Clock) {
    let params = GateParams::new(max, None, wait).expect("valid gate");
    let clock = Clock::new(weir_tokio::rt());
    (Arc::new(Admission::new(params, clock)), clock)
}

/// Enter a full gate: the queued ticket.
fn queue(a: &Admission, clock: Clock) -> weir_core::admission::Ticket {
    match a.gate().enter(clock.now()) {
        Entry::Queued(t) => t,
        other => panic!("expected a queued ticket, got {other:?}"),
    }
}

/// C-LOAD-1: a queued request is woken when the slot is handed to it, long before its deadline,
/// and its `cancel` then says it was admitted.
#[tokio::test]
async fn c_load_1_handed_slot_wakes_the_waiter() {
    let (a, clock) = admission(1, Duration::from_secs(5));
    assert_eq!(a.gate().enter(clock.now()), Entry::Admitted);
    let ticket = queue(&a, clock);
    let a2 = Arc::clone(&a);
    let waiter = tokio::spawn(async move { a2.wait(ticket.id, Some(ticket.deadline)).await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let handed = a
        .gate()
        .leave(clock.now())
        .expect("the slot goes to the queued ticket");
    a.wake(handed);
    let woken = tokio::time::timeout(Duration::from_secs(1), waiter)
        .await
        .expect("woken before the deadline")
        .expect("task");
    assert!(woken);
    assert_eq!(
        a.gate().cancel(ticket.id, clock.now()),
        Cancel::AlreadyAdmitted
    );
    assert_eq!(a.gate().queued(), 0);
}

/// A wake-up that arrives before the waiter parked is remembered.
#[tokio::test]
async fn c_load_1_early_wake_up_is_not_lost() {
    let (a, clock) = admission(1, Duration::from_secs(5));
    assert_eq!(a.gate().enter(clock.now()), Entry::Admitted);
    let ticket = queue(&a, clock);
    a.wake(a.gate().leave(clock.now()).expect("handed"));
    let woken = tokio::time::timeout(
        Duration::from_secs(1),
        a.wait(ticket.id, Some(ticket.deadline)),
    )
    .await
    .expect("at once");
    assert!(woken);
}

/// C-LOAD-1: without a hand-off the wait ends at the deadline, not before; `cancel` then says
/// the ticket expired.
#[tokio::test]
async fn c_load_1_wait_ends_at_the_deadline() {
    let (a, clock) = admission(1, Duration::from_millis(30));
    assert_eq!(a.gate().enter(clock.now()), Entry::Admitted);
    let ticket = queue(&a, clock);
    let started = std::time::Instant::now();
    assert!(!a.wait(ticket.id, Some(ticket.deadline)).await);
    assert!(started.elapsed() >= Duration::from_millis(30));
    assert_eq!(a.gate().cancel(ticket.id, clock.now()), Cancel::Expired);
    assert_eq!(a.gate().queued(), 0);
}
