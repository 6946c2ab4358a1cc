//! The proxy on smol and async-io (its own issue follows).
