//! Storage: tables with a declared schema, rows in arenas, and their indexes.
//!
//! A table owns one row arena, one primary index (hash for point access, or
//! ordered where ranges are needed) and any number of non-unique secondary
//! indexes (ordered, keyed by a function of the row). Storage knows nothing of
//! transactions: the `cc` and `txn` layers decide who may read and write a row
//! and when. What storage guarantees is that every row slot has a version word
//! (`tid`), a lock word and its key, and that a slot is never freed to the
//! allocator, so concurrent readers can always validate what they read.
//!
//! Version word: `tid << 2 | PRESENT << 1 | LOCKED`. A zeroed slot is absent.

pub mod arena;
pub mod btree;
pub mod hash;
mod mem;
pub mod ordered;
#[cfg(test)]
mod ordered_model;
pub mod schema;
pub mod sole;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use arena::{PrefaultStats, RowCache, RowId};
pub use schema::{Col, ColType, Column, RowMut, RowRef, Schema};

use arena::{Arena, HEADER_WORDS, W_KEY, W_TID};
use hash::HashIndex;
use ordered::OrderedIndex;

use crate::Error;

pub type TableId = u16;

pub const LOCKED: u64 = 1;
pub const PRESENT: u64 = 2;

#[inline]
pub fn tid_of(word: u64) -> u64 {
    word >> 2
}
#[inline]
pub fn make_word(tid: u64, present: bool) -> u64 {
    (tid << 2) | if present { PRESENT } else { 0 }
}

/// A cache prefetch hint for the line holding `v` (a no-op where unsupported).
#[inline]
pub(crate) fn prefetch<T>(v: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is a hint; it never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            v as *const T as *const i8,
        )
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = v;
}

/// How a table's primary key is indexed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrimaryKind {
    /// Point access only (fastest).
    Hash,
    /// Point access and range scans.
    Ordered,
}

/// What [`Table::prefetch`] brings into cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prefetch {
    Index,
    Row,
}

/// A non-unique secondary index: a key computed from the row.
#[derive(Clone)]
pub struct SecondaryDef {
    pub name: String,
    pub key: fn(&RowRef) -> u64,
}

/// A table as the application declares it.
#[derive(Clone)]
pub struct TableDef {
    pub name: String,
    pub columns: Vec<(String, ColType)>,
    /// Most rows the table may hold at once; fixed at start.
    pub capacity: u64,
    pub primary: PrimaryKind,
    pub secondary: Vec<SecondaryDef>,
    /// The rows are loaded once and never inserted, deleted, or moved to
    /// another secondary key afterwards (TPC-C's warehouse, district,
    /// customer, stock, item). Scans of such a table cannot meet a phantom,
    /// so they need no validation at commit; transactions that would change
    /// its key set fail instead.
    pub fixed_keys: bool,
}

impl TableDef {
    pub fn new(
        name: &str,
        columns: &[(&str, ColType)],
        capacity: u64,
        primary: PrimaryKind,
    ) -> TableDef {
        TableDef {
            name: name.into(),
            columns: columns
                .iter()
                .map(|(n, t)| ((*n).to_string(), *t))
                .collect(),
            capacity,
            primary,
            secondary: vec![],
            fixed_keys: false,
        }
    }

    /// Declares the table's key set fixed after load (see `fixed_keys`).
    pub fn with_fixed_keys(mut self) -> TableDef {
        self.fixed_keys = true;
        self
    }

    pub fn with_secondary(mut self, name: &str, key: fn(&RowRef) -> u64) -> TableDef {
        self.secondary.push(SecondaryDef {
            name: name.into(),
            key,
        });
        self
    }

    /// About how many bytes a table of this definition takes once it holds
    /// `rows` rows, on an island with several workers (`concurrent`) or one:
    /// what creating it reserves whatever it holds (a hash index's slots,
    /// sized by the capacity and written at once; the arena's chunk
    /// pointers), the rows (arena chunks of about 2 MiB, claimed as rows
    /// come) and their entries in ordered indexes. An estimate, to refuse
    /// what cannot fit before loading it; saturates instead of overflowing.
    pub fn memory_bytes(&self, rows: u64, concurrent: bool) -> u64 {
        let rows = rows.min(self.capacity);
        let hash = match self.primary {
            PrimaryKind::Hash => HashIndex::bytes_for(self.capacity),
            PrimaryKind::Ordered => 0,
        };
        Arena::bytes_for(self.row_words(), self.capacity, rows)
            .saturating_add(hash)
            .saturating_add(rows.saturating_mul(self.index_entry_bytes(concurrent)))
    }

    /// About how many bytes one more row takes: its slot in the arena and
    /// its ordered-index entries (what a table that grows while a run goes
    /// adds per insert).
    pub fn bytes_per_row(&self, concurrent: bool) -> u64 {
        ((arena::HEADER_WORDS + self.row_words()) * 8) as u64 + self.index_entry_bytes(concurrent)
    }

    fn row_words(&self) -> usize {
        let cols: Vec<(&str, ColType)> =
            self.columns.iter().map(|(n, t)| (n.as_str(), *t)).collect();
        Schema::new(&cols).map_or(1, |s| s.row_words())
    }

    /// Bytes of a row's entries in the table's ordered indexes.
    fn index_entry_bytes(&self, concurrent: bool) -> u64 {
        let indexes = self.secondary.len() as u64 + u64::from(self.primary == PrimaryKind::Ordered);
        let entry = if concurrent {
            ORDERED_ENTRY_SHARED_BYTES
        } else {
            ORDERED_ENTRY_OWNED_BYTES
        };
        indexes * entry
    }
}

/// A fingerprint of a set of tables: their names, columns (names and types), row sizes,
/// primary index kinds and secondary index names, in order; not their capacities. Two
/// databases with the same fingerprint read each other's logs and checkpoints.
pub fn schema_fingerprint(defs: &[TableDef]) -> u64 {
    let mut text = String::new();
    for d in defs {
        let row = schema::Schema::new(
            &d.columns
                .iter()
                .map(|(n, t)| (n.as_str(), *t))
                .collect::<Vec<_>>(),
        )
        .map_or(0, |s| s.row_bytes);
        text.push_str(&format!(
            "table {} {:?} {} row {row}:",
            d.name, d.primary, d.fixed_keys
        ));
        for (n, t) in &d.columns {
            text.push_str(&format!(" {n} {t:?}"));
        }
        for s in &d.secondary {
            text.push_str(&format!(" index {}", s.name));
        }
        text.push('\n');
    }
    fnv1a(text.as_bytes())
}

/// FNV-1a, 64 bits: the fingerprints' hash (stable across builds and machines).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
/// Bytes an entry of an ordered index takes, about: a `BTreeMap` entry (24
/// bytes in nodes some way from full) on a single-worker island, a skip-list
/// node (key, value, reference count, tower; from the allocator) otherwise.
const ORDERED_ENTRY_OWNED_BYTES: u64 = 40;
const ORDERED_ENTRY_SHARED_BYTES: u64 = 80;

pub struct Table {
    pub id: TableId,
    pub name: String,
    pub schema: Schema,
    pub(crate) arena: Arena,
    pub(crate) hash: Option<HashIndex>,
    pub(crate) ordered: Option<OrderedIndex>,
    pub(crate) secondary: Vec<(SecondaryDef, OrderedIndex)>,
    /// See [`TableDef::fixed_keys`].
    pub fixed_keys: bool,
}

/// Index of a secondary index within its table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SecondaryId(pub u16);

impl Table {
    pub fn new(id: TableId, def: &TableDef, concurrent: bool) -> Result<Table, Error> {
        let cols: Vec<(&str, ColType)> =
            def.columns.iter().map(|(n, t)| (n.as_str(), *t)).collect();
        let schema =
            Schema::new(&cols).map_err(|e| Error::Config(format!("table '{}': {e}", def.name)))?;
        if def.capacity == 0 {
            return Err(Error::Config(format!(
                "table '{}' has capacity 0",
                def.name
            )));
        }
        let fail = |e: String| Error::Config(format!("table '{}': {e}", def.name));
        let arena = Arena::new(schema.row_words(), def.capacity).map_err(fail)?;
        let (hash, ordered) = match def.primary {
            PrimaryKind::Hash => (
                Some(HashIndex::new(def.capacity, concurrent).map_err(fail)?),
                None,
            ),
            PrimaryKind::Ordered => (None, Some(OrderedIndex::new(concurrent))),
        };
        Ok(Table {
            id,
            name: def.name.clone(),
            schema,
            arena,
            hash,
            ordered,
            secondary: def
                .secondary
                .iter()
                .map(|s| (s.clone(), OrderedIndex::new(concurrent)))
                .collect(),
            fixed_keys: def.fixed_keys,
        })
    }

    pub fn secondary(&self, name: &str) -> Option<SecondaryId> {
        self.secondary
            .iter()
            .position(|(d, _)| d.name == name)
            .map(|i| SecondaryId(i as u16))
    }

    #[inline]
    pub fn lookup(&self, key: u64) -> Option<RowId> {
        match &self.hash {
            Some(h) => h.get(&self.arena, key),
            None => self
                .ordered
                .as_ref()
                .and_then(|o| o.get(ordered::key_of(key))),
        }
    }

    /// Prefetch hints for a point access to `key`. `Index` brings the index
    /// slot into cache; `Row` finds the key's row (best after an `Index` hint;
    /// in a hash index by the slot's tag alone, so that the hint never waits
    /// for the row) and brings the row's first lines into cache. Issuing the hints for all
    /// keys of a transaction before touching any of them overlaps the cache
    /// misses instead of taking them one after another.
    #[inline]
    pub fn prefetch(&self, key: u64, what: Prefetch) {
        match what {
            Prefetch::Index => {
                if let Some(h) = &self.hash {
                    h.prefetch(key);
                }
            }
            Prefetch::Row => {
                let rid = match &self.hash {
                    Some(h) => h.guess(key),
                    None => self.lookup(key),
                };
                if let Some(rid) = rid {
                    // Every line: a read copies the whole row out.
                    self.prefetch_rid(rid, true);
                }
            }
        }
    }

    /// Brings the row's header line (its version and lock words) into cache,
    /// and with `all` every line of its data too. A commit installs rows that
    /// it read long before (a two-phase commit waits for forced log records,
    /// milliseconds), so they are cold again: prefetching them all first lets
    /// the misses overlap instead of stalling the install once per row.
    #[inline]
    pub(crate) fn prefetch_rid(&self, rid: RowId, all: bool) {
        let w = self.arena.row(rid);
        let end = if all { w.len() } else { 1 };
        for i in (0..end).step_by(8) {
            prefetch(&w[i]);
        }
        if all {
            prefetch(&w[w.len() - 1]);
        }
    }

    #[inline]
    pub(crate) fn words(&self, rid: RowId) -> &[AtomicU64] {
        self.arena.row(rid)
    }

    #[inline]
    pub(crate) fn data(&self, rid: RowId) -> &[AtomicU64] {
        &self.arena.row(rid)[HEADER_WORDS..]
    }

    #[inline]
    pub(crate) fn version(&self, rid: RowId) -> &AtomicU64 {
        &self.arena.row(rid)[W_TID]
    }

    #[inline]
    pub(crate) fn key_word(&self, rid: RowId) -> &AtomicU64 {
        &self.arena.row(rid)[W_KEY]
    }

    /// Copies a row's data into `out` (no consistency check; callers validate).
    #[inline]
    pub(crate) fn copy_out(&self, rid: RowId, out: &mut [u64]) {
        for (o, w) in out.iter_mut().zip(self.data(rid)) {
            *o = w.load(Ordering::Relaxed);
        }
    }

    /// Writes a row's data from `src` (the caller holds the row's lock or owns the island).
    #[inline]
    pub(crate) fn copy_in(&self, rid: RowId, src: &[u64]) {
        for (w, s) in self.data(rid).iter().zip(src) {
            w.store(*s, Ordering::Relaxed);
        }
    }

    /// Adds `key → rid` to the primary index. `Some(existing)` if the key was present.
    pub(crate) fn index_primary(&self, key: u64, rid: RowId) -> Result<Option<RowId>, Error> {
        match &self.hash {
            Some(h) => match h.insert(&self.arena, key, rid) {
                Ok(hash::Inserted::Ok) => Ok(None),
                Ok(hash::Inserted::Exists(r)) => Ok(Some(r)),
                Err(hash::IndexFull) => Err(self.full()),
            },
            None => Ok(self
                .ordered
                .as_ref()
                .and_then(|o| o.insert(ordered::key_of(key), rid))),
        }
    }

    pub(crate) fn unindex_primary(&self, key: u64, rid: RowId) {
        match &self.hash {
            Some(h) => {
                h.remove(key, rid);
            }
            None => {
                if let Some(o) = &self.ordered {
                    o.remove(ordered::key_of(key));
                }
            }
        }
    }

    pub(crate) fn index_secondary(&self, key: u64, rid: RowId, row: &RowRef) {
        for (def, idx) in &self.secondary {
            idx.insert(ordered::pair((def.key)(row), key), rid);
        }
    }

    pub(crate) fn unindex_secondary(&self, key: u64, row: &RowRef) {
        for (def, idx) in &self.secondary {
            idx.remove(ordered::pair((def.key)(row), key));
        }
    }

    pub(crate) fn full(&self) -> Error {
        Error::TableFull {
            table: self.name.clone(),
            capacity: self.arena.capacity(),
        }
    }

    pub(crate) fn alloc(&self, cache: &mut RowCache) -> Result<RowId, Error> {
        self.arena.alloc(cache).ok_or_else(|| self.full())
    }

    /// Puts a committed row directly, outside any transaction: for loaders and
    /// recovery, while no worker runs. Replaces an existing row with the same key.
    pub fn put_direct(
        &self,
        cache: &mut RowCache,
        key: u64,
        tid: u64,
        data: &[u64],
    ) -> Result<RowId, Error> {
        if let Some(rid) = self.lookup(key) {
            self.unindex_secondary_of(key, rid);
            self.copy_in(rid, data);
            self.version(rid)
                .store(make_word(tid, true), Ordering::Release);
            self.index_secondary(
                key,
                rid,
                &RowRef {
                    words: data,
                    schema: &self.schema,
                },
            );
            return Ok(rid);
        }
        let rid = self.alloc(cache)?;
        self.key_word(rid).store(key, Ordering::Release);
        self.copy_in(rid, data);
        self.version(rid)
            .store(make_word(tid, true), Ordering::Release);
        self.index_primary(key, rid)?;
        self.index_secondary(
            key,
            rid,
            &RowRef {
                words: data,
                schema: &self.schema,
            },
        );
        Ok(rid)
    }

    /// Removes a stored row's secondary entries, computed from its current
    /// image (loaders and recovery, which run alone; skipped without indexes).
    fn unindex_secondary_of(&self, key: u64, rid: RowId) {
        if self.secondary.is_empty() {
            return;
        }
        let old: Vec<u64> = self
            .data(rid)
            .iter()
            .map(|w| w.load(Ordering::Relaxed))
            .collect();
        self.unindex_secondary(
            key,
            &RowRef {
                words: &old,
                schema: &self.schema,
            },
        );
    }

    /// Deletes a row directly (recovery only). Returns whether it existed.
    pub fn delete_direct(&self, cache: &mut RowCache, key: u64) -> bool {
        let Some(rid) = self.lookup(key) else {
            return false;
        };
        self.unindex_secondary_of(key, rid);
        self.unindex_primary(key, rid);
        let t = tid_of(self.version(rid).load(Ordering::Acquire));
        self.version(rid)
            .store(make_word(t, false), Ordering::Release);
        self.arena.free(cache, rid);
        true
    }

    /// Calls `f(key, tid, data)` for every present row, each read consistently
    /// (retried while a writer holds it). Safe while workers run: this is how a
    /// fuzzy checkpoint reads the table.
    pub fn for_each_row(&self, mut f: impl FnMut(u64, u64, &[u64])) {
        let r: Result<(), std::convert::Infallible> = self.try_for_each_row(|k, tid, row| {
            f(k, tid, row);
            Ok(())
        });
        let Ok(()) = r;
    }

    /// [`Table::for_each_row`] that stops at the first error `f` returns.
    pub fn try_for_each_row<E>(
        &self,
        mut f: impl FnMut(u64, u64, &[u64]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut buf = vec![0u64; self.schema.row_words()];
        for rid in 0..self.arena.high_water() {
            if !self.arena.is_allocated(rid) {
                continue;
            }
            loop {
                let v1 = self.version(rid).load(Ordering::Acquire);
                if v1 & LOCKED != 0 {
                    std::hint::spin_loop();
                    continue;
                }
                let key = self.key_word(rid).load(Ordering::Acquire);
                self.copy_out(rid, &mut buf);
                std::sync::atomic::fence(Ordering::Acquire);
                let v2 = self.version(rid).load(Ordering::Acquire);
                if v1 != v2 {
                    continue;
                }
                if v1 & PRESENT != 0 {
                    f(key, tid_of(v1), &buf)?;
                }
                break;
            }
        }
        Ok(())
    }

    /// Number of present rows (walks the arena; for tests and reports).
    pub fn count_rows(&self) -> u64 {
        let mut n = 0;
        self.for_each_row(|_, _, _| n += 1);
        n
    }
}

/// All tables of one island. The tables are shared so that the island's
/// prefault thread can hold them, and not the island, during a pass.
pub struct Catalog {
    pub tables: Arc<[Table]>,
}

impl Catalog {
    pub fn new(defs: &[TableDef], concurrent: bool) -> Result<Catalog, Error> {
        if defs.len() > u16::MAX as usize {
            return Err(Error::Config("too many tables".into()));
        }
        let mut tables = Vec::with_capacity(defs.len());
        for (i, d) in defs.iter().enumerate() {
            if defs[..i].iter().any(|o| o.name == d.name) {
                return Err(Error::Config(format!("table '{}' declared twice", d.name)));
            }
            tables.push(Table::new(i as TableId, d, concurrent)?);
        }
        Ok(Catalog {
            tables: tables.into(),
        })
    }

    pub fn table(&self, id: TableId) -> &Table {
        &self.tables[id as usize]
    }

    pub fn by_name(&self, name: &str) -> Option<&Table> {
        self.tables.iter().find(|t| t.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(capacity: u64, primary: PrimaryKind) -> TableDef {
        TableDef::new("t", &[("v", ColType::U64)], capacity, primary)
    }

    #[test]
    fn the_memory_estimate_counts_the_reservation_the_rows_and_their_indexes() {
        // A hash index for 1000 rows: 2048 slots of 8 bytes, whatever it holds.
        let hash = def(1000, PrimaryKind::Hash);
        let empty = hash.memory_bytes(0, false);
        assert!(empty >= 2048 * 8, "{empty}");
        // Rows of 4 words (3 of header, 1 of data) come in chunks of about 2 MiB.
        let full = hash.memory_bytes(1000, false);
        assert!(full >= empty + 1000 * 32, "{full}");
        assert_eq!(hash.bytes_per_row(false), 32);
        // An ordered primary index: an entry per row, dearer when shared.
        let ordered = def(1 << 20, PrimaryKind::Ordered);
        assert!(
            ordered.memory_bytes(1 << 20, true) > ordered.memory_bytes(1 << 20, false),
            "a skip-list entry costs more than a B-tree's"
        );
        assert!(ordered.memory_bytes(1 << 20, false) >= (1 << 20) * (32 + 40));
        // No overflow, whatever the capacity.
        assert_eq!(
            def(u64::MAX, PrimaryKind::Hash).memory_bytes(0, true),
            u64::MAX
        );
    }

    #[test]
    fn a_capacity_beyond_what_a_table_can_hold_is_an_error_not_a_panic() {
        let e = Table::new(0, &def(1 << 41, PrimaryKind::Hash), false)
            .err()
            .expect("refused");
        assert!(e.to_string().contains("table 't'"), "{e}");
        let e = Table::new(0, &def(u64::MAX, PrimaryKind::Ordered), false)
            .err()
            .expect("refused");
        assert!(e.to_string().contains("table 't'"), "{e}");
    }
}
