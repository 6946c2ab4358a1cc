//! weir-load: the side-by-side benchmark of weir against nginx and HAProxy (issue 4, item 7),
//! and the idle-connection memory probe.
//!
//! The orchestration lives in `load/bench.sh` and `load/idle-conns` (bash: installing packages,
//! writing the three proxies' configurations, starting and stopping processes). This crate holds
//! the parts worth testing and the parts that must be fast: the static [`backend`] all three
//! proxies forward to, the [`wrk`] output parser, the [`summary`] table (medians of interleaved
//! rounds, paired ratios, the goals), the [`idle`] connection opener, the [`procfs`]
//! RSS reader and the [`h2abuse`] driver (HTTP/2 abuse cases against weir and nginx, issue 21).
//! See docs/benchmarks.md.

pub mod backend;
pub mod h2abuse;
pub mod idle;
pub mod procfs;
pub mod summary;
pub mod wrk;
