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

/// A sample's value from a Prometheus/OpenMetrics text exposition: the first line of family
/// `name` whose labels contain `label` (`""` for any).
pub fn metric(text: &str, name: &str, label: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(['{', ' ']))
                && l.contains(label)
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The resident set size of process `pid` in KiB (`VmRSS` of `/proc/<pid>/status`).
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// CPU time (user + system) of process `pid` so far, from `/proc/<pid>/stat` (clock ticks of
/// 10 ms, the Linux `USER_HZ` of every mainstream distribution).
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}
