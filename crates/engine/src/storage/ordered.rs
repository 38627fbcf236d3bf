//! Ordered indexes with range scans, for primary keys that need ranges and for
//! non-unique secondary indexes.
//!
//! Keys are `u128`: a unique index on a `u64` key uses `(key << 64)`, a
//! non-unique secondary index uses `(secondary_key << 64) | primary_key`, so
//! equal secondary keys sort by primary key and every entry is unique.
//!
//! Implementations behind one type, chosen when the island opens:
//! - `Owned`: a `BTreeMap` used by exactly one thread (a single-worker island):
//!   no atomics, no latches.
//! - `Tree`: a B+tree with optimistic lock coupling ([`super::btree`]) for
//!   islands with several workers, when [`SHARED`] says so;
//! - `Skip`: a lock-free skip list (crossbeam), the other choice of [`SHARED`].
//!   How the choices compare: `docs/tuning.md`, "Ordered indexes".

use std::cell::UnsafeCell;
use std::collections::BTreeMap;
use std::ops::Bound;

use crossbeam_skiplist::SkipMap;

use super::arena::RowId;
use super::btree::BTree;
use super::sole::SoleUser;

/// What a [`SoleUser`] check of the owned map names.
const OWNED: &str = "an owned ordered index (a single-worker island's)";

/// An ordered index's implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `BTreeMap`, for one thread.
    Owned,
    /// The crossbeam skip list, for several threads.
    SkipList,
    /// The optimistic-lock-coupling B+tree, for several threads.
    BTree,
}

/// The implementation of a multi-worker island's ordered indexes.
pub const SHARED: Kind = Kind::BTree;

// One index per table, built once: its size does not matter, and boxing the
// skip list would add a pointer chase to every shared-index operation.
#[allow(clippy::large_enum_variant)]
pub enum OrderedIndex {
    /// The map, and the check that one thread at a time uses it.
    Owned(UnsafeCell<BTreeMap<u128, RowId>>, SoleUser),
    Shared(SkipMap<u128, RowId>),
    Tree(BTree),
}

// SAFETY: the `Owned` variant is only created for tables of a single-worker
// island; the island hands its tables to exactly one worker thread at a time
// (see `island::Island::worker`), so the map is never accessed concurrently.
unsafe impl Sync for OrderedIndex {}

pub fn key_of(k: u64) -> u128 {
    (k as u128) << 64
}

pub fn pair(secondary: u64, primary: u64) -> u128 {
    ((secondary as u128) << 64) | primary as u128
}

impl OrderedIndex {
    /// An index for several threads (`SHARED`'s kind) or for one.
    pub fn new(concurrent: bool) -> OrderedIndex {
        OrderedIndex::of(if concurrent { SHARED } else { Kind::Owned })
    }

    pub fn of(kind: Kind) -> OrderedIndex {
        match kind {
            Kind::Owned => {
                OrderedIndex::Owned(UnsafeCell::new(BTreeMap::new()), SoleUser::default())
            }
            Kind::SkipList => OrderedIndex::Shared(SkipMap::new()),
            Kind::BTree => OrderedIndex::Tree(BTree::new()),
        }
    }

    /// The `Owned` variant's map.
    ///
    /// # Safety
    /// The caller runs on the one thread that uses the index now (see the
    /// `Sync` impl; each caller enters the index's [`SoleUser`], which checks
    /// it in debug builds), and no reference from an earlier call is still
    /// in use: each caller below drops it before it returns.
    #[allow(clippy::mut_from_ref)]
    unsafe fn owned(m: &UnsafeCell<BTreeMap<u128, RowId>>) -> &mut BTreeMap<u128, RowId> {
        // SAFETY: the caller's contract.
        unsafe { &mut *m.get() }
    }

    pub fn get(&self, k: u128) -> Option<RowId> {
        match self {
            // SAFETY: one thread uses the index; the reference ends here.
            OrderedIndex::Owned(m, u) => {
                let _in = u.enter(OWNED);
                unsafe { Self::owned(m) }.get(&k).copied()
            }
            OrderedIndex::Shared(m) => m.get(&k).map(|e| *e.value()),
            OrderedIndex::Tree(t) => t.get(k),
        }
    }

    /// Inserts unless present; returns the existing row id if the key was there.
    pub fn insert(&self, k: u128, rid: RowId) -> Option<RowId> {
        match self {
            // SAFETY: one thread uses the index; the reference ends here.
            OrderedIndex::Owned(m, u) => {
                let _in = u.enter(OWNED);
                match unsafe { Self::owned(m) }.entry(k) {
                    std::collections::btree_map::Entry::Occupied(e) => Some(*e.get()),
                    std::collections::btree_map::Entry::Vacant(v) => {
                        v.insert(rid);
                        None
                    }
                }
            }
            OrderedIndex::Shared(m) => {
                let e = m.get_or_insert(k, rid);
                let existing = *e.value();
                (existing != rid).then_some(existing)
            }
            // As the skip list: the same row id again is not a conflict.
            OrderedIndex::Tree(t) => t.insert(k, rid).filter(|existing| *existing != rid),
        }
    }

    pub fn remove(&self, k: u128) -> bool {
        match self {
            // SAFETY: one thread uses the index; the reference ends here.
            OrderedIndex::Owned(m, u) => {
                let _in = u.enter(OWNED);
                unsafe { Self::owned(m) }.remove(&k).is_some()
            }
            OrderedIndex::Shared(m) => m.remove(&k).is_some(),
            OrderedIndex::Tree(t) => t.remove(k),
        }
    }

    /// Calls `f(key, rid)` for entries in `[lo, hi]`, ascending or descending,
    /// until `f` returns false. `f` must not change this index.
    pub fn scan(&self, lo: u128, hi: u128, reverse: bool, mut f: impl FnMut(u128, RowId) -> bool) {
        if lo > hi {
            return;
        }
        let r = (Bound::Included(lo), Bound::Included(hi));
        match self {
            OrderedIndex::Owned(m, u) => {
                let _in = u.enter(OWNED);
                // SAFETY: one thread uses the index; the iterator lives until the
                // end of the scan, and `f` must not touch this index.
                let it = unsafe { Self::owned(m) }.range(r);
                if reverse {
                    for (k, v) in it.rev() {
                        if !f(*k, *v) {
                            break;
                        }
                    }
                } else {
                    for (k, v) in it {
                        if !f(*k, *v) {
                            break;
                        }
                    }
                }
            }
            OrderedIndex::Shared(m) => {
                let it = m.range(r);
                if reverse {
                    for e in it.rev() {
                        if !f(*e.key(), *e.value()) {
                            break;
                        }
                    }
                } else {
                    for e in it {
                        if !f(*e.key(), *e.value()) {
                            break;
                        }
                    }
                }
            }
            OrderedIndex::Tree(t) => t.scan(lo, hi, reverse, f),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            // SAFETY: one thread uses the index; the reference ends here.
            OrderedIndex::Owned(m, u) => {
                let _in = u.enter(OWNED);
                unsafe { Self::owned(m) }.len()
            }
            OrderedIndex::Shared(m) => m.len(),
            // A walk of the whole tree: for tests and reports.
            OrderedIndex::Tree(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            // Stops at the first entry, where `len` walks every leaf.
            OrderedIndex::Tree(t) => t.is_empty(),
            _ => self.len() == 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Runs `ops` on the index and on a `BTreeMap`, comparing every answer.
    /// An op is (kind, a, b, reverse, limit); `key(a)` makes the key.
    fn against_a_btreemap(
        kind: Kind,
        ops: Vec<(u8, u64, u64, bool, usize)>,
        key: impl Fn(u64) -> u128,
    ) -> Result<(), TestCaseError> {
        let idx = OrderedIndex::of(kind);
        let mut model: BTreeMap<u128, RowId> = BTreeMap::new();
        for (i, (op, a, b, rev, limit)) in ops.into_iter().enumerate() {
            let k = key(a);
            match op {
                0 => {
                    let got = idx.insert(k, i as u64);
                    let want = model.get(&k).copied();
                    prop_assert_eq!(got, want);
                    model.entry(k).or_insert(i as u64);
                }
                1 => prop_assert_eq!(idx.remove(k), model.remove(&k).is_some()),
                2 => prop_assert_eq!(idx.get(k), model.get(&k).copied()),
                _ => {
                    let (lo, hi) = (key(a.min(b)), key(a.max(b)));
                    let mut got = vec![];
                    idx.scan(lo, hi, rev, |k, v| {
                        got.push((k, v));
                        got.len() < limit.max(1)
                    });
                    let mut want: Vec<_> = model.range(lo..=hi).map(|(k, v)| (*k, *v)).collect();
                    if rev {
                        want.reverse();
                    }
                    want.truncate(limit.max(1));
                    prop_assert_eq!(got, want);
                }
            }
        }
        prop_assert_eq!(idx.len(), model.len());
        prop_assert_eq!(idx.is_empty(), model.is_empty());
        Ok(())
    }

    fn kinds() -> impl Strategy<Value = Kind> {
        prop_oneof![Just(Kind::Owned), Just(Kind::SkipList), Just(Kind::BTree)]
    }

    proptest! {
        #[test]
        fn matches_a_btreemap(kind in kinds(),
                              ops in proptest::collection::vec((0u8..4, 0u64..50, 0u64..50, any::<bool>(), 0usize..6), 1..300)) {
            against_a_btreemap(kind, ops, key_of)?;
        }

        /// Enough keys for tall indexes (many nodes, many skip-list levels),
        /// with keys that use both halves of the `u128`
        /// (secondary pairs), mostly appended as a district's orders are.
        #[test]
        fn matches_a_btreemap_over_many_pairs(kind in kinds(),
                                              ops in proptest::collection::vec(
                                                  (prop_oneof![4 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8), 2 => Just(3u8)],
                                                   0u64..3_000, 0u64..3_000, any::<bool>(), 0usize..40), 1..2_000)) {
            against_a_btreemap(kind, ops, |a| pair(a / 7, a % 7 * 0x9E37_79B9))?;
        }
    }

    /// Threads insert disjoint keys (each in a scrambled order) and scan
    /// between inserts: every scan is sorted, stays within its bounds, and
    /// sees every key whose insert returned before the scan began.
    #[test]
    fn concurrent_scans_see_every_key_inserted_before_them() {
        scans_see_every_key_inserted_before_them(Kind::SkipList);
        scans_see_every_key_inserted_before_them(Kind::BTree);
    }

    fn scans_see_every_key_inserted_before_them(kind: Kind) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        const THREADS: usize = 3;
        const PER_THREAD: usize = 6_000;
        const N: usize = THREADS * PER_THREAD;
        // Key number `x` is owned by thread `x % THREADS`; that thread's
        // `j`-th insert is `x = perm(j) * THREADS + t`.
        let perm = |j: usize| (j * 2_654_435_761) % PER_THREAD;
        let mut pos_of = vec![0usize; PER_THREAD];
        for j in 0..PER_THREAD {
            pos_of[perm(j)] = j;
        }
        let key = |x: usize| pair((x / 4) as u64, (x % 4) as u64);
        let idx = OrderedIndex::of(kind);
        // How many inserts of each thread have returned.
        let done: Vec<AtomicUsize> = (0..THREADS).map(|_| AtomicUsize::new(0)).collect();
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (idx, done, pos_of) = (&idx, &done, &pos_of);
                s.spawn(move || {
                    let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ t as u64;
                    let mut next = || {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        rng
                    };
                    for j in 0..PER_THREAD {
                        let x = perm(j) * THREADS + t;
                        assert_eq!(idx.insert(key(x), x as u64), None);
                        done[t].store(j + 1, Ordering::Release);
                        if j % 4 != 0 {
                            continue;
                        }
                        let seen: Vec<usize> =
                            done.iter().map(|d| d.load(Ordering::Acquire)).collect();
                        let lo = next() as usize % N;
                        let hi = (lo + next() as usize % 200).min(N - 1);
                        let reverse = next() % 2 == 0;
                        let limit = 1 + next() as usize % 64;
                        let mut got = vec![];
                        idx.scan(key(lo), key(hi), reverse, |k, v| {
                            got.push((k, v));
                            got.len() < limit
                        });
                        let ks: Vec<u128> = got.iter().map(|(k, _)| *k).collect();
                        let mut sorted = ks.clone();
                        sorted.sort_unstable();
                        if reverse {
                            sorted.reverse();
                        }
                        assert_eq!(ks, sorted, "a scan's keys are in order");
                        assert!(
                            ks.iter().all(|k| (key(lo)..=key(hi)).contains(k)),
                            "within bounds"
                        );
                        for (k, v) in &got {
                            assert_eq!(*k, key(*v as usize), "an entry's row id is its own");
                        }
                        // The range the scan covered: all of it, or up to the
                        // last entry when the limit cut it short.
                        let (from, to) = match (got.len() == limit, reverse) {
                            (false, _) => (lo, hi),
                            (true, false) => (lo, got[limit - 1].1 as usize),
                            (true, true) => (got[limit - 1].1 as usize, hi),
                        };
                        for x in from..=to {
                            if pos_of[x / THREADS] < seen[x % THREADS] {
                                assert!(
                                    ks.contains(&key(x)),
                                    "key {x} inserted before the scan is missing"
                                );
                            }
                        }
                    }
                });
            }
        });
        assert_eq!(idx.len(), N);
    }

    /// Two writers run queues over their own keys (one appends and removes
    /// the oldest, the other runs downwards), so leaves split and empty
    /// leaves are unlinked all the time, while a reader scans: every scan is
    /// sorted, within its bounds, hands out only true entries, and sees every
    /// key that is present throughout (one in 64, inserted before).
    #[test]
    fn concurrent_scans_under_inserts_and_removes() {
        concurrent_churn(Kind::SkipList);
        concurrent_churn(Kind::BTree);
    }

    fn concurrent_churn(kind: Kind) {
        use std::sync::atomic::{AtomicBool, Ordering};
        const N: usize = 50_000;
        const STABLE: usize = 64;
        const WINDOW: usize = 500;
        const STEPS: usize = 120_000;
        let key = |x: usize| pair((x / 8) as u64, (x % 8) as u64);
        let idx = OrderedIndex::of(kind);
        for x in (0..N).step_by(STABLE) {
            assert_eq!(idx.insert(key(x), x as u64), None);
        }
        let stop = AtomicBool::new(false);
        let own = |t: usize| -> Vec<usize> {
            let mut v: Vec<usize> = (0..N).filter(|x| x % STABLE != 0 && x % 2 == t).collect();
            if t == 1 {
                v.reverse();
            }
            v
        };
        let finals = std::thread::scope(|s| {
            let writers: Vec<_> = (0..2)
                .map(|t| {
                    let (idx, own) = (&idx, own(t));
                    s.spawn(move || {
                        let mut present = std::collections::VecDeque::new();
                        for i in 0..STEPS {
                            let x = own[i % own.len()];
                            assert_eq!(idx.insert(key(x), x as u64), None, "{x} is new");
                            present.push_back(x);
                            if present.len() > WINDOW {
                                let old = present.pop_front().unwrap();
                                assert!(idx.remove(key(old)), "{old} was there");
                            }
                        }
                        present
                    })
                })
                .collect();
            let reader = s.spawn(|| {
                let mut rng = 0x2545_F491_4F6C_DD1Du64;
                let mut next = || {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng as usize
                };
                let mut scans = 0;
                while !stop.load(Ordering::Acquire) || scans < 1_000 {
                    scans += 1;
                    let lo = next() % N;
                    let hi = (lo + next() % 3_000).min(N - 1);
                    let reverse = next() % 2 == 0;
                    let limit = 1 + next() % 200;
                    let mut got = vec![];
                    idx.scan(key(lo), key(hi), reverse, |k, v| {
                        got.push((k, v));
                        got.len() < limit
                    });
                    let mut xs = vec![];
                    for (k, v) in &got {
                        assert_eq!(*k, key(*v as usize), "an entry's row id is its own");
                        assert!((lo..=hi).contains(&(*v as usize)), "within bounds");
                        xs.push(*v as usize);
                    }
                    let mut sorted = xs.clone();
                    sorted.sort_unstable();
                    sorted.dedup();
                    if reverse {
                        sorted.reverse();
                    }
                    assert_eq!(xs, sorted, "a scan's keys are in order, once each");
                    let (from, to) = match (got.len() == limit, reverse) {
                        (false, _) => (lo, hi),
                        (true, false) => (lo, xs[limit - 1]),
                        (true, true) => (xs[limit - 1], hi),
                    };
                    for x in (from.div_ceil(STABLE) * STABLE..=to).step_by(STABLE) {
                        assert!(xs.contains(&x), "stable key {x} missing from a scan");
                    }
                }
                scans
            });
            let finals: Vec<_> = writers.into_iter().map(|w| w.join().unwrap()).collect();
            stop.store(true, Ordering::Release);
            assert!(reader.join().unwrap() >= 1_000);
            finals
        });
        let mut want: Vec<usize> = (0..N).step_by(STABLE).collect();
        for f in finals {
            want.extend(f);
        }
        want.sort_unstable();
        let mut got = vec![];
        idx.scan(0, u128::MAX, false, |_, v| {
            got.push(v as usize);
            true
        });
        assert_eq!(got, want);
        assert_eq!(idx.len(), want.len());
    }

    #[test]
    fn secondary_pairs_sort_by_primary_within_a_key() {
        let idx = OrderedIndex::new(true);
        for (s, p) in [(5, 3), (5, 1), (4, 9), (5, 2), (6, 0)] {
            assert!(idx.insert(pair(s, p), p).is_none());
        }
        let mut got = vec![];
        idx.scan(pair(5, 0), pair(5, u64::MAX), false, |_, r| {
            got.push(r);
            true
        });
        assert_eq!(got, vec![1, 2, 3]);
    }
}
