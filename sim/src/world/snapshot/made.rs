//! What the world remembers of each exchange's creation ([`Made`]): the world's request state
//! holds it, the parent module fills and checks it.

use std::sync::Arc;

use weir_core::Instant;
use weir_core::pool::Pool;
use weir_core::runtime::Runtime;

/// What the world handed an exchange at creation, and the deadlines it expects of it.
#[derive(Debug, Default)]
pub(in crate::world) struct Made {
    pub runtime: Option<Arc<Runtime>>,
    pub pool: Option<Arc<Pool>>,
    /// The configuration generation in force.
    pub generation: usize,
    /// Configuration reloads published before it.
    pub reloads: u64,
    /// When a slow client has sent its body.
    pub upload_at: Option<Instant>,
    /// The current attempt's header deadline.
    pub header_deadline: Option<Instant>,
    /// The delivered response's write deadline, or the delivery itself when the head came
    /// after that deadline (the body is then aborted at once).
    pub write_deadline: Option<Instant>,
}
