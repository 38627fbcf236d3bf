//! End-to-end tests of the `islands` binary.

mod bad_input;
mod bench_processes;
mod checkpoints;
mod common;
mod control;
mod dead_log;
mod docs;
mod durability;
mod experiments;
mod forwarding;
mod multisite;
mod placement;
mod processes;
mod raw;
mod serve;
mod serve_bank;
mod serve_blocks;
mod serve_fuzz;
mod serve_hostile;
mod serve_observe;
mod serve_overflow;
mod serve_protocol;
mod serve_sql;
mod serve_tls;
mod support;
mod tpcc_crash;
