//! Home transactions: a context taken for each attempt, the remote request
//! its procedure queued, and its commit: locally, by releasing read-only
//! branches, or by two-phase commit once its remote write locks are taken
//! (a LOCK round) or its remote branches prepared early
//! ([`Txn::prepare_remote`]); and its abort, or its ending once its branches
//! confirmed that they held.

use super::cluster::bump;
use super::pool::Branch;
use super::{Executor, WORKER_BITS};
use crate::coord::{self, Action, Gtid, Msg, Timeouts, GTID_SEQ_BITS};
use crate::phases;
use crate::route::IslandId;
use crate::transport::wire::{self, Status};
use crate::transport::{push_frame, push_frame_with};
use crate::txn::{Early, LockWait, Txn};
use crate::{Abort, AbortReason, Error};

/// A home transaction whose commit waits for its LOCK round (see
/// `Executor::commit_home`).
pub(super) struct Locking {
    gtid: Gtid,
    ctx: u32,
    /// The round's request tag, which the replies echo.
    pub(super) tag: u32,
    /// Islands whose reply has not arrived.
    waiting: coord::IslandSet,
    /// The protocol clock when the round began.
    since_us: u64,
    /// A round of [`Executor::end_home`]: it asks only whether every branch
    /// still holds, and aborts the transaction either way.
    confirm: bool,
}

/// How a home transaction's commit went.
#[derive(Debug)]
pub enum HomeCommit {
    /// It touched only this island and committed.
    Local(crate::txn::Committed),
    /// Two-phase commit started; the outcome arrives in [`Executor::outcomes`].
    Distributed(Gtid),
    /// It read on several islands and wrote nothing, none of its branches
    /// validates reads at commit, and none read data its island had not made
    /// durable or written yet ([`wire::Status::Ok`]): it committed here, and
    /// its remote branches were told to release (one-way). All its locks were
    /// held at once before the first release, which is all two-phase locking
    /// asks of a reader.
    Released(crate::txn::Committed),
}

impl Executor {
    /// After the attempt on context `c` aborted: the local row whose lock it
    /// ran into ([`Txn::conflict_row`]), if any, and whether it had touched
    /// another island (whose branch hears of the abort by a message that a
    /// retry must not overtake). Valid until `c` is taken again.
    pub(crate) fn conflict_of(&self, c: u32) -> Option<(LockWait, bool)> {
        let tx = self.pool.ctx_ref(c);
        let touched = tx.dist.as_ref().is_some_and(|d| !d.touched.is_empty());
        tx.conflict_row().map(|w| (w, touched))
    }

    /// Whether the request of `w` would still conflict now: a hint for when
    /// to retry an attempt that ran into it.
    pub(crate) fn still_locked(&self, w: LockWait) -> bool {
        crate::txn::still_locked(&self.shared, w)
    }

    /// A raw pointer to context `c`, for a stored procedure's future.
    pub(crate) fn ctx_ptr(&self, c: u32) -> *mut Txn {
        self.pool.ctx_ptr(c)
    }

    /// A new gtid: this worker's next sequence number below the island's
    /// durable reservation (see `coord/gtids.rs`), with the worker's number in
    /// its low bits. On the transaction path it costs one compare and one add
    /// besides composing the gtid; near the reservation's end it asks the log
    /// writer for more, and waits only if the writer fell half a reservation
    /// behind. `None`: the log failed before the reservation it needs was
    /// durable (the worker stops at its next round, with the log's error). A
    /// worker's count wraps in the gtid after 2^40 transactions of that worker.
    #[inline]
    fn new_gtid(&mut self) -> Option<Gtid> {
        let n = match self.gtids.take() {
            Some(n) => n,
            None => self.renew_gtids()?,
        };
        let seq = (n << WORKER_BITS) | self.worker as u64;
        Some(coord::gtid(self.island, seq & ((1 << GTID_SEQ_BITS) - 1)))
    }

    #[cold]
    fn renew_gtids(&mut self) -> Option<u64> {
        let wal = self.shared.wal.as_deref();
        let limit = wal.map_or(u64::MAX, crate::wal::Wal::gtid_reserved);
        let r = self.gtids.renew(limit);
        if let (Some(want), Some(w)) = (r.ask, wal) {
            w.reserve_gtids(want);
        }
        if !r.ready {
            let w = wal?;
            let need = self.gtids.peek().saturating_add(1);
            w.reserve_gtids(need);
            if let Err(e) = w.wait_gtids(need) {
                self.pool.failed.get_or_insert(Error::from(e));
                return None;
            }
            self.gtids.renew(w.gtid_reserved());
        }
        self.gtids.take()
    }

    /// Takes a context for a new home transaction (attempt): `None` when all
    /// are busy (or, with a router, when no gtid can be had: see
    /// [`Executor::failure`]). `retry` keeps the context's previous wait-die
    /// age.
    pub fn begin_home(&mut self, retry: bool) -> Option<u32> {
        let c = self.pool.alloc_ctx()?;
        let Some(gtid) = self.home_gtid() else {
            self.pool.free_ctx(c);
            return None;
        };
        self.pool.ctx(c).begin(retry);
        self.start_home(c, gtid);
        Some(c)
    }

    /// The error that stops this worker at its next round, if any.
    pub(crate) fn failure(&self) -> Option<Error> {
        self.pool.failed.clone()
    }

    /// A gtid for a new home transaction (0 in a cluster without a router,
    /// whose transactions never cross islands).
    #[inline]
    fn home_gtid(&mut self) -> Option<Gtid> {
        if self.cl.router.is_none() {
            return Some(0);
        }
        self.new_gtid()
    }

    /// [`Executor::begin_home`] for the retry of an attempt whose timestamp
    /// was `ts` ([`Executor::timestamp_of`]): under wait-die a retried
    /// transaction keeps its age, so it eventually wins, whichever context
    /// it runs on.
    pub(crate) fn begin_retry(&mut self, ts: u64) -> Option<u32> {
        let c = self.pool.alloc_ctx()?;
        let Some(gtid) = self.home_gtid() else {
            self.pool.free_ctx(c);
            return None;
        };
        self.pool.ctx(c).begin_at(ts);
        self.start_home(c, gtid);
        Some(c)
    }

    /// Names the transaction just begun on `c` `gtid`, if it may cross
    /// islands.
    #[inline]
    fn start_home(&mut self, c: u32, gtid: Gtid) {
        if self.cl.router.is_none() {
            return;
        }
        // The current step's clock: at most one poll old (each poll is
        // followed by an exchange that reads it). Older than the truth only
        // makes `no_branch_idled_out` more careful.
        let now = self.now;
        let d = self.pool.ctx(c).dist.as_mut();
        let d = d.expect("contexts of a routing cluster are distributed");
        d.gtid = gtid;
        d.reset();
        d.begin_us = now;
    }

    /// The timestamp of the attempt last begun on context `c`. Valid until
    /// `c` is taken again.
    pub(crate) fn timestamp_of(&self, c: u32) -> u64 {
        self.pool.ctx_ref(c).timestamp()
    }

    /// Home context `c`, lent for a procedure polled to completion while
    /// the borrow lasts (the inline attempts of `run`).
    pub(crate) fn home_ctx(&mut self, c: u32) -> &mut Txn {
        self.pool.ctx(c)
    }

    /// After a poll returned `Pending`: sends the request the procedure
    /// queued (`Some(true)`), or finds that it still waits for an earlier
    /// one (`Some(false)`: the wake was spurious). `None` if it waits for
    /// nothing the executor can deliver (a procedure waiting on something
    /// else: an error the caller reports).
    pub fn send_request(&mut self, c: u32) -> Option<bool> {
        let tx = self.pool.ctx(c);
        let d = tx.dist.as_mut()?;
        if d.early == Early::Requested {
            self.prepare_early(c);
            return Some(true);
        }
        if !d.req_ready {
            // A spurious wake: it still waits for its reply or its early
            // votes. A wake pushed for an attempt that then timed out in
            // the same round reaches the next attempt on the same context.
            return (d.tag != 0 || d.early == Early::Voting).then_some(false);
        }
        d.req_ready = false;
        let to = self
            .cl
            .endpoint(d.req_to, self.cl.branch_worker(d.req_to, d.gtid));
        push_frame(self.outbox.batch(&*self.transport, to), &d.req);
        Some(true)
    }

    /// Whether the wait of home context `c`, begun at `since_ticks` (a
    /// reading of [`phases::ticks`]), has gone unanswered at `now_ticks`:
    /// past the operation timeout, and the worker it waits on has served
    /// since ([`Executor::unanswered`]). A context waiting for the votes of
    /// an early prepare waits for the coordinator instead, whose prepare
    /// timer ends it.
    pub(crate) fn reply_unanswered(&self, c: u32, since_ticks: u64, now_ticks: u64) -> bool {
        let Some(d) = self.pool.ctx_ref(c).dist.as_ref() else {
            return true;
        };
        if d.early == Early::Voting {
            return false;
        }
        let peer = self
            .cl
            .endpoint(d.req_to, self.cl.branch_worker(d.req_to, d.gtid));
        let timeout_us = u64::try_from(self.cl.opts.op_timeout.as_micros()).unwrap_or(u64::MAX);
        self.unanswered(
            peer,
            since_ticks / self.ticks_per_us,
            timeout_us,
            now_ticks / self.ticks_per_us,
        )
    }

    /// The procedure of home context `c` finished: commit it, locally or with 2PC.
    /// On `Err` the transaction is aborted everywhere and `c` is free again.
    pub fn commit_home(&mut self, c: u32) -> Result<HomeCommit, Abort> {
        if let Some(e) = self.pool.ctx(c).read_committed_wrote() {
            self.abort_home(c);
            return Err(e);
        }
        let tx = self.pool.ctx(c);
        let Some(d) = tx.dist.as_ref().filter(|d| !d.touched.is_empty()) else {
            let r = tx.commit();
            self.pool.free_ctx(c);
            return r.map(HomeCommit::Local);
        };
        let gtid = d.gtid;
        let touched = d.touched;
        if d.early == Early::Prepared {
            return self.commit_home_early(c, gtid);
        }
        // A read-only transaction need not ask its remote branches for votes
        // when none read data that is not durable yet (`Status::Ok`'s
        // `undurable`): they only release. But a participant aborts a
        // branch that idles for `branch_idle_us`, and its read locks go with
        // it; had that happened before this transaction's last lock here,
        // committing would break two-phase locking. No branch began before
        // `begin_us` (one clock for every island of the process: the
        // time-stamp counter only where it was checked to read the same on
        // every CPU, see `phases::clock`), so within half that time none can
        // have idled out; after it, the votes say. No remote branch
        // validates anything; the home's own scans and misses are validated
        // by the commit below, before the releases leave (with the next
        // flush of the outbox), so no branch releases before that check.
        if d.validating.is_empty()
            && !d.remote_undurable
            && !tx.has_writes()
            && no_branch_idled_out(self.ticks_per_us, &self.cl.opts.timeouts, d.begin_us)
        {
            for island in touched.iter() {
                let to = self
                    .cl
                    .endpoint(island, self.cl.branch_worker(island, gtid));
                push_frame_with(self.outbox.batch_lazy(&*self.transport, to), |b| {
                    wire::release(b, gtid)
                });
            }
            if let Some(d) = tx.dist.as_mut() {
                d.touched = coord::IslandSet::EMPTY;
            }
            let r = tx.commit();
            self.pool.free_ctx(c);
            if r.is_ok() {
                bump(&self.counts().distributed_commits);
            }
            return r.map(HomeCommit::Released);
        }
        // Every write lock is taken, and every new secondary-index entry
        // added, on every island, before any branch is asked to prepare: at
        // prepare a read-only branch releases its locks and a branch
        // validates its scans and misses, so a lock taken or an entry added
        // at another branch's prepare could come after them, and two-phase
        // locking would break (issue 22's write skew between two deletes),
        // or a scan validated in between would miss a writer it follows.
        // This island's rows are locked and indexed now; other islands' by
        // a LOCK round first, which starts the two-phase commit once every
        // island has answered.
        let prev = phases::switch(phases::Phase::Locking);
        let locked = tx.lock_pending_rows();
        if locked.is_ok() {
            tx.add_secondary_entries();
        }
        phases::switch(prev);
        if let Err(reason) = locked {
            self.abort_home(c);
            return Err(Abort::Conflict(reason));
        }
        let round = tx.lock_round_islands();
        if !round.is_empty() {
            self.lock_remote(c, gtid, round);
            return Ok(HomeCommit::Distributed(gtid));
        }
        self.start_commit(c, gtid)
    }

    /// Starts the two-phase commit of home context `c`, every lock of which
    /// is held: ships its remote changes, makes it the home island's branch
    /// if it holds anything here, and asks every branch to prepare. On `Err`
    /// the transaction is aborted everywhere and `c` is free again.
    fn start_commit(&mut self, c: u32, gtid: Gtid) -> Result<HomeCommit, Abort> {
        let tx = self.pool.ctx(c);
        debug_assert!(
            !tx.has_pending_locks(),
            "a branch would take a lock at prepare"
        );
        let (touched, mut validating) = tx
            .dist
            .as_ref()
            .map_or((coord::IslandSet::EMPTY, coord::IslandSet::EMPTY), |d| {
                (d.touched, d.validating)
            });
        let local = tx.has_local_part();
        if local && tx.has_validated_reads() {
            validating.insert(self.island);
        }
        // A branch validates its scans and misses at its prepare: a check at
        // one instant, which must come before any branch releases a lock,
        // or a writer could slip in between and restore what a scan saw
        // (a cycle). Branches prepare in parallel, so a branch releases at
        // its prepare (votes read-only) only when no other branch
        // validates; otherwise it holds every lock until the decision.
        let holds = |island: IslandId| {
            let mut others = validating;
            others.remove(island);
            !others.is_empty()
        };
        let mut hold = coord::IslandSet::EMPTY;
        for island in touched.iter().filter(|&i| holds(i)) {
            hold.insert(island);
        }
        // The prepare timer starts now, not at the start of the round that
        // polled this procedure (see `Executor::now_us`).
        let now = self.fresh_now_us();
        self.ship_remote(c, hold);
        let mut parts: Vec<IslandId> = touched.iter().collect();
        if local {
            self.home_branch(c, gtid, now, holds(self.island))?;
            parts.push(self.island);
        } else {
            self.pool.ctx(c).abort();
            self.pool.free_ctx(c);
        }
        let mut actions = std::mem::take(&mut self.actions);
        actions.clear();
        if let Err(e) = self.coord.begin_commit(gtid, &parts, now, &mut actions) {
            // Full: abort every branch; nothing was decided.
            for island in parts {
                actions.push(Action::Send {
                    to: island,
                    msg: Msg::AbortReq { gtid },
                });
            }
            self.run_actions(&mut actions, true);
            self.actions = actions;
            let _ = e;
            return Err(Abort::Conflict(AbortReason::Remote));
        }
        self.run_actions(&mut actions, true);
        self.actions = actions;
        Ok(HomeCommit::Distributed(gtid))
    }

    /// Sends the LOCK round of home context `c` to `islands` (see
    /// `commit_home`), each LOCK after the changes to that island's rows;
    /// its two-phase commit starts once every one answered.
    fn lock_remote(&mut self, c: u32, gtid: Gtid, islands: coord::IslandSet) {
        let counts = self.ship_changes(c, gtid, islands);
        let tx = self.pool.ctx(c);
        let tag = tx.begin_lock_round();
        if let Some(d) = tx.dist.as_mut() {
            d.shipped = islands;
        }
        let cl = &self.cl;
        for island in islands.iter() {
            let to = cl.endpoint(island, cl.branch_worker(island, gtid));
            push_frame_with(self.outbox.batch(&*self.transport, to), |b| {
                tx.encode_lock(b, island, gtid, tag, counts[island as usize])
            });
        }
        let since_us = self.fresh_now_us();
        self.locking.push(Locking {
            gtid,
            ctx: c,
            tag,
            waiting: islands,
            since_us,
            confirm: false,
        });
    }

    /// The reply of `island` to entry `i` of `locking`.
    pub(super) fn on_lock_reply(&mut self, i: usize, island: IslandId, status: Status) {
        if !matches!(status, Status::Ok { .. }) {
            return self.fail_locking(i);
        }
        let l = &mut self.locking[i];
        if !l.waiting.contains(island) {
            return; // a duplicate
        }
        l.waiting.remove(island);
        let (c, gtid, done) = (l.ctx, l.gtid, l.waiting.is_empty());
        self.pool.ctx(c).locked_on(island);
        if !done {
            return;
        }
        let l = self.locking.swap_remove(i);
        if l.confirm {
            self.abort_home(c);
            self.confirmed.push((gtid, true));
            return;
        }
        if let Some(d) = self.pool.ctx(c).dist.as_mut() {
            d.tag = 0;
        }
        if self.start_commit(c, gtid).is_err() {
            self.outcomes.push((gtid, None));
        }
    }

    /// Entry `i` of `locking` failed (a conflict, a refusal, no answer in
    /// time): the transaction aborts everywhere, and its client hears so.
    fn fail_locking(&mut self, i: usize) {
        let l = self.locking.swap_remove(i);
        self.abort_home(l.ctx);
        if l.confirm {
            self.confirmed.push((l.gtid, false));
        } else {
            self.outcomes.push((l.gtid, None));
        }
    }

    /// Fails the LOCK rounds that wait for a reply from an island of
    /// `down` (its process is down: the reply will not come), each noted
    /// with that island for the worker loop ([`Executor::aborted_for_down`]).
    pub(super) fn fail_locking_on_down(&mut self, down: coord::IslandSet) {
        let mut i = 0;
        while i < self.locking.len() {
            let l = &self.locking[i];
            match down.iter().find(|&d| l.waiting.contains(d)) {
                Some(island) => {
                    self.down_aborted.insert(l.gtid, island);
                    self.fail_locking(i);
                }
                None => i += 1,
            }
        }
    }

    /// Fails the LOCK rounds that have waited longer than the operation
    /// timeout for an island that could have answered (a lost request or
    /// reply, a crashed island; see [`Executor::unanswered`]).
    pub(super) fn expire_locking(&mut self, now: u64) {
        let timeout_us = u64::try_from(self.cl.opts.op_timeout.as_micros()).unwrap_or(u64::MAX);
        let mut i = 0;
        while i < self.locking.len() {
            let l = &self.locking[i];
            let cl = &self.cl;
            let expired = l.waiting.iter().any(|island| {
                let peer = cl.endpoint(island, cl.branch_worker(island, l.gtid));
                self.unanswered(peer, l.since_us, timeout_us, now)
            });
            if expired {
                self.fail_locking(i);
            } else {
                i += 1;
            }
        }
    }

    /// Makes home context `c` the home island's own branch of `gtid` (its
    /// participant prepares it like any other). On `Err` (the participant's
    /// table is full) the transaction is aborted everywhere and `c` is free.
    fn home_branch(&mut self, c: u32, gtid: Gtid, now: u64, hold: bool) -> Result<(), Abort> {
        if self.part.on_branch_begin(gtid, now).is_err() {
            self.abort_home(c);
            return Err(Abort::Conflict(AbortReason::Remote));
        }
        self.pool
            .branches
            .insert(gtid, Branch::new(c, Some((0, hold))));
        Ok(())
    }

    /// Sends the changes context `c` made to rows of other islands (those
    /// the LOCK round has not sent), then a PREP to every island it
    /// touched, ahead of the PrepareReqs; those to the islands in `hold`
    /// ask the branch to hold its locks until the decision.
    fn ship_remote(&mut self, c: u32, hold: coord::IslandSet) {
        let Some(d) = self.pool.ctx(c).dist.as_ref() else {
            return;
        };
        let (gtid, touched, shipped) = (d.gtid, d.touched, d.shipped);
        let counts = self.ship_changes(c, gtid, touched.minus(shipped));
        let cl = &self.cl;
        let outbox = &mut self.outbox;
        for island in touched.iter() {
            let to = cl.endpoint(island, cl.branch_worker(island, gtid));
            push_frame_with(outbox.batch(&*self.transport, to), |b| {
                wire::prep(b, gtid, counts[island as usize], hold.contains(island))
            });
        }
    }

    /// Sends the changes context `c` made to rows of `islands` (WRITE /
    /// DELETE frames). Returns, per island, how many changes the context
    /// made there, shipped now or not.
    fn ship_changes(
        &mut self,
        c: u32,
        gtid: Gtid,
        islands: coord::IslandSet,
    ) -> [u32; coord::MAX_ISLANDS] {
        let tx = self.pool.ctx(c);
        let mut counts = [0u32; coord::MAX_ISLANDS];
        let cl = &self.cl;
        let outbox = &mut self.outbox;
        tx.for_each_remote_change(|island, table, key, row| {
            counts[island as usize] += 1;
            if !islands.contains(island) {
                return;
            }
            let to = cl.endpoint(island, cl.branch_worker(island, gtid));
            push_frame_with(outbox.batch(&*self.transport, to), |b| match row {
                Some(row) => wire::write(b, gtid, table, key, row),
                None => wire::delete(b, gtid, table, key),
            });
        });
        counts
    }

    /// [`Txn::prepare_remote`]: starts 2PC over the islands context `c`
    /// touched and this one, holding back this island's PrepareReq until the
    /// procedure is done ([`Executor::commit_home`]). The remote branches hold
    /// every lock, read locks too, until the decision (PREP with hold): the
    /// home branch takes its locks after they prepared.
    fn prepare_early(&mut self, c: u32) {
        let tx = self.pool.ctx(c);
        let d = tx.dist.as_mut().expect("distributed context");
        let (gtid, touched) = (d.gtid, d.touched);
        d.early = Early::Voting;
        self.ship_remote(c, touched);
        self.pool.ctx(c).mark_remote_shipped();
        let mut parts: Vec<IslandId> = touched.iter().collect();
        parts.push(self.island);
        let now = self.fresh_now_us();
        let mut actions = std::mem::take(&mut self.actions);
        actions.clear();
        let home = self.island;
        match self.coord.begin_commit(gtid, &parts, now, &mut actions) {
            Ok(()) => {
                actions.retain(|a| {
                    !matches!(a, Action::Send { to, msg: Msg::PrepareReq { .. } } if *to == home)
                });
                self.early.push((gtid, c));
            }
            Err(_) => {
                // Full: nothing was decided; the branches learn it by AbortReq.
                actions.clear();
                for island in touched.iter() {
                    actions.push(Action::Send {
                        to: island,
                        msg: Msg::AbortReq { gtid },
                    });
                }
                if let Some(d) = self.pool.ctx(c).dist.as_mut() {
                    d.early = Early::Failed;
                }
                self.woken.push(c);
            }
        }
        self.run_actions(&mut actions, true);
        self.actions = actions;
    }

    /// Early prepares whose remote votes are all in (wake the procedure: it
    /// goes on with its home work) or that were aborted (wake it to fail).
    pub(super) fn check_early(&mut self) {
        let mut i = 0;
        while i < self.early.len() {
            let (gtid, c) = self.early[i];
            let state = match self.coord.missing_votes(gtid) {
                Some(m) if m.iter().all(|p| p == self.island) => Early::Prepared,
                Some(_) => {
                    i += 1;
                    continue;
                }
                None => Early::Failed,
            };
            self.early.swap_remove(i);
            if let Some(d) = self.pool.ctx(c).dist.as_mut() {
                d.early = state;
            }
            self.woken.push(c);
        }
    }

    /// Commit of a home transaction whose remote branches are prepared: the
    /// home branch prepares now (its own PrepareReq, held back until here),
    /// or votes read-only if it holds nothing, and the coordinator decides.
    fn commit_home_early(&mut self, c: u32, gtid: Gtid) -> Result<HomeCommit, Abort> {
        let tx = self.pool.ctx(c);
        if tx.remote_changed_after_prepare() {
            self.abort_home(c);
            return Err(Abort::Failed(Error::Config(
                "a row of another island changed after prepare_remote: its island never \
                 received the change"
                    .into(),
            )));
        }
        let home = self.island;
        if self
            .coord
            .missing_votes(gtid)
            .is_none_or(|m| !m.contains(home))
        {
            // The coordinator gave up on it (prepare timeout) after its
            // remote votes woke the procedure: it aborted and told everyone.
            tx.abort();
            self.pool.free_ctx(c);
            return Err(Abort::Conflict(AbortReason::Remote));
        }
        let now = self.fresh_now_us();
        let tx = self.pool.ctx(c);
        if tx.has_local_part() {
            // Prepared last: every other branch holds its locks until the
            // decision, so this one may take some at prepare, and release.
            self.home_branch(c, gtid, now, false)?;
            self.local.push_back((home, Msg::PrepareReq { gtid }));
        } else {
            // Everything the branch could have read is in this island's log
            // before the decision, so a read-only vote needs no wait here.
            tx.abort();
            self.pool.free_ctx(c);
            self.local.push_back((
                home,
                Msg::PrepareConf {
                    gtid,
                    read_only: true,
                },
            ));
        }
        // Prepare, vote and decide now, not in the next round: until the
        // decision is logged the home branch holds its (hot) rows, and this
        // worker's other transactions, polled in between, would find them
        // locked. The home Prepare needs no force (see `run_actions`).
        self.drain_local();
        let _ = self.complete_forces(true); // a log failure resurfaces in `pump`
        Ok(HomeCommit::Distributed(gtid))
    }

    /// Aborts home context `c` (its procedure failed, or gave up waiting):
    /// releases it here and tells every island it touched. `c` is free again.
    pub fn abort_home(&mut self, c: u32) {
        let tx = self.pool.ctx(c);
        if let Some(d) = tx.dist.as_ref() {
            let gtid = d.gtid;
            if matches!(d.early, Early::Voting | Early::Prepared) {
                // 2PC started early: the coordinator tells every branch.
                self.early.retain(|&(g, _)| g != gtid);
                let mut actions = std::mem::take(&mut self.actions);
                actions.clear();
                self.coord.abort_preparing(gtid, &mut actions);
                self.run_actions(&mut actions, true);
                self.actions = actions;
                let tx = self.pool.ctx(c);
                tx.abort();
                self.pool.free_ctx(c);
                return;
            }
            for island in d.touched.iter() {
                let to = self
                    .cl
                    .endpoint(island, self.cl.branch_worker(island, gtid));
                push_frame_with(self.outbox.batch(&*self.transport, to), |b| {
                    Msg::AbortReq { gtid }.encode(b)
                });
            }
        }
        tx.abort();
        self.pool.free_ctx(c);
    }

    /// The procedure of home context `c` stopped without asking to commit (a
    /// user abort, a failure, a panic): aborts the transaction everywhere,
    /// at once or after a confirmation, and frees `c`.
    ///
    /// Its ending tells the caller something only if what the procedure read
    /// was one view. A participant aborts a branch that idles for
    /// `branch_idle_us`, and its read locks go with it; a procedure that read
    /// on that island and went on elsewhere may have seen a state that no
    /// serial order shows (a torn total), and stopped because of it. Nothing
    /// it did commits, but its "insufficient funds" would be a lie.
    ///
    /// So an attempt on one island, younger than half the idle timeout, or
    /// whose remote branches prepared early (each held its locks from its
    /// yes vote on) is aborted at once: `None`, report the ending. Any other
    /// asks every island it touched whether its branch still holds (a LOCK
    /// round with no rows: a branch that idled out is gone, and refuses) and
    /// returns `Some(gtid)`; the answer arrives in [`Executor::confirmed`].
    pub fn end_home(&mut self, c: u32) -> Option<Gtid> {
        let tx = self.pool.ctx(c);
        let Some(d) = tx.dist.as_ref() else {
            self.abort_home(c);
            return None;
        };
        let (gtid, touched, early) = (d.gtid, d.touched, d.early);
        if touched.is_empty()
            || early == Early::Prepared
            || no_branch_idled_out(self.ticks_per_us, &self.cl.opts.timeouts, d.begin_us)
        {
            self.abort_home(c);
            return None;
        }
        if matches!(early, Early::Voting | Early::Failed) {
            // A branch asked to prepare refuses a LOCK: whether each held
            // cannot be asked before the votes are in. Retry instead.
            self.abort_home(c);
            self.confirmed.push((gtid, false));
            return Some(gtid);
        }
        let tag = tx.begin_lock_round();
        let cl = &self.cl;
        for island in touched.iter() {
            let to = cl.endpoint(island, cl.branch_worker(island, gtid));
            push_frame_with(self.outbox.batch(&*self.transport, to), |b| {
                wire::lock(b, gtid, tag, 0, 0)
            });
        }
        let since_us = self.fresh_now_us();
        self.locking.push(Locking {
            gtid,
            ctx: c,
            tag,
            waiting: touched,
            since_us,
            confirm: true,
        });
        Some(gtid)
    }
}

/// Whether no branch of a transaction begun at `begin_us` (the protocol
/// clock, `ticks_per_us` ticks of [`phases::ticks`] each) can have been
/// aborted for idling yet: it is younger than half the idle timeout (see
/// `Executor::commit_home` on the clock this relies on).
fn no_branch_idled_out(ticks_per_us: u64, t: &Timeouts, begin_us: u64) -> bool {
    (phases::ticks() / ticks_per_us).saturating_sub(begin_us) < t.branch_idle_us / 2
}
