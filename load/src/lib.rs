//! weir-load: the side-by-side benchmark of weir against nginx and HAProxy, and the
//! idle-connection memory probe.
//!
//! The orchestration lives in `load/bench.sh` and `load/idle-conns` (bash: installing packages,
//! writing the three proxies' configurations, starting and stopping processes). This crate holds
//! the parts worth testing and the parts that must be fast: the static [`backend`] all three
//! proxies forward to, the [`wrk`] output parser, the [`summary`] table (medians of interleaved
//! rounds, paired ratios, the hot-path goals), the [`idle`] connection opener, the [`procfs`]
//! RSS reader and the [`h2abuse`] driver (HTTP/2 abuse cases against weir and nginx).
//! The load profiles are [`profile`] (phases and hypotheses), [`drive`] (wrk as the
//! engine, with a Lua script that counts statuses and backends) and [`run`] (windows, progress,
//! samples, summary, JSON report); [`plot`] draws the soak and side-by-side plots and [`probe`]
//! watches which rate-limit store answers during the store drills. See load/README.md and
//! docs/benchmarks.md.

pub mod backend;
pub mod drive;
pub mod h2abuse;
pub mod idle;
pub mod plot;
pub mod probe;
pub mod procfs;
pub mod profile;
pub mod run;
pub mod summary;
pub mod wrk;
