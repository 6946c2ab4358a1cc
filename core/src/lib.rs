//! weir-core: the decisions of the weir load balancer as pure, deterministic state machines.
//!
//! Nothing here does IO, reads a clock or draws from a global RNG: time arrives as
//! [`Instant`] arguments, randomness as an [`Rng`] argument, and machines that wait report their
//! next deadline (`poll_timeout`) instead of sleeping. The adapters (tokio, smol) and the
//! simulator feed the same machines; see `DESIGN.md` and `docs/` for the contract they implement.
//!
//! Methods of a machine fall into four kinds: getters (`&self`), facts in (`handle_*`),
//! commands, and actions out (`poll_*`).

pub mod admission;
pub mod breaker;
pub mod bucket;
pub mod budget;
pub mod bulkhead;
pub mod config;
pub mod flow;
pub mod forward;
pub mod health;
pub mod mgmt;
pub mod pool;
pub mod rate;
pub mod request_id;
pub mod response;
pub mod retry;
pub mod rng;
pub mod route;
pub mod runtime;
pub mod select;
pub mod slow_start;
mod sync;
pub mod time;
pub mod upstream;

pub use rng::{Rng, WyRand};
pub use time::Instant;
