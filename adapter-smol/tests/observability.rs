//! adapter-tokio's `tests/observability.rs`, run against the `weir-smol` binary: the same source, its
//! `bin()` picks this crate's binary.

#[path = "../../adapter-tokio/tests/observability.rs"]
mod cases;
