//! Redo records: what a commit or a branch's prepare appends to the island's
//! log buffer (a row update as patches of its changed words when that is
//! smaller), and handing the buffer to the log writer and waiting for it.

use std::sync::atomic::Ordering;

use super::access::Kind;
use super::{Committed, Txn, LOCAL};
use crate::phases::{self, Phase};
use crate::storage::{RowId, Table};
use crate::wal::BatchSeq;
use crate::{Abort, Error};

impl Txn {
    /// Appends the transaction's local writes to an open commit or prepare record.
    pub(super) fn log_writes(&self, log: &mut crate::wal::LogBuffer) {
        let tables = &self.shared.catalog.tables;
        for a in &self.acc {
            if a.island != LOCAL {
                continue;
            }
            let t = &tables[a.table as usize];
            if a.kind == Kind::Delete {
                log.delete(a.table, a.key);
            } else if a.dirty {
                let off = a.off as usize;
                let img = &self.buf[off..off + t.schema.row_words()];
                if a.kind == Kind::Read {
                    log_update(log, t, a.rid, a.key, img);
                } else {
                    log.put(a.table, a.key, crate::storage::schema::row_bytes(img));
                }
            }
        }
    }

    /// Appends the prepared branch's Prepare record (its redo writes and tid)
    /// to the island's log; returns the batch it will be in (0 without a log).
    /// The batch stays pinned against checkpoint truncation until the branch
    /// is decided.
    pub(crate) fn log_prepare(&mut self, gtid: u64) -> BatchSeq {
        let shared = &*self.shared;
        let Some((tid, _)) = self.prepared else {
            debug_assert!(false, "log_prepare of an unprepared branch");
            return 0;
        };
        if shared.wal.is_none() {
            return 0;
        }
        let prev = phases::switch(Phase::Logging);
        let mut slot = shared.log.lock();
        slot.buf.prepare_begin(gtid, tid);
        self.log_writes(&mut slot.buf);
        slot.buf.record_end();
        let seq = slot.next_seq;
        slot.pin(seq);
        drop(slot);
        phases::switch(prev);
        self.prepared = Some((tid, seq));
        seq
    }

    /// Hands the island's buffered log records to the log writer. Any worker
    /// may do it; commits are durable once [`Txn::durable_batch`] reaches their
    /// [`Committed::ack`]. Returns the batch submitted, if there was anything.
    pub fn flush_log(&mut self) -> Result<Option<BatchSeq>, Error> {
        let Some(w) = &self.shared.wal else {
            return Ok(None);
        };
        self.unflushed_bytes = 0;
        self.shared.log.lock().hand_off(w)
    }

    /// Blocks until batch `seq` is durable (`sync`) or written (`async`).
    /// For callers that acknowledge one transaction at a time; the executor
    /// loop polls the island's durable batch instead and never blocks.
    pub fn wait_durable(&self, seq: BatchSeq) -> Result<(), Error> {
        match &self.shared.wal {
            Some(w) => w.wait_durable(seq).map_err(Error::from),
            None => Ok(()),
        }
    }

    /// Commits and, if the transaction wrote to the log, waits until it is
    /// durable: the simple, one-at-a-time acknowledgement.
    pub fn commit_durable(&mut self) -> Result<Committed, Abort> {
        let c = self.commit()?;
        if c.ack > 0 {
            self.flush_log()?;
            self.wait_durable(c.ack)?;
        }
        Ok(c)
    }

    /// The island's log failure, if its log has failed (it then refuses writes).
    pub fn log_failure(&self) -> Option<Error> {
        self.shared.log_failure()
    }

    /// Bytes of log records buffered and not yet handed to the log.
    pub fn log_pending_bytes(&self) -> usize {
        self.unflushed_bytes
    }

    /// The newest batch known durable (in `async` mode: written).
    #[inline]
    pub fn durable_batch(&self) -> BatchSeq {
        match &self.shared.wal {
            Some(w) => w.durable_seq(),
            None => BatchSeq::MAX,
        }
    }
}

/// Logs an update of stored row `rid` to `img`: as patches of the runs of
/// words that differ from the stored row, when they are smaller than the
/// whole row (TPC-C's updates change a few counters of rows of 40-80 words:
/// the log, and so the group commit's write and fdatasync, shrink). Runs
/// closer than [`PATCH_GAP_WORDS`] are one patch (a patch header costs more).
/// The caller holds the row locked (or validated, under OCC) and has not
/// installed it, so the stored row is the image this change applies to, as
/// it will be in recovery when the patches are replayed.
fn log_update(log: &mut crate::wal::LogBuffer, t: &Table, rid: RowId, key: u64, img: &[u64]) {
    let stored = t.data(rid);
    let differs = |i: usize| img[i] != stored[i].load(Ordering::Relaxed);
    // Runs [start, end) of changed words, at most a few per row.
    let mut runs = [(0usize, 0usize); MAX_PATCHES];
    let mut n = 0;
    let mut patch_bytes = 0;
    let mut i = 0;
    while i < img.len() {
        if !differs(i) {
            i += 1;
            continue;
        }
        let start = i;
        let mut end = i + 1;
        let mut j = end;
        while j < img.len() && j < end + PATCH_GAP_WORDS + 1 {
            if differs(j) {
                end = j + 1;
            }
            j += 1;
        }
        if n == MAX_PATCHES {
            n = usize::MAX; // too scattered: the whole row
            break;
        }
        runs[n] = (start, end);
        n += 1;
        patch_bytes += PATCH_HEADER_BYTES + (end - start) * 8;
        i = end;
    }
    if n == 0 {
        // Written back unchanged: an empty patch still carries the new tid.
        log.patch(t.id, key, 0, &[]);
    } else if n == usize::MAX || patch_bytes >= img.len() * 8 {
        log.put(t.id, key, crate::storage::schema::row_bytes(img));
    } else {
        for &(start, end) in &runs[..n] {
            log.patch(
                t.id,
                key,
                (start * 8) as u32,
                crate::storage::schema::row_bytes(&img[start..end]),
            );
        }
    }
}

/// Unchanged words between two changed ones that still make one patch.
const PATCH_GAP_WORDS: usize = 2;

/// Most patches of one row update before it is logged whole.
const MAX_PATCHES: usize = 4;

/// Log bytes of a patch beyond its data (kind, table, key, offset, length).
const PATCH_HEADER_BYTES: usize = 19;
