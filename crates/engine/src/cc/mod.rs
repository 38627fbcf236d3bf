//! Concurrency control: one trait, one implementation chosen when the island opens.
//!
//! - [`NoCc`] (`none`): for an island with exactly one worker thread. No locks,
//!   no latches, no read-modify-write atomics: the paper's fine-grained case.
//! - [`TwoPl`] (`no_wait`, `wait_die`): row locks taken during execution and
//!   held to commit.
//! - [`Occ`] (`occ`): Silo-style: reads record versions, commit locks the write
//!   set, validates the read set, installs.
//!
//! Every scheme buffers writes in the transaction and installs them at commit,
//! so abort never has to undo a row in place. Point misses and range scans are
//! validated by the transaction layer (`txn`) for every scheme except `none`:
//! they are the phantom protection that row locks and row versions cannot give.

mod occ;
mod twopl;

pub use occ::Occ;
pub use twopl::TwoPl;

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::Ordering;

use crate::storage::sole::SoleUser;
use crate::storage::{make_word, RowId, Table, LOCKED, PRESENT};
use crate::AbortReason;

/// The schemes, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CcKind {
    None,
    NoWait,
    WaitDie,
    Occ,
}

impl CcKind {
    pub const NAMES: &'static str = "none, no_wait, wait_die, occ";

    pub fn name(self) -> &'static str {
        match self {
            CcKind::None => "none",
            CcKind::NoWait => "no_wait",
            CcKind::WaitDie => "wait_die",
            CcKind::Occ => "occ",
        }
    }

    /// The scheme object for this kind. `concurrent` is false when one thread
    /// alone runs the island's transactions (a single-worker island): its lock
    /// words then need no atomic read-modify-write (see [`TwoPl`]).
    pub fn build(self, concurrent: bool) -> Box<dyn ConcurrencyControl> {
        match self {
            CcKind::None => Box::new(NoCc::default()),
            CcKind::NoWait => Box::new(TwoPl {
                wait_die: false,
                concurrent,
                sole: SoleUser::default(),
            }),
            CcKind::WaitDie => Box::new(TwoPl {
                wait_die: true,
                concurrent,
                sole: SoleUser::default(),
            }),
            CcKind::Occ => Box::new(Occ),
        }
    }
}

impl fmt::Display for CcKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CcKind {
    type Err = String;
    fn from_str(s: &str) -> Result<CcKind, String> {
        match s {
            "none" => Ok(CcKind::None),
            "no_wait" | "nowait" | "no-wait" => Ok(CcKind::NoWait),
            "wait_die" | "waitdie" | "wait-die" => Ok(CcKind::WaitDie),
            "occ" | "silo" => Ok(CcKind::Occ),
            _ => Err(format!(
                "unknown concurrency control '{s}' (valid: {})",
                CcKind::NAMES
            )),
        }
    }
}

/// What a transaction holds on a row it accessed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    Nothing,
    /// 2PL shared lock.
    Shared,
    /// 2PL exclusive lock.
    Exclusive,
    /// OCC: the version word's lock bit (commit time, or an uncommitted insert).
    VersionLock,
}

impl Held {
    /// Whether this is what a write needs held at commit: 2PL's exclusive
    /// lock, or OCC's version lock. (`none` holds nothing and needs nothing:
    /// one thread runs its island.)
    #[inline]
    pub fn is_write_lock(self) -> bool {
        matches!(self, Held::Exclusive | Held::VersionLock)
    }
}

/// The transaction's identity as the schemes need it.
#[derive(Clone, Copy, Debug)]
pub struct TxnMeta {
    /// Wait-die timestamp: smaller is older. Kept across retries of one transaction.
    pub ts: u64,
}

/// A row as read: its version word, and whether it is present with the expected key.
#[derive(Clone, Copy, Debug)]
pub struct Observed {
    pub version: u64,
    pub present: bool,
}

/// The interface between the transaction layer and a scheme.
pub trait ConcurrencyControl: Send + Sync {
    fn kind(&self) -> CcKind;

    /// Reads row `rid` (expected to hold `key`) into `out`. For `for_update`, a
    /// 2PL scheme takes the exclusive lock right away.
    fn read(
        &self,
        t: &Table,
        rid: RowId,
        key: u64,
        out: &mut [u64],
        for_update: bool,
        me: &TxnMeta,
    ) -> Result<(Observed, Held), AbortReason>;

    /// Takes what the scheme needs on a freshly allocated slot that this
    /// transaction is inserting, *before* the slot is indexed. The slot is absent.
    fn claim_insert(&self, t: &Table, rid: RowId, me: &TxnMeta) -> Held;

    /// Commit phase 1: make sure every row the transaction writes is held
    /// exclusively. `rows` are (table, rid, held) of the write set; `held` is updated.
    fn lock_write_set(
        &self,
        tables: &[Table],
        rows: &mut [WriteLock],
        me: &TxnMeta,
    ) -> Result<(), AbortReason>;

    /// Commit phase 2: checks that the rows read are unchanged (OCC only).
    fn validate_read(&self, t: &Table, rid: RowId, seen: &Observed, held: Held) -> bool;

    /// Writes a row's new image (if any), publishes its new version word
    /// (present or absent) and releases what the transaction held on it.
    fn install(&self, t: &Table, rid: RowId, new_tid: u64, image: Option<&[u64]>, held: Held);

    /// Releases a row without changing it (read-only rows at commit, every row at abort).
    fn release(&self, t: &Table, rid: RowId, held: Held);

    /// Whether a request for the row (`exclusive`, or shared) would conflict
    /// with its holders now. A hint, read without synchronising with them: a
    /// transaction that aborted on the row's lock retries once this reads
    /// false instead of after blind backoffs (see `executor::run`). The default
    /// says false (retry at once), right for a scheme whose reads never
    /// conflict on a lock (OCC validates at commit instead).
    fn is_locked(&self, t: &Table, rid: RowId, exclusive: bool) -> bool {
        let _ = (t, rid, exclusive);
        false
    }
}

/// A write-set row during commit.
#[derive(Clone, Copy, Debug)]
pub struct WriteLock {
    pub table: u16,
    pub rid: RowId,
    pub held: Held,
    /// The version observed when the row was read (for OCC: validated while locking).
    pub seen: u64,
    /// Whether the transaction inserted this row (its version lock is already held).
    pub inserted: bool,
}

/// A single-worker island: nothing to lock, nothing can change under the worker.
#[derive(Default)]
pub struct NoCc {
    /// Checks (in debug builds) that one thread at a time installs rows.
    sole: SoleUser,
}

impl ConcurrencyControl for NoCc {
    fn kind(&self) -> CcKind {
        CcKind::None
    }

    #[inline]
    fn read(
        &self,
        t: &Table,
        rid: RowId,
        key: u64,
        out: &mut [u64],
        _: bool,
        _: &TxnMeta,
    ) -> Result<(Observed, Held), AbortReason> {
        let v = t.version(rid).load(Ordering::Relaxed);
        let present = v & PRESENT != 0 && t.key_word(rid).load(Ordering::Relaxed) == key;
        if present {
            t.copy_out(rid, out);
        }
        Ok((
            Observed {
                version: v,
                present,
            },
            Held::Nothing,
        ))
    }

    fn claim_insert(&self, _: &Table, _: RowId, _: &TxnMeta) -> Held {
        Held::Nothing
    }

    fn lock_write_set(
        &self,
        _: &[Table],
        _: &mut [WriteLock],
        _: &TxnMeta,
    ) -> Result<(), AbortReason> {
        Ok(())
    }

    fn validate_read(&self, _: &Table, _: RowId, _: &Observed, _: Held) -> bool {
        true
    }

    #[inline]
    fn install(&self, t: &Table, rid: RowId, new_tid: u64, image: Option<&[u64]>, _: Held) {
        // Plain stores only; the lock bit marks the copy for concurrent
        // checkpoint readers (a seqlock), it excludes no writer.
        let _in = self
            .sole
            .enter("the rows of a `none` island (plain stores)");
        publish(t, rid, new_tid, image, true);
    }

    fn release(&self, _: &Table, _: RowId, _: Held) {}
}

/// Reads a row without locks, consistently: retries while the version is locked
/// or changes during the copy (a seqlock read). Used by OCC reads.
#[inline]
pub(crate) fn stable_read(t: &Table, rid: RowId, key: u64, out: &mut [u64]) -> Observed {
    seqlock_read(t, rid, key, out, false)
}

/// `absent_if_claimed`: a slot locked while absent (an uncommitted insert)
/// reads as absent instead of being waited for.
#[inline]
fn seqlock_read(
    t: &Table,
    rid: RowId,
    key: u64,
    out: &mut [u64],
    absent_if_claimed: bool,
) -> Observed {
    let mut spins = 0u32;
    loop {
        let v1 = t.version(rid).load(Ordering::Acquire);
        if absent_if_claimed && v1 & LOCKED != 0 && v1 & PRESENT == 0 {
            return Observed {
                version: v1,
                present: false,
            };
        }
        if v1 & LOCKED != 0 {
            spins += 1;
            backoff(spins);
            continue;
        }
        let k = t.key_word(rid).load(Ordering::Acquire);
        if v1 & PRESENT != 0 && k == key {
            t.copy_out(rid, out);
        }
        std::sync::atomic::fence(Ordering::Acquire);
        let v2 = t.version(rid).load(Ordering::Acquire);
        if v1 == v2 {
            return Observed {
                version: v1,
                present: v1 & PRESENT != 0 && k == key,
            };
        }
    }
}

/// A read-committed read ([`crate::txn::Txn::read_committed`]): the row's
/// committed image, without a lock. As [`stable_read`], except that a slot
/// locked while absent (an insert not yet committed, under OCC) reads as
/// absent at once instead of waiting for its commit.
#[inline]
pub(crate) fn committed_read(t: &Table, rid: RowId, key: u64, out: &mut [u64]) -> Observed {
    seqlock_read(t, rid, key, out, true)
}

#[inline]
pub(crate) fn backoff(spins: u32) {
    if spins < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// Writes `image` into the row (if any) and publishes the new version word.
/// With `mark`, first sets the lock bit so that seqlock readers (OCC readers,
/// the checkpointer) never take a half-written row for a stable one.
#[inline]
pub(crate) fn publish(t: &Table, rid: RowId, new_tid: u64, image: Option<&[u64]>, mark: bool) {
    let w = t.version(rid);
    if let Some(img) = image {
        if mark {
            w.store(w.load(Ordering::Relaxed) | LOCKED, Ordering::Relaxed);
            std::sync::atomic::fence(Ordering::Release);
        }
        t.copy_in(rid, img);
    }
    w.store(make_word(new_tid, image.is_some()), Ordering::Release);
}
