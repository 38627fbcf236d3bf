//! Remote operations: a transaction reads and writes rows of other islands.
//!
//! A transaction that runs under a distributed executor carries a [`Dist`]:
//! the deployment's [`Router`] (which island holds a key) and the state of
//! the one remote request it may have outstanding. An operation on a key of
//! another island encodes a request (see `transport::wire`) into the transaction,
//! marks the island as touched and suspends; the executor sends the request
//! (batched with everything else for that island), keeps running other
//! transactions, and polls this one again when the reply has arrived. The
//! reply's rows become access entries holding a *copy* of the remote row:
//! the owner island holds the lock. Changes to copies are shipped to their
//! owners at commit (WRITE / DELETE frames before the PrepareReq).
//!
//! The participant side lives here too: the owner island runs the request on
//! a branch context (an ordinary `Txn`) with the same local code paths, so
//! remote accesses lock and validate exactly like local ones.

use std::sync::Arc;
use std::task::Poll;

use super::access::{Access, Kind};
use super::{RowH, Txn, LOCAL, REMOTE_RID};
use crate::cc::{Held, Observed};
use crate::coord::IslandSet;
use crate::route::{IslandId, Router};
use crate::storage::{SecondaryId, TableId};
use crate::transport::wire::{self, Frame, Status};
use crate::wal::WriteEntry;
use crate::{Abort, AbortReason, Error};

/// Where an early prepare of a transaction's remote branches stands (see
/// [`Txn::prepare_remote`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Early {
    /// Not asked for: remote operations go on, 2PC starts at commit.
    Off,
    /// Asked for: the executor starts 2PC at its next look at the context.
    Requested,
    /// PrepareReqs sent; waiting for every remote vote.
    Voting,
    /// Every remote branch voted yes and holds its locks until the decision.
    Prepared,
    /// A remote branch voted no or did not answer: the transaction aborts.
    Failed,
}

/// Bits of a request tag below the context id.
pub(crate) const TAG_SEQ_BITS: u32 = 20;
const TAG_SEQ_MASK: u32 = (1 << TAG_SEQ_BITS) - 1;

/// A transaction's distributed state (see the module documentation).
pub(crate) struct Dist {
    pub(crate) router: Arc<dyn Router>,
    /// This island.
    pub(crate) island: IslandId,
    /// The current attempt's global id (set by the executor at begin).
    pub(crate) gtid: u64,
    /// The tag of the outstanding request, echoed by its reply: tells it from
    /// stale or duplicated replies. `tag_base` (the context's id) | a counter.
    pub(crate) tag: u32,
    pub(crate) tag_base: u32,
    req_seq: u32,
    /// Islands other than this one that hold a branch of this attempt.
    pub(crate) touched: IslandSet,
    /// A request payload waiting for the executor to send it to `req_to`.
    pub(crate) req: Vec<u8>,
    pub(crate) req_to: IslandId,
    pub(crate) req_ready: bool,
    /// The reply payload, once it arrived.
    pub(crate) reply: Vec<u8>,
    pub(crate) reply_ready: bool,
    /// The islands whose branch validates reads (misses, scans) at its
    /// prepare.
    pub(crate) validating: IslandSet,
    /// Some remote branch read data its island had not made durable
    /// (`sync`) or written (`async`) yet: it must vote, which waits for that
    /// data, at commit.
    pub(crate) remote_undurable: bool,
    pub(crate) early: Early,
    /// Remote deletes shipped by the early prepare (a later one is refused).
    pub(crate) early_deletes: usize,
    /// Islands whose changes went out with the LOCK round (ahead of its
    /// LOCK frame): the prepare does not ship them again.
    pub(crate) shipped: IslandSet,
    /// The executor's clock (µs) when the attempt began: no branch of it on
    /// another island began earlier.
    pub(crate) begin_us: u64,
}

impl Dist {
    pub(crate) fn new(router: Arc<dyn Router>, island: IslandId, tag_base: u32) -> Box<Dist> {
        Box::new(Dist {
            router,
            island,
            gtid: 0,
            tag: 0,
            tag_base,
            req_seq: 0,
            touched: IslandSet::EMPTY,
            req: Vec::with_capacity(64),
            req_to: 0,
            req_ready: false,
            reply: Vec::with_capacity(1024),
            reply_ready: false,
            validating: IslandSet::EMPTY,
            remote_undurable: false,
            early: Early::Off,
            early_deletes: 0,
            shipped: IslandSet::EMPTY,
            begin_us: 0,
        })
    }

    /// A fresh request tag: the context's id and the next sequence number,
    /// never 0 (a tag of 0 means no request outstanding, and a branch that
    /// has served none).
    fn next_tag(&mut self) -> u32 {
        self.req_seq = self.req_seq.wrapping_add(1);
        if self.req_seq & TAG_SEQ_MASK == 0 {
            self.req_seq = self.req_seq.wrapping_add(1);
        }
        self.tag_base | (self.req_seq & TAG_SEQ_MASK)
    }

    pub(crate) fn reset(&mut self) {
        self.touched = IslandSet::EMPTY;
        // No request outstanding: a late reply to the previous attempt on
        // this context is dropped as stale.
        self.tag = 0;
        self.req_ready = false;
        self.reply_ready = false;
        self.validating = IslandSet::EMPTY;
        self.remote_undurable = false;
        self.early = Early::Off;
        self.early_deletes = 0;
        self.shipped = IslandSet::EMPTY;
    }
}

impl Txn {
    /// The other island that holds `key`, if the transaction is distributed
    /// and the key is not here.
    #[inline]
    pub(super) fn route(&self, table: TableId, key: u64) -> Option<IslandId> {
        let d = self.dist.as_deref()?;
        let i = d.router.island_of(table, key)?;
        (i != d.island).then_some(i)
    }

    #[inline]
    pub(super) fn route_secondary(
        &self,
        table: TableId,
        idx: SecondaryId,
        skey: u64,
    ) -> Option<IslandId> {
        let d = self.dist.as_deref()?;
        let i = d.router.island_of_secondary(table, idx, skey)?;
        (i != d.island).then_some(i)
    }

    /// The access entry of a remote row, if the transaction has one.
    fn find_remote(&self, island: IslandId, table: TableId, key: u64) -> Option<RowH> {
        self.acc
            .iter()
            .rposition(|a| a.island == island && a.key == key && a.table == table)
            .map(|i| RowH(i as u32))
    }

    fn present(&self, h: RowH) -> bool {
        let a = &self.acc[h.0 as usize];
        a.kind != Kind::Delete && (a.seen.present || a.kind == Kind::Insert)
    }

    /// Prepares the branches this transaction holds on other islands now,
    /// instead of at commit, and waits until every one has voted yes. From
    /// then on they hold their locks (read locks too) until the decision, and
    /// the transaction may only work on its home island: a remote operation,
    /// or a change to a row of another island, fails the transaction.
    ///
    /// Why: a stored procedure that does its remote work first, prepares it,
    /// and only then touches its home island's hot rows (a TPC-C warehouse or
    /// district) holds those rows for microseconds instead of across the
    /// remote branches' forced prepare records; with `sync` durability that
    /// is the difference between the rows being free or locked most of the
    /// time. The home branch is still prepared at commit, last, and its
    /// vote decides with the others'; locks are all taken before any is
    /// released, so this is still two-phase locking.
    ///
    /// A no-op on a single island, when no other island was touched, or when
    /// a remote branch validates a scan or a point miss (those are checked at
    /// prepare, not locked, so they prepare last, at commit).
    pub async fn prepare_remote(&mut self) -> Result<(), Abort> {
        let Some(d) = self.dist.as_mut() else {
            return Ok(());
        };
        match d.early {
            Early::Prepared => return Ok(()),
            // Nothing to prepare; or a remote branch validates a scan or a
            // miss at prepare: with no lock on a range, validating it before
            // this island's part runs would let a phantom in between (then it
            // prepares at commit, with the rest).
            Early::Off if d.touched.is_empty() || !d.validating.is_empty() => return Ok(()),
            Early::Off => d.early = Early::Requested,
            Early::Failed => return Err(Abort::Conflict(AbortReason::Remote)),
            Early::Requested | Early::Voting => {}
        }
        std::future::poll_fn(|_| match self.dist.as_ref().map(|d| d.early) {
            Some(Early::Prepared) => Poll::Ready(Ok(())),
            Some(Early::Failed) => Poll::Ready(Err(Abort::Conflict(AbortReason::Remote))),
            _ => Poll::Pending,
        })
        .await
    }

    /// After an early prepare: its remote changes were shipped; forget that
    /// they are changes, so a change made later shows (and is refused).
    pub(crate) fn mark_remote_shipped(&mut self) {
        let mut deletes = 0;
        for a in self.acc.iter_mut().filter(|a| a.island != LOCAL) {
            a.dirty = false;
            deletes += usize::from(a.kind == Kind::Delete);
        }
        if let Some(d) = self.dist.as_mut() {
            d.early_deletes = deletes;
        }
    }

    /// After an early prepare: whether a row of another island was changed
    /// or deleted since (such a change was never shipped).
    pub(crate) fn remote_changed_after_prepare(&self) -> bool {
        let mut deletes = 0;
        for a in self.acc.iter().filter(|a| a.island != LOCAL) {
            if a.dirty {
                return true;
            }
            deletes += usize::from(a.kind == Kind::Delete);
        }
        self.dist
            .as_ref()
            .is_some_and(|d| d.early_deletes != deletes)
    }

    /// Queues a request for the executor and waits for its reply.
    async fn request(
        &mut self,
        island: IslandId,
        encode: impl FnOnce(&mut Vec<u8>, u64, u32),
    ) -> Result<(), Abort> {
        let d = self
            .dist
            .as_mut()
            .expect("remote operation without a distributed context");
        if d.early != Early::Off {
            return Err(Abort::Failed(Error::Config(format!(
                "a remote operation on island {island} after prepare_remote: a transaction \
                 prepares its remote branches once, after its last remote operation"
            ))));
        }
        d.req.clear();
        d.tag = d.next_tag();
        encode(&mut d.req, d.gtid, d.tag);
        if d.touched.contains(island) {
            // The branch there must still be the one the earlier requests
            // made (see `wire::CONTINUES`).
            d.req[0] |= wire::CONTINUES;
        }
        d.req_to = island;
        d.req_ready = true;
        d.reply_ready = false;
        d.touched.insert(island);
        std::future::poll_fn(|_| {
            if self.dist.as_ref().is_some_and(|d| d.reply_ready) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
        Ok(())
    }

    pub(super) async fn remote_point(
        &mut self,
        island: IslandId,
        table: TableId,
        key: u64,
        for_update: bool,
    ) -> Result<Option<RowH>, Abort> {
        if let Some(h) = self.find_remote(island, table, key) {
            return Ok(self.present(h).then_some(h));
        }
        self.request(island, |b, gtid, tag| {
            wire::get(b, gtid, tag, table, key, for_update)
        })
        .await?;
        let held = if for_update {
            Held::Exclusive
        } else {
            Held::Shared
        };
        self.absorb(island, table, held, Kind::Read, false)
    }

    /// Reads several rows of `table`, batching the keys of each other island
    /// into one request. Results: [`Txn::many_row`]`(i)` for `keys[i]`.
    pub async fn get_many(
        &mut self,
        table: TableId,
        keys: &[u64],
        for_update: bool,
    ) -> Result<(), Abort> {
        self.many_out.clear();
        let mut route = std::mem::take(&mut self.many_route);
        route.clear();
        route.extend(keys.iter().map(|&k| self.route(table, k).unwrap_or(LOCAL)));
        let r = self.get_many_routed(table, keys, &route, for_update).await;
        self.many_route = route;
        r
    }

    async fn get_many_routed(
        &mut self,
        table: TableId,
        keys: &[u64],
        route: &[IslandId],
        for_update: bool,
    ) -> Result<(), Abort> {
        if keys.len() > 1 {
            // Overlap the cache misses of the local keys: index slots first,
            // then rows (see `Table::prefetch`).
            let t = self.shared.catalog.table(table);
            for (&k, &i) in keys.iter().zip(route) {
                if i == LOCAL {
                    t.prefetch(k, crate::storage::Prefetch::Index);
                }
            }
            for (&k, &i) in keys.iter().zip(route) {
                if i == LOCAL {
                    t.prefetch(k, crate::storage::Prefetch::Row);
                }
            }
        }
        let mut remote = IslandSet::EMPTY;
        for (&k, &i) in keys.iter().zip(route) {
            if i == LOCAL {
                let h = self.point(table, k, for_update)?;
                self.many_out.push(h);
            } else if let Some(h) = self.find_remote(i, table, k) {
                self.many_out.push(Some(h).filter(|&h| self.present(h)));
            } else {
                remote.insert(i);
                self.many_out.push(None);
            }
        }
        for island in remote.iter() {
            let mut wanted = std::mem::take(&mut self.many_keys);
            wanted.clear();
            wanted.extend(
                keys.iter()
                    .zip(route)
                    .filter(|&(_, &i)| i == island)
                    .map(|(&k, _)| k),
            );
            let r = self
                .request(island, |b, gtid, tag| {
                    wire::multi_get(b, gtid, tag, table, for_update, wanted.iter().copied())
                })
                .await;
            self.many_keys = wanted;
            r?;
            let held = if for_update {
                Held::Exclusive
            } else {
                Held::Shared
            };
            self.absorb(island, table, held, Kind::Read, false)?;
            for (n, (&k, &i)) in keys.iter().zip(route).enumerate() {
                if i == island {
                    self.many_out[n] = self
                        .find_remote(island, table, k)
                        .filter(|&h| self.present(h));
                }
            }
        }
        Ok(())
    }

    /// The row of the i-th key of the last [`Txn::get_many`] (`None`: absent).
    pub fn many_row(&self, i: usize) -> Option<RowH> {
        self.many_out[i]
    }

    pub(super) async fn remote_insert(
        &mut self,
        island: IslandId,
        table: TableId,
        key: u64,
    ) -> Result<Option<RowH>, Abort> {
        if let Some(h) = self.find_remote(island, table, key) {
            let words = self.shared.catalog.table(table).schema.row_words();
            let a = &mut self.acc[h.0 as usize];
            if a.kind != Kind::Delete {
                return Ok(None);
            }
            // Deleted earlier in this transaction: becomes an overwrite.
            a.kind = Kind::Read;
            a.dirty = true;
            self.changes += 1;
            let off = a.off as usize;
            self.buf[off..off + words].fill(0);
            return Ok(Some(h));
        }
        self.request(island, |b, gtid, tag| {
            wire::insert(b, gtid, tag, table, key)
        })
        .await?;
        self.absorb(island, table, Held::Exclusive, Kind::Insert, false)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn remote_scan(
        &mut self,
        island: IslandId,
        table: TableId,
        sec: Option<SecondaryId>,
        lo: u128,
        hi: u128,
        limit: usize,
        reverse: bool,
    ) -> Result<usize, Abort> {
        let index = sec.map_or(wire::PRIMARY, |s| s.0);
        let limit = limit.min(u32::MAX as usize) as u32;
        self.request(island, |b, gtid, tag| {
            wire::scan(b, gtid, tag, table, index, lo, hi, limit, reverse)
        })
        .await?;
        self.scan_out.clear();
        self.absorb(island, table, Held::Shared, Kind::Read, true)?;
        Ok(self.scan_out.len())
    }

    /// Turns the reply into access entries (copies of the remote rows). For a
    /// scan the handles go to `scan_out`; otherwise the first row's handle is
    /// returned (`None`: no such row).
    fn absorb(
        &mut self,
        island: IslandId,
        table: TableId,
        held: Held,
        kind: Kind,
        scan: bool,
    ) -> Result<Option<RowH>, Abort> {
        let reply = {
            let d = self.dist.as_mut().expect("distributed context");
            d.reply_ready = false;
            std::mem::take(&mut d.reply)
        };
        let r = self.absorb_rows(&reply, island, table, held, kind, scan);
        if let Some(d) = self.dist.as_mut() {
            d.reply = reply;
        }
        r
    }

    fn absorb_rows(
        &mut self,
        reply: &[u8],
        island: IslandId,
        table: TableId,
        held: Held,
        kind: Kind,
        scan: bool,
    ) -> Result<Option<RowH>, Abort> {
        let def = self.shared.catalog.table(table);
        let schema_words = def.schema.row_words();
        // The image as read, for tables whose rows may move in a secondary
        // index: whether a change moved one tells whether its island must
        // add the new entries before any branch prepares (a LOCK round).
        let keep_orig = kind == Kind::Read && !def.secondary.is_empty() && !def.fixed_keys;
        let bad = |why: String| Abort::Failed(Error::Protocol(why));
        let (status, t, row_bytes, n, rows) = match wire::decode(reply) {
            Ok(Frame::Reply {
                status,
                table,
                row_bytes,
                n,
                rows,
                ..
            }) => (status, table, row_bytes, n, rows),
            Ok(f) => return Err(bad(format!("expected a reply, got {f:?}"))),
            Err(e) => return Err(bad(format!("malformed reply: {e}"))),
        };
        match status {
            Status::Ok {
                validated,
                undurable,
            } => {
                if let Some(d) = self.dist.as_mut() {
                    if validated {
                        d.validating.insert(island);
                    }
                    d.remote_undurable |= undurable;
                }
            }
            Status::Conflict(r) => return Err(Abort::Conflict(r)),
            Status::Refused => return Err(Abort::Conflict(AbortReason::Remote)),
        }
        if t != table || row_bytes as usize != schema_words * 8 {
            return Err(bad(format!(
                "reply for table {t} with {row_bytes}-byte rows to a request on table {table} ({} bytes)",
                schema_words * 8
            )));
        }
        let mut first = None;
        for i in 0..n as usize {
            let at = i * (8 + row_bytes as usize);
            let key = u64::from_le_bytes(rows[at..at + 8].try_into().expect("8 bytes"));
            let h = match self.find_remote(island, table, key) {
                // Seen before: keep this transaction's own image of it.
                Some(h) => h,
                None => {
                    let off = self.push_image(schema_words);
                    crate::storage::schema::fill_words(
                        &mut self.buf[off as usize..off as usize + schema_words],
                        &rows[at + 8..at + 8 + row_bytes as usize],
                    );
                    let orig = if keep_orig {
                        let o = self.buf.len();
                        let at = off as usize;
                        self.buf.extend_from_within(at..at + schema_words);
                        o as u32
                    } else {
                        u32::MAX
                    };
                    self.push_access(Access {
                        table,
                        rid: REMOTE_RID,
                        key,
                        island,
                        kind,
                        dirty: kind == Kind::Insert,
                        seen: Observed {
                            version: 0,
                            present: true,
                        },
                        held,
                        off,
                        orig,
                        indexed: false,
                    })
                }
            };
            if scan {
                if self.present(h) {
                    self.scan_out.push(h);
                }
            } else if first.is_none() {
                first = Some(h);
            }
        }
        Ok(first.filter(|&h| self.present(h)))
    }

    /// Whether the transaction holds anything on this island (locks, reads to
    /// validate, writes): then this island is a participant of its 2PC.
    pub(crate) fn has_local_part(&self) -> bool {
        self.acc.iter().any(|a| a.island == LOCAL)
            || !self.misses.is_empty()
            || !self.scans.is_empty()
    }

    /// The other islands that a LOCK round must reach before this
    /// transaction's two-phase commit starts (see
    /// `executor::Executor::commit_home`): those that hold a row whose write
    /// lock is still to be taken ([`Access::lock_pending`]: read without it,
    /// then changed or deleted), or a row whose new secondary entries are
    /// still to be added ([`Txn::adds_secondary_entries`]).
    pub(crate) fn lock_round_islands(&self) -> IslandSet {
        let tables = &self.shared.catalog.tables;
        let mut s = IslandSet::EMPTY;
        for a in &self.acc {
            if a.island != LOCAL
                && (a.lock_pending() || self.adds_secondary_entries(&tables[a.table as usize], a))
            {
                s.insert(a.island);
            }
        }
        s
    }

    /// Whether some row, here or on another island, still waits for its
    /// write lock ([`Access::lock_pending`]).
    pub(crate) fn has_pending_locks(&self) -> bool {
        self.acc.iter().any(|a| a.lock_pending())
    }

    /// Starts a LOCK round (see `executor::Executor::commit_home`): a fresh
    /// request tag, which every island's reply echoes. Returns it.
    pub(crate) fn begin_lock_round(&mut self) -> u32 {
        let d = self
            .dist
            .as_mut()
            .expect("a lock round without a distributed context");
        d.tag = d.next_tag();
        d.req_ready = false;
        d.reply_ready = false;
        d.tag
    }

    /// Appends the LOCK request to `island` of a lock round: every row there
    /// whose write lock is still pending, after the `writes` WRITE / DELETE
    /// frames that carried this transaction's changes there.
    pub(crate) fn encode_lock(
        &self,
        out: &mut Vec<u8>,
        island: IslandId,
        gtid: u64,
        tag: u32,
        writes: u32,
    ) {
        let pending = || {
            self.acc
                .iter()
                .filter(move |a| a.island == island && a.lock_pending())
        };
        wire::lock(out, gtid, tag, writes, pending().count() as u32);
        for a in pending() {
            wire::lock_entry(out, a.table, a.key);
        }
    }

    /// `island` answered the lock round: it holds every row of this
    /// transaction that it was asked for under its write lock.
    pub(crate) fn locked_on(&mut self, island: IslandId) {
        for a in self.acc.iter_mut() {
            if a.island == island && a.lock_pending() {
                a.held = Held::Exclusive;
            }
        }
    }

    /// Participant: a LOCK request, which comes after every change the home
    /// made to this branch's rows. Takes the write lock of this branch's
    /// row `key` of `table` for each entry of `keys` (as encoded by
    /// [`wire::lock_entry`]): the home transaction changed or deleted rows
    /// it read without that lock, and wants them locked before it asks any
    /// island to prepare. Then adds the branch's new secondary entries
    /// ([`Txn::add_secondary_entries`]), which must be in before any branch
    /// prepares too. On `Err` nothing was released (the branch aborts when
    /// the home says so).
    pub(crate) fn lock_rows(&mut self, keys: &[u8]) -> Result<(), Abort> {
        self.locks.clear();
        for e in keys.chunks_exact(wire::LOCK_ENTRY_BYTES) {
            let (table, key) = wire::lock_entry_of(e);
            let Some(h) = self.branch_entry(table, key) else {
                return Err(Abort::Failed(Error::Protocol(format!(
                    "LOCK of key {key} of table {table}, which the branch never read"
                ))));
            };
            let a = &self.acc[h.0 as usize];
            if !a.held.is_write_lock() {
                self.locks.push(a.write_lock());
            }
        }
        self.lock_listed().map_err(Abort::Conflict)?;
        self.add_secondary_entries();
        Ok(())
    }

    /// Whether the transaction changed anything, here or on another island.
    pub(crate) fn has_writes(&self) -> bool {
        self.acc.iter().any(|a| a.dirty || a.kind == Kind::Delete)
    }

    /// Whether the branch holds reads it validates at commit.
    pub(crate) fn has_validated_reads(&self) -> bool {
        !self.misses.is_empty() || !self.scans.is_empty()
    }

    /// Calls `f(island, table, key, row)` for every change to a remote row
    /// (`row` is `None` for a delete).
    pub(crate) fn for_each_remote_change(
        &self,
        mut f: impl FnMut(u16, TableId, u64, Option<&[u8]>),
    ) {
        let tables = &self.shared.catalog.tables;
        for a in &self.acc {
            if a.island == LOCAL {
                continue;
            }
            if a.kind == Kind::Delete {
                f(a.island, a.table, a.key, None);
            } else if a.dirty {
                let words = tables[a.table as usize].schema.row_words();
                let off = a.off as usize;
                f(
                    a.island,
                    a.table,
                    a.key,
                    Some(crate::storage::schema::row_bytes(
                        &self.buf[off..off + words],
                    )),
                );
            }
        }
    }

    /// Participant: the image of row `h` as bytes (for a reply).
    pub(crate) fn row_bytes(&self, h: RowH) -> &[u8] {
        crate::storage::schema::row_bytes(self.row(h).words)
    }

    /// Participant: the entry this branch holds for `key`.
    fn branch_entry(&self, table: TableId, key: u64) -> Option<RowH> {
        let t = self.shared.catalog.tables.get(table as usize)?;
        if let Some(rid) = t.lookup(key) {
            if let Some(h) = self.find(table, rid) {
                if self.acc[h.0 as usize].key == key {
                    return Some(h);
                }
            }
        }
        self.acc
            .iter()
            .rposition(|a| a.island == LOCAL && a.key == key && a.table == table)
            .map(|i| RowH(i as u32))
    }

    /// Participant: the home transaction changed row `key`; `row` is its new
    /// image. False if the branch holds no such row, the image has the
    /// wrong size, or the branch's secondary entries are in already (its
    /// LOCK round: see [`Txn::add_secondary_entries`]); the branch then
    /// votes no.
    pub(crate) fn apply_write(&mut self, table: TableId, key: u64, row: &[u8]) -> bool {
        if self.secondary_added {
            return false;
        }
        let Some(h) = self.branch_entry(table, key) else {
            return false;
        };
        let words = self.shared.catalog.table(table).schema.row_words();
        if row.len() != words * 8 || self.acc[h.0 as usize].kind == Kind::Delete {
            return false;
        }
        let m = self.row_mut(h);
        crate::storage::schema::fill_words(m.words, row);
        true
    }

    /// Participant: the home transaction deleted row `key`. False as for
    /// [`Txn::apply_write`].
    pub(crate) fn apply_delete(&mut self, table: TableId, key: u64) -> bool {
        if self.secondary_added {
            return false;
        }
        let Some(h) = self.branch_entry(table, key) else {
            return false;
        };
        let a = &mut self.acc[h.0 as usize];
        match a.kind {
            Kind::Read => {
                a.kind = Kind::Delete;
                a.dirty = false;
                true
            }
            Kind::Delete => true,
            Kind::Insert => false,
        }
    }

    /// Recovery: re-acquires a prepared branch from its Prepare record (locks
    /// its rows, stages its writes) so that it holds them until the decision.
    pub(crate) fn restore_branch(
        &mut self,
        tid: u64,
        pin: crate::wal::BatchSeq,
        writes: &[WriteEntry],
    ) -> Result<(), Abort> {
        for w in writes {
            let h = match self.point(w.table, w.key, true)? {
                Some(h) => h,
                None if w.patch_at.is_some() => {
                    return Err(Abort::Failed(Error::Recovery(format!(
                        "in-doubt branch: the row it updated (key {} of table {}) is gone",
                        w.key, w.table
                    ))));
                }
                None if w.row.is_some() => {
                    self.insert_local(w.table, w.key)?
                        .ok_or(Abort::Failed(Error::Recovery(format!(
                            "in-doubt branch: key {} of table {} is taken",
                            w.key, w.table
                        ))))?
                }
                None => continue,
            };
            let ok = match (&w.row, w.patch_at) {
                (Some(bytes), Some(at)) => {
                    // Over the row as recovery has it: what the branch read.
                    let m = self.row_mut(h);
                    let b = crate::storage::schema::row_bytes_mut(m.words);
                    let (at, end) = (at as usize, at as usize + bytes.len());
                    end <= b.len() && {
                        b[at..end].copy_from_slice(bytes);
                        true
                    }
                }
                (Some(row), None) => self.apply_write(w.table, w.key, row),
                (None, _) => self.apply_delete(w.table, w.key),
            };
            if !ok {
                return Err(Abort::Failed(Error::Recovery(format!(
                    "in-doubt branch: cannot stage the write of key {} of table {}",
                    w.key, w.table
                ))));
            }
        }
        self.lock_and_validate(true)?;
        if pin != 0 {
            self.shared.log.lock().pin(pin);
        }
        self.prepared = Some((tid, pin));
        Ok(())
    }
}
