//! hyper's HTTP/2 server limits, set explicitly (docs/proxy.md "HTTP/2 limits").
//!
//! Every abuse of 2023–2024 is bounded by one of these, whatever hyper's defaults become:
//! - rapid reset (CVE-2023-44487): at most [`MAX_PENDING_ACCEPT_RESET_STREAMS`] streams reset
//!   by the client before weir took them, then `GOAWAY(ENHANCE_YOUR_CALM)`; streams in flight
//!   at most [`MAX_CONCURRENT_STREAMS`] (nginx 128, HAProxy 100);
//! - "MadeYouReset" (CVE-2025-8671): at most [`MAX_LOCAL_ERROR_RESET_STREAMS`] streams weir had
//!   to reset for the client's protocol errors, then `GOAWAY(ENHANCE_YOUR_CALM)`;
//! - CONTINUATION flood (CVE-2024-27316 class): the header block is bounded by
//!   `max_header_list_size` (= `server.max_header_bytes`, as for HTTP/1, C-PATH-12), and h2
//!   answers a header block of more CONTINUATION frames than that size needs with
//!   `GOAWAY(ENHANCE_YOUR_CALM)`;
//! - SETTINGS and PING floods: h2 keeps one ACK / PONG pending and stops reading until it is
//!   written, so a flood costs the frames' parsing and no memory; a peer that does not read its
//!   ACKs stalls only its own connection, which `idle_timeout` then closes;
//! - a slow or zero-window peer: what is buffered for it is bounded per stream by
//!   [`MAX_SEND_BUF_SIZE`] (hyper: 400 KiB), so one connection holds at most
//!   `MAX_CONCURRENT_STREAMS × MAX_SEND_BUF_SIZE` (8 MiB); with no window at all h2 assigns no
//!   send capacity and nothing is buffered (backpressure reaches the backend read);
//! - a dead peer: a PING every [`KEEP_ALIVE_INTERVAL`], the connection closed when its PONG
//!   takes longer than [`KEEP_ALIVE_TIMEOUT`].

use std::time::Duration;

use hyper::server::conn::http2;

use crate::base::rt::Rt;
use crate::services::state::ServerLimits;

/// Streams a client may have open at once (`SETTINGS_MAX_CONCURRENT_STREAMS`).
pub const MAX_CONCURRENT_STREAMS: u32 = 128;
/// Streams reset by the client before weir accepted them, tolerated per connection.
pub const MAX_PENDING_ACCEPT_RESET_STREAMS: usize = 20;
/// Streams weir reset because of the client's errors, tolerated per connection.
pub const MAX_LOCAL_ERROR_RESET_STREAMS: usize = 256;
/// Bytes buffered for sending per stream (response data the client has no window for).
pub const MAX_SEND_BUF_SIZE: usize = 64 * 1024;
/// Receive window per stream (request bodies weir has not read yet).
pub const INITIAL_STREAM_WINDOW: u32 = 256 * 1024;
/// Receive window per connection (all streams together).
pub const INITIAL_CONNECTION_WINDOW: u32 = 1024 * 1024;
/// How often an HTTP/2 connection is pinged.
pub const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// How long a PING may go unanswered before the connection is closed.
pub const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// The HTTP/2 server builder of one worker.
pub(crate) fn builder(rt: Rt, limits: &ServerLimits) -> http2::Builder<Rt> {
    let mut h2 = http2::Builder::new(rt);
    h2.timer(rt)
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
        // What the trailer guard (`weir_core::h2::Inbound`, in front of h2) assumes: set here so
        // that a change of hyper's or h2's defaults cannot make it read frames or HPACK
        // indexes differently from h2.
        .max_frame_size(weir_core::h2::MAX_FRAME_SIZE)
        .header_table_size(weir_core::h2::HEADER_TABLE_SIZE)
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .max_pending_accept_reset_streams(MAX_PENDING_ACCEPT_RESET_STREAMS)
        .max_local_error_reset_streams(MAX_LOCAL_ERROR_RESET_STREAMS)
        .max_send_buf_size(MAX_SEND_BUF_SIZE)
        .initial_stream_window_size(INITIAL_STREAM_WINDOW)
        .initial_connection_window_size(INITIAL_CONNECTION_WINDOW)
        .adaptive_window(false)
        .keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(KEEP_ALIVE_TIMEOUT);
    h2
}
