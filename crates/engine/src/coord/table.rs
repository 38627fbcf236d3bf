//! A fixed-capacity map from gtid to per-transaction state: a slab of slots plus an index.
//! It never grows past the capacity given at construction (no allocation after `new`), and
//! iterating by slot is deterministic, which the simulator relies on.

use std::collections::HashMap;

use super::Gtid;

pub(crate) struct Table<T> {
    /// foldhash, not SipHash: looked up for every 2PC message (SipHash was
    /// 2.5% of TPC-C's time). Gtids come from the deployment's own islands.
    index: HashMap<Gtid, u32, foldhash::fast::FixedState>,
    slots: Vec<Option<(Gtid, T)>>,
    free: Vec<u32>,
}

impl<T> Table<T> {
    pub(crate) fn new(cap: usize) -> Self {
        assert!(cap > 0 && cap <= u32::MAX as usize);
        Table {
            index: HashMap::with_capacity_and_hasher(cap, Default::default()),
            slots: (0..cap).map(|_| None).collect(),
            free: (0..cap as u32).rev().collect(),
        }
    }
    pub(crate) fn cap(&self) -> usize {
        self.slots.len()
    }
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }
    pub(crate) fn is_full(&self) -> bool {
        self.free.is_empty()
    }
    pub(crate) fn contains(&self, gtid: Gtid) -> bool {
        self.index.contains_key(&gtid)
    }
    /// Inserts a new entry; `Err(v)` when full. The gtid must not be present.
    pub(crate) fn insert(&mut self, gtid: Gtid, v: T) -> Result<(), T> {
        assert!(!self.contains(gtid), "gtid {gtid:#x} inserted twice");
        let Some(slot) = self.free.pop() else {
            return Err(v);
        };
        self.slots[slot as usize] = Some((gtid, v));
        self.index.insert(gtid, slot);
        Ok(())
    }
    /// Inserts, doubling the capacity when full. Only recovery uses it: a log may hold
    /// more unfinished transactions than the restarted island's limit allows, and
    /// every one of them must be finished.
    pub(crate) fn insert_growing(&mut self, gtid: Gtid, v: T) {
        if self.free.is_empty() {
            let old = self.cap();
            self.slots.extend((0..old).map(|_| None));
            self.free.extend((old as u32..2 * old as u32).rev());
        }
        if self.insert(gtid, v).is_err() {
            unreachable!("a free slot was just made");
        }
    }
    pub(crate) fn get(&self, gtid: Gtid) -> Option<&T> {
        let slot = *self.index.get(&gtid)?;
        self.slots[slot as usize].as_ref().map(|(_, v)| v)
    }
    pub(crate) fn get_mut(&mut self, gtid: Gtid) -> Option<&mut T> {
        let slot = *self.index.get(&gtid)?;
        self.slots[slot as usize].as_mut().map(|(_, v)| v)
    }
    pub(crate) fn remove(&mut self, gtid: Gtid) -> Option<T> {
        let slot = self.index.remove(&gtid)?;
        self.free.push(slot);
        self.slots[slot as usize].take().map(|(_, v)| v)
    }
    /// The entries, by slot.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Gtid, &T)> {
        self.slots.iter().flatten().map(|(g, v)| (*g, v))
    }
    /// The entry in slot `i` (`i < cap()`), if any.
    pub(crate) fn slot_mut(&mut self, i: usize) -> Option<(Gtid, &mut T)> {
        self.slots[i].as_mut().map(|(g, v)| (*g, v))
    }
    pub(crate) fn clear(&mut self) {
        let cap = self.cap();
        self.index.clear();
        self.slots.iter_mut().for_each(|s| *s = None);
        self.free.clear();
        self.free.extend((0..cap as u32).rev());
    }
}
