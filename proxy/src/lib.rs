//! weir on hyper, independent of the async runtime: the data plane (C-PATH-*, C-FWD-*, C-LOAD-*,
//! C-RATE-1/2/4/5, C-POOL-*, C-RETRY-*), the health probes (C-HEALTH-*), and the process around
//! them.
//!
//! The runtime (tokio in `weir-tokio`, smol in `weir-smol`) comes in through [`rt::Runtime`]:
//! weir-proxy never names one (docs/architecture.md, "The runtime seam").
//!
//! [`start`] turns a validated configuration into a running proxy in this process and returns a
//! [`ProxyHandle`]. The `weir` and `weir-smol` binaries are thin `main`s around [`cli`] (process
//! protocol in docs/proxy.md); tests start proxies in-process the same way.
//!
//! The crate is five layers, each a directory that imports only from the layers below it
//! (`scripts/module-cycles` checks it in CI; the picture is in docs/architecture.md):
//! 1. [`base`]: the runtime seam, the clock, small helpers;
//! 2. [`observe`]: metrics, logs, events, listener certificates;
//! 3. [`services`]: upstream pools, the snapshot, the gate, the limiter, probes, the state;
//! 4. [`datapath`]: listeners, client connections, HTTP/1 and HTTP/2, the engine's IO;
//! 5. [`control`]: start, reload, management, console, CLI.
//!
//! This file only declares the layers and re-exports the API the binaries and tests use.

pub mod base;
pub mod control;
pub mod datapath;
pub mod observe;
pub mod services;

pub use base::{memory, rt};
pub use control::cli;
pub use control::start::{
    Options, ProxyHandle, StartError, Unsupported, check_runtime_support, default_public_bind,
    start,
};
