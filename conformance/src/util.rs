//! Polling and timing helpers: every wait in the suite is a bounded poll, never a bare sleep that
//! hopes something has happened by then.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often [`eventually`] re-checks its condition.
pub const POLL: Duration = Duration::from_millis(10);

/// Polls `check` every [`POLL`] until it returns `Some`, or panics naming `what` after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Like [`eventually`] for a synchronous condition.
pub async fn wait_until<F>(timeout: Duration, what: &str, mut check: F)
where
    F: FnMut() -> bool,
{
    eventually(timeout, what, || {
        let ok = check();
        async move { ok.then_some(()) }
    })
    .await
}

/// Polls `check` for the whole of `period` and panics (naming `what`) if it ever returns false:
/// "this stays true for a while".
pub async fn stays<F>(period: Duration, what: &str, mut check: F)
where
    F: FnMut() -> bool,
{
    let start = Instant::now();
    while start.elapsed() < period {
        assert!(check(), "{what} did not hold for {period:?}");
        tokio::time::sleep(POLL).await;
    }
}

/// Runs `fut` with a deadline and panics naming `what` when it passes.
pub async fn within<T>(timeout: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(timeout, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {timeout:?}: {what}"),
    }
}

/// Milliseconds as a `Duration` (short to write in configs and cases).
pub const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Seconds as a `Duration`.
pub const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}
