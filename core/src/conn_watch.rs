//! The client connection watchdog (C-PATH-12, docs/proxy.md "Client-side limits" and "Idle
//! connections: parking"): given the connection's phase and `now`, what is due and when to look
//! again. The proxy keeps the phase (its requests update it) and a timer; this machine decides.
//!
//! - reading a head: past `read_header_timeout` since its first byte → [`WatchAction::Close`]
//!   (a slowloris gets no answer); with parking on, look again within `park_after`, so a head
//!   that completes and is answered quickly is parked no later than 2 × `park_after`;
//! - idle between requests: past `idle_timeout` → [`WatchAction::Idle`] (graceful close); with
//!   parking on, past `park_after` → [`WatchAction::Park`] (the HTTP/1 connection state is
//!   dropped, the socket alone waits); look again no later than `read_header_timeout` from now;
//! - parking that did not finish within one look → [`WatchAction::Close`];
//! - busy (a request in flight): nothing is due; look again within `read_header_timeout`
//!   (`park_after` when parking is on), since the request may end at any moment.
//!
//! Methods: getters only (`poll_action`, `poll_timeout`); the facts are the arguments.

use core::time::Duration;

use crate::Instant;

/// Where a client connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnPhase {
    /// Between requests, since then.
    Idle {
        /// When the connection became idle.
        since: Instant,
    },
    /// A head is arriving, since its first byte.
    Head {
        /// When the head started.
        started: Instant,
    },
    /// A request is being served.
    Busy,
    /// Told to park; waiting for the HTTP/1 state to let go of the socket.
    Parking,
}

/// What is due on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchAction {
    /// Close now (a head too slow, or parking stuck).
    Close,
    /// Idle too long: shut down gracefully.
    Idle,
    /// Idle for `park_after`: park.
    Park,
}

/// The deadlines of one listener's connections (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnWatch {
    read_header_timeout: Duration,
    idle_timeout: Duration,
    /// `None`: no parking (HTTP/2).
    park_after: Option<Duration>,
}

impl ConnWatch {
    /// A watchdog with these limits; `park_after: None` turns parking off.
    #[must_use]
    pub const fn new(
        read_header_timeout: Duration,
        idle_timeout: Duration,
        park_after: Option<Duration>,
    ) -> ConnWatch {
        ConnWatch {
            read_header_timeout,
            idle_timeout,
            park_after,
        }
    }

    /// What is due at `now` in `phase`, if anything.
    #[must_use]
    pub fn poll_action(&self, phase: ConnPhase, now: Instant) -> Option<WatchAction> {
        match phase {
            ConnPhase::Head { started } => (now
                >= started.saturating_add(self.read_header_timeout)
                && !mutated!(HEAD_TIMEOUT_IGNORED))
            .then_some(WatchAction::Close),
            ConnPhase::Idle { since } => {
                if now >= since.saturating_add(self.idle_timeout) {
                    Some(WatchAction::Idle)
                } else if self
                    .park_after
                    .is_some_and(|p| now >= since.saturating_add(p))
                {
                    Some(WatchAction::Park)
                } else {
                    None
                }
            }
            ConnPhase::Parking => Some(WatchAction::Close),
            ConnPhase::Busy => None,
        }
    }

    /// When to look again (with nothing due at `now`: after [`Self::poll_action`] said `None`,
    /// or after the caller acted on what it said).
    #[must_use]
    pub fn poll_timeout(&self, phase: ConnPhase, now: Instant) -> Instant {
        let rht = self.read_header_timeout;
        match (phase, self.park_after) {
            (ConnPhase::Head { started }, None) => started.saturating_add(rht),
            (ConnPhase::Head { started }, Some(p)) => {
                started.saturating_add(rht).min(now.saturating_add(p))
            }
            (ConnPhase::Idle { since }, park) => {
                let due = since.saturating_add(self.idle_timeout);
                let next = park.map_or(due, |p| due.min(since.saturating_add(p)));
                next.min(now.saturating_add(rht))
            }
            (ConnPhase::Busy | ConnPhase::Parking, None) => now.saturating_add(rht),
            (ConnPhase::Busy | ConnPhase::Parking, Some(p)) => now.saturating_add(rht.min(p)),
        }
    }

    /// When a parked connection must be looked at again: idle, only its `idle_timeout` (from the
    /// end of its last response) is left; in any other phase, [`Self::poll_timeout`].
    #[must_use]
    pub fn parked_timeout(&self, phase: ConnPhase, now: Instant) -> Instant {
        match phase {
            ConnPhase::Idle { since } => since.saturating_add(self.idle_timeout),
            _ => self.poll_timeout(phase, now),
        }
    }
}

#[cfg(test)]
mod tests;
