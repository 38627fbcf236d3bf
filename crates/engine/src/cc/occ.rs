//! Optimistic concurrency control in the style of Silo.
//!
//! Execution reads rows without locks (a seqlock read of version + data) and
//! remembers the versions seen. Commit locks the write set in a global order
//! (table, row id), validates that every row read still has the version seen and
//! is not locked by another transaction, and installs the new images with a new
//! version, which also releases the locks. An uncommitted insert holds its new
//! slot's version lock from insert to commit, so others see it as absent and
//! fail validation if it commits.

use std::sync::atomic::Ordering;

use super::{
    backoff, publish, stable_read, CcKind, ConcurrencyControl, Held, Observed, TxnMeta, WriteLock,
};
use crate::storage::{RowId, Table, LOCKED, PRESENT};
use crate::AbortReason;

/// Spins before a commit-time lock attempt gives up (the holder is committing,
/// so this is short unless it was descheduled).
const LOCK_SPINS: u32 = 2_000;

pub struct Occ;

impl ConcurrencyControl for Occ {
    fn kind(&self) -> CcKind {
        CcKind::Occ
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
        let v = t.version(rid).load(Ordering::Acquire);
        if v & LOCKED != 0 && v & PRESENT == 0 {
            // Another transaction's uncommitted insert: absent for now; validation
            // fails if it commits before we do.
            return Ok((
                Observed {
                    version: v & !LOCKED,
                    present: false,
                },
                Held::Nothing,
            ));
        }
        Ok((stable_read(t, rid, key, out), Held::Nothing))
    }

    fn claim_insert(&self, t: &Table, rid: RowId, _: &TxnMeta) -> Held {
        let w = t.version(rid);
        let v = w.load(Ordering::Acquire);
        debug_assert_eq!(v & PRESENT, 0, "claiming a present slot");
        w.store((v & !PRESENT) | LOCKED, Ordering::Release);
        Held::VersionLock
    }

    fn lock_write_set(
        &self,
        tables: &[Table],
        rows: &mut [WriteLock],
        _: &TxnMeta,
    ) -> Result<(), AbortReason> {
        rows.sort_unstable_by_key(|r| (r.table, r.rid));
        for r in rows.iter_mut() {
            if r.held == Held::VersionLock {
                continue;
            }
            let w = tables[r.table as usize].version(r.rid);
            let mut spins = 0;
            loop {
                let v = w.load(Ordering::Acquire);
                if v & LOCKED == 0 {
                    if v != r.seen {
                        return Err(AbortReason::ReadValidation);
                    }
                    if w.compare_exchange_weak(v, v | LOCKED, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                    {
                        r.held = Held::VersionLock;
                        break;
                    }
                    continue;
                }
                spins += 1;
                if spins > LOCK_SPINS {
                    return Err(AbortReason::WriteLocked);
                }
                backoff(spins);
            }
        }
        Ok(())
    }

    #[inline]
    fn validate_read(&self, t: &Table, rid: RowId, seen: &Observed, held: Held) -> bool {
        let v = t.version(rid).load(Ordering::Acquire);
        if held == Held::VersionLock {
            v & !LOCKED == seen.version
        } else {
            v == seen.version
        }
    }

    #[inline]
    fn install(&self, t: &Table, rid: RowId, new_tid: u64, image: Option<&[u64]>, held: Held) {
        debug_assert_eq!(held, Held::VersionLock);
        publish(t, rid, new_tid, image, false);
    }

    #[inline]
    fn release(&self, t: &Table, rid: RowId, held: Held) {
        if held == Held::VersionLock {
            let w = t.version(rid);
            w.store(w.load(Ordering::Relaxed) & !LOCKED, Ordering::Release);
        }
    }
}
