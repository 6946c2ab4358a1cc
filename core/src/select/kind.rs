//! The configured policy: its name ([`PolicyKind`]) and the built policy of any kind
//! ([`AnyPolicy`], an enum, so dispatch is static).

use super::policy::Policy;
use super::{ConsistentHash, LeastRequest, PickFirst, RoundRobin, WeightedRoundRobin};
use crate::backend::Backend;
use crate::rng::Rng;
use crate::sync::Arc;

/// The policy names of `balancing.policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PolicyKind {
    /// `round_robin` (the default).
    #[default]
    RoundRobin,
    /// `weighted_round_robin`: smooth weighted round robin (nginx).
    WeightedRoundRobin,
    /// `least_request`: power of two choices on in-flight requests.
    LeastRequest,
    /// `pick_first`: the first available backend in config order.
    PickFirst,
    /// `consistent_hash`: a Maglev-style lookup table keyed by [`PickContext::hash`].
    ConsistentHash,
}

impl PolicyKind {
    /// Every policy, in documentation order.
    pub const ALL: &'static [PolicyKind] = &[
        PolicyKind::RoundRobin,
        PolicyKind::WeightedRoundRobin,
        PolicyKind::LeastRequest,
        PolicyKind::PickFirst,
        PolicyKind::ConsistentHash,
    ];

    /// The configuration name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            PolicyKind::RoundRobin => "round_robin",
            PolicyKind::WeightedRoundRobin => "weighted_round_robin",
            PolicyKind::LeastRequest => "least_request",
            PolicyKind::PickFirst => "pick_first",
            PolicyKind::ConsistentHash => "consistent_hash",
        }
    }

    /// Parse a configuration name.
    #[must_use]
    pub fn from_name(name: &str) -> Option<PolicyKind> {
        PolicyKind::ALL.iter().copied().find(|k| k.as_str() == name)
    }
}

/// A built policy of any kind (static dispatch).
#[derive(Debug)]
pub enum AnyPolicy {
    /// See [`RoundRobin`].
    RoundRobin(RoundRobin),
    /// See [`WeightedRoundRobin`].
    WeightedRoundRobin(WeightedRoundRobin),
    /// See [`LeastRequest`].
    LeastRequest(LeastRequest),
    /// See [`PickFirst`].
    PickFirst(PickFirst),
    /// See [`ConsistentHash`].
    ConsistentHash(ConsistentHash),
}

impl AnyPolicy {
    /// Build the policy `kind` over `backends`; `rng` gives it its random start.
    #[must_use]
    pub fn new(kind: PolicyKind, backends: &[Arc<Backend>], rng: &mut dyn Rng) -> AnyPolicy {
        match kind {
            PolicyKind::RoundRobin => AnyPolicy::RoundRobin(RoundRobin::new(backends.len(), rng)),
            PolicyKind::WeightedRoundRobin => {
                AnyPolicy::WeightedRoundRobin(WeightedRoundRobin::new(backends, rng))
            }
            PolicyKind::LeastRequest => AnyPolicy::LeastRequest(LeastRequest::new()),
            PolicyKind::PickFirst => AnyPolicy::PickFirst(PickFirst::new()),
            PolicyKind::ConsistentHash => AnyPolicy::ConsistentHash(ConsistentHash::new(backends)),
        }
    }

    /// The kind this policy was built from.
    #[must_use]
    pub fn kind(&self) -> PolicyKind {
        match self {
            AnyPolicy::RoundRobin(_) => PolicyKind::RoundRobin,
            AnyPolicy::WeightedRoundRobin(_) => PolicyKind::WeightedRoundRobin,
            AnyPolicy::LeastRequest(_) => PolicyKind::LeastRequest,
            AnyPolicy::PickFirst(_) => PolicyKind::PickFirst,
            AnyPolicy::ConsistentHash(_) => PolicyKind::ConsistentHash,
        }
    }

    pub(crate) fn policy(&self) -> &dyn Policy {
        match self {
            AnyPolicy::RoundRobin(p) => p,
            AnyPolicy::WeightedRoundRobin(p) => p,
            AnyPolicy::LeastRequest(p) => p,
            AnyPolicy::PickFirst(p) => p,
            AnyPolicy::ConsistentHash(p) => p,
        }
    }
}
