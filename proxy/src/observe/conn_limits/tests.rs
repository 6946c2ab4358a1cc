use super::*;

use std::future::Future;
use std::task::{Context, Poll, Waker};

fn poll<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    std::pin::Pin::new(f).poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn permits_stop_at_the_cap_and_free_on_drop() {
    let l = ConnLimit::new(Listener::Public, 2);
    let a = l.try_acquire();
    let b = l.try_acquire();
    assert!(a.is_some() && b.is_some());
    assert!(l.try_acquire().is_none(), "a third place under a cap of 2");
    assert_eq!(l.open(), 2);
    drop(a);
    assert_eq!(l.open(), 1);
    assert!(l.try_acquire().is_some());
}

#[test]
fn acquire_waits_for_a_close_and_counts_the_cap_once() {
    let l = ConnLimit::new(Listener::Public, 1);
    let held = l.try_acquire();
    let mut warn = Warn::default();
    let mut waiting = Box::pin(l.acquire(&mut warn));
    assert!(poll(&mut waiting).is_pending());
    assert!(poll(&mut waiting).is_pending());
    assert_eq!(l.reached(), 1);
    drop(held);
    match poll(&mut waiting) {
        Poll::Ready(p) => {
            assert_eq!(l.open(), 1);
            drop(p);
        }
        Poll::Pending => panic!("a freed place did not wake the acceptor"),
    }
    assert_eq!(l.open(), 0);
}

#[test]
fn fd_exhaustion_is_a_resource_failure_and_aborts_are_not() {
    let l = ConnLimit::new(Listener::Management, 1);
    let mut warn = Warn::default();
    let emfile = std::io::Error::from_raw_os_error(rustix::io::Errno::MFILE.raw_os_error());
    let aborted = std::io::Error::from_raw_os_error(rustix::io::Errno::CONNABORTED.raw_os_error());
    assert!(l.accept_failed(&emfile, &mut warn));
    assert!(!l.accept_failed(&aborted, &mut warn));
    assert_eq!(l.accept_errors(), 2);
    // The second warning within WARN_EVERY was left out and is counted.
    assert_eq!(warn.accept.1, 1);
}

#[test]
fn backoff_doubles_to_one_second() {
    let ms: Vec<u128> = (1..=8).map(|n| backoff(n).as_millis()).collect();
    assert_eq!(ms, [50, 100, 200, 400, 800, 1000, 1000, 1000]);
}
