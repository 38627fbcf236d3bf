//! What stored procedures and their request generators draw on: random
//! numbers and skewed key choice. Nothing here knows of the benchmark driver;
//! workloads, tests and the driver import it alike.
//!
//! - [`rng`]: a one-word random generator (SplitMix64) for the workers' hot path.
//! - [`zipf`]: skewed key choice (Gray et al., as in YCSB), rank 0 hottest.

pub mod rng;
pub mod zipf;
