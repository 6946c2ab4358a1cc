//! The bodies of the fuzz targets, shared by cargo-fuzz (`fuzz/fuzz_targets/*.rs`, nightly) and
//! by the stable replay test `core/tests/fuzz_seeds.rs`, which runs every file under
//! `fuzz/seeds/<target>/` through the same function on every `.ci/run`.
//! Each `run` must never panic on any input; the assertions inside are the target's oracle.

pub mod config_yaml;
pub mod flow;
pub mod forwarded_chain;
pub mod grpc_timeout;
pub mod h1_chunked;
pub mod h1_request;
pub mod h1_response;
pub mod mgmt_request;
pub mod proxy_proto;
pub mod request_id;
pub mod upstream_uri;

/// A target's body.
pub type Target = fn(&[u8]);

/// Every target by name, as the directories under `fuzz/seeds/` are named.
pub const TARGETS: &[(&str, Target)] = &[
    ("config_yaml", config_yaml::run),
    ("flow", flow::run),
    ("forwarded_chain", forwarded_chain::run),
    ("grpc_timeout", grpc_timeout::run),
    ("h1_chunked", h1_chunked::run),
    ("h1_request", h1_request::run),
    ("h1_response", h1_response::run),
    ("mgmt_request", mgmt_request::run),
    ("proxy_proto", proxy_proto::run),
    ("request_id", request_id::run),
    ("upstream_uri", upstream_uri::run),
];
