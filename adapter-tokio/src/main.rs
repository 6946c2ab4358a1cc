//! The `weir` binary: weir-proxy's command line on the tokio runtime (process protocol in
//! docs/proxy.md).

use std::process::ExitCode;

/// mimalloc: per-thread free lists suit the per-worker runtimes (a request allocates and frees
/// on one thread); glibc's malloc showed up at ~8% of a proxied request's CPU time.
#[global_allocator]
static GLOBAL: weir_proxy::memory::MiMalloc = weir_proxy::memory::MiMalloc;

fn main() -> ExitCode {
    weir_proxy::memory::limit_huge_pages();
    weir_proxy::memory::tune_mimalloc();
    weir_proxy::memory::set_collect(weir_proxy::memory::mimalloc_collect);
    weir_proxy::cli::main(weir_tokio::rt(), "weir")
}
