//! adapter-tokio's `tests/reload_safety.rs`, run against the `weir-smol` binary: the same
//! source, its `bin()` picks this crate's binary.

#[path = "../../adapter-tokio/tests/reload_safety.rs"]
mod cases;
