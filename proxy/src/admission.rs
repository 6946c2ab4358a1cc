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
        let mut sleep = self
            .clock
            .rt()
            .sleep_until(self.clock.deadline(ticket.deadline));
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
