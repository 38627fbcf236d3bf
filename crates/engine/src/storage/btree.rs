//! A concurrent B+tree with optimistic lock coupling (Leis et al., 2019), for
//! `u128` keys and `u64` values (row ids): the ordered index of islands with
//! several workers (see [`super::ordered`]).
//!
//! Every node has a version word: bit 0 says the node is obsolete (unlinked,
//! waiting for its epoch to pass), bit 1 that a writer holds it, the bits
//! above count its changes. Readers take no lock: they note a node's version,
//! read it, and check that the version did not change before they trust what
//! they read; on a change they restart (from the root, or from the last key a
//! scan handed out). Writers lock only the nodes they change: a leaf for an
//! insert or a removal, the leaf and its parent for a split, the path from the
//! lowest ancestor that keeps a child down to an emptied leaf for an unlink.
//!
//! Invariants:
//! - an inner node of `n` separator keys has `n + 1` children; child `i`
//!   holds the keys `k` with `key[i - 1] <= k < key[i]` (the missing bounds
//!   are the node's own);
//! - a full inner node is split on the way down, so a leaf split always finds
//!   room in its parent;
//! - a leaf that a removal empties is unlinked from the lowest ancestor with
//!   two children or more (its key range goes to a neighbour), with the chain
//!   of one-child inner nodes above it; the tree keeps at most one empty
//!   chain, the one at the root;
//! - a leaf's fences (`lo` inclusive, `hi` exclusive or open) lie inside the
//!   key range its parents give it. An insert that descends to the leaf
//!   sets them, under the leaf's lock, to the range its path validated (cut
//!   at the separator, for both halves of a split); an unlink that widens a
//!   neighbour's range leaves that neighbour's fences as they were until
//!   its next such insert (narrower than the range is allowed, never
//!   wider: only a split of the leaf itself narrows its range);
//! - an insert first tries the leaf it or a key sharing its top 32 bits last
//!   went into on this thread (a finger): if that leaf is not obsolete and
//!   its fences hold the key, it is the leaf a descent would find, and no
//!   descent is needed. A finger is trusted only while the tree has retired
//!   no leaf since it was taken, so it never points at freed memory;
//! - every field a reader may read while a writer changes it is an atomic
//!   (relaxed loads and stores; the version checks order them), and unlinked
//!   nodes are freed through `crossbeam-epoch`, after every reader that might
//!   still hold them has left.

use std::cell::Cell;
use std::ptr::null_mut;
use std::sync::atomic::{fence, AtomicPtr, AtomicU64, Ordering};

use crossbeam_epoch::{self as epoch, Guard};

/// Entries of a leaf: 29 × 24 B beside the header and the fences (64 B)
/// fill 768 B (12 cache lines).
pub const LEAF_CAP: usize = 29;
/// Separator keys of an inner node (children: one more).
pub const INNER_CAP: usize = 30;
/// How deep an unlink looks for an ancestor to unlink from; the tree is far
/// shallower (each level multiplies the entries by at least 15).
const MAX_HEIGHT: usize = 24;

const OBSOLETE: u64 = 0b01;
const LOCKED: u64 = 0b10;

/// Something changed under an optimistic read: start again.
#[derive(Debug)]
struct Restart;

type Step<T> = Result<T, Restart>;

/// A node's version word.
struct Version(AtomicU64);

impl Version {
    /// The version to validate against; waits while a writer holds the node.
    fn read(&self) -> Step<u64> {
        let mut spins = 0u32;
        loop {
            let v = self.0.load(Ordering::Acquire);
            if v & OBSOLETE != 0 {
                return Err(Restart);
            }
            if v & LOCKED == 0 {
                return Ok(v);
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                // The holder may be descheduled on a loaded machine.
                std::thread::yield_now();
            }
        }
    }

    /// Whether everything read since `read` returned `v` is consistent.
    fn check(&self, v: u64) -> Step<()> {
        // Orders the relaxed reads of the node before the version's reload.
        fence(Ordering::Acquire);
        if self.0.load(Ordering::Relaxed) == v {
            Ok(())
        } else {
            Err(Restart)
        }
    }

    /// Locks the node if it is still at version `v`.
    fn upgrade(&self, v: u64) -> Step<()> {
        self.0
            .compare_exchange(v, v + LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .map_err(|_| Restart)?;
        // The writer's stores come after the lock for any reader that sees
        // one of them (paired with the fence in `check`).
        fence(Ordering::Release);
        Ok(())
    }

    /// Unlocks and counts one change.
    fn unlock(&self) {
        self.0.fetch_add(LOCKED, Ordering::Release);
    }

    /// Unlocks and marks the node obsolete: every reader of it restarts.
    fn unlock_obsolete(&self) {
        self.0.fetch_add(LOCKED | OBSOLETE, Ordering::Release);
    }
}

/// The start of every node; a node pointer is a pointer to its header.
#[repr(C)]
struct Header {
    version: Version,
    /// Keys in the node (not more than its capacity when consistent; readers
    /// clamp it, as a torn read may see anything).
    count: AtomicU64,
    leaf: bool,
}

impl Header {
    fn new(leaf: bool) -> Header {
        Header {
            version: Version(AtomicU64::new(0)),
            count: AtomicU64::new(0),
            leaf,
        }
    }
}

fn u128_of(w: &[AtomicU64; 2]) -> u128 {
    ((w[0].load(Ordering::Relaxed) as u128) << 64) | w[1].load(Ordering::Relaxed) as u128
}

fn set_u128(w: &[AtomicU64; 2], k: u128) {
    w[0].store((k >> 64) as u64, Ordering::Relaxed);
    w[1].store(k as u64, Ordering::Relaxed);
}

/// Keys split in halves, so that each half is an atomic word.
#[repr(C)]
struct Keys<const N: usize> {
    hi: [AtomicU64; N],
    lo: [AtomicU64; N],
}

impl<const N: usize> Keys<N> {
    fn new() -> Keys<N> {
        Keys {
            hi: [const { AtomicU64::new(0) }; N],
            lo: [const { AtomicU64::new(0) }; N],
        }
    }
    fn get(&self, i: usize) -> u128 {
        let hi = self.hi[i].load(Ordering::Relaxed);
        let lo = self.lo[i].load(Ordering::Relaxed);
        ((hi as u128) << 64) | lo as u128
    }
    fn set(&self, i: usize, k: u128) {
        self.hi[i].store((k >> 64) as u64, Ordering::Relaxed);
        self.lo[i].store(k as u64, Ordering::Relaxed);
    }
    /// The first index among `[0, n)` whose key is `>= k` (`strict`: `> k`).
    fn search(&self, k: u128, n: usize, strict: bool) -> usize {
        let (mut a, mut b) = (0, n);
        while a < b {
            let m = (a + b) / 2;
            let km = self.get(m);
            if km < k || (strict && km == k) {
                a = m + 1;
            } else {
                b = m;
            }
        }
        a
    }
}

#[repr(C, align(64))]
struct Leaf {
    h: Header,
    /// The fences: keys `lo <= k < hi` (no upper bound with `hi_open`) belong
    /// here. Written under the lock, before a new leaf is linked.
    fence_lo: [AtomicU64; 2],
    fence_hi: [AtomicU64; 2],
    hi_open: AtomicU64,
    keys: Keys<LEAF_CAP>,
    vals: [AtomicU64; LEAF_CAP],
}

#[repr(C, align(64))]
struct Inner {
    h: Header,
    keys: Keys<INNER_CAP>,
    kids: [AtomicPtr<Header>; INNER_CAP + 1],
}

impl Leaf {
    fn alloc() -> *mut Header {
        let l = Box::new(Leaf {
            h: Header::new(true),
            fence_lo: [const { AtomicU64::new(0) }; 2],
            fence_hi: [const { AtomicU64::new(0) }; 2],
            hi_open: AtomicU64::new(1),
            keys: Keys::new(),
            vals: [const { AtomicU64::new(0) }; LEAF_CAP],
        });
        Box::into_raw(l).cast()
    }
    fn count(&self) -> usize {
        (self.h.count.load(Ordering::Relaxed) as usize).min(LEAF_CAP)
    }
    /// Whether the fences hold `k` (read optimistically: the caller checks
    /// the version afterwards).
    fn fences_hold(&self, k: u128) -> bool {
        let lo = u128_of(&self.fence_lo);
        let open = self.hi_open.load(Ordering::Relaxed) != 0;
        lo <= k && (open || k < u128_of(&self.fence_hi))
    }
    /// Sets the fences; the caller holds the lock or has not shared the leaf.
    fn set_fences(&self, lo: u128, hi: Option<u128>) {
        set_u128(&self.fence_lo, lo);
        set_u128(&self.fence_hi, hi.unwrap_or(0));
        self.hi_open
            .store(u64::from(hi.is_none()), Ordering::Relaxed);
    }
    /// Whether the fences are `[lo, hi)` (a missing `lo` is 0, a missing
    /// `hi` open).
    fn fences_are(&self, lo: Option<u128>, hi: Option<u128>) -> bool {
        let open = self.hi_open.load(Ordering::Relaxed) != 0;
        u128_of(&self.fence_lo) == lo.unwrap_or(0)
            && match hi {
                None => open,
                Some(h) => !open && u128_of(&self.fence_hi) == h,
            }
    }
    fn val(&self, i: usize) -> u64 {
        self.vals[i].load(Ordering::Relaxed)
    }
    fn put(&self, i: usize, k: u128, v: u64) {
        self.keys.set(i, k);
        self.vals[i].store(v, Ordering::Relaxed);
    }
    /// Inserts at `pos`, shifting the tail right. The caller holds the lock
    /// and has checked there is room.
    fn insert_at(&self, pos: usize, k: u128, v: u64) {
        let n = self.count();
        for i in (pos..n).rev() {
            self.put(i + 1, self.keys.get(i), self.val(i));
        }
        self.put(pos, k, v);
        self.h.count.store(n as u64 + 1, Ordering::Relaxed);
    }
    /// Removes the entry at `pos`. The caller holds the lock.
    fn remove_at(&self, pos: usize) {
        let n = self.count();
        for i in pos + 1..n {
            self.put(i - 1, self.keys.get(i), self.val(i));
        }
        self.h.count.store(n as u64 - 1, Ordering::Relaxed);
    }
    /// Splits this full, locked leaf for an insert at `pos` and returns the
    /// new right sibling (not yet linked). An insert past the last key (an
    /// append) keeps this leaf full and starts the right one empty, so
    /// appended keys fill their leaves; any other splits in half.
    fn split(&self, pos: usize) -> *mut Header {
        let n = self.count();
        let right = Leaf::alloc();
        if pos == n {
            return right;
        }
        // SAFETY: just allocated, not shared yet.
        let r = as_leaf(unsafe { &*right });
        let mid = n / 2;
        for i in mid..n {
            r.put(i - mid, self.keys.get(i), self.val(i));
        }
        r.h.count.store((n - mid) as u64, Ordering::Relaxed);
        self.h.count.store(mid as u64, Ordering::Relaxed);
        right
    }
}

impl Inner {
    fn alloc() -> *mut Header {
        let n = Box::new(Inner {
            h: Header::new(false),
            keys: Keys::new(),
            kids: [const { AtomicPtr::new(null_mut()) }; INNER_CAP + 1],
        });
        Box::into_raw(n).cast()
    }
    fn count(&self) -> usize {
        (self.h.count.load(Ordering::Relaxed) as usize).min(INNER_CAP)
    }
    fn kid(&self, i: usize) -> *mut Header {
        self.kids[i].load(Ordering::Relaxed)
    }
    /// The child that holds `k`: the number of separators `<= k`.
    fn child_index(&self, k: u128, n: usize) -> usize {
        self.keys.search(k, n, true)
    }
    /// Narrows `(lo, hi)`, a descent's key range so far, to child `i`'s (of
    /// `n` separators): the separators on either side of it, where there
    /// are some.
    #[inline]
    fn narrow(&self, i: usize, n: usize, range: &mut (Option<u128>, Option<u128>)) {
        if i > 0 {
            range.0 = Some(self.keys.get(i - 1));
        }
        if i < n {
            range.1 = Some(self.keys.get(i));
        }
    }
    /// Links `right`, split from the child that holds `sep`, after it. The
    /// caller holds the lock and the node has room.
    fn insert_child(&self, sep: u128, right: *mut Header) {
        let n = self.count();
        let pos = self.child_index(sep, n);
        for i in (pos..n).rev() {
            self.keys.set(i + 1, self.keys.get(i));
            self.kids[i + 2].store(self.kid(i + 1), Ordering::Relaxed);
        }
        self.keys.set(pos, sep);
        self.kids[pos + 1].store(right, Ordering::Relaxed);
        self.h.count.store(n as u64 + 1, Ordering::Relaxed);
    }
    /// Unlinks child `i`; its keys' range goes to a neighbour. The caller
    /// holds the lock and the node has two children or more.
    fn remove_child(&self, i: usize) {
        let n = self.count();
        // Child 0 gives up the separator after it; any other, the one before.
        let k = i.saturating_sub(1);
        for j in k + 1..n {
            self.keys.set(j - 1, self.keys.get(j));
        }
        for j in i + 1..=n {
            self.kids[j - 1].store(self.kid(j), Ordering::Relaxed);
        }
        self.h.count.store(n as u64 - 1, Ordering::Relaxed);
    }
    /// Splits this full, locked node in half: returns the separator that
    /// moves up and the new right sibling (not yet linked).
    fn split(&self) -> (u128, *mut Header) {
        let n = self.count();
        let mid = n / 2;
        let right = Inner::alloc();
        // SAFETY: just allocated, not shared yet.
        let r = unsafe { &*(right as *const Inner) };
        for i in mid + 1..n {
            r.keys.set(i - mid - 1, self.keys.get(i));
        }
        for i in mid + 1..=n {
            r.kids[i - mid - 1].store(self.kid(i), Ordering::Relaxed);
        }
        r.h.count.store((n - mid - 1) as u64, Ordering::Relaxed);
        self.h.count.store(mid as u64, Ordering::Relaxed);
        (self.keys.get(mid), right)
    }
}

/// A node seen through a pinned epoch.
///
/// # Safety
/// `p` is a node of this tree that was reachable while `_g` (or an older
/// guard still held) was pinned, so it is not freed before `_g` is dropped.
unsafe fn header(p: *mut Header, _g: &Guard) -> &Header {
    // SAFETY: the caller's contract.
    unsafe { &*p }
}

fn as_leaf(h: &Header) -> &Leaf {
    debug_assert!(h.leaf);
    // SAFETY: a header with `leaf` set starts a `Leaf` (`repr(C)`); `leaf`
    // is written once, before the node is shared.
    unsafe { &*(h as *const Header as *const Leaf) }
}

fn as_inner(h: &Header) -> &Inner {
    debug_assert!(!h.leaf);
    // SAFETY: as in `as_leaf`, for a header with `leaf` unset.
    unsafe { &*(h as *const Header as *const Inner) }
}

/// Frees one node (not its children).
///
/// # Safety
/// No thread can reach `p` any more (it was never shared, or it was unlinked
/// and its epoch has passed, or the tree is being dropped).
unsafe fn free(p: *mut Header) {
    // SAFETY: the caller's contract; the node was allocated by `alloc` as
    // the type its `leaf` flag names.
    unsafe {
        if (*p).leaf {
            drop(Box::from_raw(p as *mut Leaf));
        } else {
            drop(Box::from_raw(p as *mut Inner));
        }
    }
}

/// Frees `p` once every thread pinned now has unpinned.
///
/// # Safety
/// `p` is unlinked (no new reader can reach it) and retired only once.
unsafe fn retire(p: *mut Header, g: &Guard) {
    let p = p as usize;
    // SAFETY: the caller's contract; readers that reached `p` hold guards
    // pinned before the unlink, so the epoch outlasts them.
    unsafe { g.defer_unchecked(move || free(p as *mut Header)) };
}

/// What a descent to a leaf found: the leaf, its version, and the bounds of
/// its key range the path showed (`lo` inclusive, `hi` exclusive).
struct Found<'g> {
    leaf: &'g Leaf,
    version: u64,
    lo: Option<u128>,
    hi: Option<u128>,
}

/// The B+tree. See the module's documentation.
pub struct BTree {
    root: AtomicPtr<Header>,
    /// Names this tree in the threads' fingers; unique in the process.
    id: u64,
    /// Leaves retired so far: a finger taken at another count may point at
    /// a leaf whose memory is gone.
    retired: AtomicU64,
    /// Inserts that went in through a finger (tests only: no shared counter
    /// is written by every insert in a build that serves).
    #[cfg(test)]
    finger_inserts: AtomicU64,
}

/// Gives every tree its `id` (0 marks an empty finger).
static TREE_IDS: AtomicU64 = AtomicU64::new(1);

/// Fingers per thread, shared by every tree (a direct-mapped cache).
const FINGERS: usize = 512;

/// A finger: the tree's id, a leaf of it (as an address), and the tree's
/// `retired` count when it was taken.
type Finger = (u64, usize, u64);

thread_local! {
    static FINGER: [Cell<Finger>; FINGERS] = const { [const { Cell::new((0, 0, 0)) }; FINGERS] };
}

// SAFETY: nodes are shared through atomics only, and freed through epochs.
unsafe impl Send for BTree {}
unsafe impl Sync for BTree {}

impl Default for BTree {
    fn default() -> Self {
        BTree::new()
    }
}

impl BTree {
    pub fn new() -> BTree {
        BTree {
            root: AtomicPtr::new(Leaf::alloc()),
            id: TREE_IDS.fetch_add(1, Ordering::Relaxed),
            retired: AtomicU64::new(0),
            #[cfg(test)]
            finger_inserts: AtomicU64::new(0),
        }
    }

    /// The finger slot of `k` in this tree: keys that share their top 32
    /// bits (a district's orders, a prefix's rows) share a slot.
    fn finger_slot(&self, k: u128) -> usize {
        let h = (self.id ^ ((k >> 96) as u64).rotate_left(20)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> (64 - FINGERS.trailing_zeros())) as usize
    }

    /// Notes that `leaf`, which the caller holds locked (or has not linked
    /// yet), takes `k`: this thread's next insert near `k` starts there.
    fn note_finger(&self, leaf: &Leaf, k: u128) {
        // Read under the lock: the leaf cannot be retired before the lock
        // is released, so its own retirement counts after this read.
        let snap = self.retired.load(Ordering::SeqCst);
        let f: Finger = (self.id, leaf as *const Leaf as usize, snap);
        FINGER.with(|fs| fs[self.finger_slot(k)].set(f));
    }

    /// Inserts `k` into the leaf this thread's finger names, if its fences
    /// hold `k` and it has room: `None` when a descent is needed.
    fn try_finger(&self, k: u128, val: u64, g: &Guard) -> Option<Option<u64>> {
        let (id, p, snap) = FINGER.with(|fs| fs[self.finger_slot(k)].get());
        if id != self.id || self.retired.load(Ordering::SeqCst) != snap {
            return None;
        }
        // SAFETY: `p` was a leaf of this tree, not yet retired when `snap`
        // was read; no leaf was retired since (checked above, after `g` was
        // pinned), so a retirement of `p` now waits for `g`.
        let node = unsafe { header(p as *mut Header, g) };
        let v = node.version.read().ok()?;
        let leaf = as_leaf(node);
        if !leaf.fences_hold(k) {
            return None;
        }
        let n = leaf.count();
        let pos = leaf.keys.search(k, n, false);
        if pos < n && leaf.keys.get(pos) == k {
            let there = leaf.val(pos);
            leaf.h.version.check(v).ok()?;
            return Some(Some(there));
        }
        if n == LEAF_CAP {
            return None;
        }
        // Locking at `v` proves the fences, count and position read above.
        leaf.h.version.upgrade(v).ok()?;
        leaf.insert_at(pos, k, val);
        leaf.h.version.unlock();
        #[cfg(test)]
        self.finger_inserts.fetch_add(1, Ordering::Relaxed);
        Some(None)
    }

    /// The root and its version; restarts if the root was replaced between
    /// loading it and reading its version.
    fn root<'g>(&self, g: &'g Guard) -> Step<(&'g Header, u64)> {
        let p = self.root.load(Ordering::Acquire);
        // SAFETY: the root is reachable and `g` is pinned.
        let node = unsafe { header(p, g) };
        let v = node.version.read()?;
        if self.root.load(Ordering::Acquire) != p {
            return Err(Restart);
        }
        Ok((node, v))
    }

    /// Descends to the leaf whose range holds `k`.
    fn find<'g>(&self, k: u128, g: &'g Guard) -> Step<Found<'g>> {
        let (mut node, mut v) = self.root(g)?;
        let mut range = (None, None);
        while !node.leaf {
            let inner = as_inner(node);
            let n = inner.count();
            let i = inner.child_index(k, n);
            inner.narrow(i, n, &mut range);
            let kid = inner.kid(i);
            inner.h.version.check(v)?;
            // SAFETY: `kid` was a child of `inner` at a validated version,
            // under the pinned `g`.
            let child = unsafe { header(kid, g) };
            let cv = child.version.read()?;
            // A split of the child that finished before `cv` was read shows
            // here, as it changed this node too.
            inner.h.version.check(v)?;
            node = child;
            v = cv;
        }
        Ok(Found {
            leaf: as_leaf(node),
            version: v,
            lo: range.0,
            hi: range.1,
        })
    }

    fn retry<T>(&self, mut f: impl FnMut(&Guard) -> Step<T>) -> T {
        let g = epoch::pin();
        loop {
            if let Ok(t) = f(&g) {
                return t;
            }
        }
    }

    pub fn get(&self, k: u128) -> Option<u64> {
        self.retry(|g| {
            let f = self.find(k, g)?;
            let n = f.leaf.count();
            let pos = f.leaf.keys.search(k, n, false);
            let got = (pos < n && f.leaf.keys.get(pos) == k).then(|| f.leaf.val(pos));
            f.leaf.h.version.check(f.version)?;
            Ok(got)
        })
    }

    /// Inserts unless present; returns the value already there if it was.
    pub fn insert(&self, k: u128, v: u64) -> Option<u64> {
        self.retry(|g| match self.try_finger(k, v, g) {
            Some(done) => Ok(done),
            None => self.try_insert(k, v, g),
        })
    }

    fn try_insert(&self, k: u128, val: u64, g: &Guard) -> Step<Option<u64>> {
        let (mut node, mut v) = self.root(g)?;
        let mut parent: Option<(&Inner, u64)> = None;
        // The leaf's key range as the path shows it (as in `find`).
        let mut range = (None, None);
        while !node.leaf {
            let inner = as_inner(node);
            let n = inner.count();
            if n == INNER_CAP {
                inner.h.version.check(v)?;
                self.split_locked(parent, node, v, |_| inner.split())?;
                return Err(Restart);
            }
            let i = inner.child_index(k, n);
            inner.narrow(i, n, &mut range);
            let kid = inner.kid(i);
            inner.h.version.check(v)?;
            // SAFETY: as in `find`.
            let child = unsafe { header(kid, g) };
            let cv = child.version.read()?;
            inner.h.version.check(v)?;
            parent = Some((inner, v));
            node = child;
            v = cv;
        }
        let (lo, hi) = range;
        let leaf = as_leaf(node);
        let n = leaf.count();
        let pos = leaf.keys.search(k, n, false);
        if pos < n && leaf.keys.get(pos) == k {
            let there = leaf.val(pos);
            leaf.h.version.check(v)?;
            return Ok(Some(there));
        }
        if n == LEAF_CAP {
            leaf.h.version.check(v)?;
            self.split_locked(parent, node, v, |_| {
                let right = leaf.split(pos);
                // SAFETY: just allocated by `split`, not shared yet.
                let r = as_leaf(unsafe { &*right });
                // An append's key starts the right leaf; otherwise the
                // right half's first key separates.
                let sep = if pos == n { k } else { r.keys.get(0) };
                // The halves' fences are the range the descent validated,
                // cut at `sep`: an unlink may have widened that range past
                // the leaf's own fences since they were set.
                r.set_fences(sep, hi);
                leaf.set_fences(lo.unwrap_or(0), Some(sep));
                // The key goes in while both halves are locked (the right
                // one is not linked yet).
                let into = if k >= sep { r } else { leaf };
                into.insert_at(into.keys.search(k, into.count(), false), k, val);
                self.note_finger(into, k);
                (sep, right)
            })?;
            return Ok(None);
        }
        leaf.h.version.upgrade(v)?;
        if let Some((p, pv)) = parent {
            if p.h.version.check(pv).is_err() {
                leaf.h.version.unlock();
                return Err(Restart);
            }
        }
        // Fences an unlink left narrower than the range widen to it, so
        // that the finger noted below holds this key's successors.
        if !leaf.fences_are(lo, hi) {
            leaf.set_fences(lo.unwrap_or(0), hi);
        }
        leaf.insert_at(pos, k, val);
        self.note_finger(leaf, k);
        leaf.h.version.unlock();
        Ok(None)
    }

    /// Locks `parent` (or, at the root, checks `node` is still the root) and
    /// `node` at the versions read, splits `node` with `split` (which returns
    /// the separator and the new right sibling), links the sibling, unlocks.
    fn split_locked(
        &self,
        parent: Option<(&Inner, u64)>,
        node: &Header,
        v: u64,
        split: impl FnOnce(&Header) -> (u128, *mut Header),
    ) -> Step<()> {
        if let Some((p, pv)) = parent {
            p.h.version.upgrade(pv)?;
        }
        let unlock_parent = || {
            if let Some((p, _)) = parent {
                p.h.version.unlock();
            }
        };
        if node.version.upgrade(v).is_err() {
            unlock_parent();
            return Err(Restart);
        }
        let p = node as *const Header as *mut Header;
        if parent.is_none() && self.root.load(Ordering::Acquire) != p {
            node.version.unlock();
            return Err(Restart);
        }
        let (sep, right) = split(node);
        match parent {
            Some((par, _)) => par.insert_child(sep, right),
            None => {
                let root = Inner::alloc();
                // SAFETY: just allocated, not shared until stored below.
                let r = as_inner(unsafe { &*root });
                r.keys.set(0, sep);
                r.kids[0].store(p, Ordering::Relaxed);
                r.kids[1].store(right, Ordering::Relaxed);
                r.h.count.store(1, Ordering::Relaxed);
                self.root.store(root, Ordering::Release);
            }
        }
        node.version.unlock();
        unlock_parent();
        Ok(())
    }

    /// Removes `k`; whether it was there.
    pub fn remove(&self, k: u128) -> bool {
        let (removed, emptied) = self.retry(|g| {
            let f = self.find(k, g)?;
            let n = f.leaf.count();
            let pos = f.leaf.keys.search(k, n, false);
            if pos >= n || f.leaf.keys.get(pos) != k {
                f.leaf.h.version.check(f.version)?;
                return Ok((false, false));
            }
            f.leaf.h.version.upgrade(f.version)?;
            f.leaf.remove_at(pos);
            let emptied = f.leaf.count() == 0;
            f.leaf.h.version.unlock();
            Ok((true, emptied))
        });
        if emptied {
            self.unlink_empty(k);
        }
        removed
    }

    /// Unlinks the leaf that holds `k` if it is empty, with the chain of
    /// one-child inner nodes above it, from the lowest ancestor that has
    /// two children or more.
    fn unlink_empty(&self, k: u128) {
        self.retry(|g| {
            // The path: each node, its version and the child taken.
            let mut path: [(*const Header, u64, usize); MAX_HEIGHT] =
                [(std::ptr::null(), 0, 0); MAX_HEIGHT];
            let (mut node, mut v) = self.root(g)?;
            let mut depth = 0;
            while !node.leaf {
                if depth == MAX_HEIGHT {
                    return Ok(());
                }
                let inner = as_inner(node);
                let n = inner.count();
                let i = inner.child_index(k, n);
                let kid = inner.kid(i);
                inner.h.version.check(v)?;
                path[depth] = (node, v, i);
                depth += 1;
                // SAFETY: as in `find`.
                let child = unsafe { header(kid, g) };
                let cv = child.version.read()?;
                inner.h.version.check(v)?;
                node = child;
                v = cv;
            }
            let leaf = as_leaf(node);
            let empty = leaf.count() == 0;
            leaf.h.version.check(v)?;
            if !empty {
                return Ok(());
            }
            // The lowest ancestor with two children or more.
            let mut top = None;
            for d in (0..depth).rev() {
                // SAFETY: on the path, under `g`.
                let a = as_inner(unsafe { &*path[d].0 });
                let n = a.count();
                a.h.version.check(path[d].1)?;
                if n >= 1 {
                    top = Some(d);
                    break;
                }
            }
            let Some(top) = top else {
                // The whole tree is this chain: it stays.
                return Ok(());
            };
            // Lock from the ancestor down to the leaf, at the versions read.
            let mut locked = 0;
            let mut ok = true;
            for (p, pv, _) in &path[top..depth] {
                // SAFETY: on the path, under `g`.
                if unsafe { &**p }.version.upgrade(*pv).is_err() {
                    ok = false;
                    break;
                }
                locked += 1;
            }
            if ok && leaf.h.version.upgrade(v).is_err() {
                ok = false;
            }
            if !ok {
                for (p, _, _) in &path[top..top + locked] {
                    // SAFETY: on the path, locked above.
                    unsafe { &**p }.version.unlock();
                }
                return Err(Restart);
            }
            // SAFETY: on the path, locked.
            let a = as_inner(unsafe { &*path[top].0 });
            a.remove_child(path[top].2);
            let collapse = top == 0 && a.count() == 0;
            a.h.version.unlock();
            for (p, _, _) in &path[top + 1..depth] {
                // SAFETY: unlinked above, locked; retired once.
                unsafe {
                    (**p).version.unlock_obsolete();
                    retire(*p as *mut Header, g);
                }
            }
            leaf.h.version.unlock_obsolete();
            // Every finger taken before this count may name the leaf.
            self.retired.fetch_add(1, Ordering::SeqCst);
            // SAFETY: unlinked above (from the tree, and from the fingers by
            // the count); retired once.
            unsafe { retire(node as *const Header as *mut Header, g) };
            if collapse {
                self.collapse_root(g);
            }
            Ok(())
        })
    }

    /// Replaces a root with no separator by its only child. One try: it
    /// fails only when the root changed meanwhile, and a root that gained a
    /// separator needs no collapse.
    fn collapse_root(&self, g: &Guard) {
        let Ok((node, v)) = self.root(g) else { return };
        if node.leaf {
            return;
        }
        let inner = as_inner(node);
        let (n, kid) = (inner.count(), inner.kid(0));
        if n != 0 || inner.h.version.upgrade(v).is_err() {
            return;
        }
        let p = node as *const Header as *mut Header;
        if self.root.load(Ordering::Acquire) != p {
            inner.h.version.unlock();
            return;
        }
        self.root.store(kid, Ordering::Release);
        inner.h.version.unlock_obsolete();
        // SAFETY: no longer reachable from the root; retired once.
        unsafe { retire(p, g) };
    }

    /// Calls `f(key, value)` for the entries in `[lo, hi]`, ascending or
    /// descending, until `f` returns false. Each entry handed out was in the
    /// tree when it was read, and an entry present for the whole scan is
    /// handed out. `f` must not change this tree.
    pub fn scan(
        &self,
        mut lo: u128,
        mut hi: u128,
        reverse: bool,
        mut f: impl FnMut(u128, u64) -> bool,
    ) {
        if lo > hi {
            return;
        }
        let g = epoch::pin();
        // Entries go out strictly in order, each once.
        let mut last: Option<u128> = None;
        let mut f = |k: u128, v: u64| {
            debug_assert!(
                last.is_none_or(|l| if reverse { k < l } else { k > l }),
                "scan handed out {k} after {last:?}"
            );
            last = Some(k);
            f(k, v)
        };
        loop {
            let more = if reverse {
                self.scan_leaf_rev(lo, &mut hi, &mut f, &g)
            } else {
                self.scan_leaf(&mut lo, hi, &mut f, &g)
            };
            // A restart goes on from the bound the scan had reached.
            if let Ok(false) = more {
                return;
            }
        }
    }

    /// Hands out the entries `>= *lo` of one leaf, advancing `*lo` past each;
    /// returns whether the scan goes on (in the next leaf or after a restart).
    fn scan_leaf(
        &self,
        lo: &mut u128,
        hi: u128,
        f: &mut impl FnMut(u128, u64) -> bool,
        g: &Guard,
    ) -> Step<bool> {
        let found = self.find(*lo, g)?;
        let leaf = found.leaf;
        let n = leaf.count();
        let mut j = leaf.keys.search(*lo, n, false);
        while j < n {
            let (k, v) = (leaf.keys.get(j), leaf.val(j));
            leaf.h.version.check(found.version)?;
            if k > hi || !f(k, v) || k == hi {
                return Ok(false);
            }
            *lo = k + 1;
            j += 1;
        }
        leaf.h.version.check(found.version)?;
        match found.hi {
            // `next` may be an ancestor's separator that an unlink since
            // removed (the leaf's range then reaches further): never move
            // back below what was handed out.
            Some(next) if next <= hi => {
                *lo = (*lo).max(next);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// As `scan_leaf`, descending: the entries `<= *hi` of one leaf.
    fn scan_leaf_rev(
        &self,
        lo: u128,
        hi: &mut u128,
        f: &mut impl FnMut(u128, u64) -> bool,
        g: &Guard,
    ) -> Step<bool> {
        let found = self.find(*hi, g)?;
        let leaf = found.leaf;
        let n = leaf.count();
        let mut j = leaf.keys.search(*hi, n, true);
        while j > 0 {
            j -= 1;
            let (k, v) = (leaf.keys.get(j), leaf.val(j));
            leaf.h.version.check(found.version)?;
            if k < lo || !f(k, v) || k == lo {
                return Ok(false);
            }
            *hi = k - 1;
        }
        leaf.h.version.check(found.version)?;
        match found.lo {
            // As in `scan_leaf`: never move back above what was handed out.
            Some(prev) if prev > lo => {
                *hi = (*hi).min(prev - 1);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// The number of entries, by a walk of every leaf (for tests and
    /// reports: it costs a scan of the whole tree).
    pub fn len(&self) -> usize {
        let mut n = 0;
        self.scan(0, u128::MAX, false, |_, _| {
            n += 1;
            true
        });
        n
    }

    pub fn is_empty(&self) -> bool {
        let mut any = false;
        self.scan(0, u128::MAX, false, |_, _| {
            any = true;
            false
        });
        !any
    }

    /// Nodes reachable from the root (leaves, inner nodes); needs no other
    /// user of the tree.
    #[cfg(test)]
    fn nodes(&mut self) -> (usize, usize) {
        fn walk(p: *mut Header, acc: &mut (usize, usize)) {
            // SAFETY: `&mut BTree`: no other thread uses the tree.
            let h = unsafe { &*p };
            if h.leaf {
                acc.0 += 1;
            } else {
                acc.1 += 1;
                let inner = as_inner(h);
                for i in 0..=inner.count() {
                    walk(inner.kid(i), acc);
                }
            }
        }
        let mut acc = (0, 0);
        walk(*self.root.get_mut(), &mut acc);
        acc
    }
}

impl Drop for BTree {
    fn drop(&mut self) {
        let mut stack = vec![*self.root.get_mut()];
        while let Some(p) = stack.pop() {
            // SAFETY: `&mut self`: no other thread can reach the tree; each
            // reachable node is visited once (a tree), unlinked ones were
            // retired to the epoch and are not reachable.
            let h = unsafe { &*p };
            if !h.leaf {
                let inner = as_inner(h);
                for i in 0..=inner.count() {
                    stack.push(inner.kid(i));
                }
            }
            // SAFETY: as above.
            unsafe { free(p) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_fill_their_leaves() {
        let mut t = BTree::new();
        let n = 30 * LEAF_CAP;
        for i in 0..n {
            assert_eq!(t.insert((i as u128) << 64, i as u64), None);
        }
        let (leaves, _) = t.nodes();
        assert_eq!(leaves, n / LEAF_CAP, "appended leaves are full");
        assert_eq!(t.len(), n);
    }

    #[test]
    fn a_queue_keeps_few_leaves() {
        // Insert at the tail, remove at the head, as a district's new orders.
        let mut t = BTree::new();
        let window = 3 * LEAF_CAP as u128;
        for i in 0..200_000u128 {
            t.insert(i, i as u64);
            if i >= window {
                assert!(t.remove(i - window));
            }
        }
        assert_eq!(t.len(), window as usize);
        let (leaves, inners) = t.nodes();
        assert!(
            leaves <= 6 && inners <= 3,
            "{leaves} leaves, {inners} inner nodes for {window} keys"
        );
        let mut got = vec![];
        t.scan(0, u128::MAX, true, |k, _| {
            got.push(k);
            true
        });
        let want: Vec<u128> = (200_000 - window..200_000).rev().collect();
        assert_eq!(got, want);
    }

    #[test]
    fn removing_everything_leaves_one_chain() {
        let mut t = BTree::new();
        for i in 0..10_000u128 {
            t.insert(i * 7919 % 10_007, i as u64);
        }
        for i in 0..10_000u128 {
            assert!(t.remove(i * 7919 % 10_007));
        }
        assert!(t.is_empty());
        let (leaves, inners) = t.nodes();
        assert!(
            leaves == 1 && inners <= 1,
            "{leaves} leaves, {inners} inner nodes"
        );
        t.insert(5, 5);
        assert_eq!(t.get(5), Some(5));
    }
}

#[cfg(test)]
mod finger_tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Appends under many prefixes, interleaved, with the oldest keys of
    /// each removed (leaves emptied and retired, fingers dropped) and
    /// re-inserted: the tree holds what a `BTreeMap` fed the same holds, and
    /// every key sits in the leaf a descent finds (the scan sees them all).
    #[test]
    fn inserts_through_fingers_land_where_a_descent_would() {
        let t = BTree::new();
        let mut model = BTreeMap::new();
        let key = |p: u128, o: u128| (p << 96) | (o << 64);
        for o in 0..2_000u128 {
            for p in 0..40u128 {
                let k = key(p, o);
                assert_eq!(t.insert(k, o as u64), model.insert(k, o as u64));
                if o >= 100 {
                    let old = key(p, o - 100);
                    assert_eq!(t.remove(old), model.remove(&old).is_some());
                }
                if o % 97 == 0 {
                    // A key below the prefix's tail: not an append.
                    let mid = key(p, o / 2) | 1;
                    assert_eq!(t.insert(mid, 7), model.insert(mid, 7));
                }
            }
        }
        assert!(t.retired.load(Ordering::SeqCst) > 0, "leaves were retired");
        for (k, v) in &model {
            assert_eq!(t.get(*k), Some(*v), "{k:#x}");
        }
        let mut got = vec![];
        t.scan(0, u128::MAX, false, |k, v| {
            got.push((k, v));
            true
        });
        let want: Vec<(u128, u64)> = model.into_iter().collect();
        assert_eq!(got, want);
    }

    /// Appends past the end of the tree after its last leaf was emptied
    /// and unlinked (its range, up to no bound, went to the leaf before it,
    /// whose upper fence stayed where it was): every append but the one
    /// that opens each new leaf goes in through the finger.
    /// The key of order `o` of one district.
    fn order(o: usize) -> u128 {
        (o as u128) << 64
    }

    /// Three full leaves of appended keys, the third then emptied and
    /// unlinked: its range, up to no bound, went to the second leaf.
    fn last_of_three_leaves_unlinked() -> BTree {
        let t = BTree::new();
        let full = 3 * LEAF_CAP;
        for o in 0..full {
            assert_eq!(t.insert(order(o), o as u64), None);
        }
        for o in 2 * LEAF_CAP..full {
            assert!(t.remove(order(o)));
        }
        assert_eq!(t.retired.load(Ordering::SeqCst), 1, "one leaf unlinked");
        t
    }

    #[test]
    fn appends_after_an_unlink_take_the_finger() {
        let t = last_of_three_leaves_unlinked();
        let key = order;
        let appends = 10 * LEAF_CAP;
        let before = t.finger_inserts.load(Ordering::Relaxed);
        for o in 2 * LEAF_CAP..2 * LEAF_CAP + appends {
            assert_eq!(t.insert(key(o), o as u64), None);
        }
        let hits = (t.finger_inserts.load(Ordering::Relaxed) - before) as usize;
        assert_eq!(
            hits,
            appends - appends / LEAF_CAP,
            "appends through the finger, of {appends}"
        );
        assert_eq!(t.len(), 2 * LEAF_CAP + appends);
    }

    /// As above, but the widened leaf has room: the first append descends
    /// into it and widens its fences, so the next ones take the finger.
    #[test]
    fn a_descent_widens_fences_an_unlink_left_narrow() {
        let t = last_of_three_leaves_unlinked();
        let key = order;
        // Room for three appends in the second leaf.
        for o in LEAF_CAP..LEAF_CAP + 3 {
            assert!(t.remove(key(o)));
        }
        let before = t.finger_inserts.load(Ordering::Relaxed);
        for o in 2 * LEAF_CAP..2 * LEAF_CAP + 3 {
            assert_eq!(t.insert(key(o), o as u64), None);
        }
        let hits = t.finger_inserts.load(Ordering::Relaxed) - before;
        assert_eq!(
            hits, 2,
            "the first append descends, the next two take the finger"
        );
    }

    /// An append after an append goes in through the finger.
    #[test]
    fn an_append_takes_the_finger() {
        let t = BTree::new();
        t.insert(1 << 64, 1);
        let g = epoch::pin();
        assert!(matches!(t.try_finger(2 << 64, 2, &g), Some(None)));
        assert_eq!(t.get(2 << 64), Some(2));
    }

    /// Threads append under their own and shared prefixes while another
    /// removes the oldest keys (retiring emptied leaves) and scans: no key
    /// is lost or doubled.
    #[test]
    fn fingers_stay_sound_beside_removals_on_other_threads() {
        let t = std::sync::Arc::new(BTree::new());
        let per = 20_000u128;
        let writers: Vec<_> = (0..3u128)
            .map(|w| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for o in 0..per {
                        // Prefix w alone, prefix 9 shared by every writer.
                        let p = if o % 4 == 0 { 9 } else { w };
                        let k = (p << 96) | (o << 64) | w;
                        assert_eq!(t.insert(k, o as u64), None);
                    }
                })
            })
            .collect();
        let remover = {
            let t = t.clone();
            std::thread::spawn(move || {
                let mut removed = 0usize;
                for o in 0..per / 2 {
                    for w in 0..3u128 {
                        let p = if o % 4 == 0 { 9 } else { w };
                        let k = (p << 96) | (o << 64) | w;
                        while t.get(k).is_none() {
                            std::thread::yield_now();
                        }
                        assert!(t.remove(k));
                        removed += 1;
                    }
                    if o % 1000 == 0 {
                        let mut last = None;
                        t.scan(0, u128::MAX, false, |k, _| {
                            assert!(last.is_none_or(|l| k > l));
                            last = Some(k);
                            true
                        });
                    }
                }
                removed
            })
        };
        for w in writers {
            w.join().unwrap();
        }
        let removed = remover.join().unwrap();
        assert_eq!(t.len(), 3 * per as usize - removed);
        for w in 0..3u128 {
            for o in per / 2..per {
                let p = if o % 4 == 0 { 9 } else { w };
                assert_eq!(t.get((p << 96) | (o << 64) | w), Some(o as u64));
            }
        }
    }
}
