//! The fourth layer: the data path. Listeners, workers and the protocol sniff (`server`), the
//! listener's front (`front`: PROXY protocol and the TLS handshake), one downstream (client)
//! connection's context (`downstream`), weir's HTTP/1 on both sides (`h1`), the HTTP/2 server
//! and its request handler (`h2`), the IO that drives weir-core's request engine (`drive`,
//! `effects`) and the response bodies (`body`). Imports only from the layers below it.

pub mod downstream;
pub mod drive;
pub mod effects;
pub mod front;
pub mod h1;
pub mod h2;
pub mod mirror;
pub mod response_body;
pub mod server;
