//! islands: an in-memory OLTP engine that deploys itself as *hardware islands*.
//!
//! An island is one shared-nothing database instance: its own tables, its own
//! write-ahead log, its own worker threads pinned to a group of cores. This crate
//! is the engine. Its modules follow the data path of a transaction:
//!
//! - [`topology`]: the machine as a tree (sockets, L3 domains, cores) and described topologies.
//! - [`cpu`]: CPU time of the process, the calling thread and any thread of it.
//! - [`phases`]: per-thread clocks of where a worker's time goes, and the executors'
//!   protocol clock; the hot path calls it, so it depends on nothing above the machine.
//! - [`storage`]: tables with a fixed schema, row arenas, hash / ordered / secondary indexes.
//! - [`route`]: island numbers, and which island holds a key.
//! - [`cc`]: concurrency control, one scheme chosen when the island opens.
//! - [`txn`]: the transaction handle stored procedures run against.
//! - [`transport`]: how islands exchange messages: batched frames over bounded mailboxes,
//!   and the wire form of remote operations.
//! - [`wal`]: the island's write-ahead log, group commit, checkpoints, recovery.
//! - [`coord`]: two-phase commit: coordinator and participant state machines, presumed abort.
//! - [`deploy`]: deployments: how many islands, which cores, which sites each holds.
//! - [`island`]: one island: tables + scheme + log + workers.
//! - [`proc`]: the procedure contract executors run ([`proc::Workload`]), the run's
//!   phase, per-worker counters, and what procedures draw on: random numbers, Zipf.
//! - [`executor`]: the executor: the islands of a deployment running in this process, one
//!   executor per worker thread, remote operations and two-phase commit over messages.
//! - [`threads`]: the threads a deployment runs, with their CPUs and CPU time.
//! - [`api`]: the application API: a catalog of stored procedures, a deployment, clients.
//! - `server` (cargo feature `server`, on by default): a deployment served over the
//!   PostgreSQL wire protocol.

pub mod api;
pub mod cc;
pub mod coord;
pub mod cpu;
pub mod deploy;
pub mod error;
pub mod executor;
pub mod island;
pub mod phases;
pub mod proc;
pub mod route;
#[cfg(feature = "server")]
pub mod server;
pub mod storage;
pub mod threads;
pub mod topology;
pub mod transport;
pub mod txn;
pub mod wal;

pub use error::{Abort, AbortReason, Error};

/// The README's Rust example, compiled and run as a doctest, so that what a
/// newcomer copies first keeps working.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeExample;
