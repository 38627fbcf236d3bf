//! Integration tests of the engine: one binary, modules by subject.

mod bank;
mod common;
mod crash;
mod dist_crash;
mod model;
mod phantom;
