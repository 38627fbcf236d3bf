//! Which island owns each endpoint.
//!
//! Endpoints are numbered island by island: island `i`'s workers are
//! endpoints `first[i]..first[i + 1]`, worker `w` of island `i` is
//! `first[i] + w`. A transport serves one island ([`Layout::me`]) or, in one
//! process, all of them; the layout tells it which endpoints are its own.

use super::Endpoint;
use crate::route::IslandId;
use std::ops::Range;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    first: Vec<u32>,
    me: IslandId,
}

impl Layout {
    /// Islands with `workers[i]` workers each, seen from island `me`.
    /// Panics if `me` is not an island of the list or the total overflows.
    pub fn new(workers: &[u32], me: IslandId) -> Layout {
        assert!(
            usize::from(me) < workers.len(),
            "island {me} of {}",
            workers.len()
        );
        let mut first = Vec::with_capacity(workers.len() + 1);
        let mut at = 0u32;
        first.push(0);
        for &w in workers {
            at = at.checked_add(w).expect("endpoint count overflows u32");
            first.push(at);
        }
        Layout { first, me }
    }

    pub fn me(&self) -> IslandId {
        self.me
    }

    pub fn islands(&self) -> usize {
        self.first.len() - 1
    }

    pub fn endpoints(&self) -> usize {
        *self.first.last().expect("at least one island") as usize
    }

    /// Workers of `island`.
    pub fn workers(&self, island: IslandId) -> u32 {
        let r = self.range(island);
        r.end - r.start
    }

    /// Endpoints of `island`.
    pub fn range(&self, island: IslandId) -> Range<u32> {
        let i = usize::from(island);
        self.first[i]..self.first[i + 1]
    }

    pub fn endpoint(&self, island: IslandId, worker: u32) -> Endpoint {
        let r = self.range(island);
        debug_assert!(worker < r.end - r.start);
        Endpoint(r.start + worker)
    }

    /// The island owning `e` (`None` past the last endpoint).
    pub fn island_of(&self, e: Endpoint) -> Option<IslandId> {
        if e.0 as usize >= self.endpoints() {
            return None;
        }
        // Islands are few (at most a few hundred): the partition point of
        // the sorted starts is the island.
        Some((self.first.partition_point(|&f| f <= e.0) - 1) as IslandId)
    }

    /// Whether `e` is one of [`Layout::me`]'s endpoints.
    pub fn is_local(&self, e: Endpoint) -> bool {
        self.range(self.me).contains(&e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_map_back_to_their_island() {
        let l = Layout::new(&[2, 0, 3], 2);
        assert_eq!(l.endpoints(), 5);
        assert_eq!(l.range(0), 0..2);
        assert_eq!(l.range(1), 2..2);
        assert_eq!(l.range(2), 2..5);
        let owners: Vec<_> = (0..6).map(|e| l.island_of(Endpoint(e))).collect();
        assert_eq!(
            owners,
            vec![Some(0), Some(0), Some(2), Some(2), Some(2), None]
        );
        assert_eq!(l.endpoint(2, 1), Endpoint(3));
        assert!(l.is_local(Endpoint(4)) && !l.is_local(Endpoint(1)));
        assert_eq!(l.workers(1), 0);
    }
}
