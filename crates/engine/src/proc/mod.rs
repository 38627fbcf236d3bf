//! The procedure contract and what an executor needs to run requests: what
//! the executors of [`crate::executor`] run, and what stored procedures and their
//! request generators draw on. Nothing here knows of the benchmark driver;
//! workloads, tests, the application API and the driver import it alike.
//!
//! - [`Workload`]: makes requests and runs each as a stored procedure;
//!   [`Outcome`]: how a request ended; [`Both`]: two sources of requests.
//! - [`run`]: the run's phase every executor follows, and the watch for a
//!   failed log.
//! - [`stats`]: the per-worker counters and latency histogram an executor
//!   fills, and its progress counter.
//! - [`rng`]: a one-word random generator (SplitMix64) for the workers' hot path.
//! - [`zipf`]: skewed key choice (Gray et al., as in YCSB), rank 0 hottest.

pub mod rng;
pub mod run;
pub mod stats;
mod workload;
pub mod zipf;

pub use workload::{Both, BothReq, Outcome, Suspend, Workload};
