//! A per-thread executor on `async-task`, driven by `async_io::block_on`.
//!
//! weir runs one executor per thread and never moves a task between threads, so
//! `async_executor::Executor`'s work-stealing machinery (a global queue, per-runner local
//! queues, a sleeper list, ticker state) was pure cost: callgrind put it at about 2,000
//! instructions per proxied request. Here a task's `Runnable` goes to its thread's plain
//! `VecDeque` when woken on that thread (the common case: a socket woken by the reactor the same
//! thread polls), and to a mutex-protected queue only when woken from another thread (the
//! blocking pool, a timer polled elsewhere).
//!
//! [`Executor::block_on`] runs inside `async_io::block_on`: one poll of [`Run`] polls the main
//! future if it was woken, then runs queued tasks; with tasks still queued after a batch it
//! wakes itself, so `async_io::block_on` checks the reactor without blocking before the next
//! batch (IO stays fair to a busy queue); with an empty queue it returns `Pending` and the thread
//! parks in the reactor (`epoll_wait`) until a socket, a timer or another thread wakes it.
//!
//! The thread's timers ([`crate::timer`]) share one async-io timer, polled here.
//!
//! When the main future completes, every task still alive is woken and dropped, as
//! `async_executor::Executor`'s drop does: a task left waiting on a socket would otherwise keep
//! the socket (a listener, a connection) open after its worker ended.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Wake, Waker};

use async_task::Runnable;
use weir_proxy::rt::BoxFuture;

use crate::timer::Wheel;

/// Tasks run per batch before the reactor is checked again.
///
/// Short on purpose: async-io's helper thread ("async-io") takes the reactor itself whenever no
/// `block_on` has polled it for 50 µs (its back-off starts there and grows only while others
/// keep polling), and then every readiness event reaches the worker as a cross-thread wake-up,
/// the helper preempting the worker on its CPU. Measured on a busy worker at 256 connections:
/// with 64 tasks a batch the helper woke 0.47 times per request and the proxy's CPU per request
/// was 1.5× that with 16 (0.07 wake-ups), 8 gaining little more.
const BATCH: usize = 16;

/// An executor's state that other threads reach: spawns and wakes from elsewhere.
pub(crate) struct Shared {
    /// Runnables woken on another thread, taken by the executor's thread.
    remote: Mutex<Remote>,
    /// Whether `remote` may hold runnables (read without the lock on every batch).
    has_remote: AtomicBool,
    /// `async_io::block_on`'s waker of the executor's thread, set on the first poll.
    waker: OnceLock<Waker>,
    /// Every live task's waker, so that closing can cancel the tasks left.
    tasks: Mutex<Tasks>,
}

#[derive(Default)]
struct Remote {
    queue: Vec<Runnable>,
    /// The executor has ended: runnables scheduled from now on are dropped (cancelled).
    closed: bool,
}

/// A slab of the live tasks' wakers.
#[derive(Default)]
struct Tasks {
    slots: Vec<Option<Waker>>,
    free: Vec<usize>,
}

impl Tasks {
    fn insert(&mut self, waker: Waker) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(waker);
                i
            }
            None => {
                self.slots.push(Some(waker));
                self.slots.len() - 1
            }
        }
    }

    fn remove(&mut self, i: usize) -> Option<Waker> {
        let waker = self.slots.get_mut(i)?.take();
        if waker.is_some() {
            self.free.push(i);
        }
        waker
    }
}

/// The executor's thread-local side: the queue of runnables woken on its own thread.
struct Local {
    shared: Arc<Shared>,
    queue: RefCell<VecDeque<Runnable>>,
    /// Whether [`Run::poll`] is running the queue (a schedule then needs no wake-up).
    running: Cell<bool>,
    wheel: Arc<Wheel>,
}

thread_local! {
    /// The executor running on this thread, if any.
    static CURRENT: RefCell<Option<Rc<Local>>> = const { RefCell::new(None) };
}

/// A handle on one executor: spawns onto it from any thread.
#[derive(Clone)]
pub(crate) struct Executor {
    shared: Arc<Shared>,
}

impl Default for Executor {
    fn default() -> Executor {
        Executor::new()
    }
}

impl Executor {
    pub(crate) fn new() -> Executor {
        Executor {
            shared: Arc::new(Shared {
                remote: Mutex::new(Remote::default()),
                has_remote: AtomicBool::new(false),
                waker: OnceLock::new(),
                tasks: Mutex::new(Tasks::default()),
            }),
        }
    }

    /// The executor of the calling thread's [`Executor::block_on`], if one runs.
    pub(crate) fn current() -> Option<Executor> {
        CURRENT.with(|c| {
            c.borrow().as_ref().map(|l| Executor {
                shared: Arc::clone(&l.shared),
            })
        })
    }

    /// Spawn `future` onto this executor; it runs on the executor's thread. A panic in it is
    /// caught and logged, and the task dropped (tokio isolates task panics the same way).
    pub(crate) fn spawn(&self, future: BoxFuture<'static, ()>) {
        let shared = Arc::clone(&self.shared);
        // The slot is taken before the task exists (so the task knows its index) and given the
        // task's waker right after.
        let index = lock(&self.shared.tasks).insert(Waker::noop().clone());
        let tracked = Tracked {
            future,
            shared: Arc::clone(&self.shared),
            index,
        };
        let (runnable, task) = async_task::spawn(tracked, move |r| shared.schedule(r));
        if let Some(slot) = lock(&self.shared.tasks).slots.get_mut(index) {
            *slot = Some(runnable.waker());
        }
        task.detach();
        runnable.schedule();
    }

    /// Run `main` on the calling thread, with this executor's tasks, until `main` completes;
    /// then cancel the tasks left.
    pub(crate) fn block_on(&self, main: Pin<Box<dyn Future<Output = ()> + '_>>) {
        let local = Rc::new(Local {
            shared: Arc::clone(&self.shared),
            queue: RefCell::new(VecDeque::new()),
            running: Cell::new(false),
            wheel: Arc::new(Wheel::default()),
        });
        let previous = CURRENT.with(|c| c.replace(Some(Rc::clone(&local))));
        let previous_wheel = crate::timer::enter(Arc::clone(&local.wheel));
        let main_woken = Arc::new(MainWake {
            woken: AtomicBool::new(true),
            waker: OnceLock::new(),
        });
        async_io::block_on(Run {
            local: &local,
            main,
            main_waker: Waker::from(Arc::clone(&main_woken)),
            main_woken,
        });
        crate::timer::leave(previous_wheel);
        CURRENT.with(|c| *c.borrow_mut() = previous);
        self.shared.close(&local);
    }
}

impl Shared {
    /// Queue a woken task: on its own thread's queue when woken there, else on `remote`.
    fn schedule(self: &Arc<Self>, runnable: Runnable) {
        let runnable = CURRENT.with(|c| {
            let current = c.borrow();
            match current.as_ref() {
                Some(local) if Arc::ptr_eq(&local.shared, self) => {
                    local.queue.borrow_mut().push_back(runnable);
                    if !local.running.get()
                        && let Some(w) = self.waker.get()
                    {
                        w.wake_by_ref();
                    }
                    None
                }
                _ => Some(runnable),
            }
        });
        let Some(runnable) = runnable else { return };
        let mut remote = lock(&self.remote);
        if remote.closed {
            drop(remote);
            drop(runnable);
            return;
        }
        remote.queue.push(runnable);
        self.has_remote.store(true, Ordering::Release);
        drop(remote);
        if let Some(w) = self.waker.get() {
            w.wake_by_ref();
        }
    }

    /// Move the runnables woken on other threads to the local queue.
    fn take_remote(&self, local: &Local) {
        if !self.has_remote.swap(false, Ordering::Acquire) {
            return;
        }
        let taken = std::mem::take(&mut lock(&self.remote).queue);
        local.queue.borrow_mut().extend(taken);
    }

    /// After `main` ended: refuse new runnables and cancel every task left.
    fn close(&self, local: &Local) {
        lock(&self.remote).closed = true;
        let wakers: Vec<Waker> = lock(&self.tasks)
            .slots
            .iter_mut()
            .filter_map(Option::take)
            .collect();
        // Woken tasks schedule themselves: to `remote` (dropped there, `closed`), as this
        // thread no longer has `local` as its current executor.
        for w in wakers {
            w.wake();
        }
        loop {
            let next = local.queue.borrow_mut().pop_front();
            match next {
                Some(r) => drop(r),
                None => break,
            }
        }
        let left = std::mem::take(&mut lock(&self.remote).queue);
        drop(left);
    }
}

/// A spawned future, which frees its place in [`Shared::tasks`] when dropped (completed or
/// cancelled).
struct Tracked {
    future: BoxFuture<'static, ()>,
    shared: Arc<Shared>,
    index: usize,
}

impl Future for Tracked {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let future = &mut self.future;
        match std::panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx))) {
            Ok(poll) => poll,
            Err(_) => {
                tracing::error!("a task panicked; it was dropped");
                Poll::Ready(())
            }
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        // The waker is dropped after the lock is released.
        let waker = lock(&self.shared.tasks).remove(self.index);
        drop(waker);
    }
}

/// The main future's waker: marks it woken and wakes the executor's thread.
struct MainWake {
    woken: AtomicBool,
    waker: OnceLock<Waker>,
}

impl Wake for MainWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.woken.swap(true, Ordering::AcqRel)
            && let Some(w) = self.waker.get()
        {
            w.wake_by_ref();
        }
    }
}

/// The future `async_io::block_on` polls: the main future, then batches of tasks.
struct Run<'a, 'm> {
    local: &'a Local,
    main: Pin<Box<dyn Future<Output = ()> + 'm>>,
    main_woken: Arc<MainWake>,
    main_waker: Waker,
}

impl Future for Run<'_, '_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let local = this.local;
        let shared = &local.shared;
        if shared.waker.get().is_none() {
            let _ = shared.waker.set(cx.waker().clone());
            let _ = this.main_woken.waker.set(cx.waker().clone());
            local.wheel.set_waker(cx.waker());
        }
        // Wakes from here on need not wake the thread: the queue is run before this returns.
        local.running.set(true);
        if this.main_woken.woken.swap(false, Ordering::AcqRel) {
            let mut main_cx = Context::from_waker(&this.main_waker);
            if this.main.as_mut().poll(&mut main_cx).is_ready() {
                local.running.set(false);
                return Poll::Ready(());
            }
        }
        local.wheel.fire_due();
        shared.take_remote(local);
        for _ in 0..BATCH {
            let next = local.queue.borrow_mut().pop_front();
            match next {
                Some(r) => {
                    r.run();
                }
                None => break,
            }
        }
        local.running.set(false);
        // Tasks may have set earlier deadlines: arm the thread's timer before parking.
        local.wheel.arm(cx);
        if !local.queue.borrow().is_empty() || shared.has_remote.load(Ordering::Acquire) {
            // More to run: let async_io::block_on poll the reactor without blocking first.
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

/// A lock that ignores poisoning: the data behind these locks stays consistent across a panic
/// (tasks' panics are caught before they reach the executor).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::thread::ThreadId;
    use std::time::{Duration, Instant};

    use hyper::rt::Timer as _;

    use super::*;
    use crate::timer::ThreadTimer;

    /// A count of finished tasks the main future waits on.
    #[derive(Default)]
    struct Done {
        state: Mutex<(usize, Option<Waker>)>,
    }

    impl Done {
        fn finish(&self) {
            let mut s = lock(&self.state);
            s.0 += 1;
            if let Some(w) = s.1.take() {
                w.wake();
            }
        }

        async fn wait_for(&self, n: usize) {
            std::future::poll_fn(|cx| {
                let mut s = lock(&self.state);
                if s.0 >= n {
                    return Poll::Ready(());
                }
                s.1 = Some(cx.waker().clone());
                Poll::Pending
            })
            .await;
        }
    }

    fn boxed(f: impl Future<Output = ()> + Send + 'static) -> BoxFuture<'static, ()> {
        Box::pin(f)
    }

    #[test]
    fn many_sleeps_on_one_thread_fire_in_deadline_order() {
        const N: u64 = 60;
        let start = Instant::now() + Duration::from_millis(20);
        let fired = Arc::new(Mutex::new(Vec::new()));
        let done = Arc::new(Done::default());
        let ex = Executor::new();
        let (ex2, fired2, done2) = (ex.clone(), Arc::clone(&fired), Arc::clone(&done));
        ex.block_on(Box::pin(async move {
            for i in 0..N {
                // Deadlines spread out of spawn order; every third sleep is first set earlier
                // and then reset to its deadline (the lazy path), every fifth first set later
                // and reset earlier.
                let deadline = start + Duration::from_millis((i * 37) % N * 3);
                let (fired, done) = (Arc::clone(&fired2), Arc::clone(&done2));
                ex2.spawn(boxed(async move {
                    let first = match i % 15 {
                        0 | 3 | 6 | 9 | 12 => deadline - Duration::from_millis(15),
                        5 | 10 => deadline + Duration::from_secs(3600),
                        _ => deadline,
                    };
                    let mut sleep = ThreadTimer.sleep_until(first);
                    ThreadTimer.reset(&mut sleep, deadline);
                    sleep.await;
                    lock(&fired).push((deadline, Instant::now()));
                    done.finish();
                }));
            }
            done2.wait_for(N as usize).await;
        }));
        let fired = lock(&fired);
        assert_eq!(fired.len(), N as usize);
        for (deadline, at) in fired.iter() {
            assert!(at >= deadline, "a sleep ended before its deadline");
        }
        let deadlines: Vec<Instant> = fired.iter().map(|(d, _)| *d).collect();
        let mut sorted = deadlines.clone();
        sorted.sort();
        assert_eq!(deadlines, sorted, "sleeps ended out of deadline order");
    }

    /// A future that completes once another thread has set its flag.
    #[derive(Default)]
    struct Flag {
        state: Mutex<(bool, Option<Waker>)>,
    }

    impl Flag {
        fn set(&self) {
            let mut s = lock(&self.state);
            s.0 = true;
            if let Some(w) = s.1.take() {
                w.wake();
            }
        }

        async fn wait(&self) {
            std::future::poll_fn(|cx| {
                let mut s = lock(&self.state);
                if s.0 {
                    return Poll::Ready(());
                }
                s.1 = Some(cx.waker().clone());
                Poll::Pending
            })
            .await;
        }
    }

    #[test]
    fn a_task_woken_from_another_thread_runs_on_its_executor_thread() {
        let flag = Arc::new(Flag::default());
        let done = Arc::new(Done::default());
        let ran_on: Arc<Mutex<Option<ThreadId>>> = Arc::default();
        let ex = Executor::new();
        let (ex2, flag2, done2, ran_on2) = (
            ex.clone(),
            Arc::clone(&flag),
            Arc::clone(&done),
            Arc::clone(&ran_on),
        );
        let setter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            flag.set();
        });
        ex.block_on(Box::pin(async move {
            let done = Arc::clone(&done2);
            ex2.spawn(boxed(async move {
                flag2.wait().await;
                *lock(&ran_on2) = Some(std::thread::current().id());
                done.finish();
            }));
            done2.wait_for(1).await;
        }));
        setter.join().unwrap();
        assert_eq!(*lock(&ran_on), Some(std::thread::current().id()));
    }

    #[test]
    fn a_spawn_from_another_thread_runs_on_the_executor_thread() {
        let done = Arc::new(Done::default());
        let ran_on: Arc<Mutex<Option<ThreadId>>> = Arc::default();
        let ex = Executor::new();
        let (ex2, done2, ran_on2) = (ex.clone(), Arc::clone(&done), Arc::clone(&ran_on));
        let spawner = std::thread::spawn(move || {
            ex2.spawn(boxed(async move {
                *lock(&ran_on2) = Some(std::thread::current().id());
                done2.finish();
            }));
        });
        ex.block_on(Box::pin(async move { done.wait_for(1).await }));
        spawner.join().unwrap();
        assert_eq!(*lock(&ran_on), Some(std::thread::current().id()));
    }

    /// Counts its drops.
    struct Guard(Arc<AtomicUsize>);

    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn tasks_left_when_main_ends_are_dropped_and_a_panic_stays_in_its_task() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(Done::default());
        let ex = Executor::new();
        let (ex2, dropped2, done2) = (ex.clone(), Arc::clone(&dropped), Arc::clone(&done));
        ex.block_on(Box::pin(async move {
            for _ in 0..3 {
                let guard = Guard(Arc::clone(&dropped2));
                ex2.spawn(boxed(async move {
                    let _guard = guard;
                    std::future::pending::<()>().await;
                }));
            }
            ex2.spawn(boxed(async { panic!("a task's panic") }));
            let done = Arc::clone(&done2);
            ex2.spawn(boxed(async move { done.finish() }));
            done2.wait_for(1).await;
        }));
        assert_eq!(dropped.load(Ordering::SeqCst), 3);
    }
}
