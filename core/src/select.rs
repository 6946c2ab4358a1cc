//! Backend selection (C-POOL-4, C-POOL-5): one driver, several policies.
//!
//! A policy only says in which order it would like to try backends: it calls a visitor with
//! candidate indices, most preferred first, and must eventually offer every index. The driver
//! (`select/drive.rs`, called by [`Pool::select`](crate::pool::Pool::select)) does everything
//! else, the same way for every policy:
//!
//! - skips backends this request already tried (C-RETRY-2) and unavailable ones (C-POOL-3);
//! - applies slow start (C-HEALTH-4): a warming backend is taken with probability equal to its
//!   share, otherwise the policy's next candidate is asked; if every candidate was warming, the
//!   first one passed over is taken, so slow start never turns a request away;
//! - reserves the slot (C-POOL-6) and, when a reservation loses a race, moves on;
//! - "panic routing": when no backend is available and the only reason for some is an open
//!   circuit or an outlier ejection (C-OUT-2), the first such backend is used anyway and the slot is marked as a panic slot
//!   (counted by the adapter in `load_balancer_panic_selections_total`). Passive ejection alone
//!   never leaves a pool with nothing to serve while a healthy backend exists; this is the cap
//!   Envoy expresses as `max_ejection_percent` and its panic threshold. Backends that fail active
//!   health checks are never used: "all backends down" is a 503 (failure matrix);
//! - never blocks: with nothing to offer it returns a typed [`NoBackend`] (C-POOL-5).
//!
//! This mirrors gRPC's picker (reference/001): a picker never blocks, and reports why it could
//! not pick. Policies are an enum over structs that implement [`Policy`], so dispatch is static.

mod consistent_hash;
mod drive;
mod kind;
mod least_request;
mod pick_first;
mod policy;
mod rotation;
mod round_robin;
mod smooth;
mod weighted;

pub use consistent_hash::ConsistentHash;
pub use drive::{MAX_TRIED, NoBackend, Selection, Tried};
pub(crate) use drive::{Request, drive};
pub use kind::{AnyPolicy, PolicyKind};
pub use least_request::{InFlight, LeastRequest, LoadMetric};
pub use pick_first::PickFirst;
pub(crate) use policy::fmix64;
pub use policy::{PickContext, Policy, Visit, hash_key};
pub use round_robin::RoundRobin;
pub use weighted::WeightedRoundRobin;

#[cfg(all(test, not(loom)))]
pub(crate) mod tests;
