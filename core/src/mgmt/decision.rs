//! What a management request does: the handler's [`Reply`] and the adapter's [`Decision`], and
//! how each command changes the runtime (C-MGMT-3..5, C-CONF-8).

use std::net::IpAddr;

use super::{
    Access, Command, ConfigPatch, Endpoint, FieldError, MgmtRequest, Parsed, Reply, body, parse,
    route,
};
use crate::config;
use crate::rate::ClientKey;
use crate::response::ManagementError;
use crate::rng::Rng;
use crate::runtime::{AdminState, Runtime};
use crate::time::Instant;

/// What the adapter does with a management request.
#[derive(Debug)]
pub enum Decision {
    /// Serve this read endpoint: `/healthz`, `/readyz`, `/metrics` from the adapter's own
    /// state; the status from [`status_document`]; the synthetic request through the data plane
    /// with [`dashboard_forward_headers`].
    Read(Endpoint),
    /// Answer with this reply; nothing else to do (a refusal, or a change already applied to
    /// the shared backend state).
    Reply(Reply),
    /// Set the caller's rate-limit bucket (in the store in force) to hold `tokens` tokens, then
    /// answer with `reply`.
    RefillBucket {
        /// The caller's key (C-RATE-2).
        key: ClientKey,
        /// Tokens the bucket holds afterwards (at most the capacity).
        tokens: u64,
        /// The answer.
        reply: Reply,
    },
    /// Publish this runtime exactly as a reload publishes one, then answer with `reply`.
    Publish {
        /// The next runtime.
        runtime: Box<Runtime>,
        /// The answer (`200 {"status":"applied"}`).
        reply: Reply,
    },
}

impl Decision {
    /// The reply to send (after the action, if any); `None` for [`Decision::Read`].
    #[must_use]
    pub fn reply(&self) -> Option<&Reply> {
        match self {
            Decision::Read(_) => None,
            Decision::Reply(r)
            | Decision::RefillBucket { reply: r, .. }
            | Decision::Publish { reply: r, .. } => Some(r),
        }
    }
}

/// Handle a management request against the runtime in force: [`parse`], then [`apply`].
/// The adapter serialises mutations (one at a time) and access-logs every one (C-MGMT-5).
pub fn handle(
    req: &MgmtRequest<'_>,
    runtime: &Runtime,
    now: Instant,
    rng: &mut dyn Rng,
) -> Decision {
    match parse(req, &Access::of(runtime)) {
        Err(ManagementError::BadRequest) => match route(req.method, req.path) {
            Ok(endpoint) if endpoint.is_mutating() => {
                Decision::Reply(body::problem(&endpoint, req.body))
            }
            _ => Decision::Reply(Reply::Refused(ManagementError::BadRequest)),
        },
        Err(e) => Decision::Reply(Reply::Refused(e)),
        Ok(Parsed::Read(endpoint)) => Decision::Read(endpoint),
        Ok(Parsed::Mutate(command)) => apply(command, runtime, req.client, now, rng),
    }
}

/// `404` naming the backend id that is not in the configuration.
fn unknown_backend(id: &str) -> Reply {
    let shown: String = id.chars().take(128).collect();
    Reply::Problem {
        status: 404,
        message: format!("no backend with id {shown:?}"),
        errors: vec![FieldError {
            path: "id".to_owned(),
            message: format!("no backend with id {shown:?} in any pool"),
        }],
    }
}

/// Apply a mutation to `runtime` (C-MGMT-4). Backend flags are shared state and change at once;
/// a bucket refill and a configuration change come back as actions.
pub fn apply(
    command: Command,
    runtime: &Runtime,
    client: IpAddr,
    now: Instant,
    rng: &mut dyn Rng,
) -> Decision {
    match command {
        Command::SetCount { count } => Decision::Reply(set_count(runtime, count, now)),
        Command::SetEnabled { id, enabled } => match runtime.find_backend(&id) {
            None => Decision::Reply(unknown_backend(&id)),
            Some((_, b)) => {
                b.set_enabled(enabled, now);
                Decision::Reply(Reply::applied(
                    200,
                    serde_json::json!({"status": "applied", "id": id, "enabled": enabled}),
                ))
            }
        },
        Command::Drain { id } => match runtime.find_backend(&id) {
            None => Decision::Reply(unknown_backend(&id)),
            Some((_, b)) => {
                b.start_drain(now);
                Decision::Reply(Reply::applied(
                    202,
                    serde_json::json!({"status": "draining", "id": id}),
                ))
            }
        },
        Command::Limit { capacity } => {
            let rate = &runtime.config().rate;
            if capacity > rate.capacity() {
                return Decision::Reply(Reply::invalid(
                    format!(
                        "capacity must be within 0..={}, got {capacity}",
                        rate.capacity()
                    ),
                    Vec::new(),
                ));
            }
            Decision::RefillBucket {
                key: ClientKey::new(client, &rate.key()),
                tokens: capacity,
                reply: Reply::applied(
                    200,
                    serde_json::json!({"status": "applied", "tokens": capacity}),
                ),
            }
        }
        Command::Patch(p) => patch_config(&p, runtime, now, rng),
    }
}

/// `{"count": n}`: enable the first `n` backends of the default pool in config order, disable
/// the rest (`400` unless `1 ≤ n ≤ backends`). Only the default pool: it is the reference's one
/// backend list; named pools are changed one backend at a time.
fn set_count(runtime: &Runtime, count: u64, now: Instant) -> Reply {
    let Some(pool) = runtime.pool(0) else {
        return Reply::invalid("there is no default pool", Vec::new());
    };
    let backends = pool.backends();
    let n = backends.len() as u64;
    if !(1..=n).contains(&count) {
        return Reply::invalid(
            format!("count must be within 1..={n}, got {count}"),
            Vec::new(),
        );
    }
    for (i, b) in backends.iter().enumerate() {
        b.set_enabled((i as u64) < count, now);
    }
    Reply::applied(
        200,
        serde_json::json!({"status": "applied", "count": count}),
    )
}

/// `PATCH /api/dashboard/config`: see the module doc (C-CONF-8).
fn patch_config(p: &ConfigPatch, runtime: &Runtime, now: Instant, rng: &mut dyn Rng) -> Decision {
    let mut cfg = runtime.config().config.clone();
    let errors = p.apply_to(&mut cfg);
    if !errors.is_empty() {
        return Decision::Reply(Reply::invalid("invalid configuration", errors));
    }
    let valid = match config::validate_config(cfg, &runtime.secrets()) {
        Ok(v) => v,
        Err(e) => {
            return Decision::Reply(Reply::invalid(
                "invalid configuration",
                e.errors().iter().map(FieldError::from).collect(),
            ));
        }
    };
    match Runtime::build_with(valid, Some(runtime), AdminState::Keep, now, rng) {
        Ok(next) => Decision::Publish {
            runtime: Box::new(next),
            reply: Reply::applied(200, serde_json::json!({"status": "applied"})),
        },
        Err(e) => Decision::Reply(Reply::invalid(
            "invalid configuration",
            vec![FieldError {
                path: String::new(),
                message: e.to_string(),
            }],
        )),
    }
}
