//! weir's own HTTP/1.1 data path: the IO around weir-core's pure codec
//! (`weir_core::h1`) on both sides, runtime-independent (every read and write goes through
//! `hyper::rt::Read`/`Write` on a `Box<dyn Io>`, every timer through [`crate::base::rt::Rt`]).
//!
//! - [`serve`]: one downstream (client) connection: one read buffer, heads parsed by `weir_core::h1`,
//!   pipelined requests answered in order, keep-alive / `Connection: close` / HTTP/1.0, the
//!   connection timers of `weir_core::conn_watch`, and parking (a long-idle connection is held
//!   as its socket alone);
//! - [`request`]: one request's exchange (`weir_core::exchange::Exchange`), driven from the raw
//!   head as the HTTP/2 handler (`crate::datapath::h2::handler`) drives it from hyper's; every decision is the
//!   engine's;
//! - [`upstream_conn`]: upstream connections of weir's own (`Box<dyn Io>` and a read buffer), one
//!   idle pool per worker (`weir_core::idle_pool::IdlePool`), driven in the request's task;
//! - [`relay`]: bodies as they arrive (Content-Length, chunked, until close).
//!
//! - [`downstream_conn`]: a downstream connection's IO state, lent to each request in turn;
//! - [`attempt`] and [`respond`]: one attempt upstream, and the answer to the client;
//! - [`io`]: the byte buffer ([`Buf`](io::Buf)) and the write helpers both sides share.
//!
//! Imports run one way: `serve` → `request` → `respond` / `attempt` → `downstream_conn` /
//! `upstream_conn` / `relay` → `io`.

pub mod attempt;
pub mod downstream_conn;
pub mod io;
pub mod relay;
pub mod request;
pub mod respond;
pub mod serve;
pub mod upstream_conn;
