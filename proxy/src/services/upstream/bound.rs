//! `server.upstream.max_conns_per_host` for HTTP/1 backends: the connections to one backend,
//! busy and idle, of every worker together, stay within the bound (weir-core's
//! `stream_pick::may_open` decides). A connection holds a [`Ticket`] from before it is dialled
//! until it closes. At the bound a request with no idle connection of its own worker waits for
//! a connection to the backend to close, within `dial_timeout`; meanwhile a connection released
//! to the backend is closed rather than kept idle, so the waiter (on whichever worker) gets its
//! place. Past the deadline the attempt is saturated: nothing sent, retried elsewhere.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use event_listener::Event;
use weir_core::stream_pick::may_open;

use super::target::PoolKey;
use crate::base::rt::{self, Rt};

#[derive(Debug, Default)]
struct Count {
    open: usize,
    waiting: usize,
}

/// The per-backend connection counts (shared by every worker).
#[derive(Debug)]
pub(super) struct Bound {
    max: u32,
    wait: Duration,
    counts: Mutex<HashMap<PoolKey, Count>>,
    freed: Event,
}

/// One connection's place under the bound: given back when dropped.
#[derive(Debug)]
pub(super) struct Ticket {
    bound: Arc<Bound>,
    key: PoolKey,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut counts = self.bound.lock();
        if let Some(c) = counts.get_mut(&self.key) {
            c.open = c.open.saturating_sub(1);
            if c.open == 0 && c.waiting == 0 {
                counts.remove(&self.key);
            }
        }
        drop(counts);
        self.bound.freed.notify(usize::MAX);
    }
}

/// A request counted as waiting for a place on a backend while this lives.
struct Waiting<'b> {
    bound: &'b Bound,
    key: &'b PoolKey,
}

impl<'b> Waiting<'b> {
    fn new(bound: &'b Bound, key: &'b PoolKey) -> Waiting<'b> {
        bound.lock().entry(key.clone()).or_default().waiting += 1;
        Waiting { bound, key }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut counts = self.bound.lock();
        if let Some(c) = counts.get_mut(self.key) {
            c.waiting = c.waiting.saturating_sub(1);
            if c.open == 0 && c.waiting == 0 {
                counts.remove(self.key);
            }
        }
    }
}

/// What [`Bound::reserve`] found.
pub(super) enum Reserve {
    /// A place for a new connection.
    Ticket(Ticket),
    /// A connection closed: look for an idle one again, then reserve again.
    Freed,
}

impl Bound {
    pub(super) fn new(max: u32, wait: Duration) -> Arc<Bound> {
        Arc::new(Bound {
            max,
            wait,
            counts: Mutex::new(HashMap::new()),
            freed: Event::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PoolKey, Count>> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn try_take(self: &Arc<Bound>, key: &PoolKey) -> Option<Ticket> {
        let mut counts = self.lock();
        let c = counts.entry(key.clone()).or_default();
        may_open(c.open, Some(self.max)).then(|| {
            c.open += 1;
            Ticket {
                bound: Arc::clone(self),
                key: key.clone(),
            }
        })
    }

    /// A place for a new connection to `key`, or, at the bound, the news that one closed
    /// (until `deadline`, set on the first wait: `dial_timeout` from then); `None` past it.
    pub(super) async fn reserve(
        self: &Arc<Bound>,
        rt: Rt,
        key: &PoolKey,
        deadline: &mut Option<Instant>,
    ) -> Option<Reserve> {
        if let Some(t) = self.try_take(key) {
            return Some(Reserve::Ticket(t));
        }
        let until = *deadline.get_or_insert_with(|| rt.now() + self.wait);
        // Counted as waiting first, so that a connection released from now on is closed for
        // this request rather than kept idle; uncounted however the wait ends (a request
        // dropped while it waits included).
        let _waiting = Waiting::new(self, key);
        let listener = self.freed.listen();
        // A close between the look and the listening: look again first.
        if let Some(t) = self.try_take(key) {
            return Some(Reserve::Ticket(t));
        }
        let woke = rt::timeout_at(rt, until, listener).await.is_ok();
        woke.then_some(Reserve::Freed)
    }

    /// Whether a request waits for a place on `key`: a released connection is then closed
    /// rather than kept idle.
    pub(super) fn has_waiters(&self, key: &PoolKey) -> bool {
        self.lock().get(key).is_some_and(|c| c.waiting > 0)
    }
}
