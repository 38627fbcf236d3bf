//! wal (being written)
