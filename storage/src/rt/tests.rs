//! The stores' runtime seam: once a runtime is installed, the stores' background
//! tasks and timeouts go through it.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

tokio::task_local! {
    /// Set on every future the test runtime spawns.
    static THROUGH_SEAM: bool;
}

/// A duration no store uses: its sleeps are counted.
const MAGIC: Duration = Duration::from_nanos(4_242_424_242);

static MAGIC_SLEEPS: AtomicUsize = AtomicUsize::new(0);

/// tokio underneath, marking what passes through.
struct Marked;

impl StoreRuntime for Marked {
    fn spawn(&self, fut: BoxFuture) {
        drop(tokio::spawn(THROUGH_SEAM.scope(true, fut)));
    }

    fn sleep(&self, d: Duration) -> BoxFuture {
        if d == MAGIC {
            MAGIC_SLEEPS.fetch_add(1, Ordering::SeqCst);
        }
        Box::pin(tokio::time::sleep(d))
    }
}

static MARKED: Marked = Marked;

#[tokio::test]
async fn an_installed_runtime_spawns_and_times_out_the_stores_calls() {
    assert!(
        install_runtime(&MARKED),
        "the first runtime installed stays"
    );
    assert!(runtime_installed());
    let (tx, rx) = tokio::sync::oneshot::channel();
    spawn(async move {
        let _ = tx.send(THROUGH_SEAM.try_with(|v| *v).unwrap_or(false));
    });
    assert_eq!(
        rx.await,
        Ok(true),
        "the task ran through the installed runtime"
    );
    assert_eq!(timeout(MAGIC, async { 5 }).await, Some(5));
    assert_eq!(
        MAGIC_SLEEPS.load(Ordering::SeqCst),
        1,
        "the timeout slept on the installed runtime"
    );
    assert_eq!(
        timeout(Duration::ZERO, std::future::pending::<()>()).await,
        None
    );
}
