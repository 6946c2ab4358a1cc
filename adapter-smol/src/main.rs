//! The `weir-smol` binary: weir-proxy's command line on smol / async-io (process protocol in
//! docs/proxy.md; the same subcommands and flags as `weir`).

use std::process::ExitCode;

/// mimalloc, as in `weir`: a request allocates and frees on one worker thread.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    weir_proxy::memory::set_collect(collect);
    // The redis crate runs on smol here (docs/storage.md).
    weir_storage::prefer_smol();
    weir_proxy::cli::main(weir_smol::rt(), "weir-smol")
}

/// Return this thread's freed memory to the OS as far as mimalloc's purge delay allows
/// (`weir_proxy::memory` decides when; without it, a worker whose connections went idle keeps
/// the RSS of their busiest moment).
#[allow(unsafe_code)]
fn collect() {
    // SAFETY: `mi_collect` takes no pointers and may be called on any thread at any time.
    unsafe { libmimalloc_sys::mi_collect(false) }
}
