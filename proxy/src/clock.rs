//! The process clock is the health driver's: one [`Clock`] per process, shared by the data plane
//! and the probes so both speak the same time.

pub use crate::probe::Clock;
