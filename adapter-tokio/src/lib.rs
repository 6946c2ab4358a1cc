//! The production proxy on tokio and hyper (its own issue follows).

pub mod probe;
