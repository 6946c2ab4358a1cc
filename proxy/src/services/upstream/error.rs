//! How an upstream attempt fails before its response head.

use std::io;

/// Why an attempt failed before a response head (the flow's `AttemptError` minus timeouts).
#[derive(Debug)]
pub enum SendError {
    /// The connection could not be established (DNS, refused, dial or TLS timeout, handshake).
    Connect(io::Error),
    /// The connection broke after it was established.
    Transport(hyper::Error),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Connect(e) => write!(f, "connect: {e}"),
            SendError::Transport(e) => write!(f, "transport: {e}"),
        }
    }
}
