//! Criterion micro-benchmarks of weir-core hot paths live in `benches/`.
