//! adapter-tokio's `tests/management.rs`, run against the `weir-smol` binary: the same source, its
//! `bin()` picks this crate's binary.

#[path = "../../adapter-tokio/tests/management.rs"]
mod cases;
