//! Workloads (being written)
