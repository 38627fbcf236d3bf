//! Commit on one island, a branch's prepare and commit, and abort: lock the
//! write set, add the new secondary-index entries, validate, pick the tid,
//! install and release (the steps of "Locks and versions by operation" in the
//! module documentation).

use std::sync::atomic::Ordering;

use super::access::{Access, Kind};
#[cfg(test)]
use super::sched;
use super::{fixed_keys_error, Committed, Txn, LOCAL};
use crate::phases::{self, Phase};
use crate::storage::hash::HashIndex;
use crate::storage::ordered::pair;
use crate::storage::{tid_of, Table};
use crate::{Abort, AbortReason, Error};

impl Txn {
    /// Whether the transaction changed rows of this island.
    pub(crate) fn has_local_writes(&self) -> bool {
        self.acc
            .iter()
            .any(|a| a.island == LOCAL && (a.dirty || a.kind == Kind::Delete))
    }

    /// Commits: locks the write set, validates reads, misses and scans, writes
    /// the redo record to the island's log buffer and installs the writes.
    /// For a transaction that touched only this island; one that touched
    /// others commits through its executor's two-phase commit.
    pub fn commit(&mut self) -> Result<Committed, Abort> {
        if let Some(e) = self.read_committed_wrote() {
            self.abort();
            return Err(e);
        }
        if self.dist.as_ref().is_some_and(|d| !d.touched.is_empty()) {
            self.abort();
            return Err(Abort::Failed(Error::Config(
                "a transaction that touched other islands commits through its executor".into(),
            )));
        }
        let writes = self.has_local_writes();
        self.check_fixed_keys(writes)?;
        let prev = phases::switch(Phase::Locking);
        let tid = self.lock_and_validate(writes);
        let tid = tid.inspect_err(|_| {
            phases::switch(prev);
        })?;
        // SAFETY: used only in this method (see `Txn::island`).
        let shared = unsafe { self.island() };
        // 5. Log, before installing: see `island::Shared::log`.
        let logged = writes && shared.wal.is_some();
        let mut ack = 0;
        let flag = &shared.committing[self.worker as usize];
        if logged {
            phases::switch(Phase::Logging);
            flag.store(flag.load(Ordering::Relaxed) + 1, Ordering::Release);
            let mut slot = shared.log.lock();
            let before = slot.buf.len_bytes();
            slot.buf.commit_begin(tid);
            self.log_writes(&mut slot.buf);
            slot.buf.record_end();
            self.unflushed_bytes += slot.buf.len_bytes().saturating_sub(before);
            ack = slot.next_seq;
            // Changes once per hand-off, not per commit: skip the store when
            // unchanged, so read-only commits on other cores keep the line cached.
            if shared.append_seq.load(Ordering::Relaxed) != ack {
                shared.append_seq.store(ack, Ordering::Release);
            }
        } else if shared.wal.is_some() {
            // Read-only: durable once everything it could have read from is.
            ack = shared.append_seq.load(Ordering::Acquire);
        }
        // 6. Install and release.
        phases::switch(Phase::Locking);
        self.install(tid);
        if logged {
            flag.store(flag.load(Ordering::Relaxed) + 1, Ordering::Release);
        }
        self.clear();
        phases::switch(prev);
        Ok(Committed { tid, logged, ack })
    }

    /// Commit steps 1–4: locks the write set, adds new secondary entries, validates, picks the tid. On
    /// failure everything is released and the reason returned.
    pub(super) fn lock_and_validate(&mut self, writes: bool) -> Result<u64, Abort> {
        // SAFETY: used only in this method (see `Txn::island`).
        let shared = unsafe { self.island() };
        if writes {
            if let Some(e) = shared.log_failure() {
                self.abort();
                return Err(Abort::Failed(e));
            }
        }
        // 1. Lock the write set.
        if let Err(reason) = self.lock_pending_rows() {
            self.abort();
            return Err(Abort::Conflict(reason));
        }
        // 2. Make the new secondary entries visible, then validate: a scan
        // validated from here on meets them (see `index_secondary_early`).
        // A distributed commit has done it already, before any branch
        // prepared (see "Across islands" in the module documentation).
        self.add_secondary_entries();
        // 3. Validate (under read committed, what was read before the call).
        if self.validate {
            if let Err(reason) = self.validate_all() {
                self.abort();
                return Err(Abort::Conflict(reason));
            }
        }
        // 4. The commit tid: above every version seen and this worker's last.
        let mut tid = self.last_tid;
        for a in &self.acc {
            if a.island == LOCAL {
                tid = tid.max(tid_of(a.seen.version));
            }
        }
        if self.has_inserts {
            tid = tid.max(shared.delete_tid.load(std::sync::atomic::Ordering::Acquire));
        }
        tid += 1;
        self.last_tid = tid;
        // Published before the delete unindexes its key, so an insert that
        // finds the key gone sees this tid (see `Shared::delete_tid`).
        if self
            .acc
            .iter()
            .any(|a| a.island == LOCAL && a.kind == Kind::Delete)
        {
            shared
                .delete_tid
                .fetch_max(tid, std::sync::atomic::Ordering::AcqRel);
        }
        Ok(tid)
    }

    /// Takes the write lock of every row of this island whose lock is still
    /// pending ([`Access::lock_pending`]). On a conflict returns its reason,
    /// releasing nothing (the caller aborts).
    pub(crate) fn lock_pending_rows(&mut self) -> Result<(), AbortReason> {
        self.locks.clear();
        for a in self.acc.iter() {
            if a.island == LOCAL && a.lock_pending() {
                self.locks.push(a.write_lock());
            }
        }
        self.lock_listed()
    }

    /// Takes the write locks of the rows in `locks` and records what the
    /// transaction holds on each. On a conflict returns its reason.
    pub(super) fn lock_listed(&mut self) -> Result<(), AbortReason> {
        if self.locks.is_empty() {
            return Ok(());
        }
        let shared = &*self.shared;
        // The scheme may reorder `locks`; map results back by (table, rid).
        let r = shared
            .cc
            .lock_write_set(&shared.catalog.tables, &mut self.locks, &self.meta);
        for l in &self.locks {
            if let Some(h) = self.find(l.table, l.rid) {
                self.acc[h.0 as usize].held = l.held;
            }
        }
        r
    }

    /// Commit step 6: installs the local writes with `tid` and releases
    /// every lock: all writes first, then the read locks, so under 2PL no
    /// row this transaction read is free while one of its writes (or index
    /// changes) is still to come.
    fn install(&mut self, tid: u64) {
        let shared = &*self.shared;
        let cc = &*shared.cc;
        let tables = &shared.catalog.tables;
        for a in &self.acc {
            if a.island == LOCAL {
                let all = a.dirty || matches!(a.kind, Kind::Insert | Kind::Delete);
                tables[a.table as usize].prefetch_rid(a.rid, all);
            }
        }
        #[cfg(test)]
        let mut step = 0;
        for i in 0..self.acc.len() {
            let a = self.acc[i];
            if a.island != LOCAL || (a.kind == Kind::Read && !a.dirty) {
                continue;
            }
            #[cfg(test)]
            {
                sched::at(sched::Point::Install(step));
                step += 1;
            }
            let t = &tables[a.table as usize];
            let words = t.schema.row_words();
            let off = a.off as usize;
            match a.kind {
                Kind::Delete => {
                    if let Some(old) = self.orig_image(t, &a) {
                        t.unindex_secondary(a.key, &old);
                    }
                    t.unindex_primary(a.key, a.rid);
                    cc.install(t, a.rid, tid, None, a.held);
                    t.arena.free(&mut self.caches[a.table as usize], a.rid);
                }
                // Its secondary entries went in at lock time.
                Kind::Insert => {
                    cc.install(t, a.rid, tid, Some(&self.buf[off..off + words]), a.held)
                }
                Kind::Read => {
                    // The entries of the changed keys went in at lock time;
                    // the ones they replace go now, before the row is free.
                    if a.indexed {
                        if let Some(old) = self.orig_image(t, &a) {
                            let new = self.image(t, &a);
                            for (def, idx) in &t.secondary {
                                let ko = (def.key)(&old);
                                if ko != (def.key)(&new) {
                                    idx.remove(pair(ko, a.key));
                                }
                            }
                        }
                    }
                    cc.install(t, a.rid, tid, Some(&self.buf[off..off + words]), a.held);
                }
            }
        }
        for a in &self.acc {
            if a.island == LOCAL && a.kind == Kind::Read && !a.dirty {
                #[cfg(test)]
                {
                    sched::at(sched::Point::Install(step));
                    step += 1;
                }
                cc.release(&tables[a.table as usize], a.rid, a.held);
            }
        }
        #[cfg(test)]
        sched::at(sched::Point::Install(step));
    }

    /// Commit step 2, once: with this island's write set locked and before
    /// any validation, adds the new secondary entries of its rows
    /// ([`Txn::index_secondary_early`]). On one island, commit calls it
    /// between locking and validating; across islands, the home calls it
    /// for its own island and each branch at the home's LOCK round, before
    /// any branch is asked to prepare, and prepare finds it done. After it,
    /// a change of this island's rows is refused ([`Txn::apply_write`]):
    /// the entries stand for the images as they were.
    pub(crate) fn add_secondary_entries(&mut self) {
        if self.secondary_added {
            return;
        }
        self.secondary_added = true;
        self.index_secondary_early();
    }

    /// Whether commit must add secondary entries for row `a` of table `t`
    /// (here or, for a copy, on the row's island): an insert into a table
    /// with secondary indexes, or an update that changed an indexed column,
    /// of a table whose keys are not fixed. The one rule for which rows
    /// have entries to add before any validation.
    pub(super) fn adds_secondary_entries(&self, t: &Table, a: &Access) -> bool {
        a.dirty
            && a.kind != Kind::Delete
            && !t.secondary.is_empty()
            && !t.fixed_keys
            && (a.kind == Kind::Insert || self.secondary_moved(t, a))
    }

    /// Whether the working image of row `a` of table `t` has another key
    /// than the image as read in some secondary index of `t` (false if the
    /// image as read was not kept).
    fn secondary_moved(&self, t: &Table, a: &Access) -> bool {
        let Some(old) = self.orig_image(t, a) else {
            return false;
        };
        let new = self.image(t, a);
        t.secondary
            .iter()
            .any(|(def, _)| (def.key)(&old) != (def.key)(&new))
    }

    /// Adds, with the write set locked and before validation, the
    /// secondary-index entries of every row of this island for which
    /// [`Txn::adds_secondary_entries`] holds: an inserted row's, and an
    /// updated row's whose indexed column changed. A scan of another
    /// transaction validated after this point meets them, so a writer
    /// ordered before that scan (it validated first) is never missed by it;
    /// until install they name a row this transaction holds (locked under
    /// 2PL; under OCC an insert's slot is claimed and an update's row
    /// version-locked), so a scan that meets one waits for it, conflicts,
    /// or fails its validation. The entries they replace stay until
    /// install; an abort removes the new ones
    /// ([`Txn::unindex_secondary_early`]).
    fn index_secondary_early(&mut self) {
        let tables = &self.shared.catalog.tables;
        let mut added = false;
        for i in 0..self.acc.len() {
            let a = &self.acc[i];
            let t = &tables[a.table as usize];
            if a.island != LOCAL || !self.adds_secondary_entries(t, a) {
                continue;
            }
            let a = *a;
            let new = self.image(t, &a);
            if a.kind == Kind::Insert {
                t.index_secondary(a.key, a.rid, &new);
            } else if let Some(old) = self.orig_image(t, &a) {
                for (def, idx) in &t.secondary {
                    let kn = (def.key)(&new);
                    if (def.key)(&old) != kn {
                        idx.insert(pair(kn, a.key), a.rid);
                    }
                }
                self.has_moves = true;
            }
            self.acc[i].indexed = true;
            added = true;
        }
        if added {
            // The entries are stores that the validation's loads must not
            // pass (the other side of a scanner's write lock and its rescan).
            std::sync::atomic::fence(Ordering::SeqCst);
        }
    }

    /// Abort: removes the entries [`Txn::index_secondary_early`] added.
    fn unindex_secondary_early(&mut self) {
        let tables = &self.shared.catalog.tables;
        for a in &self.acc {
            if !a.indexed {
                continue;
            }
            let t = &tables[a.table as usize];
            let new = self.image(t, a);
            match (a.kind, self.orig_image(t, a)) {
                (Kind::Read, Some(old)) => {
                    for (def, idx) in &t.secondary {
                        let kn = (def.key)(&new);
                        if (def.key)(&old) != kn {
                            idx.remove(pair(kn, a.key));
                        }
                    }
                }
                (Kind::Insert, _) => t.unindex_secondary(a.key, &new),
                _ => {}
            }
        }
    }

    /// Two-phase commit, participant side: locks and validates this island's
    /// part of the transaction and keeps it locked. Returns whether it wrote
    /// anything here. On failure the branch is already aborted.
    pub(crate) fn prepare_branch(&mut self) -> Result<bool, Abort> {
        debug_assert!(self.prepared.is_none(), "prepared twice");
        let writes = self.has_local_writes();
        self.check_fixed_keys(writes)?;
        let prev = phases::switch(Phase::Locking);
        let tid = self.lock_and_validate(writes);
        phases::switch(prev);
        self.prepared = Some((tid?, 0));
        Ok(writes)
    }

    /// Installs a prepared branch (the decision was commit) and releases it.
    pub(crate) fn commit_prepared(&mut self) {
        let Some((tid, pin)) = self.prepared.take() else {
            debug_assert!(false, "commit of an unprepared branch");
            return;
        };
        // SAFETY: used only in this method (see `Txn::island`).
        let shared = unsafe { self.island() };
        let flag = &shared.committing[self.worker as usize];
        flag.store(flag.load(Ordering::Relaxed) + 1, Ordering::Release);
        if pin != 0 {
            shared.log.lock().unpin(pin);
        }
        let prev = phases::switch(Phase::Locking);
        self.install(tid);
        phases::switch(prev);
        flag.store(flag.load(Ordering::Relaxed) + 1, Ordering::Release);
        self.clear();
    }

    /// Validates the reads, misses and scans recorded: under
    /// [`Txn::read_committed`], those made before the call (later misses and
    /// scans are not recorded).
    fn validate_all(&self) -> Result<(), AbortReason> {
        let shared = &*self.shared;
        let reads = if self.read_committed {
            &self.acc[..self.rc_from as usize]
        } else {
            &self.acc[..]
        };
        for a in reads {
            if a.kind == Kind::Read && !a.dirty && a.island == LOCAL {
                let t = shared.catalog.table(a.table);
                if !shared.cc.validate_read(t, a.rid, &a.seen, a.held) {
                    return Err(AbortReason::ReadValidation);
                }
            }
        }
        for m in &self.misses {
            let t = shared.catalog.table(m.table);
            let h = t.hash.as_ref().expect("miss recorded on a hash table");
            let mut now = h.stripe_version(m.stripe as usize);
            // Our own inserts on that stripe moved it by two each.
            for a in &self.acc {
                if a.kind == Kind::Insert
                    && a.island == LOCAL
                    && a.table == m.table
                    && HashIndex::stripe_of(a.key) == m.stripe as usize
                {
                    now = now.wrapping_sub(2);
                }
            }
            if now != m.version {
                return Err(AbortReason::Phantom);
            }
        }
        for s in &self.scans {
            let t = shared.catalog.table(s.table);
            // Visit one entry more than the scan did when it ran to the end of
            // its range, to catch an insert after the last entry.
            let limit = if s.exhausted {
                s.visited.saturating_add(1)
            } else {
                s.visited
            };
            if self.rescan(t, s, limit) != (s.visited, s.digest) {
                return Err(AbortReason::Phantom);
            }
        }
        Ok(())
    }

    /// Aborts: releases everything and forgets the transaction's writes.
    pub fn abort(&mut self) {
        // SAFETY: used only in this method (see `Txn::island`).
        let shared = unsafe { self.island() };
        if let Some((_, pin)) = self.prepared.take() {
            if pin != 0 {
                shared.log.lock().unpin(pin);
            }
        }
        // Before any row is released: nobody else may move these rows yet.
        if self.acc.iter().any(|a| a.indexed) {
            self.unindex_secondary_early();
        }
        for a in &self.acc {
            if a.island != LOCAL {
                continue;
            }
            let t = shared.catalog.table(a.table);
            if a.kind == Kind::Insert {
                t.unindex_primary(a.key, a.rid);
                shared.cc.release(t, a.rid, a.held);
                t.arena.free(&mut self.caches[a.table as usize], a.rid);
            } else {
                shared.cc.release(t, a.rid, a.held);
            }
        }
        self.clear();
    }

    fn clear(&mut self) {
        self.read_committed = false;
        self.acc.clear();
        self.acc_index.clear();
        self.buf.clear();
        self.misses.clear();
        self.scans.clear();
        self.scan_out.clear();
        self.has_inserts = false;
        self.has_moves = false;
        self.secondary_added = false;
        if let Some(d) = &mut self.dist {
            d.reset();
        }
    }

    /// Refuses an update that moves a row of a fixed-key table to another
    /// secondary key: its scans are not validated, so that would be a phantom.
    /// On `Err` the transaction is aborted. `writes`: it wrote here.
    fn check_fixed_keys(&mut self, writes: bool) -> Result<(), Abort> {
        if !writes {
            return Ok(());
        }
        if let Err(e) = self.fixed_key_change() {
            self.abort();
            return Err(e);
        }
        Ok(())
    }

    fn fixed_key_change(&self) -> Result<(), Abort> {
        let tables = &self.shared.catalog.tables;
        for a in &self.acc {
            let t = &tables[a.table as usize];
            if a.island == LOCAL && a.dirty && t.fixed_keys && self.secondary_moved(t, a) {
                return Err(fixed_keys_error(t, "a change of a secondary key"));
            }
        }
        Ok(())
    }
}
