//! bench: the closed-loop driver ([`driver`]) and what it needs.
//!
//! - [`stats`]: the names of a workload's transaction types, and the monitor's
//!   sum of the executors' progress counters.
//! - [`cpu`]: process and thread CPU time.
//! - [`report`]: what a run produced, as JSON and as a human-readable table.
//! - [`progress`]: a live display (progress bar or plain lines) fed by the
//!   progress counters.
//! - [`fmt`]: number formatting shared by the report and the display.
//!
//! Nothing here allocates or synchronises on the worker's update path: a worker
//! writes only to its own [`crate::proc::stats::WorkerStats`] and, every few
//! commits, stores one relaxed atomic in its own cache line
//! ([`crate::proc::stats::ProgressCounter`]).

pub mod counters;
pub mod cpu;
pub mod driver;
pub mod fmt;
pub mod ipc;
pub mod progress;
pub mod report;
pub mod stats;
