//! Integration tests of the workloads: one binary, modules by workload.

mod micro;
