//! A single-value broadcast channel (tokio's `watch`, runtime-neutral): the sender publishes a
//! value, every receiver can wait for a change and read the latest. Used for the shutdown
//! signal and the health driver's cycle count.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use event_listener::{Event, listener};
use futures_util::future::Either;

#[derive(Debug)]
struct Inner<T> {
    value: Mutex<T>,
    /// Bumped on every change, under the value's lock and before anyone is woken; read without
    /// the lock.
    version: AtomicU64,
    closed: AtomicBool,
    changed: Event,
}

/// Publishes values; dropping it closes the channel.
#[derive(Debug)]
pub struct Sender<T> {
    inner: Arc<Inner<T>>,
}

/// Reads the latest value and waits for changes.
#[derive(Debug)]
pub struct Receiver<T> {
    inner: Arc<Inner<T>>,
    seen: u64,
}

impl<T> Clone for Receiver<T> {
    fn clone(&self) -> Self {
        Receiver {
            inner: Arc::clone(&self.inner),
            seen: self.seen,
        }
    }
}

/// The sender is gone: no change can come.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the watch sender was dropped")]
pub struct Closed;

/// A channel holding `init`.
#[must_use]
pub fn channel<T: Clone>(init: T) -> (Sender<T>, Receiver<T>) {
    let inner = Arc::new(Inner {
        value: Mutex::new(init),
        version: AtomicU64::new(0),
        closed: AtomicBool::new(false),
        changed: Event::new(),
    });
    (
        Sender {
            inner: Arc::clone(&inner),
        },
        Receiver { inner, seen: 0 },
    )
}

impl<T: Clone> Sender<T> {
    /// Publish `value` and wake every waiting receiver.
    pub fn send(&self, value: T) {
        self.send_if_modified(|v| {
            *v = value;
            true
        });
    }

    /// Change the value in place; receivers are woken when `modify` returns true.
    pub fn send_if_modified(&self, modify: impl FnOnce(&mut T) -> bool) -> bool {
        let changed = {
            let mut g = self
                .inner
                .value
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let changed = modify(&mut g);
            if changed {
                self.inner.version.fetch_add(1, Ordering::Release);
            }
            changed
        };
        if changed {
            self.inner.changed.notify(usize::MAX);
        }
        changed
    }

    /// A new receiver that has seen the current value.
    #[must_use]
    pub fn subscribe(&self) -> Receiver<T> {
        let seen = self.inner.version.load(Ordering::Acquire);
        Receiver {
            inner: Arc::clone(&self.inner),
            seen,
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.changed.notify(usize::MAX);
    }
}

impl<T: Clone> Receiver<T> {
    /// The latest value.
    #[must_use]
    pub fn get(&self) -> T {
        self.inner
            .value
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether the sender is gone.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    fn version(&self) -> u64 {
        self.inner.version.load(Ordering::Acquire)
    }

    /// Whether the value changed since this receiver last saw it, or the sender is gone: what
    /// [`changed`](Self::changed) would return at once for. Lock-free, so a hot loop can look
    /// before it polls a waiting `changed` (whose listener takes a lock shared by every
    /// receiver).
    #[must_use]
    pub fn has_changed(&self) -> bool {
        self.version() != self.seen || self.is_closed()
    }

    /// Wait until the value changes after the last one this receiver saw (at once if it already
    /// has), and mark it seen.
    ///
    /// # Errors
    /// [`Closed`] when the sender is gone and nothing new is left to see.
    pub async fn changed(&mut self) -> Result<(), Closed> {
        loop {
            let v = self.version();
            if v != self.seen {
                self.seen = v;
                return Ok(());
            }
            if self.inner.closed.load(Ordering::Acquire) {
                return Err(Closed);
            }
            listener!(self.inner.changed => heard);
            let v = self.version();
            if v != self.seen {
                self.seen = v;
                return Ok(());
            }
            if self.inner.closed.load(Ordering::Acquire) {
                return Err(Closed);
            }
            heard.await;
        }
    }

    /// Wait until `pred` holds for the value, and return it.
    ///
    /// # Errors
    /// [`Closed`] when the sender is gone before the value satisfied `pred`.
    pub async fn wait_for(&mut self, pred: impl Fn(&T) -> bool) -> Result<T, Closed> {
        loop {
            let v = self.get();
            if pred(&v) {
                return Ok(v);
            }
            self.changed().await?;
        }
    }
}

/// What a worker's loop or the acceptor woke up for.
#[derive(Debug)]
pub enum Wake<T> {
    /// The shutdown signal turned true (or its sender is gone).
    Shutdown,
    /// The awaited future finished first, with this value.
    Next(T),
}

/// Wait for `next` or for `shutdown` to turn true, whichever comes first (shutdown first when
/// both are ready).
pub async fn next_or_shutdown<T>(
    shutdown: &mut Receiver<bool>,
    next: impl std::future::Future<Output = T>,
) -> Wake<T> {
    let stop = async {
        loop {
            if shutdown.changed().await.is_err() || shutdown.get() {
                return;
            }
        }
    };
    match futures_util::future::select(std::pin::pin!(stop), std::pin::pin!(next)).await {
        Either::Left(_) => Wake::Shutdown,
        Either::Right((v, _)) => Wake::Next(v),
    }
}

#[cfg(test)]
mod tests;
