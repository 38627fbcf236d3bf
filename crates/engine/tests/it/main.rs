//! Integration tests of the engine: one binary, modules by subject.

mod bank;
mod common;
mod crash;
mod dist_crash;
mod history;
mod isolation;
mod model;
mod phantom;
