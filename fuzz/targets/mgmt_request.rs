//! C-MGMT-1..3: management requests built from arbitrary bytes never panic; without the right
//! token nothing but 401 comes back; a mutation is never accepted when mutations are disabled
//! or the CSRF header is missing.

use std::net::{IpAddr, Ipv4Addr};

use weir_core::config::Secret;
use weir_core::mgmt::{self, Access, Parsed};
use weir_core::response::ManagementError;

const TOKEN: &str = "fuzz-admin-token";

pub fn run(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut lines = rest.split(|&b| b == b'\n');
    let method = lines.next().unwrap_or_default();
    let path = lines.next().unwrap_or_default();
    let mut headers: Vec<(&[u8], &[u8])> = Vec::new();
    for line in lines.by_ref() {
        if line.is_empty() {
            break;
        }
        let at = line.iter().position(|&b| b == b':').unwrap_or(line.len());
        let (name, value) = line.split_at(at);
        let value = value.strip_prefix(b":").unwrap_or(value);
        headers.push((name, value.strip_prefix(b" ").unwrap_or(value)));
    }
    let body: Vec<u8> = lines.collect::<Vec<_>>().join(&b'\n');
    if flags & 4 != 0 {
        headers.push((b"authorization", b"Bearer fuzz-admin-token"));
    }
    let secret = Secret::new(TOKEN);
    let access = Access {
        token: Some(&secret),
        allow_insecure: flags & 1 != 0,
        runtime_mutations: flags & 2 != 0,
    };
    let client = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let result = mgmt::parse_raw(method, path, &headers, &body, client, &access);
    let authorized = access.allow_insecure
        || headers.iter().any(|(n, v)| {
            n.eq_ignore_ascii_case(b"authorization") && *v == format!("Bearer {TOKEN}").as_bytes()
        });
    if !authorized && !matches!(result, Err(ManagementError::BadRequest)) {
        assert_eq!(
            result.as_ref().err(),
            Some(&ManagementError::Unauthorized),
            "C-MGMT-1"
        );
    }
    if let Ok(Parsed::Mutate(_)) = result {
        assert!(
            access.runtime_mutations,
            "a mutation passed with runtime_mutations off (C-MGMT-3)"
        );
        let csrf_ok = headers
            .iter()
            .any(|(n, v)| n.eq_ignore_ascii_case(b"x-balancer-csrf") && *v == b"1");
        assert!(
            csrf_ok,
            "a mutation passed without X-Balancer-CSRF: 1 (C-MGMT-2)"
        );
    }
}
