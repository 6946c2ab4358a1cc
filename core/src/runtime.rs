//! The runtime snapshot: everything the data plane reads per request, built from one
//! [`ValidConfig`] and published as a whole (C-CONF-4, C-CONF-5, C-CONF-6, C-CONF-8).
//!
//! A [`Runtime`] is immutable. The adapter holds the one in force in an `Arc` swapped atomically
//! (arc-swap); a request loads it once and keeps it for its whole life, so its pool snapshot,
//! bulkhead and retry policy never change under it. A SIGHUP reload and a management `PATCH`
//! replace it through the same path: validate the whole configuration
//! ([`config::load`](crate::config::load) /
//! [`config::validate_config`](crate::config::validate_config)), plan what applies now
//! and what needs a restart ([`plan_reload`], C-CONF-7), build the next runtime from the one in
//! force ([`Runtime::build`]), warm up pools that would otherwise start with no healthy backend
//! ([`warmup_required`], C-CONF-5), then publish in one swap. Nothing is published when any step
//! fails, so the old runtime keeps serving.
//!
//! What survives a rebuild, and why:
//! - backends with the same id and url (and weight) keep their `Arc<Backend>`: health, breaker,
//!   counters and held slots (C-CONF-6). A reload re-applies the declarative `disabled` (which
//!   cancels an administrative drain, C-CONF-6); a management change
//!   ([`AdminState::Keep`]) does not touch the backends' enabled and drain flags, because it did
//!   not change the backend lists (see [`Runtime::build_with`]);
//! - a route's bulkhead, when the route's prefix and limit are unchanged, so permits held by
//!   in-flight requests stay counted (C-LOAD-2);
//! - the retry budget's tokens: the same `Arc` when its shape is unchanged, else
//!   [`RetryBudget::reload`] hands the tokens over (C-RETRY-7; a reload never mints tokens).
//!
//! This is Envoy's model (a new immutable cluster/route snapshot per xDS update, host objects
//! reused across updates by address, so health and stats survive) with HAProxy's rule that a
//! reload must not drop a server's state when the server did not change.
//!
//! [`ValidConfig`]: crate::config::ValidConfig
//! [`RetryBudget::reload`]: crate::budget::RetryBudget::reload

mod reload;
mod snapshot;

#[cfg(all(test, not(loom)))]
mod tests;

pub use reload::{
    Reload, ReloadError, ReloadPlan, RunningSecrets, plan_reload, running_secrets, warmup_required,
};
pub use snapshot::{AdminState, BuildError, Runtime};
