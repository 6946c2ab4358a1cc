//! The virtual store's state as the world holds it: the store itself ([`VirtualStore`]), how a
//! call ends ([`StoreReply`]), what the world knows of one request's decision ([`StoreView`]),
//! and the engine's services built around it ([`services`]). The parent module plays it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use weir_core::Instant;
use weir_core::admission::Gate;
use weir_core::exchange::Services;
use weir_core::rate::{ClientKey, LocalStore, LocalStoreParams, StorageKind, StoreCircuit};
use weir_core::rng::{Rng, WyRand};

use crate::model::BucketModel;
use crate::scenario::{Setup, StoreSetup, StoreState};

/// How a store call ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::world) enum StoreReply {
    /// The store takes the token and answers in time.
    Answer,
    /// The store takes the token, but answers after `operation_timeout` (the adapter dropped
    /// the call at its deadline, so the answer goes nowhere).
    Late,
    /// The store answers with an error.
    Error,
}

/// The virtual store and the world's accounting of it.
#[derive(Debug)]
pub(in crate::world) struct VirtualStore {
    pub(super) setup: StoreSetup,
    pub(super) state: StoreState,
    /// What the shared store holds.
    pub(super) buckets: LocalStore,
    /// Per key: first take, grants, the model of the shared bucket.
    pub(super) models: BTreeMap<ClientKey, (Instant, u64, BucketModel)>,
    /// Requests whose exchange waits on a store call.
    pub(super) waiting: BTreeSet<usize>,
}

impl VirtualStore {
    pub(super) fn new(setup: StoreSetup, hash_seed: u64) -> Result<VirtualStore, String> {
        let params = LocalStoreParams {
            shards: 4,
            max_buckets: 4096,
        };
        Ok(VirtualStore {
            setup,
            state: StoreState::Up,
            buckets: LocalStore::new(params, hash_seed).map_err(|e| e.to_string())?,
            models: BTreeMap::new(),
            waiting: BTreeSet::new(),
        })
    }
}

/// The engine's process-wide services of `s`: the gate, the local store and the shared store's
/// circuit, and the virtual shared store when the scenario has one (storage `redis`).
pub(in crate::world) fn services(
    s: &Setup,
    rng_core: &mut WyRand,
) -> Result<(Arc<Services>, Option<VirtualStore>), String> {
    let params = LocalStoreParams {
        shards: 4,
        max_buckets: 4096,
    };
    let local = LocalStore::new(params, rng_core.next_u64()).map_err(|e| e.to_string())?;
    let store = match &s.store {
        Some(setup) => Some(VirtualStore::new(setup.clone(), rng_core.next_u64())?),
        None => None,
    };
    let storage = if store.is_some() {
        StorageKind::Redis
    } else {
        StorageKind::Local
    };
    let services = Services::new(
        Arc::new(Gate::new(s.gate)),
        storage,
        Arc::new(local),
        Arc::new(StoreCircuit::default()),
    );
    Ok((Arc::new(services), store))
}

/// What the world knows of one request's rate decision under a shared store.
#[derive(Debug, Clone, Copy, Default)]
pub(in crate::world) struct StoreView {
    /// Calls made for it.
    pub calls: u32,
    /// The store answered in time with this decision.
    pub answered: Option<bool>,
    /// The circuit was up right before the call into the exchange that decided.
    pub up_before: bool,
    /// The request was refused with `503` because the store is unavailable.
    pub refused: bool,
    /// The rate outcome of a `429`.
    pub denied: Option<weir_core::rate::RateOutcome>,
}
