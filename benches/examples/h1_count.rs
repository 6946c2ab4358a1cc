//! Runs weir's keep-alive GET head path N times, for instruction counting:
//! `valgrind --tool=callgrind` with N = 0 and N = 100000; the difference over N is the
//! instructions per request head pair (docs/benchmarks.md).

use weir_benches::{H1_GET, H1_RESPONSE, h1_head_path};

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(0);
    let (mut up, mut down) = (Vec::with_capacity(1024), Vec::with_capacity(1024));
    let mut total = 0;
    for _ in 0..n {
        total += h1_head_path(
            std::hint::black_box(H1_GET),
            H1_RESPONSE,
            &mut up,
            &mut down,
        );
    }
    std::process::exit(i32::from(total == 1));
}
