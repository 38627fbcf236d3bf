//! bench: the closed-loop driver ([`driver`]) and what it needs.
//!
//! - [`stats`]: per-worker counters and latency histogram, owned by the worker
//!   thread and merged at the end; lock-free progress counters for a monitor.
//! - [`cpu`]: process and thread CPU time.
//! - [`report`]: what a run produced, as JSON and as a human-readable table.
//! - [`progress`]: a live display (progress bar or plain lines) fed by the
//!   progress counters.
//! - [`fmt`]: number formatting shared by the report and the display.
//!
//! Nothing here allocates or synchronises on the worker's update path: a worker
//! writes only to its own [`stats::WorkerStats`] and, every few commits, stores
//! one relaxed atomic in its own cache line ([`stats::ProgressCounter`]).

pub mod counters;
pub mod cpu;
pub mod driver;
pub mod fmt;
pub mod ipc;
pub mod progress;
pub mod report;
pub mod stats;
