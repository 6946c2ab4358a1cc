//! What an idle keep-alive HTTP/1 client connection keeps on the heap once it is parked (issue
//! 14, docs/benchmarks.md "What an idle connection holds"): a global allocator that tracks the
//! live allocations by size (all threads), weir in-process (one worker), N client connections
//! that each send one `GET /`, read the answer and stay open until weir has parked them.
//!
//! It prints the live allocations per connection by size (the accounting table's source) and
//! asserts the structural property parking relies on: a parked connection holds no read
//! buffer (no live allocation of the buffers' size, 4 KiB, or more per connection; the worker's
//! stash of released buffers holds at most 16). No byte total is asserted.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

#[path = "support/keepalive.rs"]
mod support;

struct Tracking;

/// Live allocations by exact size (the last slot: every size from it up).
const SLOTS: usize = 4097;
static LIVE: [AtomicI64; SLOTS] = [const { AtomicI64::new(0) }; SLOTS];
/// Allocations made, by exact size (never decremented): with `LIVE`, what was allocated and
/// freed again between two snapshots.
static MADE: [AtomicI64; SLOTS] = [const { AtomicI64::new(0) }; SLOTS];

fn slot(size: usize) -> &'static AtomicI64 {
    &LIVE[size.min(SLOTS - 1)]
}

fn made(size: usize) {
    MADE[size.min(SLOTS - 1)].fetch_add(1, Ordering::Relaxed);
}

// SAFETY: forwards to the system allocator unchanged; only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        slot(layout.size()).fetch_add(1, Ordering::Relaxed);
        made(layout.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        slot(layout.size()).fetch_add(1, Ordering::Relaxed);
        made(layout.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        slot(layout.size()).fetch_sub(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        slot(layout.size()).fetch_sub(1, Ordering::Relaxed);
        slot(new_size).fetch_add(1, Ordering::Relaxed);
        made(new_size);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Tracking = Tracking;

fn snapshot() -> (Vec<i64>, Vec<i64>) {
    let load = |a: &[AtomicI64]| a.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    (load(&LIVE), load(&MADE))
}

/// One `GET /` on a new connection, answered `200`; the connection stays open.
fn open(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nhost: idle.test\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 1024];
    let mut n = 0;
    while !buf[..n].ends_with(b"hello") {
        let k = s.read(&mut buf[n..]).unwrap();
        assert!(k > 0, "weir answered");
        n += k;
    }
    assert!(buf.starts_with(b"HTTP/1.1 200"));
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_parked_connection_holds_no_buffer() {
    let proxy = support::weir_in_front_of_a_backend().await;
    let addr = proxy.public_addr();
    const N: i64 = 200;
    let (before, after) = tokio::task::spawn_blocking(move || {
        // Warm-up: the upstream connection, the worker's stash and timers exist.
        drop(open(addr));
        std::thread::sleep(Duration::from_millis(2500));
        let before = snapshot();
        let conns: Vec<TcpStream> = (0..N).map(|_| open(addr)).collect();
        // Parked within `PARK_AFTER` (1 s) of the last response; a wait, not a measurement.
        std::thread::sleep(Duration::from_millis(2500));
        let after = snapshot();
        drop(conns);
        (before, after)
    })
    .await
    .unwrap();
    let ((before, made_before), (after, made_after)) = (before, after);
    // What the connections allocated and freed again before parking (their opening, active
    // spell, timers, buffers): sharing a size class with what stays, such objects leave
    // partly used allocator pages behind (docs/benchmarks.md, "What an idle connection holds").
    eprintln!("allocated and freed again per parked connection (size: count per connection):");
    for size in 0..SLOTS {
        let freed = (made_after[size] - made_before[size]) - (after[size] - before[size]);
        if freed * 10 >= N {
            eprintln!("  {size:>5} B: {:.2}", freed as f64 / N as f64);
        }
    }
    let (mut bytes, mut count, mut big) = (0i64, 0i64, 0i64);
    eprintln!("live allocations per parked connection (size: count per connection):");
    for (size, (a, b)) in after.iter().zip(&before).enumerate() {
        let d = a - b;
        if d != 0 {
            eprintln!("  {size:>5} B: {:.2}", d as f64 / N as f64);
        }
        bytes += d * size as i64;
        count += d;
        if size >= 4096 {
            big += d;
        }
    }
    eprintln!(
        "total: {:.1} allocations, {:.0} B requested per connection",
        count as f64 / N as f64,
        bytes as f64 / N as f64
    );
    assert!(
        big * 4 < N,
        "{big} live allocations of 4 KiB or more for {N} parked connections: a parked \
         connection keeps a buffer"
    );
    drop(proxy);
}
