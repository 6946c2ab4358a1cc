//! The black-box conformance suite (weir-conformance) against this crate's `weir` binary: one
//! test per case, each with its own proxy process and backends. See docs/conformance.md.

weir_conformance::suite!(env!("CARGO_BIN_EXE_weir"));
