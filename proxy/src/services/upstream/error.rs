//! How an upstream attempt fails before its response head.

use std::io;

/// Why an attempt failed before a response head (the flow's `AttemptError` minus timeouts).
#[derive(Debug)]
pub enum SendError {
    /// The connection could not be established (DNS, refused, dial or TLS timeout, handshake):
    /// nothing of the request was handed to it.
    Connect(io::Error),
    /// The backend refused the HTTP/2 stream before processing any of it: `RST_STREAM` with
    /// `REFUSED_STREAM`, or a stream above the `last_stream_id` of its `GOAWAY` (RFC 9113
    /// §8.7; C-RETRY-9). What the attempt had handed to the stream may have been written.
    Refused(hyper::Error),
    /// The connection broke after it was established.
    Transport(hyper::Error),
    /// Every HTTP/2 connection to the backend was full at `max_conns_per_host` for the whole
    /// `dial_timeout`: nothing was sent (C-RETRY-9), and the backend is not at fault.
    Saturated,
}

impl SendError {
    /// A failure of a request handed to an HTTP/2 connection: [`SendError::Refused`] when the
    /// backend said it processed none of it, [`SendError::Transport`] otherwise.
    pub(super) fn of_h2(e: hyper::Error) -> SendError {
        if refused(&e) {
            SendError::Refused(e)
        } else {
            SendError::Transport(e)
        }
    }
}

/// Whether `e` says the backend processed nothing of the stream (RFC 9113 §8.7): a
/// `RST_STREAM` with `REFUSED_STREAM` from the backend, or the backend's `GOAWAY` whose
/// `last_stream_id` is below the stream (h2 fails exactly those streams with the remote
/// `GOAWAY`'s error, and streams opened after it; a stream at or below the id that breaks later
/// fails with the connection's end, an I/O error). hyper keeps h2's error as its source.
fn refused(e: &hyper::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(h2) = s.downcast_ref::<h2::Error>() {
            return refused_h2(h2);
        }
        source = s.source();
    }
    false
}

fn refused_h2(e: &h2::Error) -> bool {
    (e.is_reset() && e.is_remote() && e.reason() == Some(h2::Reason::REFUSED_STREAM))
        || (e.is_go_away() && e.is_remote())
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Connect(e) => write!(f, "connect: {e}"),
            SendError::Refused(e) => write!(f, "refused: {e}"),
            SendError::Transport(e) => write!(f, "transport: {e}"),
            SendError::Saturated => f.write_str(
                "saturated: every connection to the backend is busy (max_conns_per_host)",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error the library made from a bare reason is no word from the backend: not a refusal
    /// (the backend's own `REFUSED_STREAM` and `GOAWAY` are the conformance cases'
    /// `c_retry_9_*`, over real sockets).
    #[test]
    fn c_retry_9_only_the_backends_refusal_counts() {
        assert!(!refused_h2(&h2::Error::from(h2::Reason::REFUSED_STREAM)));
        assert!(!refused_h2(&h2::Error::from(h2::Reason::NO_ERROR)));
    }
}
