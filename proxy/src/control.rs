//! The top layer: the process around the data path. Starting a proxy (`start`), reloads
//! (`reload`, `config_file`), health-probe wiring (`health`), the management listener
//! (`management`) and its metrics scrape (`scrape`), the certificate watch (`cert_watch`), the
//! rate-limit store's recovery (`store_recovery`), the console (`console`), the demo (`demo`)
//! and the command line (`cli`).

pub mod cert_watch;
pub mod cli;
pub mod config_file;
pub mod console;
pub mod demo;
pub mod discovery;
pub mod health;
pub mod management;
pub mod reload;
pub mod scrape;
pub mod start;
pub mod store_recovery;
pub mod store_sweep;
