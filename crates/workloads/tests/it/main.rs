//! Integration tests of the workloads crate (one test binary, modules per workload).

mod micro;
mod tpcc;
