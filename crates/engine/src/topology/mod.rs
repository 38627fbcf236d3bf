//! topology (being written)
