//! Validation of the management listener and of secrets: `*_env` fields name an environment
//! variable and are never echoed, `allow_insecure` only on loopback (C-CONF-3, C-MGMT-1).

use super::check::parse_host_port;
#[allow(clippy::wildcard_imports)]
use super::*;

/// `management` listener settings (C-MGMT-1..3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagementSettings {
    /// Whether the management listener runs.
    pub enabled: bool,
    /// Its address.
    pub address: HostPort,
    /// The bearer token (from `auth_token_env`, C-CONF-3); always present when enabled without
    /// `allow_insecure`.
    pub auth_token: Option<Secret>,
    /// Serve without a token (the process logs a warning).
    pub allow_insecure: bool,
    /// Always false: `true` is refused (weir has no pprof endpoint).
    pub enable_pprof: bool,
    /// Mutating endpoints allowed (C-MGMT-3).
    pub runtime_mutations: bool,
    /// Response deadline on the management listener.
    pub write_timeout: Duration,
}

/// Whether `name` looks like an environment variable name (`[A-Z_][A-Z0-9_]*`, at most 128
/// bytes). A `*_env` field names a variable; anything else is most likely the secret itself,
/// pasted into the wrong field, so the error never repeats it.
pub(crate) fn is_env_name(name: &str) -> bool {
    let b = name.as_bytes();
    (1..=128).contains(&b.len())
        && (b[0].is_ascii_uppercase() || b[0] == b'_')
        && b.iter()
            .all(|&c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_')
}

/// The error for a `*_env` field that is not a variable name; `false` if so. The value is not
/// repeated: it may be the secret.
pub(super) fn env_name_ok(c: &mut Check<'_>, path: &str, name: &str) -> bool {
    if name.is_empty() || is_env_name(name) {
        return true;
    }
    c.err(
        path,
        format!(
            "must name an environment variable ([A-Z_][A-Z0-9_]*, e.g. WEIR_ADMIN_TOKEN), \
             not hold the secret itself; the value ({} bytes) is not shown",
            name.len()
        ),
    );
    false
}

/// Whether `host` (of `management.address`) is a loopback address: `localhost`, `127.0.0.0/8`
/// or `::1`. An empty host means every interface.
pub(crate) fn is_loopback_host(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h.eq_ignore_ascii_case("localhost")
        || h.parse::<core::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Resolve the secret named by the field at `path` (value `name`).
pub(super) fn secret_at(
    c: &mut Check<'_>,
    secrets: &dyn SecretSource,
    path: &str,
    name: &str,
    required: bool,
) -> Option<Secret> {
    if !env_name_ok(c, path, name) {
        return None;
    }
    match secret::resolve(secrets, name) {
        Resolved::Found(s) => Some(s),
        Resolved::Missing if required => {
            c.err(
                path,
                format!("secret not found: set {name} or {name}_FILE in the environment"),
            );
            None
        }
        Resolved::Missing => None,
        Resolved::Unreadable(msg) => {
            c.err(path, format!("secret {name}: {msg}"));
            None
        }
    }
}

pub(super) fn check_management(
    cfg: &Config,
    secrets: &dyn SecretSource,
    c: &mut Check<'_>,
) -> Option<ManagementSettings> {
    let m = &cfg.management;
    if m.enable_pprof {
        c.err(
            "management.enable_pprof",
            "not supported: weir has no pprof endpoint (profile the process from outside, \
             e.g. `perf`); remove the key or set false",
        );
    }
    let address = parse_host_port(&m.address, true)
        .map_err(|e| c.err("management.address", e))
        .ok();
    if m.enabled
        && m.allow_insecure
        && let Some(a) = &address
        && !is_loopback_host(&a.host)
    {
        c.err(
            "management.allow_insecure",
            format!(
                "true only with a loopback management.address (127.0.0.1, ::1, localhost), \
                 got {:?}: without a token anyone who can reach it could change the backends",
                m.address
            ),
        );
    }
    let auth_token = if !m.enabled {
        env_name_ok(c, "management.auth_token_env", &m.auth_token_env);
        None
    } else if m.auth_token_env.is_empty() {
        if !m.allow_insecure {
            c.err(
                "management.auth_token_env",
                "required when management is enabled (or set allow_insecure: true)",
            );
        }
        None
    } else {
        secret_at(
            c,
            secrets,
            "management.auth_token_env",
            &m.auth_token_env,
            !m.allow_insecure,
        )
    };
    if let Some(t) = &auth_token
        && t.expose().is_empty()
        && !m.allow_insecure
    {
        c.err("management.auth_token_env", "the token is empty");
    }
    Some(ManagementSettings {
        enabled: m.enabled,
        address: address?,
        auth_token,
        allow_insecure: m.allow_insecure,
        enable_pprof: m.enable_pprof,
        runtime_mutations: m.runtime_mutations,
        write_timeout: m.write_timeout,
    })
}
