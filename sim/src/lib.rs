//! Deterministic chaos simulation of weir-core (its own issue follows).
