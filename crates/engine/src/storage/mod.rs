//! storage (being written)
