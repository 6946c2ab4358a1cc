//! Test helper: apply the migrations to the database `WEIR_PG_HOST`/`WEIR_PG_PORT`/
//! `WEIR_PG_USER`/`WEIR_PG_DB` and print `applied <v>,<v>,...` (the six-process migration test
//! runs several of these at once; C-RATE-7).
#![allow(clippy::print_stdout)]

use std::process::ExitCode;

fn main() -> ExitCode {
    let var =
        |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_owned());
    let port = var("WEIR_PG_PORT", "5432").parse().unwrap_or(5432);
    let opts = weir_storage::PostgresOptions::new(
        var("WEIR_PG_HOST", "127.0.0.1"),
        port,
        var("WEIR_PG_USER", "postgres"),
        var("WEIR_PG_DB", "test"),
    );
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(weir_storage::migrate(&opts.pg_config())) {
        Ok(report) => {
            let applied: Vec<String> = report.applied.iter().map(i32::to_string).collect();
            println!("applied {}", applied.join(","));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("migrate: {e}");
            ExitCode::FAILURE
        }
    }
}
