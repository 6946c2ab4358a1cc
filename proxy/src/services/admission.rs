//! The waiting half of the global overload gate (C-LOAD-1). weir-core's [`Gate`] decides who is
//! admitted, queued or turned away, and the request engine (`weir_core::exchange`) follows its
//! protocol (enter, cancel on settling, leave once); this module only parks a queued request
//! until the slot is handed to it ([`Output::GateWake`](weir_core::exchange::Output) from the
//! request that left) or its deadline comes, and wakes it.
//!
//! Wake-ups are hints: a wake-up that arrives before the waiter parked is remembered, and a lost
//! one only delays the waiter to its deadline, where the engine's `cancel` tells the truth. The
//! waker registry is a mutex-protected map touched only on the slow path (when the gate is
//! full); while slots are free, admission is one CAS in the gate and nothing here.

use std::collections::HashMap;
use std::future::poll_fn;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

use weir_core::admission::{Gate, GateParams};

use crate::base::clock::Clock;

/// The gate and its waiters, shared by every worker.
#[derive(Debug)]
pub struct Admission {
    gate: Arc<Gate>,
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

/// Takes a waiter's record out of the registry however its wait ends (also when the waiting
/// request is dropped because its client left).
struct Forget<'a> {
    admission: &'a Admission,
    id: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        lock(&self.admission.waiters).remove(&self.id);
    }
}

impl Admission {
    /// A gate with `params` (`server.overload`), timed by `clock`.
    #[must_use]
    pub fn new(params: GateParams, clock: Clock) -> Admission {
        Admission {
            gate: Arc::new(Gate::new(params)),
            waiters: Mutex::new(HashMap::new()),
            clock,
        }
    }

    /// The gate (the request engine's, and for status and metrics).
    #[must_use]
    pub fn gate(&self) -> &Arc<Gate> {
        &self.gate
    }

    /// Park the waiter of ticket `id` until a slot is handed to it (`true`) or `deadline` passes
    /// (`false`, also without a deadline never). The engine settles the ticket afterwards.
    pub async fn wait(&self, id: u64, deadline: Option<weir_core::Instant>) -> bool {
        let _forget = Forget {
            admission: self,
            id,
        };
        let at = deadline.map_or_else(|| self.clock.far_future(), |d| self.clock.deadline(d));
        let mut sleep = self.clock.rt().sleep_until(at);
        poll_fn(|cx| {
            if self.park(id, cx.waker()) {
                return Poll::Ready(true);
            }
            sleep.as_mut().poll(cx).map(|()| false)
        })
        .await
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

    /// A slot was handed to ticket `id` (`Output::GateWake`): wake its waiter, or remember the
    /// wake-up.
    pub fn wake(&self, id: u64) {
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
}

/// Lock, recovering from poisoning (every critical section here leaves the map consistent).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
