//! The two runtime calls the stores make themselves (a background task, a timeout), through one
//! seam: [`StoreRuntime`]. The proxy installs its own runtime seam here at start
//! (`weir_proxy::rt::Rt` implements the trait; [`install_runtime`]), so in weir the stores spawn
//! and time out on the very runtime that runs the data plane.
//!
//! Without an installed runtime (weir-storage used on its own: its tests, its benchmarks, the
//! migration helper binary) the calls fall back to the runtime the build has: tokio (`tokio`
//! feature), smol (`smol` feature), or, with both (a workspace build), tokio when a tokio
//! runtime is current and smol otherwise.
//!
//! What stays outside the seam, because the client crates decide it themselves: the redis
//! crate's own IO and reconnect tasks run on the runtime its feature (`tokio-comp` /
//! `smol-comp`) selects, chosen the same way (weir-smol says so explicitly with
//! [`prefer_smol`]); tokio-postgres and deadpool-postgres need a tokio runtime (the `postgres`
//! feature, tokio builds only).

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::Poll;
use std::time::Duration;

/// A boxed, sendable future (what [`StoreRuntime`] takes and gives).
pub type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// What the stores need from an async runtime (object-safe; weir-proxy's `Rt` implements it).
pub trait StoreRuntime: Send + Sync + 'static {
    /// Run `fut` in the background on the caller's executor.
    fn spawn(&self, fut: BoxFuture);
    /// A future that ends after `d`.
    fn sleep(&self, d: Duration) -> BoxFuture;
}

static RUNTIME: OnceLock<&'static dyn StoreRuntime> = OnceLock::new();

/// Make the stores spawn and time out on `rt` from now on. The first installed runtime stays
/// (a process has one); returns whether `rt` is the one in use now.
pub fn install_runtime(rt: &'static dyn StoreRuntime) -> bool {
    let set = RUNTIME.get_or_init(|| rt);
    std::ptr::addr_eq(
        *set as *const dyn StoreRuntime,
        rt as *const dyn StoreRuntime,
    )
}

/// Whether a runtime was installed ([`install_runtime`]).
#[must_use]
pub fn runtime_installed() -> bool {
    RUNTIME.get().is_some()
}

/// Whether the caller runs inside a tokio runtime.
#[cfg(feature = "tokio")]
fn on_tokio() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

/// Run `fut` in the background on the caller's runtime.
pub(crate) fn spawn(fut: impl Future<Output = ()> + Send + 'static) {
    if let Some(rt) = RUNTIME.get() {
        rt.spawn(Box::pin(fut));
        return;
    }
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
    if let Some(rt) = RUNTIME.get() {
        let mut fut = std::pin::pin!(fut);
        let mut sleep = rt.sleep(limit);
        return std::future::poll_fn(|cx| {
            if let Poll::Ready(v) = fut.as_mut().poll(cx) {
                return Poll::Ready(Some(v));
            }
            sleep.as_mut().poll(cx).map(|()| None)
        })
        .await;
    }
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

/// A future that ends after `d`, on the caller's runtime.
pub(crate) async fn sleep(d: Duration) {
    if let Some(rt) = RUNTIME.get() {
        return rt.sleep(d).await;
    }
    #[cfg(feature = "tokio")]
    if on_tokio() {
        return tokio::time::sleep(d).await;
    }
    #[cfg(feature = "smol")]
    {
        smol::Timer::after(d).await;
    }
    #[cfg(not(feature = "smol"))]
    {
        // No runtime (`spawn` drops its task then): never end rather than let a loop spin.
        std::future::pending::<()>().await;
    }
}

/// Make the redis crate use smol even where a tokio runtime might be current (weir-smol calls
/// this before anything connects). A preference already set is kept; a build without tokio
/// has nothing to choose between.
pub fn prefer_smol() {
    #[cfg(all(feature = "tokio", feature = "smol"))]
    let _ = redis::aio::prefer_smol();
}

#[cfg(test)]
mod tests;
