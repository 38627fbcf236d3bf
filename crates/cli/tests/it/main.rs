//! End-to-end tests of the `islands` binary.

mod multisite;
mod placement;
mod tpcc_crash;
