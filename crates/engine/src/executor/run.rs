//! The executor loop: what every worker thread of a [`Cluster`] runs, for a
//! benchmark and for the application API alike. A single island, or several
//! whose transactions never cross ([`Cluster::local`]), is a cluster too:
//! there is no other loop.
//!
//! Work comes from the [`Workload`] through [`Workload::poll_next`]: requests
//! that a benchmark generates on the executor's own thread (the paper's
//! "clients on the island", measured without a cross-thread hop), or calls
//! that applications submit through [`crate::api::Client`], popped from the
//! executor's bounded queue. A round takes what other executors sent (only
//! when the cluster routes keys across islands), starts and polls
//! transactions, hands the island's log buffer over when it is due,
//! acknowledges the commits whose batch is durable, and checks whether the
//! run is over.
//!
//! An attempt runs in one of two ways, fixed per executor:
//!
//! - *Inline*, when the executor exchanges no messages
//!   ([`Executor::messages`]): every row a procedure can reach is local, so it
//!   completes on its first poll. The loop polls it on its own stack and
//!   commits it at once, attempt after attempt (up to
//!   [`super::ClusterOptions::inflight`] per round): no future is stored and
//!   nothing is allocated per transaction. A procedure that suspends anyway
//!   waits for something no executor delivers, and fails the run.
//! - *In slots*, when it does: each worker keeps several home transactions in
//!   flight and serves the other islands' requests between polls. A stored
//!   procedure is then a future borrowing its transaction context and its
//!   request; the slot that owns the future also owns the request (boxed, so
//!   it never moves) and the executor owns the context (never freed while the
//!   future lives). That is why the futures are stored with a `'static`
//!   lifetime: every future is dropped before its slot, and slots before the
//!   executor, which this module guarantees by construction (see
//!   `start_attempt` and the end of `executor_loop`). Each attempt allocates
//!   its boxed future, because its type is the workload's and slots hold it
//!   only through `dyn`.
//!
//!   A slot polls only an executing attempt. A transaction whose procedure is
//!   done and whose two-phase commit is under way leaves its slot to the next
//!   one (up to [`super::ClusterOptions::commit_window`] such commits per
//!   worker): with a log, the commit waits for its participants' forced
//!   prepares, a group commit each, and a slot held across that wait either
//!   idles the worker or needs a deep window of executing transactions, whose
//!   rows go cold and whose locks collide.
//!
//! Durability is pipelined, as a server with many clients per worker would do
//! it: a committed transaction's redo record sits in the island's log buffer,
//! a worker hands the buffer to the log writer every [`FLUSH_EVERY`] of its
//! commits or [`FLUSH_AFTER`] (`sync`; [`ASYNC_FLUSH_AFTER`] in `async`
//! mode), and a transaction is *acknowledged* (counted, its latency taken,
//! [`Workload::finished`] told) only once its batch is durable in `sync` mode.
//! A read-only transaction waits too, for the batch of the newest record it
//! could have read from. A worker keeps at most its acknowledgement window
//! (`--inflight`) of commits waiting, and starts no transaction while it is
//! full. In `async` mode a commit is acknowledged at once; with durability
//! `off` nothing is logged.
//!
//! An aborted attempt leaves its slot (or the inline lane) and waits before it
//! retries; the worker goes on with other requests meanwhile. If it ran into a
//! local row's lock, it retries as soon as that row would let it pass
//! ([`crate::txn::LockWait`]), checked when the worker looks for work.
//! Otherwise (a validation failure, a remote refusal, a 2PC abort) it backs
//! off 20 µs, doubling per attempt up to about 5 ms. A retry keeps its first
//! attempt's start (its latency covers every attempt) and its wait-die age.
//! A retry that is due runs before any new request, but waiting retries fill
//! at most three quarters of the worker's window of begun transactions: the
//! rest stays for new requests, so that retries blocked on rows held for long
//! (by prepared branches waiting for their decisions) do not stop the worker
//! from starting transactions on free rows. Retries beyond that share still
//! count against twice the window.
//!
//! At the end of a run (`STOP`) a worker starts nothing new, drops the
//! retries it holds, and finishes what is in flight; what is acknowledged
//! after the end is not counted, since the measured phase is over. A worker
//! that exchanges messages leaves once every worker has settled (a settled
//! worker may still owe a peer an answer); one that does not leaves at once.
//! When the run fails instead (a worker's error, a dead log: the run's
//! `FAILED` phase) it leaves at once: its peers may be gone, so settling could
//! wait for ever. Branches and decisions in flight stay as the logs have them,
//! for the next recovery to resolve.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use super::{Cluster, Executor, GtidMap, HomeCommit, WorkerCounts};
use crate::island::Island;
use crate::phases::{self, Phase};
use crate::proc::rng::FastRng;
use crate::proc::run::{
    log_failure, watch_until, worker_seed, FailOnPanic, WorkerBody, ASYNC_FLUSH_AFTER, FAILED,
    FLUSH_AFTER, FLUSH_EVERY, MEASURE, STOP, WARMUP,
};
use crate::proc::stats::{ProgressCounter, WorkerStats};
use crate::proc::{Outcome, Suspend, Workload};
use crate::txn::{LockWait, Txn};
use crate::wal::{BatchSeq, Durability};
use crate::{Abort, AbortReason, Error};

type Proc = Pin<Box<dyn Future<Output = Result<(), Abort>>>>;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum St {
    Free,
    /// Poll the procedure.
    Ready,
    /// Waiting for a remote reply since `since`.
    Waiting,
    /// A suspending request waiting for its client ([`Suspend::Client`]).
    Client,
    /// A suspending request waiting for a local row's lock since `since`
    /// ([`Suspend::Lock`]).
    Lock(LockWait),
}

/// What a request's attempts share.
#[derive(Clone, Copy, Debug, Default)]
struct Attempt {
    ty: usize,
    /// Clock reading ([`Clock`]) of its first attempt.
    start: u64,
    /// Attempts that aborted before this one.
    attempt: u32,
    /// The wait-die timestamp of its first attempt (0: not begun yet).
    ts: u64,
}

/// An executing attempt: a slot polls its procedure.
struct Slot<R> {
    /// Borrows `req` and a context of the executor (see [`start_attempt`]):
    /// declared first, so it drops before `req` even when a slot is dropped
    /// whole (an unwinding worker).
    fut: Option<Proc>,
    req: Box<R>,
    state: St,
    /// A free slot whose `req` holds a new request not yet begun (no
    /// transaction context was free when it came).
    loaded: bool,
    ctx: u32,
    at: Attempt,
    /// Clock reading when its wait for a remote reply began.
    since: u64,
}

/// A transaction out of its slot: its two-phase commit is under way
/// ([`super::ClusterOptions::commit_window`]), or it aborted and waits to be
/// retried ([`Retry`]). A slot polls only executing attempts, so neither holds
/// one back from the next transaction.
struct Parked<R> {
    req: Box<R>,
    at: Attempt,
}

/// An aborted transaction waiting to be retried.
struct Retry<R> {
    txn: Parked<R>,
    /// Retry from this clock reading on.
    due: u64,
    /// After a conflict on a local row: retry as soon as the row would let
    /// the request pass, but not before the clock reading given.
    watch: Option<(LockWait, u64)>,
}

impl<R> Parked<R> {
    /// An attempt aborted: wait before the next. `conflict` is the local row
    /// it ran into, if any, and whether it had touched another island (see
    /// [`Executor::conflict_of`]).
    fn back_off(mut self, now: u64, clock: &Clock, conflict: Option<(LockWait, bool)>) -> Retry<R> {
        self.at.attempt += 1;
        let blind = clock.ticks(backoff(self.at.attempt));
        let (due, watch) = match conflict {
            None => (now + blind, None),
            // An AbortReq to a branch on another worker may still be on its
            // way: give it the blind backoff before a retry can meet the old
            // branch's locks.
            Some((w, touched)) => (
                now + blind.max(clock.ticks(WATCH_FALLBACK)),
                Some((w, if touched { now + blind } else { now })),
            ),
        };
        Retry {
            txn: self,
            due,
            watch,
        }
    }
}

/// A committed transaction waiting for its log batch.
struct Pending<R> {
    ack: BatchSeq,
    start: u64,
    ty: usize,
    req: Box<R>,
}

/// Where and how much one worker of a cluster runs.
#[derive(Clone, Copy, Debug)]
pub struct ClusterWorker {
    pub island: usize,
    pub worker: usize,
    pub cpu: Option<usize>,
    /// Stop starting transactions after this many have finished (committed
    /// or rolled back by the procedure); `Some(0)` only serves other
    /// islands. `None`: until the run stops.
    pub limit: Option<u64>,
}

/// The work of each of `workers` (one [`WorkerBody`] per worker, in order):
/// the executor loop running `workload` on `cl`, with worker `i`'s requests
/// drawn from seed [`worker_seed`]`(seed, i)` and at most `window` commits
/// waiting for their log batch. Whoever runs the bodies, one thread each,
/// owns the run's phase: see [`crate::proc::run`].
pub fn executor_bodies<W: Workload + 'static>(
    cl: &Arc<Cluster>,
    workers: &[ClusterWorker],
    workload: &Arc<W>,
    seed: u64,
    window: usize,
) -> Result<Vec<WorkerBody>, Error>
where
    W::Req: 'static,
{
    let mut bodies: Vec<WorkerBody> = Vec::with_capacity(workers.len());
    let clients = workers.iter().filter(|w| w.limit != Some(0)).count();
    let executors = workers
        .iter()
        .map(|w| cl.executor(w.island, w.worker))
        .collect::<Result<Vec<_>, _>>()?;
    cl.clients.store(clients, Ordering::Release);
    cl.unsettled.store(workers.len(), Ordering::Release);
    for ((i, w), ex) in workers.iter().enumerate().zip(executors) {
        let workload = Arc::clone(workload);
        let seed = worker_seed(seed, i);
        let limit = w.limit;
        let window = window.max(1);
        bodies.push(Box::new(move |phase, counter| {
            executor_loop(ex, &*workload, i, seed, phase, counter, limit, window)
        }));
    }
    Ok(bodies)
}

/// The message of a caught panic.
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// The worker loop's clock: [`phases::ticks`], read once per round (and per
/// inline attempt). A monotonic-clock read and the `timespec` arithmetic on
/// it, per slot per round, cost far more than the counter.
struct Clock {
    per_us: f64,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            per_us: phases::ticks_per_us(),
        }
    }

    #[inline]
    fn now(&self) -> u64 {
        phases::ticks()
    }

    fn ticks(&self, d: Duration) -> u64 {
        (d.as_nanos() as f64 * self.per_us / 1000.0) as u64
    }

    #[inline]
    fn ns(&self, ticks: u64) -> u64 {
        (ticks as f64 * 1000.0 / self.per_us) as u64
    }
}

/// Rounds in a row without progress a worker spins (durability `off`)
/// before it yields its core each round: a few microseconds, longer than a
/// round trip to a running peer. Workers that share cores (more workers than
/// cores, or other processes) must yield, or a peer that would answer waits
/// for the spinner's time slice.
const IDLE_SPINS: u32 = 256;

/// Exponential back-off after an abort, without blocking the worker. It
/// starts at tens of microseconds, a few message round trips: a retry that
/// comes back before the owner island has processed the abort of the
/// previous attempt would collide with that attempt's own locks.
fn backoff(attempt: u32) -> Duration {
    Duration::from_micros(20u64 << attempt.min(8))
}

/// The part of a worker's `window` (begun transactions) that its waiting
/// retries may fill: all but a quarter (at least one), which new requests
/// keep ([`Worker::room`]).
fn retry_share(window: usize) -> usize {
    window - (window / 4).max(1)
}

/// The most transactions a worker of window `window` keeps begun, retries
/// beyond their share included: twice the window ([`Worker::room`]).
fn begun_max(window: usize) -> usize {
    2 * window
}

/// The longest a logging worker with nothing to run sleeps on its bell
/// ([`Worker::park_for`]): the 2PC pump's timers run once a millisecond.
const PARK_MAX: Duration = Duration::from_millis(1);

/// A sleep shorter than this (ns) is not worth its system calls: the worker
/// yields instead.
const PARK_MIN_NS: u64 = 20_000;

/// An attempt that aborted on a local row's lock retries as soon as that row
/// is free; this is only the fallback if it looks locked for longer (a lock
/// held across a forced 2PC record is held for a millisecond or more).
const WATCH_FALLBACK: Duration = Duration::from_millis(2);

/// How often a request suspended on a local row's lock is polled again while
/// the row still looks locked: its procedure checks its own deadline (a
/// deadlock timeout) and its cancel flag when polled.
const LOCK_RECHECK: Duration = Duration::from_millis(5);

/// The slots of suspending requests ([`Workload::poll_suspending`]): the
/// interactive transactions of an executor, beside its ordinary requests.
/// A slot is held from the request's start to its procedure's end, across
/// its client's think time; the slots are fixed at start
/// ([`super::ClusterOptions::blocks`]), so a request waits in the
/// workload's queue while all are taken.
struct BlockSlots<R> {
    slots: Vec<Slot<R>>,
    /// Indexes of the free slots.
    free: Vec<u32>,
}

/// A worker's state between rounds, apart from its executor and its slots.
struct Worker<'a, W: Workload> {
    workload: &'a W,
    /// The worker's index in its run (the workload's `worker` argument).
    w: usize,
    island: Island,
    clock: Clock,
    stats: WorkerStats,
    /// Its counts in the cluster's stats ([`super::Cluster::island_counts`]),
    /// which only this worker writes.
    counts: &'a WorkerCounts,
    /// Committed transactions waiting for their log batch (`sync`), oldest first.
    pending: VecDeque<Pending<W::Req>>,
    /// Distributed commits in flight, and transactions whose ending waits
    /// for its confirmation, by gtid.
    parked: GtidMap<Parked<W::Req>>,
    /// The endings that wait for a confirmation ([`Worker::ended`]).
    endings: GtidMap<Outcome>,
    retries: Vec<Retry<W::Req>>,
    /// Request boxes to give a slot (or the inline lane) whose request went
    /// to `pending`, `parked` or `retries`.
    spare: Vec<Box<W::Req>>,
    /// Requests finished: committed, rolled back, given up or failed.
    finished: u64,
    /// Logged commits since this worker last handed the log buffer over.
    since_flush: usize,
    last_flush: u64,
    /// [`FLUSH_AFTER`] and [`ASYNC_FLUSH_AFTER`] in clock ticks.
    flush_after: u64,
    async_flush_after: u64,
    logging: bool,
    wait_ack: bool,
    /// The run is over: start nothing, count nothing more.
    stopping: bool,
    /// Transactions a worker keeps begun and not finished (executing,
    /// committing, or waiting for a retry) before it starts no new one,
    /// counting at most `retry_share` of its waiting retries
    /// ([`Worker::room`]).
    window: usize,
    /// The part of `window` that waiting retries may fill
    /// ([`retry_share`]).
    retry_share: usize,
    /// Commits a worker keeps waiting for their log batch.
    ack_window: usize,
    limit: Option<u64>,
}

impl<W: Workload> Worker<'_, W> {
    /// Whether a new request may begin while `active` transactions are
    /// begun, [`Worker::retries`] among them. Waiting retries count for at
    /// most `retry_share` of the window, so that new requests always have
    /// the rest: retries blocked on rows that stay locked for long (held
    /// by prepared branches until their decisions are durable) would
    /// otherwise fill the window, and the worker would start nothing, not
    /// even transactions on free rows. The retries beyond that share
    /// still count against twice the window, which bounds what a worker
    /// holds ([`begun_max`]). A retry that is due runs before any new
    /// request (the caller looks for one first), whatever this says.
    #[inline]
    fn room(&self, active: usize) -> bool {
        let waiting = self.retries.len();
        let counted = active.saturating_sub(waiting) + waiting.min(self.retry_share);
        counted < self.window
            && active < begun_max(self.window)
            && self.pending.len() < self.ack_window
            && self
                .limit
                .is_none_or(|l| self.finished + (active as u64) < l)
    }

    /// A spare request box, for `req`'s place when `req` goes elsewhere.
    #[inline]
    fn take_req(&mut self, req: &mut Box<W::Req>) -> Box<W::Req> {
        let spare = self.spare.pop().unwrap_or_default();
        std::mem::replace(req, spare)
    }

    /// The index of a retry that may run now: its watched row is free, or
    /// its time is up.
    fn due_retry(&self, ex: &Executor, now: u64) -> Option<usize> {
        self.retries.iter().position(|r| {
            now >= r.due
                || r.watch
                    .is_some_and(|(w, from)| now >= from && !ex.still_locked(w))
        })
    }

    /// A transaction committed (or its commit was decided): it counts once
    /// its batch `ack` is durable (`sync`), now otherwise. `end` is the
    /// clock reading its latency ends at (`None`: read the clock now).
    fn committed(&mut self, ack: BatchSeq, at: Attempt, req: &mut Box<W::Req>, end: Option<u64>) {
        self.workload.committed(self.w, req);
        self.finished += 1;
        if self.wait_ack && ack > self.island.durable_batch() {
            let req = self.take_req(req);
            self.pending.push_back(Pending {
                ack,
                start: at.start,
                ty: at.ty,
                req,
            });
            return;
        }
        if !self.stopping {
            let end = end.unwrap_or_else(|| self.clock.now());
            self.stats
                .record_commit(at.ty, self.clock.ns(end.saturating_sub(at.start)));
        }
        self.workload.finished(self.w, req, Outcome::Committed);
    }

    /// An attempt aborted, for `reason`: counted in the worker's stats and
    /// the cluster's, it is retried after a back-off, or given up when the
    /// workload bounds its attempts. Every aborted attempt, in the inline
    /// lane and in slots alike, comes here.
    fn aborted(
        &mut self,
        p: Parked<W::Req>,
        reason: AbortReason,
        now: u64,
        conflict: Option<(LockWait, bool)>,
    ) {
        self.stats.record_abort(reason);
        self.counts.abort(reason);
        let attempts = p.at.attempt + 1;
        if self
            .workload
            .max_attempts(&p.req)
            .is_some_and(|m| attempts >= m)
        {
            self.counts.gave_up();
            let mut req = p.req;
            self.workload.finished(
                self.w,
                &mut req,
                Outcome::GaveUp {
                    attempts,
                    last: reason,
                },
            );
            self.spare.push(req);
            self.finished += 1;
            return;
        }
        self.retries.push(p.back_off(now, &self.clock, conflict));
    }

    /// The procedure of a request panicked: the request fails (once its
    /// branches confirm, see [`Worker::ended`]), or the run does if the
    /// workload does not isolate failures. The transaction is aborted.
    fn panicked(
        &mut self,
        ex: &mut Executor,
        c: u32,
        at: Attempt,
        req: &mut Box<W::Req>,
        panic: Box<dyn std::any::Any + Send>,
    ) -> Result<(), Error> {
        let msg = panic_message(&*panic);
        if !self.workload.isolates_failures(req) {
            ex.abort_home(c);
            return Err(Error::Config(format!("a stored procedure panicked: {msg}")));
        }
        self.ended(ex, c, Outcome::Panicked(msg), at, req);
        Ok(())
    }

    /// The procedure on context `c` stopped without asking to commit (a user
    /// abort, an isolated failure, a panic): the transaction is aborted, and
    /// `ending` reaches the workload once every branch it touched confirms
    /// that it held ([`Executor::end_home`]; at once when none needs asking).
    fn ended(
        &mut self,
        ex: &mut Executor,
        c: u32,
        ending: Outcome,
        mut at: Attempt,
        req: &mut Box<W::Req>,
    ) {
        if at.ts == 0 {
            at.ts = ex.timestamp_of(c);
        }
        match ex.end_home(c) {
            Some(g) => {
                let req = self.take_req(req);
                self.parked.insert(g, Parked { req, at });
                self.endings.insert(g, ending);
            }
            None => self.report_ending(ending, at.ty, req),
        }
    }

    /// Tells the workload how a request ended without committing.
    fn report_ending(&mut self, ending: Outcome, ty: usize, req: &mut W::Req) {
        if matches!(ending, Outcome::UserAbort(_)) {
            self.stats.record_user_abort(ty);
            self.counts.user_abort();
        }
        self.workload.finished(self.w, req, ending);
        self.finished += 1;
    }

    /// What follows an attempt on context `c` whose procedure is done:
    /// `done` is how it ended. A commit is asked for, or the transaction is
    /// aborted. `req` is the request; when it must be kept (a commit waiting
    /// for its batch or its 2PC, a retry, an ending waiting for its
    /// confirmation), a spare box takes its place.
    fn settle(
        &mut self,
        ex: &mut Executor,
        c: u32,
        done: Result<(), Abort>,
        mut at: Attempt,
        req: &mut Box<W::Req>,
        now: u64,
    ) -> Result<(), Error> {
        let r = match done {
            Ok(()) => ex.commit_home(c),
            Err(Abort::User(why)) => {
                self.ended(ex, c, Outcome::UserAbort(why), at, req);
                return Ok(());
            }
            Err(Abort::Failed(e))
                if self.workload.isolates_failures(req) && !matches!(e, Error::LogFailed(_)) =>
            {
                self.ended(ex, c, Outcome::Failed(e), at, req);
                return Ok(());
            }
            Err(e) => {
                ex.abort_home(c);
                Err(e)
            }
        };
        // A transaction kept for later keeps its first attempt's age (the
        // context is not taken again before this returns).
        if at.ts == 0 && !matches!(r, Ok(HomeCommit::Local(_) | HomeCommit::Released(_))) {
            at.ts = ex.timestamp_of(c);
        }
        match r {
            Ok(HomeCommit::Local(done)) => {
                self.since_flush += done.logged as usize;
                self.committed(done.ack, at, req, None);
            }
            Ok(HomeCommit::Released(done)) => {
                self.stats.distributed += 1;
                self.since_flush += done.logged as usize;
                self.committed(done.ack, at, req, None);
            }
            Ok(HomeCommit::Distributed(g)) => {
                let req = self.take_req(req);
                self.parked.insert(g, Parked { req, at });
            }
            Err(Abort::Conflict(reason)) => {
                // The context is free but not yet taken again: its conflict
                // is this attempt's.
                let conflict = (reason == AbortReason::LockConflict)
                    .then(|| ex.conflict_of(c))
                    .flatten();
                let req = self.take_req(req);
                self.aborted(Parked { req, at }, reason, now, conflict);
            }
            Err(Abort::User(why)) => self.report_ending(Outcome::UserAbort(why), at.ty, req),
            Err(Abort::Failed(e))
                if self.workload.isolates_failures(req) && !matches!(e, Error::LogFailed(_)) =>
            {
                self.report_ending(Outcome::Failed(e), at.ty, req)
            }
            Err(Abort::Failed(e)) => return Err(e),
        }
        Ok(())
    }

    /// Endings whose confirmation arrived this round ([`Worker::ended`]):
    /// they stand if every branch held, and the attempt is retried if one
    /// did not (what it read may be no one view), or fails with
    /// [`Error::IslandDown`] if an island it asked went down.
    fn on_confirmed(&mut self, ex: &mut Executor, now: u64) {
        let mut confirmed = std::mem::take(&mut ex.confirmed);
        for (g, held) in confirmed.drain(..) {
            // An island the confirmation waited for went down: it cannot
            // be asked, and a retry would need it.
            let down = ex.aborted_for_down(g);
            let (Some(mut p), Some(ending)) = (self.parked.remove(&g), self.endings.remove(&g))
            else {
                continue;
            };
            match (held, down) {
                (true, _) => {
                    self.report_ending(ending, p.at.ty, &mut p.req);
                    self.spare.push(p.req);
                }
                (false, Some(island)) => self.island_down(p, island),
                (false, None) => self.aborted(p, AbortReason::Remote, now, None),
            }
        }
        ex.confirmed = confirmed;
    }

    /// The outcomes of distributed commits that arrived this round.
    fn on_outcomes(&mut self, ex: &mut Executor, now: u64) {
        let mut outcomes = std::mem::take(&mut ex.outcomes);
        for (g, outcome) in outcomes.drain(..) {
            let down = ex.aborted_for_down(g);
            let Some(mut p) = self.parked.remove(&g) else {
                continue;
            };
            match outcome {
                // Decided: it counts once its decision is durable.
                Some(ack) => {
                    self.stats.distributed += 1;
                    self.committed(ack, p.at, &mut p.req, Some(now));
                    self.spare.push(p.req);
                }
                None => match down {
                    Some(island) => self.island_down(p, island),
                    None => self.aborted(p, AbortReason::Remote, now, None),
                },
            }
        }
        ex.outcomes = outcomes;
    }

    /// An attempt aborted because it needs `island`, whose process is
    /// down: counted, and the request fails with [`Error::IslandDown`]
    /// without a retry.
    fn island_down(&mut self, p: Parked<W::Req>, island: crate::route::IslandId) {
        self.stats.record_abort(AbortReason::IslandDown);
        self.counts.abort(AbortReason::IslandDown);
        let mut req = p.req;
        self.report_ending(
            Outcome::Failed(Error::IslandDown { island }),
            p.at.ty,
            &mut req,
        );
        self.spare.push(req);
    }

    /// Ends the attempt in slot `s`, which waits for a remote reply: drops
    /// its procedure, aborts its transaction and frees the slot (the caller
    /// returns a block slot to its free list). Returns the request, its
    /// attempt keeping its wait-die age for a retry.
    fn abandon(&mut self, ex: &mut Executor, s: &mut Slot<W::Req>) -> Parked<W::Req> {
        s.fut = None;
        let at = Attempt {
            ts: ex.timestamp_of(s.ctx),
            ..s.at
        };
        ex.abort_home(s.ctx);
        s.state = St::Free;
        let req = self.take_req(&mut s.req);
        Parked { req, at }
    }

    /// If slot `s` waits for a reply that would come from an island that is
    /// down, its attempt fails now, as a call's transaction does
    /// ([`Worker::island_down`]), and the slot is free; returns whether it
    /// did. Slots of calls and of blocks alike.
    fn fail_if_down(&mut self, ex: &mut Executor, s: &mut Slot<W::Req>) -> bool {
        if s.state != St::Waiting {
            return false;
        }
        let Some(island) = ex.waits_on_down(s.ctx) else {
            return false;
        };
        let p = self.abandon(ex, s);
        self.island_down(p, island);
        true
    }

    /// Runs attempts inline (see the module documentation) until a round's
    /// worth ran, the workload has no request to start, or there is no room.
    /// `cur` is the lane's request box. Returns whether any attempt ran, and
    /// whether the workload had nothing to start.
    #[inline]
    fn inline_round(
        &mut self,
        ex: &mut Executor,
        cur: &mut Box<W::Req>,
        rng: &mut FastRng,
        per_round: usize,
        now: u64,
    ) -> Result<(bool, bool), Error> {
        let mut ran = false;
        let mut none_due = self.retries.is_empty();
        for _ in 0..per_round {
            let retry = if none_due {
                None
            } else {
                let i = self.due_retry(ex, now);
                // Nothing changes for the rest of the round.
                none_due = i.is_none();
                i
            };
            let at = match retry {
                Some(i) => {
                    let p = self.retries.swap_remove(i).txn;
                    self.spare.push(std::mem::replace(cur, p.req));
                    self.stats.record_retry();
                    p.at
                }
                None => {
                    if !self.room(self.retries.len()) {
                        break;
                    }
                    phases::switch(Phase::Management);
                    let Some(ty) = self.workload.poll_next(self.w, rng, cur) else {
                        return Ok((ran, true));
                    };
                    Attempt {
                        ty,
                        start: self.clock.now(),
                        attempt: 0,
                        ts: 0,
                    }
                }
            };
            ran = true;
            let c = if at.ts == 0 {
                ex.begin_home(false)
            } else {
                ex.begin_retry(at.ts)
            };
            let Some(c) = c else {
                if let Some(e) = ex.failure() {
                    return Err(e);
                }
                return Err(Error::Config(
                    "an executor that runs procedures inline found its transaction context taken"
                        .into(),
                ));
            };
            phases::switch(Phase::Execution);
            let polled = poll_inline(self.workload, ex.home_ctx(c), &**cur);
            phases::switch(Phase::Management);
            match polled {
                Ok(Poll::Ready(done)) => self.settle(ex, c, done, at, cur, now)?,
                // The future is gone (it lived on `poll_inline`'s stack):
                // the attempt fails like a procedure that returned an error.
                Ok(Poll::Pending) => {
                    self.settle(ex, c, Err(Abort::Failed(foreign_wait())), at, cur, now)?
                }
                Err(panic) => self.panicked(ex, c, at, cur, panic)?,
            }
        }
        Ok((ran, false))
    }

    /// Starts, resumes and polls the suspending requests of `bs` (see
    /// [`BlockSlots`]): a new one while a slot is free, one whose client or
    /// row lock let it go on. At the end of the run, one that waits for its
    /// client or a lock is ended ([`Outcome::UserAbort`] of [`STOPPED`]).
    /// `base` is the first block slot's number in `slot_of`. Returns
    /// whether it progressed, the slots in use, those of them waiting for
    /// their clients (the executor may park meanwhile: a client's operation
    /// wakes it), and the batches received while polling.
    #[allow(clippy::too_many_arguments)]
    fn block_round(
        &mut self,
        ex: &mut Executor,
        bs: &mut BlockSlots<W::Req>,
        slot_of: &mut Vec<u32>,
        base: usize,
        may_start: bool,
        messages: bool,
        op_timeout: u64,
        now: u64,
    ) -> Result<(bool, usize, usize, usize), Error>
    where
        W: 'static,
        W::Req: 'static,
    {
        let mut progressed = false;
        let mut received = 0;
        // New requests, one per free slot while the workload has them.
        while let (true, Some(&i)) = (may_start, bs.free.last()) {
            let s = &mut bs.slots[i as usize];
            if !s.loaded {
                let Some(ty) = self.workload.poll_suspending(self.w, &mut s.req) else {
                    break;
                };
                s.loaded = true;
                s.at = Attempt {
                    ty,
                    start: now,
                    attempt: 0,
                    ts: 0,
                };
            }
            let Some(c) = ex.begin_home(false) else {
                // No context free: it starts in a later round.
                break;
            };
            bs.free.pop();
            s.loaded = false;
            progressed = true;
            // SAFETY: as for the ordinary slots (see the call in
            // `executor_loop`): `c` was just taken, the slot is free and its
            // future dropped, and block slots drop before `ex` and `workload`.
            unsafe { start_attempt(s, ex, c, self.workload) };
            if slot_of.len() <= c as usize {
                slot_of.resize(c as usize + 1, 0);
            }
            slot_of[c as usize] = (base + i as usize) as u32;
        }
        let (mut busy, mut suspended) = (0, 0);
        if bs.free.len() == bs.slots.len() {
            // None open: the common case of an executor serving calls.
            return Ok((progressed, busy, suspended, received));
        }
        let recheck = self.clock.ticks(LOCK_RECHECK);
        let mut cx = Context::from_waker(Waker::noop());
        for (i, s) in bs.slots.iter_mut().enumerate() {
            if self.fail_if_down(ex, s) {
                bs.free.push(i as u32);
                progressed = true;
                continue;
            }
            match s.state {
                St::Free => continue,
                St::Client | St::Lock(_) if self.stopping => {
                    // The run is over and nobody will hand it more work.
                    s.fut = None;
                    s.state = St::Free;
                    bs.free.push(i as u32);
                    self.ended(ex, s.ctx, Outcome::UserAbort(STOPPED), s.at, &mut s.req);
                    progressed = true;
                    continue;
                }
                St::Client if self.workload.resumable(&s.req) => s.state = St::Ready,
                St::Lock(w) if now.saturating_sub(s.since) >= recheck || !ex.still_locked(w) => {
                    s.state = St::Ready
                }
                St::Waiting
                    if now.saturating_sub(s.since) > op_timeout
                        && ex.reply_unanswered(s.ctx, s.since, now) =>
                {
                    let p = self.abandon(ex, s);
                    bs.free.push(i as u32);
                    self.aborted(p, AbortReason::Remote, now, None);
                    progressed = true;
                    continue;
                }
                _ => {}
            }
            if s.state == St::Ready {
                progressed = true;
                let fut = s.fut.as_mut().expect("a ready slot has a procedure");
                phases::switch(Phase::Execution);
                let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    fut.as_mut().poll(&mut cx)
                }));
                phases::switch(Phase::Management);
                match polled {
                    Err(panic) => {
                        s.fut = None;
                        s.state = St::Free;
                        bs.free.push(i as u32);
                        self.panicked(ex, s.ctx, s.at, &mut s.req, panic)?;
                    }
                    Ok(Poll::Pending) => match self.workload.suspended(&s.req) {
                        Some(Suspend::Client) => s.state = St::Client,
                        Some(Suspend::Lock(w)) => {
                            s.state = St::Lock(w);
                            s.since = self.clock.now();
                        }
                        None => match ex.send_request(s.ctx) {
                            Some(sent) => {
                                s.state = St::Waiting;
                                if sent {
                                    s.since = self.clock.now();
                                }
                            }
                            None => {
                                s.fut = None;
                                s.state = St::Free;
                                bs.free.push(i as u32);
                                let done = Err(Abort::Failed(foreign_wait()));
                                self.settle(ex, s.ctx, done, s.at, &mut s.req, now)?;
                            }
                        },
                    },
                    Ok(Poll::Ready(done)) => {
                        s.fut = None;
                        s.state = St::Free;
                        bs.free.push(i as u32);
                        self.settle(ex, s.ctx, done, s.at, &mut s.req, now)?;
                    }
                }
                if messages {
                    phases::switch(Phase::Communication);
                    received += ex.exchange();
                    phases::switch(Phase::Management);
                }
            }
            // A block waiting for a lock keeps its executor from parking:
            // the holder may be another executor's, whose release wakes
            // nobody here, and the wait is bounded by the deadlock timeout.
            match s.state {
                St::Free => {}
                St::Client => {
                    busy += 1;
                    suspended += 1;
                }
                _ => busy += 1,
            }
        }
        Ok((progressed, busy, suspended, received))
    }

    /// How long a logging worker whose round made no progress may sleep on
    /// its bell, or `None` if it must only yield: it does not log, or a
    /// retry or a hand-off of the log buffer is due now. Whatever it waits
    /// for rings the bell (a batch from a peer, a durable log batch, a
    /// call), so the sleep lasts at most until its own next deadline: the
    /// earliest retry, the log hand-off ([`FLUSH_AFTER`]) and [`PARK_MAX`]
    /// (the 2PC timers run once a millisecond).
    ///
    /// A worker must not spin while it waits only for the log: on a machine
    /// with as many busy threads as cores, a pinned worker that yields in a
    /// loop keeps its core from the kernel work that completes the log's
    /// `fdatasync`. Then the branches it prepared hold their locks until
    /// that sync, its retries find those rows locked, fill its window and
    /// spin in turn, and the run commits nothing for seconds.
    fn park_for(&self, now: u64) -> Option<Duration> {
        if !self.logging {
            return None;
        }
        let mut until = now + self.clock.ticks(PARK_MAX);
        if let Some(due) = self.retries.iter().map(|r| r.due).min() {
            until = until.min(due);
        }
        if self.since_flush > 0 {
            let after = if self.wait_ack {
                self.flush_after
            } else {
                self.async_flush_after
            };
            until = until.min(self.last_flush + after);
        }
        let left_ns = self.clock.ns(until.saturating_sub(now));
        (left_ns >= PARK_MIN_NS).then(|| Duration::from_nanos(left_ns))
    }

    /// Hands the log buffer over when it is due, and acknowledges the
    /// commits whose batch is durable.
    fn log_round(&mut self, ex: &mut Executor, now: u64) -> Result<(), Error> {
        if self.logging {
            let since = now.saturating_sub(self.last_flush);
            let due = if self.wait_ack {
                !self.pending.is_empty()
                    && (self.since_flush >= FLUSH_EVERY
                        || since >= self.flush_after
                        || (self.pending.len() >= self.ack_window && self.since_flush > 0))
            } else {
                self.since_flush > 0
                    && (self.since_flush >= FLUSH_EVERY || since >= self.async_flush_after)
            };
            if due || (self.stopping && self.since_flush > 0) {
                phases::switch(Phase::Logging);
                ex.flush_log()?;
                phases::switch(Phase::Management);
                self.since_flush = 0;
                self.last_flush = now;
            }
        }
        if !self.pending.is_empty() {
            let durable = self.island.durable_batch();
            while let Some(p) = self.pending.front() {
                if p.ack > durable {
                    break;
                }
                if !self.stopping {
                    self.stats
                        .record_commit(p.ty, self.clock.ns(now.saturating_sub(p.start)));
                }
                let mut p = self.pending.pop_front().expect("a front");
                self.workload
                    .finished(self.w, &mut p.req, Outcome::Committed);
                self.spare.push(p.req);
            }
        }
        Ok(())
    }
}

/// The abort of a suspending request that waited for its client or a lock
/// when the run ended.
pub const STOPPED: &str = "the executor stopped";

/// The failure of a procedure that returned `Pending` without waiting for an
/// engine operation: it awaited something no executor wakes (a timer, a
/// channel, another runtime's future), and would never be polled again.
fn foreign_wait() -> Error {
    Error::Config(
        "the stored procedure awaited something other than its transaction's operations \
         (a future no executor wakes): a procedure may await only the engine's operations"
            .into(),
    )
}

/// Polls a procedure once, on the caller's stack; a panic is caught only
/// when the workload isolates failures (then the unwinding boundary costs a
/// call that the benchmark's procedures, inlined here, do without).
#[inline(always)]
fn poll_inline<W: Workload>(
    workload: &W,
    tx: &mut Txn,
    req: &W::Req,
) -> Result<Poll<Result<(), Abort>>, Box<dyn std::any::Any + Send>> {
    let mut poll = move || {
        let mut cx = Context::from_waker(Waker::noop());
        let fut = pin!(workload.run(tx, req));
        fut.poll(&mut cx)
    };
    if workload.isolates_failures(req) {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(poll))
    } else {
        Ok(poll())
    }
}

#[allow(clippy::too_many_arguments)]
fn executor_loop<W: Workload + 'static>(
    mut ex: Executor,
    workload: &W,
    w: usize,
    seed: u64,
    phase: &AtomicU8,
    counter: &ProgressCounter,
    limit: Option<u64>,
    ack_window: usize,
) -> (WorkerStats, Result<(), Error>)
where
    W::Req: 'static,
{
    let cl = Arc::clone(ex.cluster());
    let island = ex.pool.own.clone();
    let durability = island.config().durability;
    let messages = ex.messages();
    let clock = Clock::new();
    let op_timeout = clock.ticks(cl.options().op_timeout);
    let linger = clock.ticks(Duration::from_millis(2));
    let window = (cl.options().inflight + cl.options().commit_window).max(1);
    let mut rng = FastRng::new(seed);
    let mut wk = Worker {
        workload,
        w,
        island,
        stats: WorkerStats::new(),
        counts: cl.worker_counts(ex.endpoint()),
        pending: VecDeque::new(),
        parked: GtidMap::default(),
        endings: GtidMap::default(),
        retries: Vec::new(),
        spare: Vec::new(),
        finished: 0,
        since_flush: 0,
        last_flush: clock.now(),
        flush_after: clock.ticks(FLUSH_AFTER),
        async_flush_after: clock.ticks(ASYNC_FLUSH_AFTER),
        logging: durability != Durability::Off,
        wait_ack: durability == Durability::Sync,
        stopping: false,
        window,
        retry_share: retry_share(window),
        ack_window: ack_window.max(1),
        limit,
        clock,
    };
    // Slots only for an executor that messages: inline attempts need none.
    let mut slots: Vec<Slot<W::Req>> = (0..if messages { cl.options().inflight } else { 0 })
        .map(|_| Slot {
            fut: None,
            req: Box::default(),
            state: St::Free,
            loaded: false,
            ctx: 0,
            at: Attempt::default(),
            since: 0,
        })
        .collect();
    let blocks = cl.options().blocks;
    let mut bs = BlockSlots {
        slots: (0..blocks)
            .map(|_| Slot {
                fut: None,
                req: Box::default(),
                state: St::Free,
                loaded: false,
                ctx: 0,
                at: Attempt::default(),
                since: 0,
            })
            .collect(),
        free: (0..blocks as u32).rev().collect(),
    };
    let base = slots.len();
    // The inline lane's request.
    let mut cur: Box<W::Req> = Box::default();
    // The slot polling each context (contexts are numbered densely).
    let mut slot_of: Vec<u32> = Vec::new();
    let per_round = cl.options().inflight.max(1);
    let mut my_phase = WARMUP;
    let mut client_done = limit == Some(0);
    let mut idle_since: Option<u64> = None;
    let mut idle_rounds = 0u32;
    // `workload.idle` was called since the last round that progressed.
    let mut told_idle = false;
    // Counted in `cl.unsettled` while false (every worker starts unsettled).
    let mut settled = false;
    let mut cx = Context::from_waker(Waker::noop());
    let result = (|| -> Result<(), Error> {
        loop {
            let p = phase.load(Ordering::Relaxed);
            if p != my_phase {
                if p == FAILED {
                    // Leave without settling: the peers this worker's
                    // commits and branches wait for may be gone, or their
                    // log dead. What a crash would leave in doubt stays so
                    // in the logs, for recovery to resolve.
                    return Ok(());
                } else if p == STOP {
                    wk.stopping = true;
                } else if p == MEASURE {
                    wk.stats.reset();
                    phases::take();
                }
                my_phase = p;
            }
            let now = wk.clock.now();
            let mut received = 0;
            let mut progressed = false;
            if messages {
                phases::switch(Phase::Communication);
                received = ex.pump_at(now)?;
                phases::switch(Phase::Management);
                progressed = received > 0 || !ex.woken.is_empty() || !ex.outcomes.is_empty();
                for c in ex.woken.drain(..) {
                    let s = slot_of.get(c as usize).and_then(|&i| {
                        let i = i as usize;
                        if i < base {
                            slots.get_mut(i)
                        } else {
                            bs.slots.get_mut(i - base)
                        }
                    });
                    if let Some(s) = s {
                        if s.state == St::Waiting && s.ctx == c {
                            s.state = St::Ready;
                        }
                    }
                }
                progressed |= !ex.confirmed.is_empty();
                wk.on_outcomes(&mut ex, now);
                wk.on_confirmed(&mut ex, now);
            }
            let may_start = !wk.stopping && limit.is_none_or(|l| wk.finished < l);
            if wk.stopping {
                let reqs = wk.retries.drain(..).map(|r| r.txn.req);
                wk.spare.extend(reqs);
            }
            // The workload had no request to start this round.
            let mut source_dry = false;
            let mut busy = wk.parked.len() + wk.retries.len();
            if !messages {
                if may_start {
                    let (ran, dry) =
                        wk.inline_round(&mut ex, &mut cur, &mut rng, per_round, now)?;
                    progressed |= ran;
                    source_dry = dry;
                    busy = wk.retries.len();
                }
            } else {
                // Transactions begun and not finished: executing, committing,
                // or waiting to be retried.
                let mut active = slots.iter().filter(|s| s.state != St::Free).count() + busy;
                let mut none_due = wk.retries.is_empty();
                for (i, s) in slots.iter_mut().enumerate() {
                    if wk.fail_if_down(&mut ex, s) {
                        active -= 1;
                    }
                    match s.state {
                        St::Free if may_start => {
                            // A request loaded earlier first, then a due retry
                            // (its watched row free, or its time up), else a new
                            // request if there is room and the workload has one.
                            let retry = if none_due || s.loaded {
                                None
                            } else {
                                wk.due_retry(&ex, now)
                            };
                            if !s.loaded {
                                // Nothing changes for the rest of the round.
                                none_due = retry.is_none();
                            }
                            if retry.is_none() && !s.loaded {
                                if !wk.room(active) || source_dry {
                                    continue;
                                }
                                let Some(ty) = workload.poll_next(w, &mut rng, &mut s.req) else {
                                    source_dry = true;
                                    continue;
                                };
                                active += 1;
                                s.loaded = true;
                                s.at = Attempt {
                                    ty,
                                    start: now,
                                    attempt: 0,
                                    ts: 0,
                                };
                            }
                            let c = match retry {
                                Some(i) => ex.begin_retry(wk.retries[i].txn.at.ts),
                                None => ex.begin_home(false),
                            };
                            let Some(c) = c else {
                                continue;
                            };
                            if let Some(i) = retry {
                                let p = wk.retries.swap_remove(i).txn;
                                wk.spare.push(std::mem::replace(&mut s.req, p.req));
                                s.at = p.at;
                                wk.stats.record_retry();
                            } else {
                                s.loaded = false;
                            }
                            // SAFETY: `c` was just taken for this attempt. A slot's
                            // request is replaced or taken only while the slot is
                            // free, after its future was dropped (`s.fut = None`);
                            // every slot, so every future, drops before `ex` and
                            // `workload` (at the end of this function, or on an
                            // unwind, `fut` before `req`); and the executor touches
                            // a context only between polls of its future.
                            unsafe { start_attempt(s, &ex, c, workload) };
                            if slot_of.len() <= c as usize {
                                slot_of.resize(c as usize + 1, 0);
                            }
                            slot_of[c as usize] = i as u32;
                        }
                        St::Waiting
                            if now.saturating_sub(s.since) > op_timeout
                                && ex.reply_unanswered(s.ctx, s.since, now) =>
                        {
                            let p = wk.abandon(&mut ex, s);
                            wk.aborted(p, AbortReason::Remote, now, None);
                        }
                        _ => {}
                    }
                    if s.state == St::Ready {
                        progressed = true;
                        let fut = s.fut.as_mut().expect("a ready slot has a procedure");
                        phases::switch(Phase::Execution);
                        // A panic is caught only to fail its own request (see
                        // `Workload::isolates_failures`); unwinding costs
                        // nothing on the path that does not panic.
                        let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            fut.as_mut().poll(&mut cx)
                        }));
                        phases::switch(Phase::Management);
                        match polled {
                            Err(panic) => {
                                s.fut = None;
                                s.state = St::Free;
                                wk.panicked(&mut ex, s.ctx, s.at, &mut s.req, panic)?;
                            }
                            Ok(Poll::Pending) => match ex.send_request(s.ctx) {
                                Some(sent) => {
                                    s.state = St::Waiting;
                                    // The wait starts when the request
                                    // leaves, not when the round began: the
                                    // round may have polled long procedures
                                    // since. A spurious wake does not
                                    // restart it.
                                    if sent {
                                        s.since = wk.clock.now();
                                    }
                                }
                                None => {
                                    // It waits for something no executor
                                    // delivers: its attempt fails (only its
                                    // own request, if the workload isolates
                                    // failures).
                                    s.fut = None;
                                    s.state = St::Free;
                                    let done = Err(Abort::Failed(foreign_wait()));
                                    wk.settle(&mut ex, s.ctx, done, s.at, &mut s.req, now)?;
                                }
                            },
                            Ok(Poll::Ready(done)) => {
                                s.fut = None;
                                s.state = St::Free;
                                wk.settle(&mut ex, s.ctx, done, s.at, &mut s.req, now)?;
                            }
                        }
                        phases::switch(Phase::Communication);
                        received += ex.exchange();
                        phases::switch(Phase::Management);
                    }
                    if s.state != St::Free {
                        busy += 1;
                    }
                }
            }
            // Block slots waiting for their clients: the executor may park
            // meanwhile (a client's operation wakes it).
            // Blocks waiting for a lock (see `block_round`).
            let mut lock_waits = 0;
            if !bs.slots.is_empty() {
                let (ran, b, susp, got) = wk.block_round(
                    &mut ex,
                    &mut bs,
                    &mut slot_of,
                    base,
                    may_start,
                    messages,
                    op_timeout,
                    now,
                )?;
                progressed |= ran;
                busy += b;
                lock_waits = b - susp;
                received += got;
            }
            wk.log_round(&mut ex, now)?;
            wk.stats.maybe_publish(counter);
            // This worker's clients are done: it starts nothing more.
            let idle_client = busy == 0 && (wk.stopping || !may_start);
            if idle_client && !client_done && (wk.pending.is_empty() || wk.stopping) {
                client_done = true;
                if messages {
                    cl.clients.fetch_sub(1, Ordering::AcqRel);
                }
            }
            if client_done && !messages {
                // Nobody waits for it: what is pending is acknowledged on the
                // way out.
                return Ok(());
            }
            // Leave once every worker has been settled (no client work, no
            // 2PC state, nothing received) for `linger`. Settled alone is not
            // enough: a worker that committed a branch and forgot it still
            // owes an acknowledgement to a coordinator whose first one was
            // lost, and only the coordinator knows it waits. A process
            // that leaves its peers (`Cluster::leave`) settles on its own
            // state alone: the peers' requests keep arriving, and are
            // refused, for as long as it serves.
            let now_settled = client_done
                && (received == 0 || cl.leaving())
                && cl.clients.load(Ordering::Acquire) == 0
                && ex.quiescent();
            if now_settled != settled {
                settled = now_settled;
                if settled {
                    cl.unsettled.fetch_sub(1, Ordering::AcqRel);
                } else {
                    cl.unsettled.fetch_add(1, Ordering::AcqRel);
                }
            }
            if settled && cl.unsettled.load(Ordering::Acquire) == 0 {
                let t = *idle_since.get_or_insert(now);
                if now.saturating_sub(t) >= linger {
                    return Ok(());
                }
            } else {
                idle_since = None;
            }
            idle_rounds = if progressed { 0 } else { idle_rounds + 1 };
            // Nothing to run: no request came, no slot was ready, no retry
            // waits for its time, and the log holds nothing of this
            // worker's that it must still hand over. What is left waits for
            // a message (a batch rings this worker's bell), for the log
            // writer (which rings it when a batch is durable) or for a
            // client (whose call rings it): the workload may sleep.
            let only_waits = wk.retries.is_empty()
                && lock_waits == 0
                && wk.since_flush == 0
                && !ex.hand_off_due();
            if !progressed && source_dry && only_waits {
                workload.idle(w, busy > 0 || !wk.pending.is_empty());
                told_idle = true;
            } else if progressed && told_idle {
                // Work came by another way than the workload (batches
                // from peers): its idle count starts again.
                workload.busy_again(w);
                told_idle = false;
            }
            if (!progressed && (wk.logging || idle_rounds > IDLE_SPINS))
                || (received == 0 && busy == 0 && client_done)
            {
                // Every transaction here waits (for another island, or for a
                // log flush): give the core to whoever they wait for. With
                // fewer cores than workers plus log writers, spinning here
                // delays the very fdatasync that would free them, so a
                // worker with a log that exchanges messages sleeps on its
                // bell until its next deadline ([`Worker::park_for`]), and
                // yields only when that is too near. Without a log, a
                // worker spins a while first: when it has a core of its own
                // nobody else wants it, and the syscall only slows the
                // answer to the next reply.
                phases::switch(Phase::Idle);
                match wk.park_for(wk.clock.now()) {
                    Some(d) if messages && !progressed && lock_waits == 0 => {
                        ex.transport.bell(ex.me).sleep_unless_rung(d);
                    }
                    _ => std::thread::yield_now(),
                }
            }
        }
    })();
    let Worker {
        mut stats,
        mut pending,
        island,
        ..
    } = wk;
    stats.phase_ticks = phases::take();
    if result.is_err() && messages {
        // Let the other workers stop instead of serving forever.
        if !client_done {
            cl.clients.fetch_sub(1, Ordering::AcqRel);
        }
        if !settled {
            cl.unsettled.fetch_sub(1, Ordering::AcqRel);
        }
    }
    // Futures borrow their slot's request and a context of `ex`: drop them first.
    for s in slots.iter_mut().chain(bs.slots.iter_mut()) {
        if s.fut.take().is_some() {
            ex.abort_home(s.ctx);
        }
    }
    drop(slots);
    drop(bs);
    let _ = ex.flush_log();
    // Commits already decided are acknowledged once durable, unless the
    // log died (then they stay as the log has them, for recovery).
    if result.is_ok() {
        while let Some(p) = pending.front() {
            if p.ack > island.durable_batch() {
                if log_failure(std::slice::from_ref(&island)).is_some() {
                    break;
                }
                std::thread::yield_now();
                continue;
            }
            let mut p = pending.pop_front().expect("a front");
            workload.finished(w, &mut p.req, Outcome::Committed);
        }
    }
    if messages {
        let _ = ex.pump();
    }
    stats.publish(counter);
    (stats, result)
}

/// Starts an attempt of the slot's request on context `c`: stores in `s.fut`
/// a future that borrows context `c` of `ex`, the request in `s.req` and
/// `workload` as if for `'static`.
///
/// # Safety
///
/// The caller guarantees that the future is dropped (`s.fut` taken, or the
/// slot dropped) before any of what it borrows goes or moves: before `s.req`
/// is replaced or dropped, before `ex` is dropped (its contexts live as long
/// as it does) and before `workload` is; that `c` was just taken for this
/// attempt ([`Executor::begin_home`], [`Executor::begin_retry`]), so no other
/// future borrows it; and that the executor touches context `c` only while
/// the future is not being polled.
unsafe fn start_attempt<W: Workload + 'static>(
    s: &mut Slot<W::Req>,
    ex: &Executor,
    c: u32,
    workload: &W,
) where
    W::Req: 'static,
{
    // SAFETY: the caller keeps what the future borrows alive and in place
    // for as long as the future lives (see the function's contract).
    let tx: &'static mut crate::txn::Txn = unsafe { &mut *ex.ctx_ptr(c) };
    let req: &'static W::Req = unsafe { &*(&*s.req as *const W::Req) };
    let wl: &'static W = unsafe { &*(workload as *const W) };
    s.fut = Some(Box::pin(wl.run(tx, req)));
    s.ctx = c;
    s.state = St::Ready;
}

/// Runs `workload` on the given workers until every worker with a `limit`
/// has finished that many transactions (every worker needs one, or `Some(0)`
/// to only serve), with no warm-up: for tests and tools that want exact
/// transaction counts rather than a timed benchmark. Returns each worker's
/// statistics. A worker's error or a failed log stops every worker within a
/// round, and the run returns that error (the log's own, when one failed).
pub fn run_to_completion<W: Workload + 'static>(
    cl: &Arc<Cluster>,
    workers: &[ClusterWorker],
    workload: Arc<W>,
    seed: u64,
) -> Result<Vec<WorkerStats>, Error>
where
    W::Req: 'static,
{
    if let Some(w) = workers.iter().find(|w| w.limit.is_none()) {
        return Err(Error::Config(format!(
            "worker {} of island {} has no transaction limit: the run would not end",
            w.worker, w.island
        )));
    }
    let clients = workers.iter().filter(|w| w.limit != Some(0)).count();
    cl.clients.store(clients, Ordering::Release);
    cl.unsettled.store(workers.len(), Ordering::Release);
    let phase = AtomicU8::new(MEASURE);
    let window = cl.options().inflight;
    let mut out = Vec::new();
    let executors = workers
        .iter()
        .map(|w| cl.executor(w.island, w.worker))
        .collect::<Result<Vec<_>, _>>()?;
    let mut first_err = None;
    let local: Vec<Island> = cl.local_islands().map(|(_, i)| i.clone()).collect();
    std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for ((i, w), ex) in workers.iter().enumerate().zip(executors) {
            let workload = Arc::clone(&workload);
            let phase = &phase;
            let w = *w;
            handles.push(scope.spawn(move || {
                let _fail = FailOnPanic(phase);
                if let Some(c) = w.cpu {
                    let _ = crate::topology::pin_to(c);
                }
                let counter = ProgressCounter::new();
                let (stats, r) = executor_loop(
                    ex,
                    &*workload,
                    i,
                    worker_seed(seed, i),
                    phase,
                    &counter,
                    w.limit,
                    window,
                );
                if r.is_err() {
                    phase.store(FAILED, Ordering::Release);
                }
                (stats, r)
            }));
        }
        // Until every worker is done: a dead log stops them all.
        watch_until(&local, &phase, || handles.iter().all(|h| h.is_finished()));
        for h in handles {
            match h.join() {
                Ok((stats, r)) => {
                    out.push(stats);
                    if let Err(e) = r {
                        first_err.get_or_insert(e);
                    }
                }
                Err(_) => {
                    first_err.get_or_insert(Error::Config("a worker thread panicked".into()));
                }
            }
        }
    });
    // The log's own failure is the cause (see `run_threads`).
    if let Some(e) = log_failure(&local).or(first_err) {
        return Err(e);
    }
    Ok(out)
}

/// Serves `workload` on the given workers until `phase` leaves `MEASURE`:
/// one named thread per worker (pinned as its `cpu` says), which calls
/// `on_start` with its worker index before it serves and keeps what it
/// returns until it leaves. At `STOP` the workers
/// finish what they hold and leave together; a worker that fails sets
/// `FAILED`, and every worker leaves at once. The workers' `limit`s are
/// ignored. Worker `i` publishes its commit count to `counters[i]` (every
/// `PUBLISH_EVERY` commits, and when it leaves). Returns the threads, each
/// answering its worker's error.
pub fn serve<W: Workload + 'static, G: 'static>(
    cl: &Arc<Cluster>,
    workers: &[ClusterWorker],
    workload: Arc<W>,
    phase: &Arc<AtomicU8>,
    counters: &[Arc<ProgressCounter>],
    on_start: impl Fn(usize) -> G + Send + Sync + 'static,
) -> Result<Vec<std::thread::JoinHandle<Result<(), Error>>>, Error>
where
    W::Req: 'static,
{
    let executors = workers
        .iter()
        .map(|w| cl.executor(w.island, w.worker))
        .collect::<Result<Vec<_>, _>>()?;
    cl.clients.store(workers.len(), Ordering::Release);
    cl.unsettled.store(workers.len(), Ordering::Release);
    // Committed transactions each worker may keep waiting for their log
    // batch (`sync`) before it waits for the log writer.
    let window = 4096;
    if counters.len() != workers.len() {
        return Err(Error::Config(format!(
            "{} progress counters for {} workers",
            counters.len(),
            workers.len()
        )));
    }
    let on_start = Arc::new(on_start);
    let mut handles = Vec::with_capacity(workers.len());
    for ((i, w), ex) in workers.iter().enumerate().zip(executors) {
        let (workload, ph, on_start, counter) = (
            Arc::clone(&workload),
            Arc::clone(phase),
            Arc::clone(&on_start),
            Arc::clone(&counters[i]),
        );
        let w = *w;
        let spawned = std::thread::Builder::new()
            .name(format!("i{}-exec-{}", w.island, w.worker))
            .spawn(move || {
                let phase = &*ph;
                let _fail = FailOnPanic(phase);
                if let Some(c) = w.cpu {
                    // Pinning can fail in a restricted container; serving goes on.
                    let _ = crate::topology::pin_to(c);
                }
                let _started = on_start(i);
                let seed = worker_seed(0, i);
                let (_, r) = executor_loop(ex, &*workload, i, seed, phase, &counter, None, window);
                if r.is_err() {
                    phase.store(FAILED, Ordering::Release);
                }
                r
            });
        match spawned {
            Ok(h) => handles.push(h),
            Err(e) => {
                // The threads started so far leave; the cluster is not served.
                phase.store(FAILED, Ordering::Release);
                for h in handles {
                    let _ = h.join();
                }
                return Err(Error::Config(format!(
                    "cannot start an executor thread: {e}"
                )));
            }
        }
    }
    Ok(handles)
}
