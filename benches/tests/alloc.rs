//! Hot paths allocate nothing: a counting global allocator (per thread, so parallel tests do not
//! disturb each other) shows 0 allocations per pick for every policy and per local-store take, on
//! a hit and on the eviction path. It also measures the local store's memory per bucket.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::{IpAddr, Ipv4Addr};

use weir_benches::healthy_pool;
use weir_core::bucket::BucketParams;
use weir_core::pool::Tried;
use weir_core::rate::{KeyParams, LocalStore, LocalStoreParams};
use weir_core::select::{PickContext, PolicyKind, Selection};
use weir_core::{Instant, WyRand};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
    static BYTES: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator unchanged; only counts on the calling thread.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        BYTES.with(|c| c.set(c.get() + layout.size() as u64));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        BYTES.with(|c| c.set(c.get() + new_size as u64));
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn counted<R>(f: impl FnOnce() -> R) -> (R, u64, u64) {
    let (a0, b0) = (ALLOCS.with(Cell::get), BYTES.with(Cell::get));
    let r = f();
    (r, ALLOCS.with(Cell::get) - a0, BYTES.with(Cell::get) - b0)
}

#[test]
fn c_pool_4_pick_allocates_nothing_for_any_policy() {
    for &kind in PolicyKind::ALL {
        for n in [8usize, 1024] {
            let pool = healthy_pool(n, kind);
            let mut rng = WyRand::new(3);
            let tried = Tried::new();
            let now = Instant::from_secs(1);
            let (picked, allocs, _) = counted(|| {
                let mut picked = 0;
                for i in 0..10_000u64 {
                    let ctx = PickContext {
                        hash: Some(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                    };
                    if let Selection::Selected { slot, .. } =
                        pool.select(&ctx, &tried, now, &mut rng)
                    {
                        picked += 1;
                        drop(slot);
                    }
                    if pool.choose(&ctx, &tried, now, &mut rng).is_ok() {
                        picked += 1;
                    }
                }
                picked
            });
            assert_eq!(picked, 20_000, "{kind:?}/{n}: every pick succeeds");
            assert_eq!(
                allocs, 0,
                "{kind:?} at {n} backends allocated {allocs} times in 20k picks"
            );
        }
    }
}

#[test]
fn c_rate_4_local_take_allocates_nothing_on_hit_or_eviction() {
    let store = LocalStore::new(LocalStoreParams::default(), 1).unwrap();
    let keys = KeyParams::default();
    let bucket = BucketParams::new(100, 100.0).unwrap();
    let hot = keys.key(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)));
    // Fill the store past capacity first, so the measured loop runs on the eviction path.
    for i in 0..150_000u32 {
        store.take(
            keys.key(IpAddr::V4(Ipv4Addr::from(i))),
            &bucket,
            Instant::ZERO,
        );
    }
    assert!(store.evictions() > 0);
    let (_, allocs, _) = counted(|| {
        for i in 0..200_000u32 {
            store.take(hot, &bucket, Instant::from_nanos(u64::from(i)));
            let k = keys.key(IpAddr::V4(Ipv4Addr::from(1_000_000 + i)));
            store.take(k, &bucket, Instant::from_nanos(u64::from(i)));
        }
    });
    assert_eq!(allocs, 0, "local store takes allocated {allocs} times");
}

#[test]
fn c_rate_4_memory_per_bucket_at_100k_keys() {
    let (store, _, bytes) = counted(|| LocalStore::new(LocalStoreParams::default(), 1).unwrap());
    let per_bucket = bytes as f64 / 100_000.0;
    eprintln!("local store: {bytes} bytes allocated for 100000 buckets = {per_bucket:.1} B/bucket");
    assert!(per_bucket <= 128.0, "{per_bucket} B per bucket");
    // Filling it allocates nothing more: the memory is all reserved up front.
    let keys = KeyParams::default();
    let bucket = BucketParams::new(100, 100.0).unwrap();
    let (_, allocs, _) = counted(|| {
        for i in 0..100_000u32 {
            store.take(
                keys.key(IpAddr::V4(Ipv4Addr::from(i))),
                &bucket,
                Instant::ZERO,
            );
        }
    });
    assert_eq!(allocs, 0);
    // Shards fill unevenly (keys hash to them), so a shard may evict before the store is full.
    let len = store.len();
    assert!((90_000..=100_000).contains(&len), "{len} buckets held");
}

/// The keep-alive GET head path of weir's HTTP/1 codec (parse the client head, write
/// the upstream head, parse the response head, write the client head) allocates nothing once
/// the connection's two output buffers have grown.
#[test]
fn h1_keep_alive_get_head_path_allocates_nothing() {
    use weir_benches::{H1_GET, H1_RESPONSE, h1_head_path};
    let (mut up, mut down) = (Vec::new(), Vec::new());
    let first = h1_head_path(H1_GET, H1_RESPONSE, &mut up, &mut down);
    assert!(first > 0);
    for _ in 0..3 {
        let (n, allocs, bytes) = counted(|| h1_head_path(H1_GET, H1_RESPONSE, &mut up, &mut down));
        assert_eq!(n, first);
        assert_eq!(
            (allocs, bytes),
            (0, 0),
            "heap allocations on the keep-alive GET head path"
        );
    }
    // The first request grew the buffers: that is the only allocation a connection pays.
    let (mut up, mut down) = (Vec::new(), Vec::new());
    let (_, allocs, _) = counted(|| h1_head_path(H1_GET, H1_RESPONSE, &mut up, &mut down));
    assert!(
        allocs > 0,
        "the counter sees a fresh connection's buffers grow"
    );
}
