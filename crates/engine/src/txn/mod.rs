//! txn (being written)
