//! islands-bench: the benchmark of the islands engine. It runs a workload
//! ([`islands::proc::Workload`]) on the engine's executors for a warm-up and
//! a measured phase and reports what the measured phase did; nothing in the
//! engine depends on it.
//!
//! - [`driver`]: the closed-loop driver: threads, phases, the run's report.
//! - [`stats`]: the names of a workload's transaction types, and the monitor's
//!   sum of the executors' progress counters.
//! - [`report`]: what a run produced, as JSON and as a human-readable table.
//! - [`progress`]: a live display (progress bar or plain lines) fed by the
//!   progress counters.
//! - [`fmt`]: number formatting shared by the report and the display.
//! - [`ipc`]: message round trips between two pinned threads.
//!
//! Nothing here allocates or synchronises on the worker's update path: a worker
//! writes only to its own [`islands::proc::stats::WorkerStats`] and, every few
//! commits, stores one relaxed atomic in its own cache line
//! ([`islands::proc::stats::ProgressCounter`]).

pub mod driver;
pub mod fmt;
pub mod ipc;
pub mod progress;
pub mod report;
pub mod stats;

pub use driver::RunError;
