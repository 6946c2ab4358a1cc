//! Load profiles and side-by-side benchmarks (their own issue follows).
