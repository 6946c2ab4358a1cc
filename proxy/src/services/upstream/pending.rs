//! The upstream request of an attempt before a connection takes it (C-RETRY-9): made only
//! then, so a connect error leaves the client's headers and body where they were. Shared by
//! the HTTP/1 pool and the HTTP/2 pools.

use http::Request;

use super::body::UpBody;

/// A request not made yet (its maker), or made and given back unsent by a connection that
/// closed under it.
pub(crate) enum Pending<F, R> {
    /// To be made once a connection takes it.
    Make(F),
    /// Made (and shaped for its protocol).
    Made(R),
}

impl<F: FnOnce() -> Request<UpBody>, R> Pending<F, R> {
    /// The request, made now if it was not, shaped by `shape` when made now.
    pub(crate) fn made(self, shape: impl FnOnce(Request<UpBody>) -> R) -> R {
        match self {
            Pending::Make(make) => shape(make()),
            Pending::Made(r) => r,
        }
    }
}
