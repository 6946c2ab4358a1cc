//! The `weir-smol` binary: weir-proxy's command line on smol / async-io (process protocol in
//! docs/proxy.md; the same subcommands and flags as `weir`).

use std::process::ExitCode;

/// mimalloc, as in `weir`: a request allocates and frees on one worker thread.
#[global_allocator]
static GLOBAL: weir_proxy::memory::MiMalloc = weir_proxy::memory::MiMalloc;

fn main() -> ExitCode {
    weir_proxy::memory::limit_huge_pages();
    weir_proxy::memory::tune_mimalloc();
    weir_proxy::memory::set_collect(weir_proxy::memory::mimalloc_collect);
    // The redis crate runs on smol here (docs/storage.md).
    weir_storage::prefer_smol();
    weir_proxy::cli::main(weir_smol::rt(), "weir-smol")
}
