//! The benchmark driver's worker loop for a [`Cluster`]: each worker thread
//! keeps several home transactions in flight on its [`Executor`] and serves
//! the other islands' requests between polls.
//!
//! A stored procedure is a future borrowing its transaction context and its
//! request; the slot that owns the future also owns the request (boxed, so it
//! never moves) and the executor owns the context (never freed while the
//! future lives). That is why the futures are stored with a `'static`
//! lifetime: every future is dropped before its slot, and slots before the
//! executor, which this module guarantees by construction (see
//! `Slot::start` and the end of [`cluster_worker`]).
//!
//! Each attempt allocates one boxed future (its size is the procedure's, a
//! few hundred bytes): the one allocation on the path, kept because the
//! future's type is the workload's and slots are generic over it only
//! through `dyn`.
//!
//! A slot polls only an executing attempt. A transaction whose procedure is
//! done and whose two-phase commit is under way leaves its slot to the next
//! one (up to [`super::ClusterOptions::commit_window`] such commits per
//! worker): with a log, the commit waits for its participants' forced
//! prepares, a group commit each, and a slot held across that wait either
//! idles the worker or needs a deep window of executing transactions, whose
//! rows go cold and whose locks collide (micro update, 100% multisite, sync:
//! 1.21-1.89 times the throughput of 128 slots held through the commit).
//!
//! An aborted transaction also leaves its slot, and waits before it retries.
//! If it ran into a local row's lock, it retries as soon as that row would
//! let it pass ([`crate::txn::LockWait`]); the worker checks the lock words of
//! the waiting transactions when a slot is free. Otherwise (a remote refusal,
//! a 2PC abort) it backs off 20 µs, doubling per attempt up to about 5 ms.
//!
//! At the end of a run a worker finishes what it holds and leaves once every
//! worker has settled. When the run fails instead (a worker's error, a dead
//! log: the driver's `FAILED` phase) it leaves at once: its peers may be
//! gone, so settling could wait for ever. Branches and decisions in flight
//! stay as the logs have them, for the next recovery to resolve.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use super::{Cluster, Executor, HomeCommit, WorkerCounts};
use crate::bench::driver::{
    log_failure, run_threads, watch_until, worker_seed, DriverConfig, FailOnPanic, Outcome,
    WorkerBody, WorkerSpec, Workload, ASYNC_FLUSH_AFTER, FAILED, FLUSH_AFTER, FLUSH_EVERY, MEASURE,
    STOP, WARMUP,
};
use crate::bench::phases::{self, Phase};
use crate::bench::report::Report;
use crate::bench::rng::FastRng;
use crate::bench::stats::{ProgressCounter, WorkerStats};
use crate::txn::LockWait;
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
}

/// An executing attempt: a slot polls its procedure.
struct Slot<R> {
    fut: Option<Proc>,
    req: Box<R>,
    state: St,
    /// A free slot whose `req` holds a new request not yet begun (no
    /// transaction context was free when it came).
    loaded: bool,
    ctx: u32,
    ty: usize,
    /// Clock readings ([`Clock`]).
    start: u64,
    since: u64,
    attempt: u32,
}

impl<R: Default> Slot<R> {
    /// Takes the slot's transaction out (its procedure is done or dropped)
    /// and frees the slot; its request box is replaced by a spare one.
    fn park(&mut self, spare: &mut Vec<Box<R>>) -> Parked<R> {
        self.state = St::Free;
        let req = spare.pop().unwrap_or_default();
        Parked {
            req: std::mem::replace(&mut self.req, req),
            ty: self.ty,
            start: self.start,
            attempt: self.attempt,
        }
    }
}

/// A transaction out of its slot: its two-phase commit is under way
/// ([`super::ClusterOptions::commit_window`]), or it aborted and waits to be
/// retried ([`Retry`]). A slot polls only executing attempts, so neither holds
/// one back from the next transaction.
struct Parked<R> {
    req: Box<R>,
    ty: usize,
    /// Clock reading of its first attempt.
    start: u64,
    attempt: u32,
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
        self.attempt += 1;
        let blind = clock.ticks(backoff(self.attempt));
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

/// Runs `workload` on every worker of `cl` and reports the measured phase.
/// `cfg.workers` and `cfg.pin` are ignored: `workers` says it all.
pub fn run_cluster<W: Workload + 'static>(
    cl: &Arc<Cluster>,
    workers: &[ClusterWorker],
    workload: Arc<W>,
    cfg: &DriverConfig,
) -> Result<Report, Error>
where
    W::Req: 'static,
{
    let mut bodies: Vec<WorkerBody> = Vec::with_capacity(workers.len());
    let mut specs = Vec::with_capacity(workers.len());
    let clients = workers.iter().filter(|w| w.limit != Some(0)).count();
    let executors = workers
        .iter()
        .map(|w| cl.executor(w.island, w.worker))
        .collect::<Result<Vec<_>, _>>()?;
    cl.clients.store(clients, Ordering::Release);
    cl.unsettled.store(workers.len(), Ordering::Release);
    for ((i, w), ex) in workers.iter().enumerate().zip(executors) {
        let workload = Arc::clone(&workload);
        let seed = worker_seed(cfg.seed, i);
        let limit = w.limit;
        let window = cfg.inflight.max(1);
        specs.push(WorkerSpec {
            island: w.island,
            cpu: w.cpu,
        });
        bodies.push(Box::new(move |phase, counter| {
            cluster_worker(ex, &*workload, i, seed, phase, counter, limit, window)
        }));
    }
    let mut report = run_threads(cl.islands(), &specs, bodies, &workload.types(), cfg)?;
    let s = &cl.stats;
    report.notes.push(format!(
        "islands: {} remote operations served, {} malformed frames rejected, {} protocol violations",
        s.remote_ops(),
        s.malformed.load(Ordering::Relaxed),
        s.protocol_violations.load(Ordering::Relaxed)
    ));
    Ok(report)
}

/// A committed transaction waiting for its log batch.
struct Pending<R> {
    ack: BatchSeq,
    start: u64,
    ty: usize,
    req: Box<R>,
}

/// An aborted attempt, counted in the worker's stats and the cluster's:
/// retried after a back-off, or given up when the workload bounds its
/// attempts. Returns whether it was given up.
#[allow(clippy::too_many_arguments)]
fn retry_or_give_up<W: Workload>(
    workload: &W,
    w: usize,
    counts: &WorkerCounts,
    stats: &mut WorkerStats,
    p: Parked<W::Req>,
    reason: AbortReason,
    now: u64,
    clock: &Clock,
    conflict: Option<(LockWait, bool)>,
    retries: &mut Vec<Retry<W::Req>>,
    spare: &mut Vec<Box<W::Req>>,
) -> bool {
    stats.record_abort(reason);
    counts.abort(reason);
    let attempts = p.attempt + 1;
    if workload.max_attempts().is_some_and(|m| attempts >= m) {
        counts.gave_up();
        let mut req = p.req;
        workload.finished(
            w,
            &mut req,
            Outcome::GaveUp {
                attempts,
                last: reason,
            },
        );
        spare.push(req);
        return true;
    }
    retries.push(p.back_off(now, clock, conflict));
    false
}

/// The message of a caught panic.
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// The worker loop's clock: [`phases::ticks`], read once per round. A
/// monotonic-clock read and the `timespec` arithmetic on it (per slot per
/// round) showed as 15% of a worker's samples under perf in the multisite
/// microbenchmark; without perf the counter gained 1-4% in interleaved runs.
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
/// for the spinner's time slice; the fault-injecting tests (3 islands on 2
/// cores, 5 ms timeouts) then aborted nearly every attempt on timeouts.
const IDLE_SPINS: u32 = 256;

/// Exponential back-off after an abort, without blocking the worker. It
/// starts at tens of microseconds, a few message round trips: a retry that
/// comes back before the owner island has processed the abort of the
/// previous attempt would collide with that attempt's own locks.
fn backoff(attempt: u32) -> Duration {
    Duration::from_micros(20u64 << attempt.min(8))
}

/// An attempt that aborted on a local row's lock retries as soon as that row
/// is free; this is only the fallback if it looks locked for longer. Blind
/// backoffs of 20, 40, 80 µs … retried several times into a lock held across
/// a forced 2PC record (a millisecond), each retry a wasted attempt, and the
/// last one overshot the release by up to its own length.
const WATCH_FALLBACK: Duration = Duration::from_millis(2);

#[allow(clippy::too_many_arguments)]
fn cluster_worker<W: Workload + 'static>(
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
    let counts = cl.worker_counts(ex.endpoint());
    let home = ex.island();
    let durability = cl.islands()[home].config().durability;
    let clock = Clock::new();
    let op_timeout = clock.ticks(cl.options().op_timeout);
    let flush_after = clock.ticks(FLUSH_AFTER);
    let async_flush_after = clock.ticks(ASYNC_FLUSH_AFTER);
    let linger = clock.ticks(Duration::from_millis(2));
    let mut stats = WorkerStats::new();
    let mut rng = FastRng::new(seed);
    let mut slots: Vec<Slot<W::Req>> = (0..cl.options().inflight)
        .map(|_| Slot {
            fut: None,
            req: Box::default(),
            state: St::Free,
            loaded: false,
            ctx: 0,
            ty: 0,
            start: 0,
            since: 0,
            attempt: 0,
        })
        .collect();
    let window = cl.options().inflight + cl.options().commit_window;
    // Commits in flight by gtid, aborted transactions waiting for their
    // retry, and request boxes to give a slot whose request was parked.
    let mut parked: super::GtidMap<Parked<W::Req>> = super::GtidMap::default();
    let mut retries: Vec<Retry<W::Req>> = Vec::new();
    let mut spare: Vec<Box<W::Req>> = Vec::new();
    // The slot polling each context (contexts are numbered densely).
    let mut slot_of: Vec<u32> = Vec::new();
    let mut finished = 0u64;
    let mut my_phase = WARMUP;
    let mut stopping = false;
    let mut client_done = limit == Some(0);
    let mut idle_since: Option<u64> = None;
    let mut idle_rounds = 0u32;
    // Counted in `cl.unsettled` while false (every worker starts unsettled).
    let mut settled = false;
    let mut pending: VecDeque<Pending<W::Req>> = VecDeque::new();
    let mut since_flush = 0usize;
    let mut last_flush = clock.now();
    let logging = durability != Durability::Off;
    let wait_ack = durability == Durability::Sync;
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
                    stopping = true;
                } else if p == MEASURE {
                    stats.reset();
                    phases::take();
                }
                my_phase = p;
            }
            let now = clock.now();
            phases::switch(Phase::Communication);
            let mut received = ex.pump_at(now)?;
            phases::switch(Phase::Management);
            let mut progressed = received > 0 || !ex.woken.is_empty() || !ex.outcomes.is_empty();
            for c in ex.woken.drain(..) {
                if let Some(s) = slot_of.get(c as usize).map(|&i| &mut slots[i as usize]) {
                    if s.state == St::Waiting && s.ctx == c {
                        s.state = St::Ready;
                    }
                }
            }
            for (g, outcome) in ex.outcomes.drain(..) {
                let Some(p) = parked.remove(&g) else {
                    continue;
                };
                if let Some(ack) = outcome {
                    // Decided: it counts once its decision is durable.
                    workload.committed(w, &p.req);
                    stats.distributed += 1;
                    finished += 1;
                    if wait_ack && ack > cl.islands()[home].durable_batch() {
                        pending.push_back(Pending {
                            ack,
                            start: p.start,
                            ty: p.ty,
                            req: p.req,
                        });
                    } else {
                        stats.record_commit(p.ty, clock.ns(now.saturating_sub(p.start)));
                        let mut req = p.req;
                        workload.finished(w, &mut req, Outcome::Committed);
                        spare.push(req);
                    }
                } else {
                    if retry_or_give_up(
                        workload,
                        w,
                        counts,
                        &mut stats,
                        p,
                        AbortReason::Remote,
                        now,
                        &clock,
                        None,
                        &mut retries,
                        &mut spare,
                    ) {
                        finished += 1;
                    }
                }
            }
            let may_start = !stopping && limit.is_none_or(|l| finished < l);
            if stopping {
                spare.extend(retries.drain(..).map(|r| r.txn.req));
            }
            // Transactions begun and not finished: executing, committing, or
            // waiting to be retried.
            let mut active = (slots.iter().filter(|s| s.state != St::Free).count()
                + parked.len()
                + retries.len()) as u64;
            let mut busy = parked.len() + retries.len();
            let mut none_due = retries.is_empty();
            // The workload had no request to start this round.
            let mut source_dry = false;
            for (i, s) in slots.iter_mut().enumerate() {
                match s.state {
                    St::Free if may_start => {
                        // A request loaded earlier first, then a due retry
                        // (its watched row free, or its time up), else a new
                        // request if there is room and the workload has one.
                        let retry = if none_due || s.loaded {
                            None
                        } else {
                            retries.iter().position(|r| {
                                now >= r.due
                                    || r.watch
                                        .is_some_and(|(w, from)| now >= from && !ex.still_locked(w))
                            })
                        };
                        if !s.loaded {
                            // Nothing changes for the rest of the round.
                            none_due = retry.is_none();
                        }
                        if retry.is_none() && !s.loaded {
                            let room = (active as usize) < window
                                && limit.is_none_or(|l| finished + active < l);
                            if !room || source_dry {
                                continue;
                            }
                            let Some(ty) = workload.poll_next(w, &mut rng, &mut s.req) else {
                                source_dry = true;
                                continue;
                            };
                            active += 1;
                            s.loaded = true;
                            s.ty = ty;
                            s.start = now;
                            s.attempt = 0;
                        }
                        let Some(c) = ex.begin_home(retry.is_some()) else {
                            continue;
                        };
                        if let Some(i) = retry {
                            let p = retries.swap_remove(i).txn;
                            spare.push(std::mem::replace(&mut s.req, p.req));
                            s.ty = p.ty;
                            s.start = p.start;
                            s.attempt = p.attempt;
                            stats.record_retry();
                        } else {
                            s.loaded = false;
                        }
                        start_attempt(s, &ex, c, workload);
                        if slot_of.len() <= c as usize {
                            slot_of.resize(c as usize + 1, 0);
                        }
                        slot_of[c as usize] = i as u32;
                    }
                    St::Waiting if now.saturating_sub(s.since) > op_timeout => {
                        s.fut = None;
                        ex.abort_home(s.ctx);
                        let p = s.park(&mut spare);
                        if retry_or_give_up(
                            workload,
                            w,
                            counts,
                            &mut stats,
                            p,
                            AbortReason::Remote,
                            now,
                            &clock,
                            None,
                            &mut retries,
                            &mut spare,
                        ) {
                            finished += 1;
                        }
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
                    let polled = match polled {
                        Ok(p) => p,
                        Err(panic) => {
                            let msg = panic_message(&*panic);
                            s.fut = None;
                            ex.abort_home(s.ctx);
                            if !workload.isolates_failures() {
                                return Err(Error::Config(format!(
                                    "a stored procedure panicked: {msg}"
                                )));
                            }
                            workload.finished(w, &mut s.req, Outcome::Panicked(msg));
                            finished += 1;
                            s.state = St::Free;
                            continue;
                        }
                    };
                    match polled {
                        Poll::Pending => {
                            let Some(sent) = ex.send_request(s.ctx) else {
                                return Err(Error::Config(
                                    "a stored procedure suspended without a remote request".into(),
                                ));
                            };
                            s.state = St::Waiting;
                            // A spurious wake does not restart the wait's clock.
                            if sent {
                                s.since = now;
                            }
                        }
                        Poll::Ready(r) => {
                            s.fut = None;
                            let r = match r {
                                Ok(()) => ex.commit_home(s.ctx),
                                Err(e) => {
                                    ex.abort_home(s.ctx);
                                    Err(e)
                                }
                            };
                            match r {
                                Ok(HomeCommit::Local(c) | HomeCommit::Released(c)) => {
                                    workload.committed(w, &s.req);
                                    if matches!(r, Ok(HomeCommit::Released(_))) {
                                        stats.distributed += 1;
                                    }
                                    finished += 1;
                                    since_flush += c.logged as usize;
                                    if wait_ack && c.ack > cl.islands()[ex.island()].durable_batch()
                                    {
                                        let p = s.park(&mut spare);
                                        pending.push_back(Pending {
                                            ack: c.ack,
                                            start: p.start,
                                            ty: p.ty,
                                            req: p.req,
                                        });
                                    } else {
                                        s.state = St::Free;
                                        // A fresh clock: `now` is this round's, and a
                                        // transaction started in this round would
                                        // record a latency of zero.
                                        let t = clock.now();
                                        stats.record_commit(
                                            s.ty,
                                            clock.ns(t.saturating_sub(s.start)),
                                        );
                                        workload.finished(w, &mut s.req, Outcome::Committed);
                                    }
                                }
                                Ok(HomeCommit::Distributed(g)) => {
                                    parked.insert(g, s.park(&mut spare));
                                }
                                Err(Abort::Conflict(reason)) => {
                                    // The context is free but not yet taken
                                    // again: its conflict is this attempt's.
                                    let conflict = (reason == AbortReason::LockConflict)
                                        .then(|| ex.conflict_of(s.ctx))
                                        .flatten();
                                    let p = s.park(&mut spare);
                                    if retry_or_give_up(
                                        workload,
                                        w,
                                        counts,
                                        &mut stats,
                                        p,
                                        reason,
                                        now,
                                        &clock,
                                        conflict,
                                        &mut retries,
                                        &mut spare,
                                    ) {
                                        finished += 1;
                                    }
                                }
                                Err(Abort::User(why)) => {
                                    stats.record_user_abort(s.ty);
                                    counts.user_abort();
                                    workload.finished(w, &mut s.req, Outcome::UserAbort(why));
                                    finished += 1;
                                    s.state = St::Free;
                                }
                                Err(Abort::Failed(e))
                                    if workload.isolates_failures()
                                        && !matches!(e, Error::LogFailed(_)) =>
                                {
                                    workload.finished(w, &mut s.req, Outcome::Failed(e));
                                    finished += 1;
                                    s.state = St::Free;
                                }
                                Err(Abort::Failed(e)) => return Err(e),
                            }
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
            // Log hand-offs and acknowledgements of local commits (`sync`).
            if logging {
                let due = if wait_ack {
                    !pending.is_empty()
                        && (since_flush >= FLUSH_EVERY
                            || now.saturating_sub(last_flush) >= flush_after
                            || pending.len() >= ack_window)
                } else {
                    since_flush > 0 && now.saturating_sub(last_flush) >= async_flush_after
                };
                if due || (stopping && since_flush > 0) {
                    phases::switch(Phase::Logging);
                    ex.flush_log()?;
                    phases::switch(Phase::Management);
                    since_flush = 0;
                    last_flush = now;
                }
            }
            if !pending.is_empty() {
                let durable = cl.islands()[ex.island()].durable_batch();
                while let Some(p) = pending.front() {
                    if p.ack > durable {
                        break;
                    }
                    stats.record_commit(p.ty, clock.ns(now.saturating_sub(p.start)));
                    let mut p = pending.pop_front().expect("a front");
                    workload.finished(w, &mut p.req, Outcome::Committed);
                    spare.push(p.req);
                }
            }
            stats.maybe_publish(counter);
            // Stop: this worker's clients are done, everyone's are, and no
            // state or message is left here for a while.
            let idle_client = busy == 0 && (stopping || !may_start);
            if idle_client && !client_done && (pending.is_empty() || stopping) {
                client_done = true;
                cl.clients.fetch_sub(1, Ordering::AcqRel);
            }
            // Leave once every worker has been settled (no client work, no
            // 2PC state, nothing received) for `linger`. Settled alone is not
            // enough: a worker that committed a branch and forgot it still
            // owes an acknowledgement to a coordinator whose first one was
            // lost, and only the coordinator knows it waits.
            let now_settled = client_done
                && received == 0
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
            if !progressed && source_dry && busy == 0 && pending.is_empty() {
                workload.idle(w);
            }
            if (!progressed && (logging || idle_rounds > IDLE_SPINS))
                || (received == 0 && busy == 0 && client_done)
            {
                // Every transaction here waits (for another island, or for a
                // log flush): give the core to whoever they wait for. With
                // fewer cores than workers plus log writers, spinning here
                // delays the very fdatasync that would free them (TPC-C sync
                // on 2 islands, 2 cores: +12% in interleaved pairs). Without
                // a log, a worker spins a while first: when it has a core of
                // its own nobody else wants it, and the syscall only slows
                // the answer to the next reply.
                phases::switch(Phase::Idle);
                std::thread::yield_now();
            }
        }
    })();
    stats.phase_ticks = phases::take();
    if result.is_err() {
        // Let the other workers stop instead of serving forever.
        if !client_done {
            cl.clients.fetch_sub(1, Ordering::AcqRel);
        }
        if !settled {
            cl.unsettled.fetch_sub(1, Ordering::AcqRel);
        }
    }
    // Futures borrow their slot's request and a context of `ex`: drop them first.
    for s in slots.iter_mut() {
        if s.fut.take().is_some() {
            ex.abort_home(s.ctx);
        }
    }
    drop(slots);
    let _ = ex.flush_log();
    // Commits already decided are acknowledged once durable, unless the
    // log died (then they stay as the log has them, for recovery).
    if result.is_ok() {
        while let Some(p) = pending.front() {
            if p.ack > cl.islands()[home].durable_batch() {
                if log_failure(&cl.islands()[home..=home]).is_some() {
                    break;
                }
                std::thread::yield_now();
                continue;
            }
            let mut p = pending.pop_front().expect("a front");
            workload.finished(w, &mut p.req, Outcome::Committed);
        }
    }
    let _ = ex.pump();
    stats.publish(counter);
    (stats, result)
}

/// Starts an attempt of the slot's request on context `c`.
fn start_attempt<W: Workload + 'static>(s: &mut Slot<W::Req>, ex: &Executor, c: u32, workload: &W)
where
    W::Req: 'static,
{
    // SAFETY: the future may outlive this call but not the slot (which owns
    // the boxed request and drops the future before itself) nor the executor
    // (whose contexts live until it drops, after every slot); `workload`
    // outlives the worker loop. See the module documentation.
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
    std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for ((i, w), ex) in workers.iter().enumerate().zip(executors) {
            let workload = Arc::clone(&workload);
            let phase = &phase;
            let w = *w;
            handles.push(scope.spawn(move || {
                let _fail = FailOnPanic(phase);
                if let Some(c) = w.cpu {
                    let _ = crate::bench::driver::pin_to(c);
                }
                let counter = ProgressCounter::new();
                let (stats, r) = cluster_worker(
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
        watch_until(cl.islands(), &phase, || {
            handles.iter().all(|h| h.is_finished())
        });
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
    if let Some(e) = log_failure(cl.islands()).or(first_err) {
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
                    let _ = crate::bench::driver::pin_to(c);
                }
                let _started = on_start(i);
                let seed = worker_seed(0, i);
                let (_, r) = cluster_worker(ex, &*workload, i, seed, phase, &counter, None, window);
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
