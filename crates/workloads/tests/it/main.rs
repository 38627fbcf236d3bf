//! Integration tests of the workloads crate (one test binary, modules per workload).

mod checks;
mod inserts;
mod micro;
mod overflow;
mod tpcc;
