//! deploy (being written)
