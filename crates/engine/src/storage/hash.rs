//! The hash primary index: open addressing over one preallocated slot array.
//!
//! Written by hand because it is the hottest structure of the engine: a point
//! lookup is one hash, usually one cache line of slots and one row key compare,
//! with no lock and no allocation. A slot is one word holding a row id and a tag
//! of the key's hash; the key itself lives in the row, so a hit is confirmed
//! against the row. Sized at creation for the table's capacity (load at most
//! 1/2), never resized: limits are fixed at start.
//!
//! Mutations (insert, delete) of one key are serialized by the key's *stripe*.
//! A stripe word is also a version: odd while a mutation runs, bumped by two on
//! every insert or delete. A transaction that looked up a missing key records the
//! stripe version and validates it at commit, which keeps point misses
//! serializable (no phantom inserts). On a single-worker island the stripe words
//! are plain stores: no read-modify-write atomics.

use std::sync::atomic::{AtomicU64, Ordering};

use super::arena::{Arena, RowId, W_KEY};

const EMPTY: u64 = 0;
const TOMB: u64 = 1;
const RID_BITS: u32 = 40;
const RID_MASK: u64 = (1 << RID_BITS) - 1;
const STRIPES: usize = 4096;
/// Slots [`HashIndex::guess`] looks at: at load 1/2, a probe is longer than
/// this about once in a few hundred lookups.
const GUESS_PROBES: usize = 8;

#[inline]
pub fn hash_key(key: u64) -> u64 {
    // A strong 64-bit mixer (the splitmix64 finalizer): keys are often dense integers.
    let mut z = key.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub struct HashIndex {
    /// Zero is EMPTY: fresh memory is an empty index (see [`super::mem`]).
    slots: super::mem::ZeroedWords,
    mask: usize,
    stripes: Box<[AtomicU64]>,
    concurrent: bool,
}

/// What an insert found.
pub enum Inserted {
    Ok,
    /// The key is already indexed, pointing at this row.
    Exists(RowId),
}

impl HashIndex {
    /// Most rows a hash index can point at (row ids have 40 bits).
    pub const MAX_CAPACITY: u64 = RID_MASK - 3;

    /// Slots of an index for `capacity` rows (load at most 1/2); `None`
    /// above [`HashIndex::MAX_CAPACITY`].
    pub fn slots_for(capacity: u64) -> Option<u64> {
        (capacity <= Self::MAX_CAPACITY).then(|| (capacity.max(8) * 2).next_power_of_two())
    }

    /// Bytes an index for `capacity` rows allocates (and writes) when it is made.
    pub fn bytes_for(capacity: u64) -> u64 {
        Self::slots_for(capacity).map_or(u64::MAX, |n| n.saturating_mul(8))
    }

    /// An index for `capacity` rows: its slots are allocated and written now.
    /// An error when the capacity is beyond what row ids can name, or the
    /// memory cannot be had.
    pub fn new(capacity: u64, concurrent: bool) -> Result<HashIndex, String> {
        let n = Self::slots_for(capacity)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| {
                format!(
                    "a hash index holds at most {} rows, not {capacity}",
                    Self::MAX_CAPACITY
                )
            })?;
        let slots = super::mem::ZeroedWords::new(n).ok_or_else(|| {
            format!(
                "cannot allocate the {} bytes of a hash index for {capacity} rows",
                n as u64 * 8
            )
        })?;
        Ok(HashIndex {
            slots,
            mask: n - 1,
            stripes: (0..STRIPES).map(|_| AtomicU64::new(0)).collect(),
            concurrent,
        })
    }

    #[inline]
    fn tag(h: u64) -> u64 {
        (h >> 40) | 1 // never zero, so a slot is never EMPTY or TOMB
    }

    #[inline]
    fn pack(h: u64, rid: RowId) -> u64 {
        (Self::tag(h) << RID_BITS) | (rid + 2)
    }

    #[inline]
    fn unpack(v: u64) -> RowId {
        (v & RID_MASK) - 2
    }

    #[inline]
    pub fn stripe_of(key: u64) -> usize {
        (hash_key(key) as usize) & (STRIPES - 1)
    }

    /// The version of a key's stripe: even when stable.
    #[inline]
    pub fn stripe_version(&self, stripe: usize) -> u64 {
        self.stripes[stripe].load(Ordering::Acquire)
    }

    /// Asks the CPU to bring the key's first slot into cache.
    #[inline]
    pub fn prefetch(&self, key: u64) {
        let i = (hash_key(key) as usize) & self.mask;
        super::prefetch(&self.slots[i]);
    }

    /// The row `key` most likely has, for a prefetch hint: the first slot of
    /// its probe whose tag matches, without reading the row to confirm it.
    /// `get` confirms against the row's key, a demand load that stalls until
    /// the row arrives; a hint that stalls overlaps nothing. A wrong guess
    /// (another key with the same 23-bit tag earlier in the probe) costs one
    /// useless prefetch. Looks at a few slots at most.
    #[inline]
    pub fn guess(&self, key: u64) -> Option<RowId> {
        let h = hash_key(key);
        let tag = Self::tag(h);
        let mut i = (h as usize) & self.mask;
        for _ in 0..GUESS_PROBES {
            let v = self.slots[i].load(Ordering::Relaxed);
            if v == EMPTY {
                return None;
            }
            if v != TOMB && (v >> RID_BITS) == tag {
                return Some(Self::unpack(v));
            }
            i = (i + 1) & self.mask;
        }
        None
    }

    #[inline]
    pub fn get(&self, arena: &Arena, key: u64) -> Option<RowId> {
        let h = hash_key(key);
        let tag = Self::tag(h);
        let mut i = (h as usize) & self.mask;
        // Bounded like `insert` and `remove`: slots never go back from TOMB to
        // EMPTY, so after enough inserts and deletes no EMPTY slot may be left
        // to end the probe of an absent key.
        for _ in 0..=self.mask {
            let v = self.slots[i].load(Ordering::Acquire);
            if v == EMPTY {
                return None;
            }
            if v != TOMB && (v >> RID_BITS) == tag {
                let rid = Self::unpack(v);
                if arena.row(rid)[W_KEY].load(Ordering::Acquire) == key {
                    return Some(rid);
                }
            }
            i = (i + 1) & self.mask;
        }
        None
    }

    fn lock_stripe(&self, s: usize) {
        let w = &self.stripes[s];
        if !self.concurrent {
            w.store(w.load(Ordering::Relaxed) + 1, Ordering::Release);
            return;
        }
        loop {
            let v = w.load(Ordering::Relaxed);
            if v & 1 == 0
                && w.compare_exchange_weak(v, v + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            std::hint::spin_loop();
        }
    }

    fn unlock_stripe(&self, s: usize) {
        let w = &self.stripes[s];
        w.store(w.load(Ordering::Relaxed) + 1, Ordering::Release);
    }

    /// Indexes `key → rid` unless the key is present. The row's key word must
    /// already hold `key`.
    pub fn insert(&self, arena: &Arena, key: u64, rid: RowId) -> Result<Inserted, IndexFull> {
        let h = hash_key(key);
        let s = (h as usize) & (STRIPES - 1);
        self.lock_stripe(s);
        let r = self.insert_locked(arena, key, h, rid);
        self.unlock_stripe(s);
        r
    }

    fn insert_locked(
        &self,
        arena: &Arena,
        key: u64,
        h: u64,
        rid: RowId,
    ) -> Result<Inserted, IndexFull> {
        let tag = Self::tag(h);
        'retry: loop {
            let mut i = (h as usize) & self.mask;
            let mut first_tomb = None;
            for _ in 0..=self.mask {
                let v = self.slots[i].load(Ordering::Acquire);
                if v == EMPTY {
                    let (at, expect) = match first_tomb {
                        Some(t) => (t, TOMB),
                        None => (i, EMPTY),
                    };
                    if self.cas(at, expect, Self::pack(h, rid)) {
                        return Ok(Inserted::Ok);
                    }
                    // Another stripe's insert took that slot: probe again.
                    continue 'retry;
                }
                if v == TOMB {
                    first_tomb.get_or_insert(i);
                } else if (v >> RID_BITS) == tag {
                    let other = Self::unpack(v);
                    if arena.row(other)[W_KEY].load(Ordering::Acquire) == key {
                        return Ok(Inserted::Exists(other));
                    }
                }
                i = (i + 1) & self.mask;
            }
            if let Some(t) = first_tomb {
                if self.cas(t, TOMB, Self::pack(h, rid)) {
                    return Ok(Inserted::Ok);
                }
                continue 'retry;
            }
            return Err(IndexFull);
        }
    }

    #[inline]
    fn cas(&self, i: usize, expect: u64, new: u64) -> bool {
        if self.concurrent {
            self.slots[i]
                .compare_exchange(expect, new, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        } else {
            self.slots[i].store(new, Ordering::Release);
            true
        }
    }

    /// Removes `key → rid`. Returns whether it was there.
    pub fn remove(&self, key: u64, rid: RowId) -> bool {
        let h = hash_key(key);
        let s = (h as usize) & (STRIPES - 1);
        self.lock_stripe(s);
        let want = Self::pack(h, rid);
        let mut i = (h as usize) & self.mask;
        let mut found = false;
        for _ in 0..=self.mask {
            let v = self.slots[i].load(Ordering::Acquire);
            if v == EMPTY {
                break;
            }
            if v == want {
                // Slots are only written under their key's stripe or by CAS from
                // EMPTY/TOMB, so this entry cannot change under us.
                self.slots[i].store(TOMB, Ordering::Release);
                found = true;
                break;
            }
            i = (i + 1) & self.mask;
        }
        self.unlock_stripe(s);
        found
    }
}

/// The hash index has no free slot left.
#[derive(Debug)]
pub struct IndexFull;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn setup(cap: u64) -> (Arena, HashIndex) {
        (
            Arena::new(1, cap).unwrap(),
            HashIndex::new(cap, true).unwrap(),
        )
    }

    proptest! {
        #[test]
        fn matches_a_hashmap(ops in proptest::collection::vec((0u8..3, 0u64..64), 1..400)) {
            let (arena, idx) = setup(128);
            let mut cache = Default::default();
            let mut model: HashMap<u64, RowId> = HashMap::new();
            for (op, key) in ops {
                match op {
                    0 => {
                        let rid = arena.alloc(&mut cache).unwrap();
                        arena.row(rid)[W_KEY].store(key, Ordering::Release);
                        match idx.insert(&arena, key, rid).unwrap() {
                            Inserted::Ok => { prop_assert!(!model.contains_key(&key)); model.insert(key, rid); }
                            Inserted::Exists(r) => { prop_assert_eq!(model.get(&key), Some(&r)); arena.free(&mut cache, rid); }
                        }
                    }
                    1 => {
                        if let Some(rid) = model.remove(&key) {
                            prop_assert!(idx.remove(key, rid));
                            arena.row(rid)[W_KEY].store(u64::MAX, Ordering::Release);
                            arena.free(&mut cache, rid);
                        } else {
                            prop_assert!(idx.get(&arena, key).is_none());
                        }
                    }
                    _ => prop_assert_eq!(idx.get(&arena, key), model.get(&key).copied()),
                }
            }
            for (k, r) in &model {
                prop_assert_eq!(idx.get(&arena, *k), Some(*r));
                // A guess may give up on a long probe, but a wrong row
                // needs two of these keys to share a 23-bit tag.
                if let Some(g) = idx.guess(*k) {
                    prop_assert_eq!(g, *r);
                }
            }
        }
    }

    /// Deleted slots become tombstones and stay so; churn at half load uses
    /// up every EMPTY slot. A lookup of an absent key must still end.
    #[test]
    fn absent_key_lookup_ends_after_churn() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (arena, idx) = setup(8);
            let mut cache = Default::default();
            let mut live = std::collections::VecDeque::new();
            for key in 0..10_000u64 {
                let rid = arena.alloc(&mut cache).unwrap();
                arena.row(rid)[W_KEY].store(key, Ordering::Release);
                assert!(matches!(idx.insert(&arena, key, rid), Ok(Inserted::Ok)));
                live.push_back((key, rid));
                if live.len() == 4 {
                    let (k, r) = live.pop_front().unwrap();
                    assert!(idx.remove(k, r));
                    arena.row(r)[W_KEY].store(u64::MAX, Ordering::Release);
                    arena.free(&mut cache, r);
                }
            }
            let empty = idx
                .slots
                .iter()
                .filter(|s| s.load(Ordering::Relaxed) == EMPTY);
            let _ = tx.send((empty.count(), idx.get(&arena, u64::MAX - 1)));
        });
        let (empty, got) = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("a lookup of an absent key never ended (no EMPTY slot left to stop its probe)");
        assert_eq!(got, None, "{empty} EMPTY slots left");
    }

    #[test]
    fn guesses_find_the_rows_of_a_half_full_index() {
        let (arena, idx) = setup(4096);
        let mut cache = Default::default();
        let mut rids = Vec::new();
        for key in 0..4096u64 {
            let rid = arena.alloc(&mut cache).unwrap();
            arena.row(rid)[W_KEY].store(key * 7919, Ordering::Release);
            assert!(matches!(
                idx.insert(&arena, key * 7919, rid),
                Ok(Inserted::Ok)
            ));
            rids.push(rid);
        }
        let mut missed = 0;
        for (key, &rid) in (0..4096u64).zip(&rids) {
            match idx.guess(key * 7919) {
                Some(g) => assert_eq!(g, rid, "key {}", key * 7919),
                None => missed += 1,
            }
        }
        // Probes longer than GUESS_PROBES slots are rare at load 1/2.
        assert!(missed < 4096 / 100, "{missed} of 4096 keys not guessed");
    }

    #[test]
    fn stripe_version_moves_on_insert() {
        let (arena, idx) = setup(16);
        let mut cache = Default::default();
        let s = HashIndex::stripe_of(7);
        let v0 = idx.stripe_version(s);
        let rid = arena.alloc(&mut cache).unwrap();
        arena.row(rid)[W_KEY].store(7, Ordering::Release);
        idx.insert(&arena, 7, rid).unwrap();
        assert_eq!(idx.stripe_version(s), v0 + 2);
        assert!(idx.remove(7, rid));
        assert_eq!(idx.stripe_version(s), v0 + 4);
    }
}
