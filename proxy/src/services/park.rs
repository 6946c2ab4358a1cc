//! The parked HTTP/1 connections of one worker: their `idle_timeout` and the shutdown signal,
//! watched once for all of them (point 5).
//!
//! A parked connection waits for bytes on its socket, for its `idle_timeout` (from the end of its
//! last response) and for shutdown. It used to hold a runtime timer of its own (a boxed sleep,
//! 112 B on tokio) and a pinned future on the shutdown signal (its listener node, ≈ 100 B in the
//! task). Now it holds a place in its worker's [`Lot`]: its waker and its deadline (24 B in one
//! vector). The lot's sweeper task, running while anything is parked, looks every
//! [`tick`] (a sixteenth of `idle_timeout`, between 10 ms and 1 s) and wakes the connections
//! whose deadline passed, which check their own deadline and close; when the shutdown signal
//! turns, it marks the lot closing and wakes every parked connection, which closes at once. A
//! parked connection therefore closes at most one tick after `idle_timeout`.

use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Waker;
use std::time::Duration;

use crate::base::clock::Clock;
use crate::base::rt::{self, watch};

/// A worker's connections as the acceptor and the parked connections see them: how many are
/// open (for the acceptor's choice) and the lot of the parked ones.
#[derive(Debug)]
pub struct Worker {
    /// Open connections of this worker.
    pub open: AtomicUsize,
    /// Its parked HTTP/1 connections.
    pub(crate) lot: Lot,
}

impl Worker {
    /// A worker with `open` connections whose parked ones close when `shutdown` turns true
    /// (or its sender is dropped).
    #[must_use]
    pub fn new(open: usize, shutdown: watch::Receiver<bool>) -> Arc<Worker> {
        Arc::new(Worker {
            open: AtomicUsize::new(open),
            lot: Lot {
                inner: Mutex::new(Inner::default()),
                closing: AtomicBool::new(false),
                shutdown,
            },
        })
    }
}

/// The parked connections of one worker (module doc).
#[derive(Debug)]
pub(crate) struct Lot {
    inner: Mutex<Inner>,
    /// Shutdown began: parked connections close, and none parks any more.
    closing: AtomicBool,
    /// The worker's shutdown signal, cloned by the sweeper.
    shutdown: watch::Receiver<bool>,
}

#[derive(Debug, Default)]
struct Inner {
    /// The parked connections by key (`None`: a free place, listed in `free`).
    entries: Vec<Option<Entry>>,
    free: Vec<usize>,
    parked: usize,
    /// Whether a sweeper task runs.
    sweeping: bool,
}

#[derive(Debug)]
struct Entry {
    waker: Waker,
    /// When the connection's `idle_timeout` ends ([`weir_core::Instant::MAX`]: woken for it
    /// already).
    deadline: weir_core::Instant,
}

/// How often the sweeper of connections with `idle_timeout` looks.
#[must_use]
pub fn tick(idle_timeout: Duration) -> Duration {
    (idle_timeout / 16).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

impl Lot {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether shutdown began.
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// Park a connection whose task `waker` wakes, until `deadline`: its key, or `None` once
    /// shutdown began (then it closes). Starts the sweeper when none runs.
    pub(crate) fn park(
        worker: &Arc<Worker>,
        clock: Clock,
        tick: Duration,
        waker: &Waker,
        deadline: weir_core::Instant,
    ) -> Option<usize> {
        let lot = &worker.lot;
        let start = {
            let mut g = lot.lock();
            if lot.is_closing() {
                return None;
            }
            let entry = Some(Entry {
                waker: waker.clone(),
                deadline,
            });
            let key = match g.free.pop() {
                Some(k) => {
                    g.entries[k] = entry;
                    k
                }
                None => {
                    g.entries.push(entry);
                    g.entries.len() - 1
                }
            };
            g.parked += 1;
            let start = !g.sweeping;
            g.sweeping = true;
            (key, start)
        };
        if start.1 {
            clock
                .rt()
                .spawn(sweep(clock, Arc::clone(worker), tick, lot.shutdown.clone()));
        }
        Some(start.0)
    }

    /// The parked connection `key` is now woken by `waker`, until `deadline`.
    pub(crate) fn update(&self, key: usize, waker: &Waker, deadline: weir_core::Instant) {
        let mut g = self.lock();
        if let Some(Some(e)) = g.entries.get_mut(key) {
            if !e.waker.will_wake(waker) {
                e.waker = waker.clone();
            }
            e.deadline = deadline;
        }
    }

    /// The parked connection `key` is active again, or closes.
    pub(crate) fn unpark(&self, key: usize) {
        let mut g = self.lock();
        if let Some(slot) = g.entries.get_mut(key)
            && slot.take().is_some()
        {
            g.free.push(key);
            g.parked -= 1;
            if g.parked == 0 {
                // Nothing parked: give the memory back.
                g.entries = Vec::new();
                g.free = Vec::new();
            }
        }
    }

    /// Wake the connections whose deadline is past `now`; whether any connection is parked
    /// (if none, the sweeper ends, and the next park starts another).
    fn sweep(&self, now: weir_core::Instant) -> bool {
        let mut g = self.lock();
        if g.parked == 0 {
            g.sweeping = false;
            return false;
        }
        for e in g.entries.iter_mut().flatten() {
            if e.deadline <= now {
                e.deadline = weir_core::Instant::MAX;
                e.waker.wake_by_ref();
            }
        }
        true
    }

    /// Shutdown began: wake every parked connection (each sees [`Lot::is_closing`]).
    fn close(&self) {
        let mut g = self.lock();
        self.closing.store(true, Ordering::Release);
        g.sweeping = false;
        for e in g.entries.iter().flatten() {
            e.waker.wake_by_ref();
        }
    }
}

/// The sweeper of `worker`'s lot: every `tick`, the deadlines; at shutdown, everyone.
async fn sweep(
    clock: Clock,
    worker: Arc<Worker>,
    tick: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let rt = clock.rt();
    let mut stop = pin!(async {
        loop {
            if shutdown.changed().await.is_err() || shutdown.get() {
                return;
            }
        }
    });
    loop {
        if rt::timeout(rt, tick, stop.as_mut()).await.is_ok() {
            worker.lot.close();
            return;
        }
        if !worker.lot.sweep(clock.now()) {
            return;
        }
    }
}

/// A connection's place in its lot, given back when it is dropped.
pub(crate) struct Place<'a> {
    worker: &'a Arc<Worker>,
    key: Option<usize>,
}

impl<'a> Place<'a> {
    /// Not parked yet.
    pub(crate) fn new(worker: &'a Arc<Worker>) -> Place<'a> {
        Place { worker, key: None }
    }

    /// Whether shutdown began.
    pub(crate) fn is_closing(&self) -> bool {
        self.worker.lot.is_closing()
    }

    /// Parked (or still parked) until `deadline`, woken by `waker`: `false` once shutdown began.
    pub(crate) fn hold(
        &mut self,
        clock: Clock,
        tick: Duration,
        waker: &Waker,
        deadline: weir_core::Instant,
    ) -> bool {
        match self.key {
            Some(k) => {
                self.worker.lot.update(k, waker, deadline);
                true
            }
            None => {
                self.key = Lot::park(self.worker, clock, tick, waker, deadline);
                self.key.is_some()
            }
        }
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        if let Some(k) = self.key.take() {
            self.worker.lot.unpark(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tick_is_a_sixteenth_of_idle_timeout_within_bounds() {
        assert_eq!(tick(Duration::from_secs(60)), Duration::from_secs(1));
        assert_eq!(tick(Duration::from_secs(3)), Duration::from_micros(187_500));
        assert_eq!(tick(Duration::from_millis(50)), Duration::from_millis(10));
    }
}
