//! End-to-end tests of the `islands` binary.

mod experiments;
mod multisite;
mod placement;
mod tpcc_crash;
