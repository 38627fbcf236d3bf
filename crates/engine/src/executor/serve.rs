//! Serving other islands' transactions: their remote operations run on
//! branch contexts here (a branch begins on its first request), their LOCK
//! requests, and the engine as the participant state machine sees it
//! ([`coord::Branches`]: prepare, commit, abort, and restore after a crash).

use std::sync::atomic::Ordering;

use super::cluster::bump;
use super::pool::{Branch, Pool};
use super::Executor;
use crate::coord::{self, home_of, Action, Gtid, Msg, Vote};
use crate::phases;
use crate::route::IslandId;
use crate::transport::wire::{self, Frame, Status};
use crate::transport::{push_frame_with, Endpoint};
use crate::txn::Txn;
use crate::{Abort, Error};

impl Executor {
    /// Aborts this island's branch of `gtid` as an AbortReq from `home`
    /// would, and sends nothing back: the home wants no answer, or learns
    /// the outcome another way.
    pub(super) fn abort_branch_unanswered(&mut self, home: IslandId, gtid: Gtid, now: u64) {
        let mut actions = std::mem::take(&mut self.actions);
        actions.clear();
        let mut eng = Engine(&mut self.pool);
        self.part
            .on_message(home, Msg::AbortReq { gtid }, now, &mut eng, &mut actions);
        actions.retain(|a| !matches!(a, Action::Send { .. }));
        self.run_actions(&mut actions, false);
        self.actions = actions;
    }

    /// Participant: a LOCK request of the branch of `gtid` (see
    /// `commit_home`), after `writes` changes to its rows. The branch must
    /// be executing here still, with exactly those changes applied.
    pub(super) fn lock_branch(&mut self, gtid: Gtid, writes: u32, entries: &[u8]) -> Status {
        let now = self.fresh_now_us();
        let Some(b) = self.pool.branches.get(&gtid) else {
            // Aborted after idling (or never begun): its reads are unprotected.
            self.cl.stats.lost_branches.fetch_add(1, Ordering::Relaxed);
            return Status::Refused;
        };
        // Every change shipped ahead of the LOCK must be here: with one
        // lost or overtaken, the entries added would not be those of the
        // images that commit.
        if b.expect.is_some()
            || b.bad
            || b.applied != writes
            || self.part.on_branch_begin(gtid, now).is_err()
        {
            return Status::Refused;
        }
        let prev = phases::switch(phases::Phase::Locking);
        let r = self.pool.ctx(b.ctx).lock_rows(entries);
        phases::switch(prev);
        match r {
            Ok(()) => wire::OK,
            Err(Abort::Conflict(reason)) => Status::Conflict(reason),
            Err(_) => {
                self.cl
                    .stats
                    .protocol_violations
                    .fetch_add(1, Ordering::Relaxed);
                Status::Refused
            }
        }
    }
    pub(super) fn reply(&mut self, to: Endpoint, tag: u32, status: Status, table: u16) {
        push_frame_with(self.outbox.batch(&*self.transport, to), |b| {
            wire::reply_header(b, tag, status, table, 0, 0)
        });
    }

    /// Runs a remote operation on the branch of `gtid` (started on first use;
    /// a request that `continues` a branch this worker no longer holds is
    /// refused, see [`wire::CONTINUES`]).
    pub(super) fn serve(
        &mut self,
        from: Endpoint,
        gtid: Gtid,
        tag: u32,
        frame: Frame<'_>,
        continues: bool,
    ) {
        // Read now, not at the round's start: a branch never seems to begin
        // before the home transaction did (the read-only shortcut in
        // `commit_home` relies on it), however long the round has run.
        let now = self.fresh_now_us();
        let table = match frame {
            Frame::Get { table, .. }
            | Frame::MultiGet { table, .. }
            | Frame::Insert { table, .. }
            | Frame::Scan { table, .. } => table,
            _ => unreachable!("serve is called for requests"),
        };
        if self.pool.is_copy(gtid, tag) {
            return;
        }
        let c = match self.pool.branches.get(&gtid) {
            Some(b) if b.expect.is_none() => {
                let c = b.ctx;
                if self.part.on_branch_begin(gtid, now).is_err() {
                    return self.reply(from, tag, Status::Refused, table);
                }
                c
            }
            // Prepared or preparing: too late for more work.
            Some(_) => return self.reply(from, tag, Status::Refused, table),
            // The branch the earlier requests made is gone (aborted after
            // sitting idle): a new one would lack its locks.
            None if continues => {
                self.cl.stats.lost_branches.fetch_add(1, Ordering::Relaxed);
                return self.reply(from, tag, Status::Refused, table);
            }
            // This process leaves (a clean stop): a transaction of another
            // process begins no branch here, so the stop waits only for
            // what is in flight (its home aborts it, and retries elsewhere
            // or hears that this island is down).
            None if self.cl.leaving() && self.cl.island(usize::from(home_of(gtid))).is_none() => {
                return self.reply(from, tag, Status::Refused, table);
            }
            None => {
                // Refused when full, and for a gtid whose branch finished
                // here lately: a late copy (see the module documentation).
                if self.part.on_branch_begin(gtid, now).is_err() {
                    return self.reply(from, tag, Status::Refused, table);
                }
                let Some(c) = self.pool.alloc_ctx() else {
                    // The home learns from the refusal.
                    self.abort_branch_unanswered(home_of(gtid), gtid, now);
                    return self.reply(from, tag, Status::Refused, table);
                };
                self.pool.ctx(c).begin(false);
                let mut b = Branch::new(c, None);
                b.serve_once(tag);
                self.pool.branches.insert(gtid, b);
                c
            }
        };
        bump(&self.counts().remote_ops);
        let tx = self.pool.ctx(c);
        let t = self.shared.catalog.table(table);
        let row_bytes = (t.schema.row_words() * 8) as u32;
        let batch = self.outbox.batch(&*self.transport, from);
        let frame_at = batch.len();
        let result: Result<(), Abort> = (|| {
            match frame {
                Frame::Get {
                    key, for_update, ..
                } => {
                    let h = tx.point(table, key, for_update)?;
                    reply_row(batch, tx, tag, table, row_bytes, key, h);
                }
                Frame::MultiGet {
                    for_update, keys, ..
                } => {
                    let at = batch.len();
                    batch.extend_from_slice(&[0; 4]);
                    let start = batch.len();
                    wire::reply_header(batch, tag, wire::OK, table, row_bytes, 0);
                    let mut n = 0u32;
                    for k in keys.chunks_exact(8) {
                        let key = u64::from_le_bytes(k.try_into().expect("8 bytes"));
                        t.prefetch(key, crate::storage::Prefetch::Index);
                    }
                    for k in keys.chunks_exact(8) {
                        let key = u64::from_le_bytes(k.try_into().expect("8 bytes"));
                        t.prefetch(key, crate::storage::Prefetch::Row);
                    }
                    for k in keys.chunks_exact(8) {
                        let key = u64::from_le_bytes(k.try_into().expect("8 bytes"));
                        match tx.point(table, key, for_update) {
                            Ok(Some(h)) => {
                                batch.extend_from_slice(&key.to_le_bytes());
                                batch.extend_from_slice(tx.row_bytes(h));
                                n += 1;
                            }
                            Ok(None) => {}
                            Err(e) => {
                                batch.truncate(at);
                                return Err(e);
                            }
                        }
                    }
                    let len = (batch.len() - start) as u32;
                    batch[at..at + 4].copy_from_slice(&len.to_le_bytes());
                    batch[start + wire::REPLY_N_AT..start + wire::REPLY_N_AT + 4]
                        .copy_from_slice(&n.to_le_bytes());
                }
                Frame::Insert { key, .. } => {
                    let h = tx.insert_local(table, key)?;
                    reply_row(batch, tx, tag, table, row_bytes, key, h);
                }
                Frame::Scan {
                    index,
                    lo,
                    hi,
                    limit,
                    reverse,
                    ..
                } => {
                    let sec = if index == wire::PRIMARY {
                        None
                    } else if (index as usize) < t.secondary.len() {
                        Some(crate::storage::SecondaryId(index))
                    } else {
                        return Err(Abort::Failed(Error::Protocol(format!(
                            "scan of secondary index {index} of table {table}, which has {}",
                            t.secondary.len()
                        ))));
                    };
                    let n = tx.scan_index(table, sec, lo, hi, limit as usize, reverse)?;
                    push_frame_with(batch, |b| {
                        wire::reply_header(b, tag, wire::OK, table, row_bytes, n as u32);
                        for i in 0..n {
                            let h = tx.scan_row(i);
                            b.extend_from_slice(&tx.key(h).to_le_bytes());
                            b.extend_from_slice(tx.row_bytes(h));
                        }
                    });
                }
                _ => unreachable!(),
            }
            // The flags of Status::Ok, after the frame's length word.
            let mut flags = 0;
            if tx.has_validated_reads() {
                flags |= wire::OK_VALIDATED;
            }
            if undurable_reads(&self.shared) {
                flags |= wire::OK_UNDURABLE;
            }
            batch[frame_at + 4 + wire::REPLY_FLAGS_AT] = flags;
            Ok(())
        })();
        match result {
            Ok(()) => {}
            Err(Abort::Conflict(r)) => self.reply(from, tag, Status::Conflict(r), table),
            Err(_) => self.reply(from, tag, Status::Refused, table),
        }
    }
}

/// Whether reads just done on this island may have seen writes that a crash
/// would lose: its newest appended record (read after the reads, as a local
/// read-only commit's acknowledgement is) is not durable (`sync`) or written
/// (`async`) yet. A remote branch that read such data must vote, which waits
/// for it, rather than be released. Without a log (`off`) nothing survives a
/// crash, and nothing is waited for.
pub(super) fn undurable_reads(shared: &crate::island::Shared) -> bool {
    shared.append_seq.load(Ordering::Acquire) > shared.durable_seq()
}

/// Appends a reply with row `key` (`None`: no such row) to `batch`.
fn reply_row(
    batch: &mut Vec<u8>,
    tx: &Txn,
    tag: u32,
    table: u16,
    row_bytes: u32,
    key: u64,
    h: Option<crate::txn::RowH>,
) {
    push_frame_with(batch, |b| {
        wire::reply_header(b, tag, wire::OK, table, row_bytes, h.is_some() as u32);
        if let Some(h) = h {
            b.extend_from_slice(&key.to_le_bytes());
            b.extend_from_slice(tx.row_bytes(h));
        }
    });
}

/// The engine as the participant state machine sees it ([`coord::Branches`]):
/// the executor's contexts, borrowed apart from the machine itself.
pub(super) struct Engine<'a>(pub(super) &'a mut Pool);

impl coord::Branches for Engine<'_> {
    fn prepare(&mut self, gtid: Gtid) -> Vote {
        let ex = &mut *self.0;
        let Some(b) = ex.branches.get(&gtid) else {
            return Vote::No;
        };
        let Some((writes, hold)) = b.expect else {
            // PREP lost or overtaken: the branch cannot know it has all writes.
            return Vote::No;
        };
        if b.bad || b.applied != writes {
            return Vote::No;
        }
        let c = b.ctx;
        match ex.ctx(c).prepare_branch() {
            Ok(wrote) if wrote || hold => Vote::Yes,
            Ok(_) => Vote::ReadOnly,
            Err(_) => Vote::No,
        }
    }

    fn commit(&mut self, gtid: Gtid) {
        let ex = &mut *self.0;
        if let Some(b) = ex.branches.remove(&gtid) {
            // A branch with writes logs its decision before it installs and
            // releases, as every commit's record does: a transaction that
            // then sees these writes logs after them, so replay applies them
            // first (its patches are diffed against an image that holds
            // them). The participant's Log action that follows finds it
            // logged. A read-only branch (released at prepare, or held) has
            // nothing to order.
            if ex.ctx(b.ctx).has_local_writes() {
                let seq = ex
                    .own
                    .shared()
                    .log_record(|l| l.decision(gtid, true), false);
                ex.decided.insert(gtid, seq);
            }
            ex.ctx(b.ctx).commit_prepared();
            #[cfg(test)]
            super::tests::after_branch_install(&ex.cl, gtid);
            ex.free_ctx(b.ctx);
        }
    }

    fn abort(&mut self, gtid: Gtid) {
        let ex = &mut *self.0;
        if let Some(b) = ex.branches.remove(&gtid) {
            ex.ctx(b.ctx).abort();
            ex.free_ctx(b.ctx);
        }
    }

    fn restore(&mut self, gtid: Gtid) {
        let ex = &mut *self.0;
        let Some(d) = ex.in_doubt.remove(&gtid) else {
            return;
        };
        let Some(c) = ex.alloc_ctx() else {
            ex.failed = Some(Error::Recovery(format!(
                "no transaction context left to restore in-doubt branch {gtid:#x}"
            )));
            return;
        };
        let tx = ex.ctx(c);
        tx.begin(false);
        match tx.restore_branch(d.tid, d.seq, &d.writes) {
            Ok(()) => {
                ex.branches.insert(gtid, Branch::new(c, Some((0, true))));
            }
            Err(e) => {
                tx.abort();
                ex.free_ctx(c);
                ex.failed = Some(Error::Recovery(format!(
                    "cannot restore in-doubt branch {gtid:#x}: {e}"
                )));
            }
        }
    }
}
