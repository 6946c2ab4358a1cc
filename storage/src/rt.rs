//! The two runtime calls the stores make themselves (a background task, a timeout), on
//! whichever runtime runs the caller: tokio when a tokio runtime is current, smol otherwise
//! (weir-smol; the redis crate decides the same way, and weir-smol says so explicitly with
//! [`prefer_smol`]).

use std::future::Future;
use std::time::Duration;

/// Whether the caller runs inside a tokio runtime.
fn on_tokio() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

/// Run `fut` in the background on the caller's runtime.
pub(crate) fn spawn(fut: impl Future<Output = ()> + Send + 'static) {
    if on_tokio() {
        drop(tokio::spawn(fut));
    } else {
        smol::spawn(fut).detach();
    }
}

/// `fut`, unless `limit` passes first (`None`).
pub(crate) async fn timeout<T>(limit: Duration, fut: impl Future<Output = T>) -> Option<T> {
    if on_tokio() {
        tokio::time::timeout(limit, fut).await.ok()
    } else {
        smol::future::or(async { Some(fut.await) }, async {
            smol::Timer::after(limit).await;
            None
        })
        .await
    }
}

/// Make the redis crate use smol even where a tokio runtime might be current (weir-smol calls
/// this before anything connects). A preference already set is kept.
pub fn prefer_smol() {
    let _ = redis::aio::prefer_smol();
}
