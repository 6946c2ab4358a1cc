//! The event log: every fact the world fed to the core and every decision it got back, hashed
//! as it happens (the determinism check compares hashes) and, when asked, written as JSON lines
//! (the console's demo mode replays them).
//!
//! Format: the first line is a [`Header`] (`"kind": "header"`); each further line is one
//! [`Rec`] with the virtual time in nanoseconds (`"t_ns"`). Backends are named by their index
//! in the header's `backends` list, requests by their arrival number.

use core::hash::{Hash, Hasher};
use std::io::Write;

use serde::Serialize;

use crate::model::Fnv;

/// The first line of a trace.
#[derive(Debug, Clone, Serialize)]
pub struct Header {
    /// Always `"header"`.
    pub kind: &'static str,
    /// The scenario's name.
    pub scenario: &'static str,
    /// The seed.
    pub seed: u64,
    /// Every simulated backend's id, by index.
    pub backends: Vec<String>,
    /// Each pool's initial backends (indices) and policy.
    pub pools: Vec<(Vec<usize>, &'static str)>,
    /// Route prefixes with their pool and bulkhead limit.
    pub routes: Vec<(&'static str, usize, Option<u32>)>,
}

/// One entry of the event log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Rec {
    /// A request arrived.
    Arrive {
        /// Request number.
        req: u64,
        /// Client number.
        client: u32,
        /// Method.
        method: &'static str,
        /// Path.
        path: &'static str,
    },
    /// It waits in the gate's queue.
    Queued {
        /// Request number.
        req: u64,
    },
    /// A queued request was handed a slot.
    Admitted {
        /// Request number.
        req: u64,
    },
    /// An attempt (first or retry) was sent.
    Attempt {
        /// Request number.
        req: u64,
        /// Attempt number, 1-based.
        attempt: u32,
        /// Backend index.
        backend: u32,
        /// Granted by panic routing.
        panic: bool,
        /// A half-open trial.
        trial: bool,
    },
    /// A response head arrived for the current attempt.
    Head {
        /// Request number.
        req: u64,
        /// Backend index.
        backend: u32,
        /// Status.
        status: u16,
    },
    /// The current attempt failed before a head.
    AttemptError {
        /// Request number.
        req: u64,
        /// Backend index.
        backend: u32,
        /// `connect`, `transport`, `per_try_timeout` or `client_gone`.
        error: &'static str,
    },
    /// The client got its response (head): from a backend or synthetic.
    Respond {
        /// Request number.
        req: u64,
        /// Status.
        status: u16,
        /// What kind of response: `backend`, `failure`, `overload`, `rate_limited`,
        /// `bulkhead_full`, `no_backend:<reason>`.
        what: &'static str,
        /// Attempts made.
        attempts: u32,
        /// The retry budget stopped a retry.
        budget_exhausted: bool,
    },
    /// The client went away before any response.
    Abandon {
        /// Request number.
        req: u64,
    },
    /// The client disconnected.
    Disconnect {
        /// Request number.
        req: u64,
    },
    /// A delivered body ended (`complete`, `error` or `client_gone`).
    BodyEnd {
        /// Request number.
        req: u64,
        /// How.
        end: &'static str,
    },
    /// A probe answered (or timed out).
    Probe {
        /// Backend index.
        backend: u32,
        /// Success.
        ok: bool,
    },
    /// Active health flipped.
    Health {
        /// Backend index.
        backend: u32,
        /// The new health.
        healthy: bool,
    },
    /// A circuit changed state (as observed after an event).
    Circuit {
        /// Backend index.
        backend: u32,
        /// `closed`, `open` or `half_open`.
        state: &'static str,
    },
    /// A fault was applied to a backend.
    Fault {
        /// Backend index.
        backend: u32,
        /// Which.
        fault: &'static str,
    },
    /// A reload step: `applied`, `warmup`, `published`, `rejected`.
    Reload {
        /// Pool index.
        pool: u32,
        /// Which step.
        step: &'static str,
    },
    /// The shared store changed state (`store_up`, `store_errors`, `store_hangs`, `store_slow`).
    Store {
        /// The new state.
        state: &'static str,
    },
    /// A shared-store call was made (`trial`: the recovery trial of a down store).
    StoreCall {
        /// Request number.
        req: u64,
        /// A recovery trial.
        trial: bool,
    },
    /// A configuration reload was published: generation `generation` is in force.
    ConfigReload {
        /// The configuration generation.
        generation: u32,
    },
    /// Traffic started (every pool finished a check cycle, C-HEALTH-1) or stopped.
    Traffic {
        /// On or off.
        on: bool,
    },
}

#[derive(Serialize)]
struct Line<'a> {
    t_ns: u64,
    #[serde(flatten)]
    rec: &'a Rec,
}

/// The log: a running hash, and optionally a JSON-lines sink.
pub struct Trace<'w> {
    hasher: Fnv,
    records: u64,
    sink: Option<&'w mut dyn Write>,
    error: Option<std::io::Error>,
}

impl core::fmt::Debug for Trace<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Trace")
            .field("records", &self.records)
            .field("hash", &self.hasher.finish())
            .finish_non_exhaustive()
    }
}

impl<'w> Trace<'w> {
    /// A log that only hashes.
    #[must_use]
    pub fn hashing() -> Trace<'w> {
        Trace {
            hasher: Fnv::default(),
            records: 0,
            sink: None,
            error: None,
        }
    }

    /// A log that also writes JSON lines to `sink`, starting with `header`.
    pub fn writing(sink: &'w mut dyn Write, header: &Header) -> Trace<'w> {
        let mut t = Trace {
            hasher: Fnv::default(),
            records: 0,
            sink: Some(sink),
            error: None,
        };
        t.write_json(header);
        t
    }

    fn write_json<T: Serialize>(&mut self, value: &T) {
        if self.error.is_some() {
            return;
        }
        if let Some(sink) = self.sink.as_mut() {
            let result = serde_json::to_writer(&mut **sink, value)
                .map_err(std::io::Error::from)
                .and_then(|()| sink.write_all(b"\n"));
            if let Err(e) = result {
                self.error = Some(e);
            }
        }
    }

    /// Log `rec` at `t_ns`.
    pub fn record(&mut self, t_ns: u64, rec: Rec) {
        t_ns.hash(&mut self.hasher);
        rec.hash(&mut self.hasher);
        self.records += 1;
        if self.sink.is_some() {
            self.write_json(&Line { t_ns, rec: &rec });
        }
    }

    /// Mix a fact that is not a record (an event's kind and time) into the hash.
    pub fn mix(&mut self, value: impl Hash) {
        value.hash(&mut self.hasher);
    }

    /// The hash of everything logged so far.
    #[must_use]
    pub fn hash(&self) -> u64 {
        self.hasher.finish()
    }

    /// The first write error, if any.
    pub fn take_error(&mut self) -> Option<std::io::Error> {
        self.error.take()
    }
}
