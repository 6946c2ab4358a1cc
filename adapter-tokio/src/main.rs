//! The `weir` binary: weir-proxy's command line on the tokio runtime (process protocol in
//! docs/proxy.md).

use std::process::ExitCode;

/// mimalloc: per-thread free lists suit the per-worker runtimes (a request allocates and frees
/// on one thread); glibc's malloc showed up at ~8% of a proxied request's CPU time.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    weir_proxy::memory::set_collect(collect);
    weir_proxy::cli::main(weir_tokio::rt(), "weir")
}

/// Return this thread's freed memory to the OS as far as mimalloc's purge delay allows
/// (`weir_proxy::memory` decides when; without it, a worker whose connections went idle keeps
/// the RSS of their busiest moment).
#[allow(unsafe_code)]
fn collect() {
    // SAFETY: `mi_collect` takes no pointers and may be called on any thread at any time.
    unsafe { libmimalloc_sys::mi_collect(false) }
}
