//! Where rows live: island numbers, and which island holds a key.
//!
//! Islands are numbered 0, 1, … within their deployment ([`IslandId`], 16
//! bits); a running deployment has at most 128, as the two-phase commit keeps
//! sets of them in one `u128`. A [`Router`] says which island holds a key of a table, or that
//! every island holds it (a replicated table); a transaction asks it at every
//! operation, so an answer is arithmetic or a lookup, never an allocation or a
//! lock. [`RangeRouter`] is the plain partitioning: contiguous key ranges, one
//! per island.

use crate::storage::{SecondaryId, TableId};
use crate::Error;

/// An island's number within its deployment: 0, 1, …
pub type IslandId = u16;

/// Where rows live: the deployment's partitioning, as the engine needs it.
pub trait Router: Send + Sync {
    /// The island holding `key` of `table`, or `None` when every island has
    /// the row (a replicated table such as TPC-C's ITEM).
    fn island_of(&self, table: TableId, key: u64) -> Option<IslandId>;

    /// The island holding the rows of secondary key `skey` of `index`; `None`
    /// means every island (scanned locally). The default says `None`: a
    /// router of a partitioned table with secondary scans must override it.
    fn island_of_secondary(
        &self,
        table: TableId,
        index: SecondaryId,
        skey: u64,
    ) -> Option<IslandId> {
        let _ = (table, index, skey);
        None
    }
}

/// Router for a table partitioned by key ranges.
pub struct RangeRouter {
    /// `bounds[i]` is the first key of island `i + 1`.
    bounds: Vec<u64>,
    /// Tables present on every island.
    replicated: Vec<bool>,
}

impl RangeRouter {
    /// Island `i` holds keys `[starts[i], starts[i+1])`; `starts[0]` must be 0.
    pub fn new(starts: &[u64], replicated_tables: &[u16]) -> Result<RangeRouter, Error> {
        if starts.first() != Some(&0) || starts.windows(2).any(|w| w[0] >= w[1]) {
            return Err(Error::Config(
                "island key ranges must start at 0 and increase".into(),
            ));
        }
        let mut replicated = vec![false; 1 << 16];
        for &t in replicated_tables {
            replicated[t as usize] = true;
        }
        Ok(RangeRouter {
            bounds: starts[1..].to_vec(),
            replicated,
        })
    }
}

impl Router for RangeRouter {
    #[inline]
    fn island_of(&self, table: u16, key: u64) -> Option<u16> {
        if self.replicated[table as usize] {
            return None;
        }
        Some(self.bounds.partition_point(|&b| b <= key) as u16)
    }
}
