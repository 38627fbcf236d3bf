//! cc (being written)
