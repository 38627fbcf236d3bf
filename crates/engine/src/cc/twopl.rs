//! Two-phase locking with `no_wait` or `wait_die` conflict handling.
//!
//! Each row has a lock word: bit 63 is the exclusive bit, bits 48..63 count
//! shared holders, bits 0..48 hold the smallest (oldest) wait-die timestamp
//! among holders since the lock was last free. That minimum can be stale (an old
//! holder may have left), which only makes a requester die more often, never
//! wait for an older transaction, so wait-die stays deadlock-free.
//!
//! Locks are taken during execution (shared for reads, exclusive for
//! read-for-update and inserts; a shared lock on a written row is upgraded at
//! commit) and released after the new versions are installed: a written
//! row's as it is installed, the read locks once every write is (see the
//! `txn` module's "Locks and versions by operation").
//!
//! On a single-worker island (`concurrent == false`) one thread alone runs
//! every transaction, its own and the branches other islands send it, so the
//! lock words are logical locks between the transactions it interleaves, and
//! no other thread ever writes them. Taking and dropping them is then a plain
//! load and store: a locked compare-and-swap would cost the same logic a full
//! barrier, which stops the core from overlapping the cache misses of the rows
//! a transaction reads one after another (it was most of the time of a remote
//! read batch). The hash index makes the same distinction.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{backoff, publish, CcKind, ConcurrencyControl, Held, Observed, TxnMeta, WriteLock};
use crate::storage::sole::SoleUser;
use crate::storage::{RowId, Table, PRESENT};
use crate::AbortReason;

/// What a [`SoleUser`] check of the lock words names.
const PLAIN: &str = "the lock words of a single-worker island (plain stores)";

const EXCL: u64 = 1 << 63;
const ONE_SHARED: u64 = 1 << 48;
const COUNT_MASK: u64 = 0x7fff << 48;
const TS_MASK: u64 = (1 << 48) - 1;

pub struct TwoPl {
    pub wait_die: bool,
    /// More than one thread runs transactions on the island (see the module
    /// documentation).
    pub concurrent: bool,
    /// Without `concurrent`, checks (in debug builds) that the plain stores
    /// to lock words come from one thread at a time.
    pub sole: SoleUser,
}

#[inline]
fn is_free(w: u64) -> bool {
    w & (EXCL | COUNT_MASK) == 0
}

impl TwoPl {
    #[inline]
    fn lock_word(t: &Table, rid: RowId) -> &AtomicU64 {
        &t.words(rid)[crate::storage::arena::W_LOCK]
    }

    /// Conflict: abort (no_wait), wait (wait_die, older than every holder), or die.
    #[inline]
    fn conflict(&self, w: u64, me: &TxnMeta, spins: &mut u32) -> Result<(), AbortReason> {
        if !self.wait_die {
            return Err(AbortReason::LockConflict);
        }
        if (me.ts & TS_MASK) < (w & TS_MASK) {
            *spins += 1;
            backoff(*spins);
            Ok(())
        } else {
            Err(AbortReason::WaitDie)
        }
    }

    fn acquire(&self, l: &AtomicU64, exclusive: bool, me: &TxnMeta) -> Result<(), AbortReason> {
        let my_ts = me.ts & TS_MASK;
        let mut spins = 0;
        loop {
            let w = l.load(Ordering::Acquire);
            let new = if is_free(w) {
                if exclusive {
                    EXCL | my_ts
                } else {
                    ONE_SHARED | my_ts
                }
            } else if !exclusive && w & EXCL == 0 && w & COUNT_MASK != COUNT_MASK {
                (w + ONE_SHARED) & !TS_MASK | (w & TS_MASK).min(my_ts)
            } else {
                self.conflict(w, me, &mut spins)?;
                continue;
            };
            if self.cas(l, w, new) {
                return Ok(());
            }
        }
    }

    /// Replaces the lock word `w` by `new`: atomically when several threads
    /// share the island, a plain store when its one thread owns every word.
    #[inline]
    fn cas(&self, l: &AtomicU64, w: u64, new: u64) -> bool {
        if self.concurrent {
            l.compare_exchange_weak(w, new, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        } else {
            let _in = self.sole.enter(PLAIN);
            l.store(new, Ordering::Relaxed);
            true
        }
    }

    fn upgrade(&self, l: &AtomicU64, me: &TxnMeta) -> Result<(), AbortReason> {
        let my_ts = me.ts & TS_MASK;
        let mut spins = 0;
        loop {
            let w = l.load(Ordering::Acquire);
            debug_assert!(
                w & EXCL == 0 && w & COUNT_MASK != 0,
                "upgrade without a shared lock"
            );
            if w & COUNT_MASK == ONE_SHARED {
                if self.cas(l, w, EXCL | my_ts) {
                    return Ok(());
                }
                continue;
            }
            // Other readers hold it. Wait only if we are the oldest of all holders.
            if !self.wait_die {
                return Err(AbortReason::LockConflict);
            }
            if (w & TS_MASK) == my_ts {
                spins += 1;
                backoff(spins);
            } else {
                return Err(AbortReason::WaitDie);
            }
        }
    }

    fn unlock(&self, l: &AtomicU64, held: Held) {
        match held {
            Held::Exclusive => l.store(TS_MASK, Ordering::Release),
            Held::Shared => {
                let mut w = l.load(Ordering::Relaxed);
                loop {
                    let new = if w & COUNT_MASK == ONE_SHARED {
                        TS_MASK
                    } else {
                        w - ONE_SHARED
                    };
                    if !self.concurrent {
                        let _in = self.sole.enter(PLAIN);
                        l.store(new, Ordering::Release);
                        return;
                    }
                    match l.compare_exchange_weak(w, new, Ordering::AcqRel, Ordering::Relaxed) {
                        Ok(_) => return,
                        Err(cur) => w = cur,
                    }
                }
            }
            Held::Nothing | Held::VersionLock => {}
        }
    }
}

impl ConcurrencyControl for TwoPl {
    fn is_locked(&self, t: &Table, rid: RowId, exclusive: bool) -> bool {
        let w = Self::lock_word(t, rid).load(Ordering::Relaxed);
        if exclusive {
            !is_free(w)
        } else {
            // Readers share: only a writer, or a full reader count, conflicts.
            w & EXCL != 0 || w & COUNT_MASK == COUNT_MASK
        }
    }

    fn kind(&self) -> CcKind {
        if self.wait_die {
            CcKind::WaitDie
        } else {
            CcKind::NoWait
        }
    }

    fn read(
        &self,
        t: &Table,
        rid: RowId,
        key: u64,
        out: &mut [u64],
        for_update: bool,
        me: &TxnMeta,
    ) -> Result<(Observed, Held), AbortReason> {
        let l = Self::lock_word(t, rid);
        self.acquire(l, for_update, me)?;
        let held = if for_update {
            Held::Exclusive
        } else {
            Held::Shared
        };
        let v = t.version(rid).load(Ordering::Acquire);
        if v & PRESENT == 0 || t.key_word(rid).load(Ordering::Acquire) != key {
            // Deleted (and maybe reused) between the index lookup and the lock.
            self.unlock(l, held);
            return Err(AbortReason::LockConflict);
        }
        t.copy_out(rid, out);
        Ok((
            Observed {
                version: v,
                present: true,
            },
            held,
        ))
    }

    fn claim_insert(&self, t: &Table, rid: RowId, _: &TxnMeta) -> Held {
        // The slot is fresh or came from this worker's free list; a reader that
        // raced with its delete may hold it for an instant.
        let l = Self::lock_word(t, rid);
        let mut spins = 0;
        loop {
            let w = l.load(Ordering::Acquire);
            if is_free(w) && self.cas(l, w, EXCL) {
                return Held::Exclusive;
            }
            spins += 1;
            backoff(spins);
        }
    }

    fn lock_write_set(
        &self,
        tables: &[Table],
        rows: &mut [WriteLock],
        me: &TxnMeta,
    ) -> Result<(), AbortReason> {
        for r in rows.iter_mut() {
            match r.held {
                Held::Exclusive => {}
                Held::Shared => {
                    self.upgrade(Self::lock_word(&tables[r.table as usize], r.rid), me)?;
                    r.held = Held::Exclusive;
                }
                Held::Nothing | Held::VersionLock => {
                    self.acquire(Self::lock_word(&tables[r.table as usize], r.rid), true, me)?;
                    r.held = Held::Exclusive;
                }
            }
        }
        Ok(())
    }

    fn validate_read(&self, _: &Table, _: RowId, _: &Observed, _: Held) -> bool {
        true
    }

    fn install(&self, t: &Table, rid: RowId, new_tid: u64, image: Option<&[u64]>, held: Held) {
        publish(t, rid, new_tid, image, true);
        self.unlock(Self::lock_word(t, rid), held);
    }

    fn release(&self, t: &Table, rid: RowId, held: Held) {
        self.unlock(Self::lock_word(t, rid), held);
    }
}
