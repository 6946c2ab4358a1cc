//! The `weir` binary (filled in by the tokio adapter change).

fn main() {}
