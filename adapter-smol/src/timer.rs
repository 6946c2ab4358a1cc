//! [`LazyTimer`]: hyper's timer seam on async-io's timers, with resets to a later deadline
//! that touch no timer.
//!
//! An async-io `Timer` lives in the reactor's shared `BTreeMap`, and every (re)insertion
//! wakes the thread blocked on the reactor (`Reactor::notify`: one eventfd `write`, then the
//! woken `epoll_pwait`, its `timerfd_settime` and the eventfd `read`). weir resets a
//! connection's deadline on every request (header read and idle timeouts, the upstream
//! timeouts' slots), almost always to a later instant: with smol-hyper's `SmolTimer` that was
//! about one reactor wake-up per request. A [`LazySleep`] instead keeps its async-io timer
//! armed at the earlier instant and only records the new deadline; when the timer fires early
//! it is re-armed once for the deadline. Only a reset to an earlier instant re-arms at once.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::rt::{Sleep, Timer};

/// async-io's timers, reset lazily (module docs).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LazyTimer;

impl Timer for LazyTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Sleep>> {
        Box::pin(LazySleep::at(Instant::now() + duration))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn Sleep>> {
        Box::pin(LazySleep::at(deadline))
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn Sleep>>, new_deadline: Instant) {
        match sleep.as_mut().downcast_mut_pin::<LazySleep>() {
            Some(mut s) => s.reset(new_deadline),
            None => *sleep = Box::pin(LazySleep::at(new_deadline)),
        }
    }
}

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
