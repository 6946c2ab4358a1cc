//! The lowest layer: the runtime seam (`rt`: spawn, timers, sockets, TLS streams, watch
//! channels), the process clock (`clock`), per-worker helpers (`worker`: the thread's rng and
//! entropy), the allocator and its collection (`memory`), metric exposition (`exposition`:
//! owned metric families and their encoding), bounded file reading (`safe_read`), secrets from
//! files and the environment (`secrets`), the upstream URI (`uri`), JSON log lines
//! (`log_json`) and an error with its causes on one line (`error_chain`). Imports nothing of
//! weir-proxy above it.

pub mod clock;
pub mod error_chain;
pub mod exposition;
pub mod log_json;
pub mod memory;
pub mod rt;
pub mod safe_read;
pub mod secrets;
pub mod uri;
pub mod worker;
