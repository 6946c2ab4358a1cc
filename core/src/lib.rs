//! weir-core: the decisions of the weir load balancer as pure, deterministic state machines.
//!
//! Nothing here does IO, reads a clock or draws from a global RNG: time arrives as
//! [`Instant`] arguments, randomness as an [`Rng`] argument, and machines that wait report their
//! next deadline (`poll_timeout`) instead of sleeping. The adapters (tokio, smol) and the
//! simulator feed the same machines; docs/architecture.md explains the shape, and docs/contract.md
//! indexes the behaviour they implement.
//!
//! Methods of a machine fall into four kinds: getters (`&self`), facts in (`handle_*`),
//! commands, and actions out (`poll_*`).

/// Whether the test-only mutation switch `$name` is on: always `false` (a constant the compiler
/// folds away) unless the `mutations` feature is enabled, which only weir-sim's tests do. See
/// the `mutations` module (present with the feature) and docs/simulation.md.
macro_rules! mutated {
    ($name:ident) => {{
        #[cfg(feature = "mutations")]
        let on = $crate::mutations::on(&$crate::mutations::$name);
        #[cfg(not(feature = "mutations"))]
        let on = false;
        on
    }};
}

pub mod adaptive;
pub mod admission;
pub mod backend;
pub mod breaker;
pub mod bucket;
pub mod budget;
pub mod bulkhead;
pub mod config;
pub mod conn_limit;
pub mod conn_watch;
pub mod console_guard;
pub mod discovery;
pub mod exchange;
pub mod flow;
pub mod forward;
pub mod grpc;
pub mod h1;
pub mod h2;
pub mod headers;
pub mod health;
pub mod idle_pool;
pub mod method;
pub mod mgmt;
pub mod mirror;
#[cfg(feature = "mutations")]
pub mod mutations;
mod outcome;
pub mod outlier;
pub mod pool;
pub mod proxy_proto;
pub mod pushback;
pub mod rate;
pub mod request_id;
pub mod response;
pub mod retry;
pub mod rng;
pub mod route;
pub mod runtime;
pub mod select;
pub mod slow_start;
pub mod stream_pick;
mod sync;
pub mod time;
pub mod upstream;

pub use rng::{Rng, WyRand};
pub use time::Instant;
