//! The executor's transaction contexts, and the branches of transactions
//! (other islands' and its own) that some of them hold.

use std::sync::Arc;

use super::{Cluster, GtidMap};
use crate::coord::Gtid;
use crate::island::InDoubt;
use crate::route::IslandId;
use crate::txn::{Dist, Txn};
use crate::wal::BatchSeq;
use crate::Error;

/// What a registered branch context knows beyond the transaction itself.
pub(super) struct Branch {
    pub(super) ctx: u32,
    /// From PREP: WRITE/DELETE frames to expect, and whether to hold at prepare.
    pub(super) expect: Option<(u32, bool)>,
    pub(super) applied: u32,
    /// A WRITE/DELETE could not be applied: the branch votes no.
    pub(super) bad: bool,
    /// The tag of the newest request (or LOCK) served. The home sends one at
    /// a time, each with a newer tag, so a request whose tag is not newer is
    /// a copy (a transport that duplicates) and is not served again: an
    /// INSERT run twice would answer "present", for the branch's own row.
    last_tag: u32,
}

impl Branch {
    pub(super) fn new(ctx: u32, expect: Option<(u32, bool)>) -> Branch {
        Branch {
            ctx,
            expect,
            applied: 0,
            bad: false,
            last_tag: 0,
        }
    }

    /// Records `tag` as served; false if it is not newer than the last one
    /// (same context bits; sequence numbers compared modulo their width).
    pub(super) fn serve_once(&mut self, tag: u32) -> bool {
        let mask = (1u32 << crate::txn::TAG_SEQ_BITS) - 1;
        let ahead = tag.wrapping_sub(self.last_tag) & mask;
        if self.last_tag != 0 && (ahead == 0 || ahead > mask / 2) {
            return false;
        }
        self.last_tag = tag;
        true
    }
}

/// The executor's transaction contexts and the branches among them.
pub(super) struct Pool {
    pub(super) cl: Arc<Cluster>,
    pub(super) island: IslandId,
    /// The island it serves (local: an executor runs only on a local island).
    pub(super) own: crate::island::Island,
    /// Transaction contexts, owned through raw pointers: a suspended stored
    /// procedure holds `&mut Txn` into one of them (see [`run`](super::run)), while the
    /// executor delivers replies into the same context between polls.
    pub(super) ctxs: Vec<*mut Txn>,
    pub(super) free: Vec<u32>,
    pub(super) branches: GtidMap<Branch>,
    pub(super) in_doubt: GtidMap<InDoubt>,
    /// Commit decisions a participant logged before installing its branch
    /// (see `Engine::commit`): the batch each went to, for its force.
    pub(super) decided: GtidMap<BatchSeq>,
    pub(super) failed: Option<Error>,
}

impl Drop for Pool {
    fn drop(&mut self) {
        for &p in &self.ctxs {
            // SAFETY: allocated by `Box::into_raw` in `alloc_ctx`, freed once here.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

impl Pool {
    /// Whether a request or LOCK with `tag` for the branch of `gtid` is a
    /// copy of one the branch has served (and answered) already; if not,
    /// the branch records it as served.
    pub(super) fn is_copy(&mut self, gtid: Gtid, tag: u32) -> bool {
        self.branches
            .get_mut(&gtid)
            .is_some_and(|b| !b.serve_once(tag))
    }

    /// The context `i`. Through `&mut self` the pool lends one context at a
    /// time; the only other reference to a context is the `&mut Txn` of its
    /// suspended procedure ([`Pool::ctx_ptr`]), which is never polled while
    /// the executor runs, so the two are never used at once.
    pub(crate) fn ctx(&mut self, i: u32) -> &mut Txn {
        // SAFETY: allocated in `alloc_ctx`, freed only when the pool drops;
        // unaliased while used, as above.
        unsafe { &mut *self.ctxs[i as usize] }
    }

    /// The context `i`, to read (as [`Pool::ctx`], shared).
    pub(crate) fn ctx_ref(&self, i: u32) -> &Txn {
        // SAFETY: as in `ctx`.
        unsafe { &*self.ctxs[i as usize] }
    }

    /// A raw pointer to context `i`, for a stored procedure's future.
    pub(crate) fn ctx_ptr(&self, i: u32) -> *mut Txn {
        self.ctxs[i as usize]
    }

    pub(super) fn alloc_ctx(&mut self) -> Option<u32> {
        if let Some(i) = self.free.pop() {
            return Some(i);
        }
        if self.ctxs.len() >= self.cl.opts.contexts_per_worker() {
            return None;
        }
        let island = &self.own;
        let mut tx = island.worker().ok()?;
        let id = self.ctxs.len() as u32;
        tx.dist = self
            .cl
            .router
            .as_ref()
            .map(|r| Dist::new(Arc::clone(r), self.island, id << crate::txn::TAG_SEQ_BITS));
        self.ctxs.push(Box::into_raw(Box::new(tx)));
        Some(id)
    }

    pub(super) fn free_ctx(&mut self, i: u32) {
        debug_assert!(!self.free.contains(&i));
        self.free.push(i);
    }
}
