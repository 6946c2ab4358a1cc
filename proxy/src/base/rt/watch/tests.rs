use super::*;
use std::future::Future;
use std::task::{Context, Poll, Waker};

fn poll_once<F: Future>(f: F) -> Poll<F::Output> {
    let mut f = std::pin::pin!(f);
    f.as_mut().poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn has_changed_tracks_what_changed_would_return_at_once() {
    let (tx, mut rx) = channel(false);
    assert!(!rx.has_changed());
    assert!(poll_once(rx.changed()).is_pending());
    tx.send(true);
    assert!(rx.has_changed(), "a send is seen without the lock");
    assert_eq!(poll_once(rx.changed()), Poll::Ready(Ok(())));
    assert!(!rx.has_changed(), "seen once changed() returned");
    let other = rx.clone();
    drop(tx);
    assert!(other.has_changed(), "a closed channel counts as changed");
    assert_eq!(poll_once(rx.changed()), Poll::Ready(Err(Closed)));
}
