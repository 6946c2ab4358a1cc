//! The admission gate's waiting (C-LOAD-1), on tokio: moved out of weir-proxy, which has no
//! runtime of its own.

use std::sync::Arc;
use std::time::Duration;

use weir_core::admission::{GateParams, Overloaded};
use weir_tokio::admission::Admission;
use weir_tokio::clock::Clock;

fn admission(max: u32, queue: Option<u32>, wait: Duration) -> Arc<Admission> {
    let params = GateParams::new(max, queue, wait).expect("valid gate");
    Arc::new(Admission::new(params, Clock::new(weir_tokio::rt())))
}

/// C-LOAD-1: a full gate queues, hands the slot over FIFO when a request leaves.
#[tokio::test]
async fn c_load_1_queued_request_gets_the_freed_slot() {
    let a = admission(1, None, Duration::from_secs(5));
    let first = a.admit().await.expect("admitted");
    let a2 = Arc::clone(&a);
    let waiter = tokio::spawn(async move { a2.admit().await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(a.gate().queued(), 1);
    drop(first);
    let got = tokio::time::timeout(Duration::from_secs(1), waiter)
        .await
        .expect("woken before the deadline")
        .expect("task");
    assert!(got.is_ok());
    assert_eq!(a.gate().in_flight(), 0);
    assert_eq!(a.gate().queued(), 0);
}

/// C-LOAD-1: the wait ends at `queue_timeout` with an overload answer.
#[tokio::test]
async fn c_load_1_queue_timeout_rejects() {
    let a = admission(1, None, Duration::from_millis(30));
    let _first = a.admit().await.expect("admitted");
    let started = std::time::Instant::now();
    let second = a.admit().await;
    assert!(second.is_err());
    assert!(started.elapsed() >= Duration::from_millis(30));
    assert_eq!(a.gate().queued(), 0);
}

/// C-LOAD-1: `queue_timeout: 0s` rejects at once, no queue.
#[tokio::test]
async fn c_load_1_no_wait_rejects_at_once() {
    let a = admission(1, None, Duration::ZERO);
    let _first = a.admit().await.expect("admitted");
    assert_eq!(a.admit().await.err(), Some(Overloaded::NoWait));
}

/// C-LOAD-1: a waiter whose client leaves (its future dropped) leaves the queue at once, and
/// the next slot goes to the one behind it.
#[tokio::test]
async fn c_load_1_disconnected_waiter_leaves_the_queue() {
    let a = admission(1, Some(1), Duration::from_secs(5));
    let first = a.admit().await.expect("admitted");
    let a2 = Arc::clone(&a);
    let gone = tokio::spawn(async move { a2.admit().await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(a.gate().queued(), 1);
    gone.abort();
    let _ = gone.await;
    assert_eq!(a.gate().queued(), 0, "the dropped waiter left the queue");
    // The queue (one place) has room again.
    let a3 = Arc::clone(&a);
    let next = tokio::spawn(async move { a3.admit().await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(20)).await;
    drop(first);
    let got = tokio::time::timeout(Duration::from_secs(1), next)
        .await
        .expect("woken")
        .expect("task");
    assert!(got.is_ok());
    assert_eq!(a.gate().in_flight(), 0);
}

/// A slot handed to a waiter that is dropped before it settles is passed on, never lost.
#[tokio::test]
async fn c_load_1_handed_slot_of_a_dropped_waiter_is_not_lost() {
    let a = admission(1, None, Duration::from_secs(5));
    let first = a.admit().await.expect("admitted");
    let a2 = Arc::clone(&a);
    let w = tokio::spawn(async move { a2.admit().await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(20)).await;
    // Hand over and drop the waiter before it runs.
    drop(first);
    w.abort();
    let _ = w.await;
    assert_eq!(a.gate().in_flight(), 0);
    assert!(a.admit().await.is_ok());
}
