//! The two runtime calls the stores make themselves (a background task, a timeout), on the
//! runtime the build has: tokio (`tokio` feature), smol (`smol` feature), or, with both (a
//! workspace build), tokio when a tokio runtime is current and smol otherwise. The redis crate
//! decides the same way, and weir-smol says so explicitly with [`prefer_smol`].

use std::future::Future;
use std::time::Duration;

/// Whether the caller runs inside a tokio runtime.
#[cfg(feature = "tokio")]
fn on_tokio() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

/// Run `fut` in the background on the caller's runtime.
pub(crate) fn spawn(fut: impl Future<Output = ()> + Send + 'static) {
    #[cfg(feature = "tokio")]
    if on_tokio() {
        drop(tokio::spawn(fut));
        return;
    }
    #[cfg(feature = "smol")]
    smol::spawn(fut).detach();
    #[cfg(not(feature = "smol"))]
    drop(fut);
}

/// `fut`, unless `limit` passes first (`None`).
pub(crate) async fn timeout<T>(limit: Duration, fut: impl Future<Output = T>) -> Option<T> {
    #[cfg(feature = "tokio")]
    if on_tokio() {
        return tokio::time::timeout(limit, fut).await.ok();
    }
    #[cfg(feature = "smol")]
    return smol::future::or(async { Some(fut.await) }, async {
        smol::Timer::after(limit).await;
        None
    })
    .await;
    #[cfg(not(feature = "smol"))]
    {
        drop(fut);
        let _ = limit;
        None
    }
}

/// Make the redis crate use smol even where a tokio runtime might be current (weir-smol calls
/// this before anything connects). A preference already set is kept; a build without tokio
/// has nothing to choose between.
pub fn prefer_smol() {
    #[cfg(all(feature = "tokio", feature = "smol"))]
    let _ = redis::aio::prefer_smol();
}
