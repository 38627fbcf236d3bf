//! The access set: the rows a transaction read, inserted, changed or deleted
//! on its own island, the lock or version each read took, and the point
//! misses and scans it recorded for validation at commit. Reads (`get`, `get_for_update`), inserts and deletes enter rows
//! here; procedures reach them by [`RowH`] (`row`, `row_mut`). See "Locks and
//! versions by operation" in the module documentation for what each takes.

#[cfg(test)]
use super::sched;
use super::{fixed_keys_error, LockWait, RowH, Txn, LOCAL};
use crate::cc::{Held, Observed, WriteLock};
use crate::phases::{self, Phase};
use crate::route::IslandId;
use crate::storage::hash::HashIndex;
use crate::storage::ordered::key_of;
use crate::storage::{RowId, RowMut, RowRef, SecondaryId, Table, TableId};
use crate::{Abort, AbortReason, Error};

/// Access sets up to this size are searched linearly (they fit in a few cache lines).
const SMALL_ACCESS_SET: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Read,
    Insert,
    Delete,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Access {
    pub(super) table: TableId,
    pub(super) rid: RowId,
    pub(super) key: u64,
    /// [`LOCAL`], or the island that holds the row (a copy of a remote row:
    /// `rid` is [`REMOTE_RID`], and the owner holds the lock).
    pub(super) island: IslandId,
    pub(super) kind: Kind,
    /// The image was changed (updates and inserts).
    pub(super) dirty: bool,
    pub(super) seen: Observed,
    pub(super) held: Held,
    /// Offset of the working image in `buf`.
    pub(super) off: u32,
    /// Offset of the image as read, kept for tables with secondary indexes
    /// (to move index entries when indexed columns change); `u32::MAX` if none.
    pub(super) orig: u32,
    /// Commit added this row's new secondary-index entries (an insert's, or
    /// an update's that changed an indexed column) before validating: see
    /// [`Txn::index_secondary_early`]. Abort takes them out again; install
    /// removes the entries they replace.
    pub(super) indexed: bool,
}

impl Access {
    /// Whether commit has still to take this row's write lock: the row is in
    /// the write set (changed, inserted or deleted) and what the transaction
    /// holds on it is less (a shared lock, or nothing: a plain read that was
    /// then changed or deleted). For a copy of another island's row this says
    /// what its owner holds for the transaction. The one rule for *when* a
    /// lock is taken late; see "Locks and versions by operation".
    #[inline]
    pub(super) fn lock_pending(&self) -> bool {
        (self.dirty || self.kind == Kind::Delete) && !self.held.is_write_lock()
    }

    /// The row as the scheme's `lock_write_set` takes it.
    pub(super) fn write_lock(&self) -> WriteLock {
        WriteLock {
            table: self.table,
            rid: self.rid,
            held: self.held,
            seen: self.seen.version,
            inserted: self.kind == Kind::Insert,
        }
    }
}

/// A point miss: the key was absent; validated through its hash stripe.
#[derive(Clone, Copy, Debug)]
pub(super) struct Miss {
    pub(super) table: TableId,
    pub(super) stripe: u32,
    pub(super) version: u64,
}

/// A range scan, remembered so commit can check that it would see the same entries.
#[derive(Clone, Copy, Debug)]
pub(super) struct Scan {
    pub(super) table: TableId,
    pub(super) secondary: Option<SecondaryId>,
    pub(super) lo: u128,
    pub(super) hi: u128,
    pub(super) reverse: bool,
    /// Index entries visited (not counting the transaction's own inserts).
    pub(super) visited: u32,
    /// The scan reached the end of its range before its limit.
    pub(super) exhausted: bool,
    pub(super) digest: u64,
}

/// Where a scan's digest of the entries it visited starts (no entries).
pub(super) const DIGEST_SEED: u64 = 0x243f_6a88_85a3_08d3;

impl Txn {
    /// The transaction's entry for a row, if it has one. A short access set is
    /// searched linearly; past [`SMALL_ACCESS_SET`] entries a hash map (kept
    /// from then on, cleared but not freed between transactions) answers, so
    /// transactions of hundreds of rows (TPC-C StockLevel, Delivery) do not
    /// go quadratic.
    #[inline]
    pub(super) fn find(&self, table: TableId, rid: RowId) -> Option<RowH> {
        if self.acc.len() <= SMALL_ACCESS_SET {
            return self
                .acc
                .iter()
                .rposition(|a| a.rid == rid && a.table == table)
                .map(|i| RowH(i as u32));
        }
        self.acc_index.get(&(table, rid)).map(|&i| RowH(i))
    }

    /// Appends an access entry (and indexes it once the set is large).
    pub(super) fn push_access(&mut self, a: Access) -> RowH {
        let i = self.acc.len() as u32;
        self.acc.push(a);
        if self.acc.len() == SMALL_ACCESS_SET + 1 {
            for (j, e) in self.acc.iter().enumerate() {
                self.acc_index.insert((e.table, e.rid), j as u32);
            }
        } else if self.acc.len() > SMALL_ACCESS_SET + 1 {
            self.acc_index.insert((a.table, a.rid), i);
        }
        RowH(i)
    }

    pub(super) fn push_image(&mut self, words: usize) -> u32 {
        let off = self.buf.len();
        self.buf.resize(off + words, 0);
        off as u32
    }

    /// Hints that the transaction will soon access `key` (see
    /// [`crate::storage::Table::prefetch`]): a procedure that knows its keys up
    /// front issues `Index` hints for all of them, then `Row` hints, then
    /// reads, so the cache misses overlap.
    #[inline]
    pub fn prefetch(&self, table: TableId, key: u64, what: crate::storage::Prefetch) {
        self.shared.catalog.table(table).prefetch(key, what);
    }

    /// Reads a row by primary key. `None` if absent.
    pub async fn get(&mut self, table: TableId, key: u64) -> Result<Option<RowH>, Abort> {
        if let Some(island) = self.route(table, key) {
            return self.remote_point(island, table, key, false).await;
        }
        self.point(table, key, false)
    }

    /// Reads a row by primary key with the intent to update it (2PL takes the
    /// exclusive lock now). Change it through [`Txn::row_mut`].
    pub async fn get_for_update(
        &mut self,
        table: TableId,
        key: u64,
    ) -> Result<Option<RowH>, Abort> {
        if let Some(island) = self.route(table, key) {
            return self.remote_point(island, table, key, true).await;
        }
        self.point(table, key, true)
    }

    pub(crate) fn point(
        &mut self,
        table: TableId,
        key: u64,
        for_update: bool,
    ) -> Result<Option<RowH>, Abort> {
        // SAFETY: used only in this method (see `Txn::island`).
        let t = unsafe { self.island() }.catalog.table(table);
        let mut rid = t.lookup(key);
        // A miss on a hash table is validated through its key's stripe
        // version, which must be read *before* the lookup that finds the key
        // absent: an insert between a lookup and a later version read would
        // be inside the version recorded, invisible to validation. Hits need
        // no stripe version, so the first lookup goes without: on a miss the
        // version is read (waiting while odd) and the key looked up again,
        // and that second lookup is the one the answer rests on.
        let mut stripe = None;
        loop {
            let Some(r) = rid else {
                #[cfg(test)]
                sched::at(sched::Point::LookupMissed);
                if stripe.is_none() {
                    stripe = self.miss_stripe(t, key);
                    if stripe.is_some() {
                        rid = t.lookup(key);
                        continue;
                    }
                }
                self.record_miss(t, key, stripe);
                return Ok(None);
            };
            if let Some(h) = self.find(table, r) {
                let a = &self.acc[h.0 as usize];
                if a.key != key {
                    // This transaction read the slot under another key, and
                    // the index now names it for `key`: it was freed and
                    // taken again since. The earlier read fails validation
                    // unless the reuse was undone (an insert that aborted),
                    // and then nothing would validate this answer.
                    return Err(Abort::Conflict(AbortReason::ReadValidation));
                }
                if a.kind != Kind::Delete && (a.seen.present || a.kind == Kind::Insert) {
                    return Ok(Some(h));
                }
                return Ok(None);
            }
            match self.read_rid(table, r, key, for_update) {
                // Indexed but absent (an uncommitted insert, a delete being
                // installed, a reused slot): the answer is "no such key", and
                // it is validated like an index miss (the slot's version does
                // not move when the key is inserted again into another slot).
                // Its stripe version, too, must precede a lookup that still
                // finds no present row under the key.
                Ok(None) => {
                    #[cfg(test)]
                    sched::at(sched::Point::ReadAbsent);
                    if stripe.is_none() {
                        stripe = self.miss_stripe(t, key);
                        if stripe.is_some() {
                            let now = t.lookup(key);
                            if now != Some(r) {
                                rid = now;
                                continue;
                            }
                        }
                    }
                    self.record_miss(t, key, stripe);
                    return Ok(None);
                }
                res => return res.map_err(Abort::Conflict),
            }
        }
    }

    /// For a miss on `t` that commit must validate through a hash stripe:
    /// the key's stripe and its version, read once no insert or delete on
    /// the stripe is under way. `None` if the miss needs no stripe (not
    /// validated, no hash index, or a fixed key set).
    fn miss_stripe(&self, t: &Table, key: u64) -> Option<(usize, u64)> {
        if !self.validate || self.read_committed || t.fixed_keys {
            return None;
        }
        let h = t.hash.as_ref()?;
        let stripe = HashIndex::stripe_of(key);
        let mut version = h.stripe_version(stripe);
        let mut spins = 0;
        while version & 1 == 1 {
            spins += 1;
            crate::cc::backoff(spins);
            version = h.stripe_version(stripe);
        }
        Some((stripe, version))
    }

    /// Records a point miss for validation at commit: through `stripe` (from
    /// [`Txn::miss_stripe`], read before the lookup) on a hash table, as an
    /// empty scan of the key on an ordered one.
    fn record_miss(&mut self, t: &Table, key: u64, stripe: Option<(usize, u64)>) {
        if let Some((stripe, version)) = stripe {
            // Validation takes every own insert on the stripe back out of
            // the version it finds; the ones made before this miss are
            // already in `version`, so take them out here too. Otherwise a
            // foreign insert (of this very key) would be cancelled out.
            let own = self
                .acc
                .iter()
                .filter(|a| {
                    a.kind == Kind::Insert
                        && a.island == LOCAL
                        && a.table == t.id
                        && HashIndex::stripe_of(a.key) == stripe
                })
                .count() as u64;
            self.misses.push(Miss {
                table: t.id,
                stripe: stripe as u32,
                version: version.wrapping_sub(2 * own),
            });
            return;
        }
        // A hash table's miss to validate always comes with its stripe.
        if !self.validate || self.read_committed || t.fixed_keys || t.hash.is_some() {
            return;
        }
        // Nothing is indexed under the key: validated as an empty scan.
        let k = key_of(key);
        self.scans.push(Scan {
            table: t.id,
            secondary: None,
            lo: k,
            hi: k,
            reverse: false,
            visited: 0,
            exhausted: true,
            digest: DIGEST_SEED,
        });
    }

    /// Reads row `rid` (known to the index under `key`) into a new access entry.
    pub(super) fn read_rid(
        &mut self,
        table: TableId,
        rid: RowId,
        key: u64,
        for_update: bool,
    ) -> Result<Option<RowH>, AbortReason> {
        let shared = &*self.shared;
        let t = shared.catalog.table(table);
        let words = t.schema.row_words();
        let off = self.buf.len();
        self.buf.resize(off + words, 0);
        // Under `none` a read is a copy: execution, not locking.
        let prev = if self.validate {
            phases::switch(Phase::Locking)
        } else {
            Phase::Idle
        };
        let read = if self.read_committed && !for_update {
            // The row in the table is always a committed image (writes are
            // buffered until commit installs them), so a consistent copy of
            // it, without a lock, is a committed read.
            let seen = crate::cc::committed_read(t, rid, key, &mut self.buf[off..off + words]);
            Ok((seen, crate::cc::Held::Nothing))
        } else {
            shared.cc.read(
                t,
                rid,
                key,
                &mut self.buf[off..off + words],
                for_update,
                &self.meta,
            )
        };
        if self.validate {
            phases::switch(prev);
        }
        if let Err(AbortReason::LockConflict) = read {
            self.conflict = Some(LockWait {
                table,
                rid,
                exclusive: for_update,
            });
        }
        let (seen, held) = read?;
        let orig = if seen.present && !t.secondary.is_empty() {
            let o = self.buf.len();
            self.buf.extend_from_within(off..off + words);
            o as u32
        } else {
            u32::MAX
        };
        let h = self.push_access(Access {
            table,
            rid,
            key,
            island: LOCAL,
            kind: Kind::Read,
            dirty: false,
            seen,
            held,
            off: off as u32,
            orig,
            indexed: false,
        });
        Ok(seen.present.then_some(h))
    }

    /// Inserts a row with `key`; its columns start zeroed: set them through
    /// [`Txn::row_mut`]. `Ok(None)` if a committed row with that key exists.
    pub async fn insert(&mut self, table: TableId, key: u64) -> Result<Option<RowH>, Abort> {
        if let Some(island) = self.route(table, key) {
            return self.remote_insert(island, table, key).await;
        }
        self.insert_local(table, key)
    }

    pub(crate) fn insert_local(&mut self, table: TableId, key: u64) -> Result<Option<RowH>, Abort> {
        // SAFETY: used only in this method (see `Txn::island`).
        let shared = unsafe { self.island() };
        let t = shared.catalog.table(table);
        if t.fixed_keys {
            return Err(fixed_keys_error(t, "an insert"));
        }
        let rid = t.alloc(&mut self.caches[table as usize])?;
        let old = t.version(rid).load(std::sync::atomic::Ordering::Acquire);
        let held = shared.cc.claim_insert(t, rid, &self.meta);
        t.key_word(rid)
            .store(key, std::sync::atomic::Ordering::Release);
        match t.index_primary(key, rid) {
            Ok(None) => {}
            Ok(Some(existing)) => {
                self.undo_claim(t, rid, held);
                if let Some(h) = self.find(table, existing) {
                    if self.acc[h.0 as usize].key != key {
                        // Read under another key: the slot was reused since
                        // (see `Txn::point`).
                        return Err(Abort::Conflict(AbortReason::ReadValidation));
                    }
                    // Our own row: present unless we deleted it, or read it
                    // absent (then someone's insert has indexed the key in
                    // that slot since, and the read fails validation).
                    let a = &mut self.acc[h.0 as usize];
                    if a.kind == Kind::Read && !a.dirty && !a.seen.present {
                        return Err(Abort::Conflict(AbortReason::ReadValidation));
                    }
                    if a.kind != Kind::Delete {
                        return Ok(None);
                    }
                    // Deleted earlier in this transaction: the insert becomes an
                    // overwrite of that row with a fresh (zeroed) image.
                    a.kind = Kind::Read;
                    a.dirty = true;
                    self.changes += 1;
                    let off = a.off as usize;
                    self.buf[off..off + t.schema.row_words()].fill(0);
                    return Ok(Some(h));
                }
                // A slot this transaction never read holds the key. If it
                // read the key in another slot (and deleted it there, or read
                // it there as present), the key was deleted and inserted again
                // since: that read is stale and fails validation, and the
                // transaction's own view (a key it deleted is gone) must not
                // meet the new row as a duplicate.
                if self.accessed_key(table, key) {
                    return Err(Abort::Conflict(AbortReason::ReadValidation));
                }
                // Someone else's row: a committed duplicate is an answer (and is
                // validated like a read); an uncommitted one is a conflict.
                return match self.read_rid(table, existing, key, false) {
                    Ok(Some(_)) => Ok(None),
                    Ok(None) => Err(Abort::Conflict(AbortReason::DuplicateKey)),
                    Err(r) => Err(Abort::Conflict(r)),
                };
            }
            Err(e) => {
                self.undo_claim(t, rid, held);
                return Err(e.into());
            }
        }
        let off = self.push_image(t.schema.row_words());
        let h = self.push_access(Access {
            table,
            rid,
            key,
            island: LOCAL,
            kind: Kind::Insert,
            dirty: true,
            seen: Observed {
                version: old,
                present: false,
            },
            held,
            off,
            orig: u32::MAX,
            indexed: false,
        });
        self.has_inserts = true;
        Ok(Some(h))
    }

    /// Whether the transaction holds an entry for `key` of local table
    /// `table` (under any slot). A linear search: only an insert that found
    /// its key taken asks.
    fn accessed_key(&self, table: TableId, key: u64) -> bool {
        self.acc
            .iter()
            .any(|a| a.island == LOCAL && a.table == table && a.key == key)
    }

    fn undo_claim(&mut self, t: &Table, rid: RowId, held: Held) {
        self.shared.cc.release(t, rid, held);
        t.arena.free(&mut self.caches[t.id as usize], rid);
    }

    /// Deletes a row the transaction has read (or inserted).
    pub async fn delete(&mut self, h: RowH) -> Result<(), Abort> {
        let t = self.shared.catalog.table(self.acc[h.0 as usize].table);
        if t.fixed_keys {
            return Err(fixed_keys_error(t, "a delete"));
        }
        self.changes += 1;
        let a = &mut self.acc[h.0 as usize];
        match a.kind {
            Kind::Read => {
                a.kind = Kind::Delete;
                a.dirty = false;
                Ok(())
            }
            Kind::Insert => Err(Abort::Failed(Error::Config(
                "deleting a row inserted by the same transaction is not supported".into(),
            ))),
            Kind::Delete => Ok(()),
        }
    }

    /// The current image of a row the transaction holds.
    #[inline]
    pub fn row(&self, h: RowH) -> RowRef<'_> {
        let a = &self.acc[h.0 as usize];
        let t = self.shared.catalog.table(a.table);
        let off = a.off as usize;
        RowRef {
            words: &self.buf[off..off + t.schema.row_words()],
            schema: &t.schema,
        }
    }

    /// Write access to a row's image; the change is installed at commit.
    #[inline]
    pub fn row_mut(&mut self, h: RowH) -> RowMut<'_> {
        let a = &mut self.acc[h.0 as usize];
        debug_assert!(a.kind != Kind::Delete, "writing a deleted row");
        a.dirty = true;
        self.changes += 1;
        let t = self.shared.catalog.table(a.table);
        let off = a.off as usize;
        RowMut {
            words: &mut self.buf[off..off + t.schema.row_words()],
            schema: &t.schema,
        }
    }

    /// The primary key of a row the transaction holds.
    pub fn key(&self, h: RowH) -> u64 {
        self.acc[h.0 as usize].key
    }

    /// The working image of local row `a` of table `t`.
    pub(super) fn image<'b>(&'b self, t: &'b Table, a: &Access) -> RowRef<'b> {
        let o = a.off as usize;
        RowRef {
            words: &self.buf[o..o + t.schema.row_words()],
            schema: &t.schema,
        }
    }

    /// The image of local row `a` of table `t` as it was read, if it was
    /// kept (tables with secondary indexes).
    pub(super) fn orig_image<'b>(&'b self, t: &'b Table, a: &Access) -> Option<RowRef<'b>> {
        (a.orig != u32::MAX).then(|| {
            let o = a.orig as usize;
            RowRef {
                words: &self.buf[o..o + t.schema.row_words()],
                schema: &t.schema,
            }
        })
    }

    /// Lowers this transaction's isolation to *read committed* (ANSI P0 and
    /// P1 excluded; TPC-C's Level 1, which its Stock-Level transaction may
    /// run at, Clause 3.4.1): from here on its local reads take no lock and
    /// are not validated at commit, and neither are its scans and misses. It
    /// sees only committed rows, but two reads of one row may differ, and
    /// phantoms may appear. From here on it never makes another transaction
    /// abort or wait. Reads for update still lock, and its reads on other
    /// islands keep their island's scheme. A read-committed transaction must
    /// not write: its commit fails with an error.
    ///
    /// Called partway through a transaction, it leaves what was read before
    /// the call as it was: those reads keep their locks (2PL) and are
    /// validated at commit with the misses and scans made before the call,
    /// so the commit fails if any of them changed. A row read before the
    /// call and read again after it is the transaction's own copy, as ever.
    pub fn read_committed(&mut self) {
        if !self.read_committed {
            self.read_committed = true;
            self.rc_from = self.acc.len() as u32;
        }
    }

    /// A write in a read-committed transaction: the error its commit gives.
    pub(crate) fn read_committed_wrote(&self) -> Option<Abort> {
        (self.read_committed && (self.has_writes() || self.has_inserts)).then(|| {
            Abort::Failed(Error::Config(
                "a read-committed transaction (Txn::read_committed) wrote: only read-only \
                 transactions may lower their isolation"
                    .into(),
            ))
        })
    }
}
