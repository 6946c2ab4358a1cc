//! Allocations per proxied request on weir's own HTTP/1 path, end to end: a counting
//! global allocator (all threads), real sockets on 127.0.0.1, weir in-process (one worker), a
//! backend and a client that allocate nothing in their loops (fixed buffers, blocking std
//! sockets on their own threads). After a warm-up (the connections, the pooled upstream
//! connection, the buffers and the request timer exist), N keep-alive `GET`s are counted.
//!
//! A count, not a timing. The bound is below one allocation per ten requests rather than
//! exactly zero, so that a background task of the process (a pool sweep, a probe) that
//! allocates once in the window does not fail it; one allocation per request would be N.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};

#[path = "support/keepalive.rs"]
mod support;

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// One keep-alive `GET /` on `s`: whether weir's `200` with the backend's body came back.
fn get(s: &mut TcpStream, buf: &mut [u8]) -> bool {
    if s.write_all(b"GET / HTTP/1.1\r\nhost: alloc.test\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut n = 0;
    loop {
        match s.read(&mut buf[n..]) {
            Ok(0) | Err(_) => return false,
            Ok(k) => n += k,
        }
        if buf[..n].ends_with(b"hello") {
            return buf.starts_with(b"HTTP/1.1 200");
        }
        if n == buf.len() {
            return false;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn h1_keep_alive_get_allocates_nothing_per_request_end_to_end() {
    let proxy = support::weir_in_front_of_a_backend().await;
    let addr = proxy.public_addr();
    const WARM: usize = 200;
    const N: u64 = 2000;
    let (ok, allocs) = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        let mut buf = vec![0u8; 8192];
        for _ in 0..WARM {
            assert!(get(&mut s, &mut buf), "warm-up request answered 200");
        }
        let before = ALLOCS.load(Ordering::Relaxed);
        let mut ok = 0u64;
        for _ in 0..N {
            ok += u64::from(get(&mut s, &mut buf));
        }
        (ok, ALLOCS.load(Ordering::Relaxed) - before)
    })
    .await
    .unwrap();
    eprintln!("{allocs} allocations over {N} keep-alive GETs (all threads)");
    assert_eq!(ok, N, "every counted request answered 200");
    assert!(
        allocs < N / 10,
        "{allocs} allocations over {N} requests: the keep-alive GET path allocates per request"
    );
    drop(proxy);
}
