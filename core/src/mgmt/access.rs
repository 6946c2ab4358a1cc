//! Who may call the management API and the guards a mutating request passes before its body is
//! read as a command (C-MGMT-1, C-MGMT-2).

use http::HeaderValue;

use super::MgmtRequest;
use crate::config::Secret;
use crate::response::ManagementError;
use crate::runtime::Runtime;

/// Largest request body, in bytes (C-MGMT-2). The adapter reads at most one byte more, so an
/// oversized body is seen as such and answered `413` without being read to the end.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The CSRF header every mutating request carries with the value `1` (C-MGMT-2).
pub const CSRF_HEADER: &str = "x-balancer-csrf";

/// Who may call, from the configuration in force.
#[derive(Debug, Clone, Copy)]
pub struct Access<'a> {
    /// The bearer token (C-MGMT-1).
    pub token: Option<&'a Secret>,
    /// No token needed (the process warned at start).
    pub allow_insecure: bool,
    /// Mutating endpoints allowed (C-MGMT-3).
    pub runtime_mutations: bool,
}

impl<'a> Access<'a> {
    /// The access rules of `runtime`'s configuration.
    #[must_use]
    pub fn of(runtime: &'a Runtime) -> Access<'a> {
        let m = &runtime.config().management;
        Access {
            token: m.auth_token.as_ref(),
            allow_insecure: m.allow_insecure,
            runtime_mutations: m.runtime_mutations,
        }
    }
}

/// Check the bearer token (C-MGMT-1): exactly one `Authorization` header of the form
/// `Bearer <token>` (scheme case-insensitive, RFC 7235) whose token matches in constant time.
/// `allow_insecure` lets every request through; without a configured token and without
/// `allow_insecure` nothing gets through.
pub fn authorize(
    req: &MgmtRequest<'_>,
    token: Option<&Secret>,
    allow_insecure: bool,
) -> Result<(), ManagementError> {
    if allow_insecure {
        return Ok(());
    }
    match token {
        Some(token) if bearer_matches(req.headers, token) => Ok(()),
        _ => Err(ManagementError::Unauthorized),
    }
}

/// Whether `headers` hold exactly one `Authorization: Bearer <token>` (scheme
/// case-insensitive, RFC 7235) whose token matches `token` in constant time ([`Secret::matches`]).
/// The management plane's check (C-MGMT-1) and the console's own (`console_guard`).
#[must_use]
pub fn bearer_matches(headers: &http::HeaderMap, token: &Secret) -> bool {
    let mut values = headers.get_all(http::header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return false;
    };
    let Some((scheme, rest)) = value.as_bytes().split_at_checked(6) else {
        return false;
    };
    scheme.eq_ignore_ascii_case(b"bearer")
        && rest.first() == Some(&b' ')
        && token.matches(rest.trim_ascii())
}

/// The header checks of a mutating request, in the contract's order (C-MGMT-2): cross-site,
/// CSRF header, media type, body size. The body's form is checked by [`parse`].
pub fn guard(req: &MgmtRequest<'_>) -> Result<(), ManagementError> {
    let cross_site = req.headers.get_all("sec-fetch-site").iter().any(|v| {
        v.as_bytes()
            .trim_ascii()
            .eq_ignore_ascii_case(b"cross-site")
    });
    if cross_site {
        return Err(ManagementError::CrossSite);
    }
    let mut csrf = req.headers.get_all(CSRF_HEADER).iter();
    match (csrf.next(), csrf.next()) {
        (Some(v), None) if v.as_bytes() == b"1" => {}
        _ => return Err(ManagementError::CsrfHeader),
    }
    let mut ct = req.headers.get_all(http::header::CONTENT_TYPE).iter();
    match (ct.next(), ct.next()) {
        (Some(v), None) if is_json(v) => {}
        _ => return Err(ManagementError::UnsupportedMediaType),
    }
    if req.body.len() > MAX_BODY_BYTES {
        return Err(ManagementError::PayloadTooLarge);
    }
    Ok(())
}

/// `application/json`, case-insensitive, parameters (`; charset=utf-8`) allowed.
fn is_json(v: &HeaderValue) -> bool {
    let b = v.as_bytes();
    let essence = b.split(|c| *c == b';').next().unwrap_or(b).trim_ascii();
    essence.eq_ignore_ascii_case(b"application/json")
}
