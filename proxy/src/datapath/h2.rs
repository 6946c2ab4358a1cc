//! HTTP/2 from clients, on hyper: the server's limits (`limits`) and the request handler
//! (`handler`), an IO loop around weir-core's request engine.

pub mod handler;
pub mod limits;
