//! What a client's streamed body handed to an HTTP/2 stream the backend has not answered yet,
//! kept so that a stream the backend refuses can be sent again whole (C-RETRY-9). One bound for
//! both clients: an HTTP/1 client's request owns one, which its HTTP/2 translation fills
//! (`datapath::h1::request::to_h2`); an HTTP/2 client's body fills its own as hyper reads it
//! ([`ClientBody::resumable`](super::ClientBody::resumable)).

use bytes::Bytes;

/// The most body bytes kept for sending a refused stream again: HTTP/2's default stream
/// window (RFC 9113 §6.9.2), which is what a backend that refuses a stream at once lets reach
/// it before its refusal; a stream refused after more than this went out is not sent again
/// (the refusal is then a transport error).
pub const RESEND_LIMIT: usize = 65_535;

/// What the client's streamed body handed to an HTTP/2 stream the backend has not answered yet:
/// cheap clones of the chunks, none once more than [`RESEND_LIMIT`] went.
#[derive(Debug, Default)]
pub struct Resend {
    /// The chunks handed over, in order (empty once the limit was passed).
    pub chunks: Vec<Bytes>,
    len: usize,
    overflow: bool,
}

impl Resend {
    /// Keep `chunk`, unless the limit is passed (then nothing is kept any more).
    pub fn keep(&mut self, chunk: &Bytes) {
        if self.overflow {
            return;
        }
        self.len += chunk.len();
        if self.len > RESEND_LIMIT {
            self.overflow = true;
            self.chunks = Vec::new();
        } else {
            self.chunks.push(chunk.clone());
        }
    }

    /// Whether everything handed over is kept (so the body can be sent again).
    pub fn whole(&self) -> bool {
        !self.overflow
    }

    /// The backend answered: nothing needs sending again.
    pub fn clear(&mut self) {
        *self = Resend::default();
    }
}
