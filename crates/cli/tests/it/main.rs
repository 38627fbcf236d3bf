//! End-to-end tests of the `islands` binary.

mod placement;
mod tpcc_crash;
