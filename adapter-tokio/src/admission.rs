//! The waiting half of the global overload gate (C-LOAD-1): weir-core's [`Gate`] decides who is
//! admitted, queued or turned away; this module parks queued requests until a slot is handed to
//! them, their deadline passes, or their client leaves.
//!
//! The protocol is the one in [`Gate`]'s doc, followed to the letter:
//! - every `Admitted` (or `AlreadyAdmitted`) becomes a [`Permit`], whose `Drop` calls `leave`
//!   exactly once and wakes the waiter the slot was handed to;
//! - every `Queued` ticket is settled by exactly one `cancel`, also after a wake-up: a drop guard
//!   calls it if the request future is dropped while waiting (the client disconnected), so the
//!   waiter leaves the queue at once;
//! - wake-ups are hints: a wake-up that arrives before the waiter registered is remembered, and a
//!   lost one only delays the waiter to its deadline, where `cancel` tells the truth.
//!
//! The waker registry is a mutex-protected map touched only on the slow path (when the gate is
//! full); while slots are free, admission is one CAS in the gate and nothing here.

use std::collections::HashMap;
use std::future::poll_fn;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

use weir_core::admission::{Cancel, Entry, Gate, GateParams, Overloaded};

use crate::clock::Clock;

/// The gate and its waiters, shared by every worker.
#[derive(Debug)]
pub struct Admission {
    gate: Gate,
    waiters: Mutex<HashMap<u64, Wait>>,
    clock: Clock,
}

#[derive(Debug)]
enum Wait {
    /// Parked, to be woken through this waker.
    Parked(Waker),
    /// A slot was handed over before the waiter parked.
    Woken,
}

/// A request's slot in the gate; dropping it leaves the gate (and hands the slot on).
#[derive(Debug)]
pub struct Permit {
    admission: Arc<Admission>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let now = self.admission.clock.now();
        if let Some(id) = self.admission.gate.leave(now) {
            self.admission.wake(id);
        }
    }
}

/// Settles a queued ticket exactly once: on the normal path through [`TicketGuard::settle`], or
/// by `Drop` when the waiting request is dropped (its client went away).
struct TicketGuard<'a> {
    admission: &'a Arc<Admission>,
    id: u64,
    settled: bool,
}

impl TicketGuard<'_> {
    fn settle(&mut self) -> Cancel {
        self.settled = true;
        let outcome = self
            .admission
            .gate
            .cancel(self.id, self.admission.clock.now());
        self.admission.forget(self.id);
        outcome
    }
}

impl Drop for TicketGuard<'_> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        if self.settle() == Cancel::AlreadyAdmitted {
            // The slot was ours but nobody will use it: leave at once, handing it on.
            drop(Permit {
                admission: Arc::clone(self.admission),
            });
        }
    }
}

impl Admission {
    /// A gate with `params` (`server.overload`), timed by `clock`.
    #[must_use]
    pub fn new(params: GateParams, clock: Clock) -> Admission {
        Admission {
            gate: Gate::new(params),
            waiters: Mutex::new(HashMap::new()),
            clock,
        }
    }

    /// The gate (for status and metrics).
    #[must_use]
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// Admit a request (C-LOAD-1): at once when a slot is free, after a FIFO wait of at most
    /// `queue_timeout` otherwise, or never (`Err`: answer `503`). Dropping the future while it
    /// waits takes the request out of the queue.
    pub async fn admit(self: &Arc<Self>) -> Result<Permit, Overloaded> {
        let ticket = match self.gate.enter(self.clock.now()) {
            Entry::Admitted => {
                return Ok(Permit {
                    admission: Arc::clone(self),
                });
            }
            Entry::Rejected(why) => return Err(why),
            Entry::Queued(ticket) => ticket,
        };
        let mut guard = TicketGuard {
            admission: self,
            id: ticket.id,
            settled: false,
        };
        let sleep = tokio::time::sleep_until(self.clock.deadline(ticket.deadline));
        tokio::pin!(sleep);
        poll_fn(|cx| {
            if self.park(ticket.id, cx.waker()) {
                return Poll::Ready(());
            }
            sleep.as_mut().poll(cx)
        })
        .await;
        match guard.settle() {
            Cancel::AlreadyAdmitted => Ok(Permit {
                admission: Arc::clone(self),
            }),
            // Expired (or, if our timer fired a hair early, removed): the wait is over.
            Cancel::Expired | Cancel::Removed | Cancel::Unknown => Err(Overloaded::QueueFull),
        }
    }

    /// Register `waker` for ticket `id`; `true` when a slot was already handed over.
    fn park(&self, id: u64, waker: &Waker) -> bool {
        let mut waiters = lock(&self.waiters);
        match waiters.get_mut(&id) {
            Some(Wait::Woken) => true,
            Some(Wait::Parked(w)) => {
                if !w.will_wake(waker) {
                    w.clone_from(waker);
                }
                false
            }
            None => {
                waiters.insert(id, Wait::Parked(waker.clone()));
                false
            }
        }
    }

    /// A slot was handed to ticket `id`: wake its waiter, or remember the wake-up.
    fn wake(&self, id: u64) {
        let mut waiters = lock(&self.waiters);
        match waiters.insert(id, Wait::Woken) {
            Some(Wait::Parked(w)) => w.wake(),
            Some(Wait::Woken) | None => {
                // A wake-up for a waiter that already settled leaves a record behind; keep the
                // map bounded by dropping such records when it grows past the queue's size.
                let bound = 2 * self.gate.params().max_queue() as usize + 64;
                if waiters.len() > bound {
                    waiters.retain(|_, w| matches!(w, Wait::Parked(_)));
                }
            }
        }
    }

    fn forget(&self, id: u64) {
        lock(&self.waiters).remove(&id);
    }
}

/// Lock, recovering from poisoning (every critical section here leaves the map consistent).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn admission(max: u32, queue: Option<u32>, wait: Duration) -> Arc<Admission> {
        let params = GateParams::new(max, queue, wait).expect("valid gate");
        Arc::new(Admission::new(params, Clock::new()))
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
}
