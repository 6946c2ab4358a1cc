//! adapter-tokio's `tests/runtime_bounds.rs`, run against the `weir-smol` binary: the same
//! source, its `bin()` picks this crate's binary.

#[path = "../../adapter-tokio/tests/runtime_bounds.rs"]
mod cases;
