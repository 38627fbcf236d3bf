//! Range scans over ordered primary and secondary indexes, and their
//! validation at commit: a scan records the range it walked with a count and
//! digest of its entries, and commit re-walks it (phantom protection).

use super::access::{Kind, DIGEST_SEED};
use super::{Access, RowH, Scan, Txn, LOCAL};
use crate::storage::ordered::{key_of, pair};
use crate::storage::{RowId, RowRef, SecondaryDef, SecondaryId, Table, TableId};
use crate::{Abort, AbortReason, Error};

impl Txn {
    /// Scans the primary ordered index over keys `[lo, hi]`, ascending or
    /// descending, returning at most `limit` present rows. Read them with
    /// [`Txn::scan_row`]`(0..n)`.
    pub async fn scan(
        &mut self,
        table: TableId,
        lo: u64,
        hi: u64,
        limit: usize,
        reverse: bool,
    ) -> Result<usize, Abort> {
        if let Some(island) = self.route(table, lo) {
            return self
                .remote_scan(
                    island,
                    table,
                    None,
                    key_of(lo),
                    key_of(hi) | u64::MAX as u128,
                    limit,
                    reverse,
                )
                .await;
        }
        self.scan_index(
            table,
            None,
            key_of(lo),
            key_of(hi) | u64::MAX as u128,
            limit,
            reverse,
        )
    }

    /// Rows whose secondary key equals `skey`, in primary-key order (at most `limit`).
    pub async fn scan_secondary(
        &mut self,
        table: TableId,
        idx: SecondaryId,
        skey: u64,
        limit: usize,
        reverse: bool,
    ) -> Result<usize, Abort> {
        if let Some(island) = self.route_secondary(table, idx, skey) {
            return self
                .remote_scan(
                    island,
                    table,
                    Some(idx),
                    pair(skey, 0),
                    pair(skey, u64::MAX),
                    limit,
                    reverse,
                )
                .await;
        }
        self.scan_index(
            table,
            Some(idx),
            pair(skey, 0),
            pair(skey, u64::MAX),
            limit,
            reverse,
        )
    }

    /// Resolves a secondary index by name (do it once, outside the hot path).
    /// Panics if the table has no such index: that is a schema/program mismatch.
    pub fn catalog_secondary(&self, table: TableId, name: &str) -> SecondaryId {
        let t = self.shared.catalog.table(table);
        t.secondary(name)
            .unwrap_or_else(|| panic!("table '{}' has no secondary index '{name}'", t.name))
    }

    /// The i-th row of the last scan.
    pub fn scan_row(&self, i: usize) -> RowH {
        self.scan_out[i]
    }

    pub(crate) fn scan_index(
        &mut self,
        table: TableId,
        sec: Option<SecondaryId>,
        lo: u128,
        hi: u128,
        limit: usize,
        reverse: bool,
    ) -> Result<usize, Abort> {
        // SAFETY: used only in this method (see `Txn::island`).
        let shared = unsafe { self.island() };
        let t = shared.catalog.table(table);
        let idx = match sec {
            Some(s) => &t.secondary[s.0 as usize].1,
            None => match &t.ordered {
                Some(o) => o,
                None => {
                    return Err(Abort::Failed(Error::Config(format!(
                        "table '{}' has a hash primary index: it cannot be range-scanned",
                        t.name
                    ))))
                }
            },
        };
        let want = limit.max(1);
        // A secondary scan must see this transaction's own changes to indexed
        // columns, which reach the index only at commit: scan the whole key
        // group, then correct it with the rows this transaction changed.
        let own_changes = sec.is_some()
            && self.acc.iter().any(|a| {
                a.table == table && a.island == LOCAL && (a.dirty || a.kind == Kind::Delete)
            });
        let limit = if own_changes { usize::MAX } else { want };
        // An entry of a secondary index may name a row whose image has
        // another key: the entry a committing writer added before it
        // installed (then aborted), or the one it replaces, removed only at
        // install. Such a row is not returned (the entry still counts for
        // validation). Rows of a fixed-key table never change keys.
        let check = sec
            .filter(|_| !t.fixed_keys)
            .map(|s| &t.secondary[s.0 as usize].0);
        let mut out = std::mem::take(&mut self.scan_out);
        out.clear();
        let mut visited = 0u32;
        let mut digest = DIGEST_SEED;
        let mut exhausted = true;
        let mut last = lo;
        let mut failed = None;
        idx.scan(lo, hi, reverse, |k, rid| {
            last = k;
            let pk = if sec.is_some() {
                k as u64
            } else {
                (k >> 64) as u64
            };
            let h = match self.find(table, rid) {
                Some(h) if self.acc[h.0 as usize].key != pk => {
                    // Read under another key: the slot was reused since
                    // (see `Txn::point`).
                    failed = Some(AbortReason::ReadValidation);
                    return false;
                }
                Some(h) => {
                    let a = &self.acc[h.0 as usize];
                    if a.kind != Kind::Insert {
                        visited += 1;
                        digest = mix(digest, k, rid);
                    }
                    (a.kind != Kind::Delete && (a.seen.present || a.kind == Kind::Insert))
                        .then_some(h)
                }
                None => {
                    visited += 1;
                    digest = mix(digest, k, rid);
                    match self.read_rid(table, rid, pk, false) {
                        Ok(h) => h,
                        Err(r) => {
                            failed = Some(r);
                            return false;
                        }
                    }
                }
            };
            let h =
                h.filter(|&h| check.is_none_or(|def| (def.key)(&self.row(h)) == (k >> 64) as u64));
            if let Some(h) = h {
                out.push(h);
                if out.len() == limit {
                    exhausted = false;
                    return false;
                }
            }
            true
        });
        if let Some(r) = failed {
            self.scan_out = out;
            return Err(Abort::Conflict(r));
        }
        if own_changes {
            let (def, _) = &t.secondary[sec.map_or(0, |s| s.0 as usize)];
            let skey = (lo >> 64) as u64;
            let words = t.schema.row_words();
            let image_key = |a: &Access, buf: &[u64]| {
                let o = a.off as usize;
                (def.key)(&RowRef {
                    words: &buf[o..o + words],
                    schema: &t.schema,
                })
            };
            out.retain(|h| {
                let a = &self.acc[h.0 as usize];
                !(a.dirty && image_key(a, &self.buf) != skey)
            });
            for (i, a) in self.acc.iter().enumerate() {
                let h = RowH(i as u32);
                if a.table == table
                    && a.island == LOCAL
                    && a.dirty
                    && a.kind != Kind::Delete
                    && image_key(a, &self.buf) == skey
                    && !out.contains(&h)
                {
                    out.push(h);
                }
            }
            out.sort_unstable_by_key(|h| self.acc[h.0 as usize].key);
            if reverse {
                out.reverse();
            }
            out.truncate(want);
        }
        self.scan_out = out;
        // A scan cut short by its limit has read its range up to the last
        // entry it visited: validate that whole range. Counting entries is not
        // enough: the rescan skips the transaction's own inserts, so when the
        // last row returned is an own insert, a foreign insert before it would
        // leave the count and digest of the other entries unchanged.
        let (lo, hi) = match (exhausted, reverse) {
            (true, _) => (lo, hi),
            (false, false) => (lo, last),
            (false, true) => (last, hi),
        };
        let exhausted = true;
        // A table whose key set is fixed has no phantoms to validate against.
        if self.validate && !self.read_committed && !self.shared.catalog.table(table).fixed_keys {
            self.scans.push(Scan {
                table,
                secondary: sec,
                lo,
                hi,
                reverse,
                visited,
                exhausted,
                digest,
            });
        }
        Ok(self.scan_out.len())
    }

    /// Re-walks a scan's range, skipping this transaction's own inserts.
    pub(super) fn rescan(&self, t: &Table, s: &Scan, limit: u32) -> (u32, u64) {
        let idx = match s.secondary {
            Some(sec) => &t.secondary[sec.0 as usize].1,
            None => t.ordered.as_ref().expect("scan on an ordered table"),
        };
        let mut visited = 0u32;
        let mut digest = DIGEST_SEED;
        if limit == 0 {
            return (0, digest);
        }
        let def = s.secondary.map(|sec| &t.secondary[sec.0 as usize].0);
        idx.scan(s.lo, s.hi, s.reverse, |k, rid| {
            if self.own_new_entry(t, def, k, rid) {
                return true;
            }
            visited += 1;
            digest = mix(digest, k, rid);
            visited < limit
        });
        (visited, digest)
    }

    /// Whether index entry `k → rid` (of the secondary index `def`, or the
    /// primary index) was added by this transaction: an insert's, or one
    /// [`Txn::index_secondary_early`] added for a changed key. A rescan
    /// skips them: the scan they validate ran before they existed.
    fn own_new_entry(&self, t: &Table, def: Option<&SecondaryDef>, k: u128, rid: RowId) -> bool {
        if !self.has_inserts && !self.has_moves {
            return false;
        }
        let Some(h) = self.find(t.id, rid) else {
            return false;
        };
        let a = &self.acc[h.0 as usize];
        match (a.kind, def) {
            (Kind::Insert, _) => true,
            (Kind::Read, Some(def)) if a.indexed => self
                .orig_image(t, a)
                .is_some_and(|old| (def.key)(&old) != (k >> 64) as u64),
            _ => false,
        }
    }
}

#[inline]
fn mix(d: u64, k: u128, rid: RowId) -> u64 {
    let x = (k as u64) ^ ((k >> 64) as u64).rotate_left(17) ^ rid.rotate_left(41);
    crate::storage::hash::hash_key(d ^ x)
}
