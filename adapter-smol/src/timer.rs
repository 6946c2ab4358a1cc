//! hyper's timer seam on async-io: [`ThreadTimer`].
//!
//! On a thread that runs an [`Executor`](crate::exec::Executor), sleeps live in the thread's
//! [`Wheel`]: a deadline-ordered set behind one async-io `Timer`, armed for the earliest
//! deadline and polled by the executor. async-io keeps every `Timer` in the reactor's shared
//! `BTreeMap` behind a mutex, and each (re)insertion goes through its queue of timer operations
//! and wakes the thread blocked on the reactor (an eventfd `write`, the woken `epoll_pwait`, its
//! `timerfd_settime`, the eventfd `read`): with one async-io timer per sleep a connection's new
//! or moved deadline cost that much; with the wheel it costs an insertion in a thread's own set,
//! and async-io hears only of the earliest deadline.
//!
//! weir resets a connection's deadline on every request (header read and idle timeouts, the
//! upstream timeouts' slots), almost always to a later instant. A sleep reset to a later
//! deadline keeps its place in the wheel at the earlier instant and only records the new
//! deadline; when that place comes due it moves once to the deadline. Only a reset to an
//! earlier instant moves it at once.
//!
//! Elsewhere (a thread without an executor) a [`LazySleep`] does the same on its own async-io
//! timer.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use hyper::rt::{Sleep, Timer};

/// Sleeps in the calling thread's [`Wheel`], or [`LazySleep`]s where there is none.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ThreadTimer;

impl Timer for ThreadTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Sleep>> {
        self.sleep_until(Instant::now() + duration)
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn Sleep>> {
        match WHEEL.with(|w| w.borrow().clone()) {
            Some(wheel) => Box::pin(WheelSleep::at(wheel, deadline)),
            None => Box::pin(LazySleep::at(deadline)),
        }
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn Sleep>>, new_deadline: Instant) {
        if let Some(mut s) = sleep.as_mut().downcast_mut_pin::<WheelSleep>() {
            s.reset(new_deadline);
        } else if let Some(mut s) = sleep.as_mut().downcast_mut_pin::<LazySleep>() {
            s.reset(new_deadline);
        } else {
            *sleep = self.sleep_until(new_deadline);
        }
    }
}

thread_local! {
    /// The wheel of the executor running on this thread, if any.
    static WHEEL: RefCell<Option<Arc<Wheel>>> = const { RefCell::new(None) };
}

/// Make `wheel` the calling thread's; returns the one it replaces (for [`leave`]).
pub(crate) fn enter(wheel: Arc<Wheel>) -> Option<Arc<Wheel>> {
    WHEEL.with(|w| w.replace(Some(wheel)))
}

/// Restore the thread's wheel [`enter`] replaced.
pub(crate) fn leave(previous: Option<Arc<Wheel>>) {
    WHEEL.with(|w| *w.borrow_mut() = previous);
}

/// One thread's sleeps, by deadline, behind one async-io timer (module docs).
///
/// Behind a mutex because hyper's sleeps are `Send + Sync`; in weir only the wheel's own thread
/// takes it, so it is never contended.
#[derive(Default)]
pub(crate) struct Wheel {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// The queued entries by the instant they are queued for (then their index, for ties).
    order: BTreeSet<(Instant, usize)>,
    entries: Vec<Entry>,
    free: Vec<usize>,
    /// The async-io timer the executor polls, and the instant it is set for (`None`: not set,
    /// or spent).
    timer: Option<async_io::Timer>,
    timer_at: Option<Instant>,
    /// Wakers of entries come due, woken once the lock is released (kept for its capacity).
    due: Vec<Waker>,
    /// The executor's waker ([`Wheel::set_waker`]).
    owner: Option<Waker>,
}

/// A sleep's place in the wheel.
struct Entry {
    /// The instant it is (or was last) queued for: at most its sleep's deadline.
    at: Instant,
    /// Whether it is in `order`; `false` once `at` has come (it fired for `at`).
    queued: bool,
    waker: Option<Waker>,
}

impl Wheel {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Wake the sleeps whose instant has come (the executor, each turn).
    pub(crate) fn fire_due(&self) {
        let mut inner = self.lock();
        if inner.order.is_empty() && inner.timer_at.is_none() {
            return;
        }
        let now = Instant::now();
        // A timer set for an instant now past has fired (or is about to): `arm` must set it
        // again, even if its entry is gone.
        if inner.timer_at.is_some_and(|t| t <= now) {
            inner.timer_at = None;
        }
        if inner.order.first().is_none_or(|&(at, _)| at > now) {
            return;
        }
        let mut due = std::mem::take(&mut inner.due);
        while let Some(&(at, i)) = inner.order.first() {
            if at > now {
                break;
            }
            inner.order.pop_first();
            let entry = &mut inner.entries[i];
            entry.queued = false;
            due.extend(entry.waker.take());
        }
        drop(inner);
        for w in due.drain(..) {
            w.wake();
        }
        self.lock().due = due;
    }

    /// Set the async-io timer for the earliest queued instant when it is not set for that or
    /// earlier (the executor, before it parks); `cx` is what the timer wakes when it fires.
    ///
    /// A timer set earlier than the earliest entry (its entry was dropped or fired) stays: it
    /// fires once for nothing, and is then set for the next.
    pub(crate) fn arm(&self, cx: &mut Context<'_>) {
        let mut inner = self.lock();
        let Some(&(first, _)) = inner.order.first() else {
            return;
        };
        if inner.timer_at.is_some_and(|t| t <= first) {
            return;
        }
        inner.timer_at = Some(first);
        let timer = inner.timer.get_or_insert_with(async_io::Timer::never);
        timer.set_at(first);
        // Registers `cx` with the reactor; `fire_due` runs when the executor is woken.
        if Pin::new(timer).poll(cx).is_ready() {
            // Already past: no wake-up will come from the reactor.
            inner.timer_at = None;
            cx.waker().wake_by_ref();
        }
    }

    /// The executor's waker, woken when a sleep polled on another thread queues an entry
    /// earlier than the timer is set for.
    pub(crate) fn set_waker(&self, waker: &Waker) {
        self.lock().owner = Some(waker.clone());
    }

    /// After queueing an entry for `at`: when the timer may be set later than that and the
    /// wheel's own executor is not the caller (which sets the timer before it parks), wake it.
    fn queued(&self, inner: MutexGuard<'_, Inner>, at: Instant) {
        if inner.timer_at.is_some_and(|t| t <= at) {
            return;
        }
        let owner = inner.owner.clone();
        drop(inner);
        let here = WHEEL.with(|w| {
            w.borrow()
                .as_ref()
                .is_some_and(|w| std::ptr::eq(Arc::as_ptr(w), self))
        });
        if !here && let Some(w) = owner {
            w.wake();
        }
    }

    fn insert(&self, at: Instant) -> usize {
        let mut inner = self.lock();
        let entry = Entry {
            at,
            queued: true,
            waker: None,
        };
        let i = match inner.free.pop() {
            Some(i) => {
                inner.entries[i] = entry;
                i
            }
            None => {
                inner.entries.push(entry);
                inner.entries.len() - 1
            }
        };
        inner.order.insert((at, i));
        self.queued(inner, at);
        i
    }
}

/// A sleep until `deadline` in a thread's [`Wheel`], queued there for `deadline` or earlier.
pub(crate) struct WheelSleep {
    wheel: Arc<Wheel>,
    index: usize,
    deadline: Instant,
}

impl WheelSleep {
    fn at(wheel: Arc<Wheel>, deadline: Instant) -> WheelSleep {
        let index = wheel.insert(deadline);
        WheelSleep {
            wheel,
            index,
            deadline,
        }
    }

    fn reset(&mut self, deadline: Instant) {
        self.deadline = deadline;
        let mut guard = self.wheel.lock();
        let inner = &mut *guard;
        let entry = &mut inner.entries[self.index];
        // Later, or fired (the next poll queues it again when needed): nothing to move.
        if entry.queued && deadline < entry.at {
            inner.order.remove(&(entry.at, self.index));
            entry.at = deadline;
            inner.order.insert((deadline, self.index));
            self.wheel.queued(guard, deadline);
        }
    }
}

impl Future for WheelSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let mut guard = this.wheel.lock();
        let inner = &mut *guard;
        let entry = &mut inner.entries[this.index];
        match &entry.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => entry.waker = Some(cx.waker().clone()),
        }
        if entry.queued {
            return Poll::Pending;
        }
        if entry.at >= this.deadline {
            return Poll::Ready(());
        }
        // Fired for an earlier deadline since moved on: once more, for the current one.
        entry.at = this.deadline;
        entry.queued = true;
        inner.order.insert((this.deadline, this.index));
        this.wheel.queued(guard, this.deadline);
        Poll::Pending
    }
}

impl Drop for WheelSleep {
    fn drop(&mut self) {
        let waker = {
            let mut guard = self.wheel.lock();
            let inner = &mut *guard;
            let entry = &mut inner.entries[self.index];
            if entry.queued {
                inner.order.remove(&(entry.at, self.index));
            }
            let waker = entry.waker.take();
            inner.free.push(self.index);
            waker
        };
        drop(waker);
    }
}

impl Sleep for WheelSleep {}

/// A sleep until `deadline` whose async-io timer may be armed earlier (never later).
pub(crate) struct LazySleep {
    deadline: Instant,
    /// The instant `timer` is set for: at most `deadline`.
    armed: Instant,
    /// Whether this sleep has completed: async-io's timer is then spent (it never fires again
    /// until set anew), so any reset must re-arm it.
    fired: bool,
    timer: async_io::Timer,
}

impl LazySleep {
    fn at(deadline: Instant) -> LazySleep {
        LazySleep {
            deadline,
            armed: deadline,
            fired: false,
            timer: async_io::Timer::at(deadline),
        }
    }

    fn reset(&mut self, deadline: Instant) {
        if self.fired || deadline < self.armed {
            self.timer.set_at(deadline);
            self.armed = deadline;
            self.fired = false;
        }
        self.deadline = deadline;
    }
}

impl Future for LazySleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        loop {
            if Pin::new(&mut this.timer).poll(cx).is_pending() {
                return Poll::Pending;
            }
            if this.armed >= this.deadline {
                this.fired = true;
                return Poll::Ready(());
            }
            // Fired for an earlier deadline since moved on: once more, for the current one.
            this.timer.set_at(this.deadline);
            this.armed = this.deadline;
        }
    }
}

impl Sleep for LazySleep {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_reset_keeps_the_timer_and_still_waits_for_the_new_deadline() {
        let start = Instant::now();
        let mut sleep = LazySleep::at(start + Duration::from_millis(5));
        sleep.reset(start + Duration::from_millis(40));
        assert_eq!(sleep.armed, start + Duration::from_millis(5));
        async_io::block_on(&mut sleep);
        assert!(Instant::now() >= start + Duration::from_millis(40));
        assert_eq!(sleep.armed, sleep.deadline);
    }

    #[test]
    fn an_earlier_reset_rearms_at_once() {
        let start = Instant::now();
        let mut sleep = LazySleep::at(start + Duration::from_secs(3600));
        sleep.reset(start + Duration::from_millis(5));
        assert_eq!(sleep.armed, start + Duration::from_millis(5));
        async_io::block_on(&mut sleep);
        assert!(Instant::now() >= start + Duration::from_millis(5));
    }

    #[test]
    fn a_fired_sleep_reset_later_waits_again() {
        let start = Instant::now();
        let mut sleep = LazySleep::at(start);
        async_io::block_on(&mut sleep);
        let later = Instant::now() + Duration::from_millis(10);
        sleep.reset(later);
        async_io::block_on(&mut sleep);
        assert!(Instant::now() >= later);
    }
}
