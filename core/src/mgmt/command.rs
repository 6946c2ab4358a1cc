//! A mutating request's body as a [`Command`]: exactly one JSON object of known fields
//! (C-MGMT-2 `400`), range checks left to the handler.

use std::net::IpAddr;

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use serde::Deserialize;

use super::{Access, ConfigPatch, Endpoint, MgmtRequest, authorize, guard, route};
use crate::response::ManagementError;

#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Enable the first `count` backends of the default pool, disable the rest.
    SetCount {
        /// How many.
        count: u64,
    },
    /// Enable or disable one backend (enabling clears a drain).
    SetEnabled {
        /// Its id.
        id: String,
        /// The new state.
        enabled: bool,
    },
    /// Drain one backend.
    Drain {
        /// Its id.
        id: String,
    },
    /// Refill the caller's bucket to `capacity` tokens.
    Limit {
        /// Tokens the bucket holds afterwards.
        capacity: u64,
    },
    /// Change dynamic settings.
    Patch(Box<ConfigPatch>),
}

/// A request that passed every check: a read for the adapter to serve, or a mutation to apply.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    /// A read endpoint (never [`Endpoint::is_mutating`]).
    Read(Endpoint),
    /// A mutation, allowed by `runtime_mutations`.
    Mutate(Command),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CountBody {
    count: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EnabledBody {
    enabled: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EmptyBody {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LimitBody {
    capacity: u64,
}

/// The body as exactly one JSON object of known fields (C-MGMT-2): the first byte after
/// whitespace must open an object (serde would read a struct from an array too), and nothing
/// but whitespace may follow it; duplicate and unknown fields are rejected.
fn json_object<'de, T: Deserialize<'de>>(body: &'de [u8]) -> Result<T, ManagementError> {
    if body.trim_ascii_start().first() != Some(&b'{') {
        return Err(ManagementError::BadRequest);
    }
    serde_json::from_slice(body).map_err(|_| ManagementError::BadRequest)
}

/// Run every check of a request, in the order of the module doc, without touching any state:
/// authentication, routing, the C-MGMT-2 guards and body, then `runtime_mutations`.
pub fn parse(req: &MgmtRequest<'_>, access: &Access<'_>) -> Result<Parsed, ManagementError> {
    authorize(req, access.token, access.allow_insecure)?;
    let endpoint = route(req.method, req.path)?;
    if !endpoint.is_mutating() {
        return Ok(Parsed::Read(endpoint));
    }
    guard(req)?;
    let command = match endpoint {
        Endpoint::SetCount => Command::SetCount {
            count: json_object::<CountBody>(req.body)?.count,
        },
        Endpoint::SetEnabled { id } => Command::SetEnabled {
            id,
            enabled: json_object::<EnabledBody>(req.body)?.enabled,
        },
        Endpoint::Drain { id } => {
            json_object::<EmptyBody>(req.body)?;
            Command::Drain { id }
        }
        Endpoint::Limit => Command::Limit {
            capacity: json_object::<LimitBody>(req.body)?.capacity,
        },
        _ => Command::Patch(Box::new(json_object::<ConfigPatch>(req.body)?)),
    };
    if !access.runtime_mutations {
        return Err(ManagementError::MutationsDisabled);
    }
    Ok(Parsed::Mutate(command))
}

/// [`parse`] over raw parts, for fuzzing (`fuzz_targets/mgmt_request`) and replay: a method
/// that is not a token is refused `400` as an HTTP server would; a header that is not a valid
/// name or value is dropped; a path that is not UTF-8 names no endpoint (`404` once
/// authenticated). Never panics.
pub fn parse_raw(
    method: &[u8],
    path: &[u8],
    headers: &[(&[u8], &[u8])],
    body: &[u8],
    client: IpAddr,
    access: &Access<'_>,
) -> Result<Parsed, ManagementError> {
    let method = Method::from_bytes(method).map_err(|_| ManagementError::BadRequest)?;
    // Not UTF-8: no endpoint has that path; authentication still comes first.
    let path = core::str::from_utf8(path).unwrap_or("\u{fffd}");
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            map.append(n, v);
        }
    }
    parse(
        &MgmtRequest {
            method: &method,
            path,
            headers: &map,
            body,
            client,
        },
        access,
    )
}
