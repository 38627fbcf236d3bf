//! Where rows live: island numbers, and which island holds a key.
//!
//! Islands are numbered 0, 1, … within their deployment ([`IslandId`]); the
//! two-phase commit keeps sets of them in one `u128`, so a deployment has at
//! most 128. A [`Router`] says which island holds a key of a table, or that
//! every island holds it (a replicated table); a transaction asks it at every
//! operation, so an answer is arithmetic or a lookup, never an allocation or a
//! lock. [`RangeRouter`] is the plain partitioning: contiguous key ranges, one
//! per island.

/// An island's number within its deployment: 0, 1, …
pub type IslandId = u16;
