//! Route bulkheads: a per-route cap on concurrent requests (C-LOAD-2).
//!
//! A route may set `max_concurrent_requests`; when that many of its requests are in flight the next
//! one is turned away at once with `503` (reason `bulkhead_full`, C-LOAD-3) while every other route
//! keeps its own capacity. This is the bulkhead of reference/004 (a buffered `chan struct{}` per
//! traffic class, released by `defer`), Hystrix's semaphore isolation and Envoy's per-route
//! `max_requests` circuit-breaker threshold.
//!
//! Unlike reference/004, an overflowing request does not wait for a slot: the global gate in front
//! (C-LOAD-1) already provides the one bounded queue, and a request parked on a saturated route
//! would hold a global slot while it waits, which is exactly the cross-route interference a
//! bulkhead exists to prevent (C-LOAD-2: "other routes are unaffected").
//!
//! The count is one atomic taken by a CAS loop; the permit is an RAII guard, so a slot cannot leak
//! on an early return, an error or a panic (the `defer` rule of reference/004, enforced by the
//! type system). A bulkhead without a limit still counts, so the status API can show in-flight
//! requests per route.

use core::fmt;

use crate::sync::{Arc, AtomicU32, Ordering};

/// Why a bulkhead could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkheadError {
    /// a route limit must be at least 1 (leave it out for no limit)
    ZeroLimit,
}

impl fmt::Display for BulkheadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BulkheadError::ZeroLimit => write!(
                f,
                "max_concurrent_requests must be at least 1 (leave it out for no limit)"
            ),
        }
    }
}

impl std::error::Error for BulkheadError {}

/// The bulkhead is full: the request gets `503` with reason `bulkhead_full` (C-LOAD-2, C-LOAD-3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BulkheadFull {
    /// The limit that was reached.
    pub limit: u32,
}

/// A concurrency limit shared by all requests of one route (C-LOAD-2).
///
/// Kinds of methods: getters (`limit`, `in_flight`) and one command, [`Bulkhead::try_acquire`],
/// whose permit gives the slot back when dropped. Share it as `Arc<Bulkhead>`.
pub struct Bulkhead {
    /// `u32::MAX` when unlimited (4 billion concurrent requests cannot happen).
    limit: u32,
    unlimited: bool,
    in_flight: AtomicU32,
}

impl fmt::Debug for Bulkhead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bulkhead")
            .field("limit", &self.limit())
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl Bulkhead {
    /// A bulkhead admitting at most `limit` concurrent requests; `None` counts without limiting.
    pub fn new(limit: Option<u32>) -> Result<Bulkhead, BulkheadError> {
        let (limit, unlimited) = match limit {
            Some(0) => return Err(BulkheadError::ZeroLimit),
            Some(n) => (n, false),
            None => (u32::MAX, true),
        };
        Ok(Bulkhead {
            limit,
            unlimited,
            in_flight: AtomicU32::new(0),
        })
    }

    /// The configured limit, `None` when unlimited.
    #[must_use]
    pub fn limit(&self) -> Option<u32> {
        (!self.unlimited).then_some(self.limit)
    }

    /// Requests of this route in flight now (permits alive).
    #[must_use]
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Take a slot without waiting (C-LOAD-2): a permit that releases it on drop, or
    /// [`BulkheadFull`]. Lock-free (one CAS loop), no allocation. An associated function rather
    /// than a method because `self: &Arc<Self>` does not work with loom's `Arc`.
    pub fn try_acquire(this: &Arc<Bulkhead>) -> Result<BulkheadPermit, BulkheadFull> {
        let mut current = this.in_flight.load(Ordering::Relaxed);
        loop {
            if current >= this.limit && !mutated!(BULKHEAD_UNLIMITED) {
                return Err(BulkheadFull { limit: this.limit });
            }
            match this.in_flight.compare_exchange_weak(
                current,
                current + 1, // < limit <= u32::MAX, cannot overflow
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    return Ok(BulkheadPermit {
                        bulkhead: Arc::clone(this),
                    });
                }
                Err(seen) => current = seen,
            }
        }
    }
}

/// One slot of a [`Bulkhead`]; dropping it gives the slot back. Hold it until the response body
/// has finished (or the upgraded connection closed), like the per-backend slot (C-POOL-6).
#[must_use = "dropping the permit releases the slot at once"]
pub struct BulkheadPermit {
    bulkhead: Arc<Bulkhead>,
}

impl fmt::Debug for BulkheadPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BulkheadPermit")
            .field("bulkhead", &self.bulkhead)
            .finish()
    }
}

impl Drop for BulkheadPermit {
    fn drop(&mut self) {
        // Each permit was counted once by `try_acquire`, so the count is at least 1 here.
        self.bulkhead.in_flight.fetch_sub(1, Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;
