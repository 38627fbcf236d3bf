//! Integration tests of the engine: one binary, modules by subject.

mod api;
mod bank;
mod blocks;
mod checkpoints;
mod clusters;
mod common;
mod crash;
mod dist_crash;
mod forwarding;
mod history;
mod isolation;
mod model;
mod phantom;
mod processes;
mod shm_restart;
mod slow_procs;
