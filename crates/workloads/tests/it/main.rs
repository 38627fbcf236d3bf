//! Integration tests of the workloads crate (one test binary, modules per workload).

mod inserts;
mod micro;
mod tpcc;
