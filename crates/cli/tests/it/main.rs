//! End-to-end tests of the `islands` binary.

mod tpcc_crash;
