//! The 2PC pump: a round of the worker's service loop receives the batches
//! waiting in its mailbox and dispatches their frames, runs the actions of
//! the coordinator and the participant (messages, log records, outcomes),
//! completes forced records once they are durable, fires the state
//! machines' timers, and sends the outgoing batches.

use std::sync::atomic::Ordering;

use super::cluster::bump;
use super::serve::Engine;
use super::Executor;
use crate::coord::{home_of, Action, LogRec, Msg};
use crate::phases;
use crate::route::IslandId;
use crate::transport::wire::{self, Frame, Status};
use crate::transport::{frames, push_frame_with, Endpoint};
use crate::wal::BatchSeq;
use crate::Error;

/// Lines of a received batch prefetched before it is read (a few KiB: more
/// would only evict what the frames' work needs).
const PREFETCH_BATCH_LINES: usize = 64;

/// How long (µs) a round runs, since it began or since its last hand-off,
/// before [`Executor::exchange`] hands the log buffer over for forced
/// records rather than leaving it to the round's end.
const HAND_OFF_AFTER_US: u64 = 1000;

/// How long a participant's CommitConf may wait for other traffic to its
/// coordinator before it leaves alone (capped at a quarter of the
/// coordinator's CommitReq resend interval, so that it never causes a
/// resend). Until it arrives the coordinator keeps the transaction's entry
/// and logs no End: the acknowledgement is off every caller's path.
const CONF_HOLD_US: u64 = 1_000;

impl Executor {
    /// One round of the worker's service loop: receives every batch waiting
    /// in its mailbox, runs what they ask, completes forced log records that
    /// became durable, fires timers, and sends the outgoing batches.
    /// Returns the number of batches received.
    pub fn pump(&mut self) -> Result<usize, Error> {
        self.pump_at(phases::ticks())
    }

    /// [`Executor::pump`] with the caller's reading of [`phases::ticks`]
    /// (a worker loop reads the clock once per round, and an executor that
    /// waits for replies runs many rounds per transaction).
    pub fn pump_at(&mut self, now_ticks: u64) -> Result<usize, Error> {
        if let Some(e) = &self.pool.failed {
            return Err(e.clone());
        }
        self.now = self.now.max(now_ticks / self.ticks_per_us);
        let now = self.now_us();
        // Everything that arrived, and every vote that became due, before
        // the timers: a round can last as long as the procedures it polled,
        // and what came in meanwhile must count before a deadline does.
        self.handed_off_us = now;
        let received = self.receive();
        self.complete_forces(true)?;
        self.watch_peers();
        if now >= self.last_tick + 1000 {
            self.last_tick = now;
            let mut actions = std::mem::take(&mut self.actions);
            actions.clear();
            let (cl, home) = (&self.cl, self.island);
            let busy_max_us = u64::try_from(cl.opts.busy_peer_max.as_micros()).unwrap_or(u64::MAX);
            self.coord
                .on_tick_unless_busy(now, &mut actions, |gtid, missing, since_us| {
                    // The votes are late, but only a silent participant
                    // aborts the transaction (see `Executor::unanswered`):
                    // another island's worker that has served since, or
                    // none past `busy_peer_max`. This island's own vote is
                    // cast within the step its PrepareReq arrives in,
                    // except after an early prepare, where it waits for
                    // the procedure, still running here.
                    if now >= since_us.saturating_add(busy_max_us) {
                        return false;
                    }
                    let half = cl.opts.timeouts.prepare_us / 2;
                    !missing
                        .iter()
                        .filter(|&island| island != home)
                        .any(|island| {
                            let peer = cl.endpoint(island, cl.branch_worker(island, gtid));
                            cl.silent_since(peer, since_us.saturating_add(half))
                        })
                });
            self.early_stale = true;
            self.run_actions(&mut actions, true);
            actions.clear();
            let mut eng = Engine(&mut self.pool);
            self.part.on_tick(now, &mut eng, &mut actions);
            self.run_actions(&mut actions, false);
            self.actions = actions;
            if !self.locking.is_empty() {
                self.expire_locking(now);
            }
            self.complete_forces(true)?;
        }
        if self.early_stale && !self.early.is_empty() {
            self.early_stale = false;
            self.check_early();
        }
        if self.forward.is_some() {
            // Read now: the calls it sends are stamped with it, and their
            // deadlines run from there.
            let sent_us = self.fresh_now_us();
            if let Some(port) = self.forward.as_mut() {
                let mut out = super::forward::Frames {
                    outbox: &mut self.outbox,
                    transport: &*self.transport,
                };
                port.round(sent_us, self.down, &mut out);
            }
        }
        let hold = CONF_HOLD_US.min(self.cl.opts.timeouts.commit_retry_us / 4);
        let flush_us = self.now_us();
        self.outbox
            .flush_holding(&*self.transport, self.me, flush_us, hold);
        let dropped = self.outbox.take_dropped();
        if dropped > 0 {
            let c = &self.counts().dropped_batches;
            c.store(c.load(Ordering::Relaxed) + dropped, Ordering::Relaxed);
        }
        self.publish_sent();
        self.publish_served(now);
        Ok(received)
    }

    /// Publishes what the outbox sent so far (including the sends of
    /// [`Executor::exchange`] since the last round) in this worker's
    /// counts: plain stores of running totals, only this worker writes them.
    fn publish_sent(&self) {
        let sent = self.outbox.sent();
        let c = self.counts();
        c.frames_out.store(sent.frames, Ordering::Relaxed);
        c.batches_out.store(sent.batches, Ordering::Relaxed);
        c.bytes_out.store(sent.bytes, Ordering::Relaxed);
    }

    /// Handles every batch waiting in this worker's mailbox (and the
    /// messages it sent itself); returns how many batches it took.
    fn receive(&mut self) -> usize {
        let mut received = 0;
        while let Some((from, batch)) = self.transport.recv(self.me) {
            received += 1;
            // The batch was written on another core: ask for all of its
            // lines at once rather than missing on each frame in turn.
            for line in batch.iter().step_by(64).take(PREFETCH_BATCH_LINES) {
                crate::storage::prefetch(line);
            }
            for f in frames(&batch) {
                match f {
                    Ok(payload) => self.on_frame(from, payload),
                    Err(_) => {
                        self.cl.stats.malformed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            self.outbox.recycle(&*self.transport, batch);
        }
        self.drain_local();
        received
    }

    /// Between two polls of home transactions: sends what they queued and
    /// serves what arrived, so that neither a request of this worker nor a
    /// reply it owes waits for the rest of the round (a round polls up to
    /// `inflight` procedures). Cheaper than [`Executor::pump_at`]: no
    /// timers, and the forced records it completes are those already
    /// durable, so the votes that became due leave with the rest and a
    /// participant polling slow procedures still answers between two of
    /// them. It hands the log buffer over for forced records only once the
    /// round has run [`HAND_OFF_AFTER_US`] since it began or since the last
    /// such hand-off: a round of short procedures leaves that to its end (a
    /// hand-off takes the log's locks), a round of long ones does not hold
    /// its votes back for the rest of it. Returns the batches it took.
    pub fn exchange(&mut self) -> usize {
        let step = self.fresh_now_us();
        if self.outbox.urgent() {
            self.outbox.flush(&*self.transport, self.me);
        }
        let received = self.receive();
        if self.waiting_from != BatchSeq::MAX {
            let hand_off =
                self.flush_due && step >= self.handed_off_us.saturating_add(HAND_OFF_AFTER_US);
            if hand_off {
                self.handed_off_us = step;
            }
            if let Err(e) = self.complete_forces(hand_off) {
                // The next `pump` reports it.
                self.pool.failed.get_or_insert(e);
            }
        }
        if self.outbox.urgent() {
            self.outbox.flush(&*self.transport, self.me);
        }
        self.publish_served(step);
        received
    }

    /// Completes the forced records (and sends the deferred votes) that are
    /// durable; with `hand_off`, first hands the island's log buffer over
    /// if forced records wait for it.
    pub(super) fn complete_forces(&mut self, hand_off: bool) -> Result<(), Error> {
        if self.forces.is_empty() && self.deferred.is_empty() {
            return Ok(());
        }
        let shared = self.pool.own.shared();
        if hand_off && self.flush_due {
            shared.flush_urgent()?;
            self.flush_due = false;
        }
        if let Some(e) = shared.log_failure() {
            self.pool.failed = Some(e.clone());
            return Err(e);
        }
        let durable = shared.durable_seq();
        if durable < self.waiting_from {
            return Ok(());
        }
        let mut i = 0;
        while i < self.deferred.len() {
            if self.deferred[i].0 > durable {
                i += 1;
                continue;
            }
            let (_, to, msg, _) = self.deferred.swap_remove(i);
            self.send_msg(to, msg);
        }
        let mut i = 0;
        let mut actions = std::mem::take(&mut self.actions);
        while i < self.forces.len() {
            let (seq, by_coord, token, _) = self.forces[i];
            if seq > durable {
                i += 1;
                continue;
            }
            self.forces.swap_remove(i);
            actions.clear();
            let now = self.now_us();
            if by_coord {
                self.coord.on_log_durable(token, now, &mut actions);
            } else {
                self.part.on_log_durable(token, now, &mut actions);
            }
            self.run_actions(&mut actions, by_coord);
        }
        self.actions = actions;
        self.drain_local();
        self.waiting_from = self
            .forces
            .iter()
            .map(|f| f.0)
            .chain(self.deferred.iter().map(|d| d.0))
            .min()
            .unwrap_or(BatchSeq::MAX);
        self.owed_since = self
            .forces
            .iter()
            .filter(|f| !f.1)
            .map(|f| f.3)
            .chain(self.deferred.iter().map(|d| d.3))
            .min()
            .unwrap_or(u64::MAX);
        Ok(())
    }

    /// Records that `forces` or `deferred` got an entry waiting for `seq`
    /// (`vote`: one whose completion sends a vote to a coordinator).
    fn waits_for(&mut self, seq: BatchSeq, vote: bool) {
        self.waiting_from = self.waiting_from.min(seq);
        if vote {
            self.owed_since = self.owed_since.min(self.now);
        }
    }

    /// Whether this worker holds no transaction state (for a clean stop)
    /// but what only an island whose process is down could move on: a
    /// commit decided here that waits for its acknowledgement, a branch
    /// here of its transaction (both stay in the log for recovery).
    pub fn quiescent(&self) -> bool {
        let down = self.down;
        self.coord.held_beside(down) == 0
            && self.part.held_beside(down) == 0
            && self
                .pool
                .branches
                .keys()
                .all(|&g| down.contains(home_of(g)))
            && self.forces.is_empty()
            && self.deferred.is_empty()
            && self.locking.is_empty()
            && self.outbox.is_empty()
    }

    /// Hands the island's log buffer to the log writer.
    pub fn flush_log(&mut self) -> Result<(), Error> {
        self.pool.own.shared().flush()
    }

    pub(super) fn drain_local(&mut self) {
        let mut actions = std::mem::take(&mut self.actions);
        while let Some((from, msg)) = self.local.pop_front() {
            actions.clear();
            let now = self.now_us();
            if msg.to_participant() {
                let mut eng = Engine(&mut self.pool);
                self.part.on_message(from, msg, now, &mut eng, &mut actions);
                self.run_actions(&mut actions, false);
            } else {
                self.coord.on_message(from, msg, now, &mut actions);
                self.early_stale = true;
                self.run_actions(&mut actions, true);
            }
        }
        self.actions = actions;
    }

    /// Performs the actions of a state machine (`by_coord`: the coordinator's).
    pub(super) fn run_actions(&mut self, actions: &mut Vec<Action>, by_coord: bool) {
        let mut i = 0;
        while i < actions.len() {
            match actions[i] {
                Action::Send {
                    to,
                    msg:
                        msg @ Msg::PrepareConf {
                            read_only: true, ..
                        },
                } if self.shared.wal.is_some() && to != self.island => {
                    // A read-only vote waits until everything the branch
                    // could have read from is durable (`sync`) or written
                    // (`async`: a process crash keeps it), as a local
                    // read-only commit's acknowledgement does: the decision
                    // that follows is forced to another island's log, and a
                    // transaction that survives a crash must not have read
                    // from one that did not. (The home island's own branch
                    // need not wait: the decision goes to this very log,
                    // after what the branch read, and the client hears of
                    // the commit once the decision is durable.)
                    let need = self.shared.append_seq.load(Ordering::Acquire);
                    if need > self.shared.durable_seq() {
                        self.deferred.push((need, to, msg, self.now));
                        self.waits_for(need, true);
                        self.flush_due = true;
                    } else {
                        self.send_msg(to, msg);
                    }
                }
                Action::Send { to, msg } => self.send_msg(to, msg),
                Action::Log { rec, force, token } => {
                    let seq = match rec {
                        LogRec::Prepare { gtid } => match self.pool.branches.get(&gtid) {
                            Some(b) => {
                                let c = b.ctx;
                                self.pool.ctx(c).log_prepare(gtid)
                            }
                            None => 0,
                        },
                        LogRec::Decision { gtid, commit } => {
                            let logged = if by_coord {
                                None
                            } else {
                                self.pool.decided.remove(&gtid)
                            };
                            let seq = match logged {
                                Some(seq) => seq,
                                None => self
                                    .shared
                                    .log_record(|l| l.decision(gtid, commit), by_coord),
                            };
                            if by_coord && seq != 0 {
                                self.coord_pins.insert(gtid, seq);
                            }
                            if by_coord && commit {
                                // Decided: the client hears it now (see
                                // `outcomes`), the durable Outcome is skipped.
                                self.outcomes.push((gtid, Some(seq)));
                                self.reported.push(gtid);
                                // Early lock release of the home island's own
                                // branch: the decision record is in this log, so
                                // every transaction that sees these writes is
                                // logged after it and acknowledged only once it
                                // is durable (a crash before that loses them
                                // all, and presumed abort agrees). The
                                // participant's CommitReq then finds nothing left.
                                if let Some(b) = self.pool.branches.get(&gtid) {
                                    let c = b.ctx;
                                    if self.pool.ctx(c).prepared.is_some() {
                                        self.pool.branches.remove(&gtid);
                                        self.pool.ctx(c).commit_prepared();
                                        self.pool.free_ctx(c);
                                    }
                                }
                            }
                            seq
                        }
                        LogRec::End { gtid } => {
                            let seq = self.shared.log_record(|l| l.end(gtid), false);
                            if let Some(p) = self.coord_pins.remove(&gtid) {
                                self.shared.unpin(p);
                            }
                            seq
                        }
                    };
                    // The home island's own branch needs no force of its
                    // Prepare: the commit decision goes to this same log
                    // after it, so the decision is durable only with it, and
                    // without a durable decision the branch aborts anyway
                    // (presumed abort). Its vote goes out at once.
                    let own_prepare = !by_coord
                        && matches!(rec, LogRec::Prepare { gtid } if home_of(gtid) == self.island);
                    if force && own_prepare {
                        self.forces.push((0, false, token, self.now));
                        self.waits_for(0, true);
                    } else if force {
                        // No log (`seq` 0): durable at once.
                        self.forces.push((seq, by_coord, token, self.now));
                        self.waits_for(seq, !by_coord);
                        if seq != 0 {
                            self.flush_due = true;
                        }
                    }
                }
                Action::Outcome { gtid, committed } => {
                    if committed {
                        bump(&self.counts().distributed_commits);
                    }
                    if !committed {
                        self.outcomes.push((gtid, None));
                    } else if let Some(i) = self.reported.iter().position(|&g| g == gtid) {
                        self.reported.swap_remove(i);
                    } else {
                        self.outcomes.push((gtid, Some(0)));
                    }
                }
                Action::Forget { .. } => {}
            }
            i += 1;
        }
        actions.clear();
    }

    /// Sends a 2PC message to the worker that handles it (this one: locally).
    fn send_msg(&mut self, to: IslandId, msg: Msg) {
        let gtid = msg.gtid();
        let worker = if msg.to_participant() {
            self.cl.branch_worker(to, gtid)
        } else {
            self.cl.home_worker(gtid)
        };
        let ep = self.cl.endpoint(to, worker);
        if ep == self.me {
            self.local.push_back((self.island, msg));
        } else if let Msg::CommitConf { .. } = msg {
            // Nobody waits on it: it rides with the next frame to that
            // worker, or leaves alone after CONF_HOLD_US.
            let now = self.now_us();
            push_frame_with(self.outbox.batch_deferred(&*self.transport, ep, now), |b| {
                msg.encode(b)
            });
        } else {
            push_frame_with(self.outbox.batch(&*self.transport, ep), |b| msg.encode(b));
        }
    }

    fn on_frame(&mut self, from: Endpoint, payload: &[u8]) {
        let frame = match wire::decode(payload) {
            Ok(f) => f,
            Err(_) => {
                self.cl.stats.malformed.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let Some(from_island) = self.cl.island_of_endpoint(from) else {
            self.cl.stats.malformed.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let ntables = self.pool.own.catalog().tables.len();
        match frame {
            Frame::Coord(msg) => {
                let mut actions = std::mem::take(&mut self.actions);
                actions.clear();
                let now = self.now_us();
                if msg.to_participant() {
                    let mut eng = Engine(&mut self.pool);
                    self.part
                        .on_message(from_island, msg, now, &mut eng, &mut actions);
                    self.run_actions(&mut actions, false);
                } else {
                    self.coord.on_message(from_island, msg, now, &mut actions);
                    self.early_stale = true;
                    self.run_actions(&mut actions, true);
                }
                self.actions = actions;
            }
            Frame::Get {
                gtid, tag, table, ..
            }
            | Frame::MultiGet {
                gtid, tag, table, ..
            }
            | Frame::Insert {
                gtid, tag, table, ..
            }
            | Frame::Scan {
                gtid, tag, table, ..
            } => {
                if table as usize >= ntables || home_of(gtid) != from_island {
                    self.cl.stats.malformed.fetch_add(1, Ordering::Relaxed);
                    self.reply(from, tag, Status::Refused, table);
                    return;
                }
                self.serve(from, gtid, tag, frame, wire::continues(payload));
            }
            Frame::Reply { tag, status, .. } => {
                let c = tag >> crate::txn::TAG_SEQ_BITS;
                if c as usize >= self.pool.ctxs.len() {
                    self.cl.stats.malformed.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                if !self.locking.is_empty() {
                    if let Some(i) = self.locking.iter().position(|l| l.tag == tag) {
                        return self.on_lock_reply(i, from_island, status);
                    }
                }
                let tx = self.pool.ctx(c);
                let Some(d) = tx.dist.as_mut() else { return };
                // Only the reply to the outstanding request counts; stale
                // and duplicated ones are dropped.
                if d.tag == tag && !d.reply_ready && !d.req_ready && d.tag != 0 {
                    d.reply.clear();
                    d.reply.extend_from_slice(payload);
                    d.reply_ready = true;
                    d.tag = 0;
                    self.woken.push(c);
                }
            }
            Frame::Write {
                gtid,
                table,
                key,
                row,
            } => {
                if let Some(b) = self.pool.branches.get_mut(&gtid) {
                    let ok = (table as usize) < ntables
                        && b.expect.is_none()
                        // SAFETY: a branch context has no procedure future.
                        && unsafe { &mut *self.pool.ctxs[b.ctx as usize] }.apply_write(table, key, row);
                    if ok {
                        b.applied += 1;
                    } else {
                        b.bad = true;
                    }
                }
            }
            Frame::Delete { gtid, table, key } => {
                if let Some(b) = self.pool.branches.get_mut(&gtid) {
                    let ok = (table as usize) < ntables
                        && b.expect.is_none()
                        // SAFETY: as above.
                        && unsafe { &mut *self.pool.ctxs[b.ctx as usize] }.apply_delete(table, key);
                    if ok {
                        b.applied += 1;
                    } else {
                        b.bad = true;
                    }
                }
            }
            Frame::Release { gtid } => {
                if self
                    .pool
                    .branches
                    .get(&gtid)
                    .is_some_and(|b| b.expect.is_none())
                {
                    // An abort of a branch that wrote nothing is a release;
                    // the home wants no answer.
                    let now = self.now_us();
                    self.abort_branch_unanswered(from_island, gtid, now);
                }
            }
            Frame::Lock {
                gtid,
                tag,
                writes,
                entries,
            } => {
                if self.pool.is_copy(gtid, tag) {
                    return;
                }
                let status = if home_of(gtid) == from_island {
                    self.lock_branch(gtid, writes, entries)
                } else {
                    self.cl.stats.malformed.fetch_add(1, Ordering::Relaxed);
                    Status::Refused
                };
                self.reply(from, tag, status, 0);
            }
            Frame::Call { .. }
            | Frame::CallReply { .. }
            | Frame::CallCancel { .. }
            | Frame::Stmt { .. }
            | Frame::Block { .. }
            | Frame::Renew { .. } => match self.forward.as_mut() {
                Some(port) => {
                    let mut out = super::forward::Frames {
                        outbox: &mut self.outbox,
                        transport: &*self.transport,
                    };
                    port.on_frame(from, from_island, frame, &mut out);
                }
                None => {
                    self.cl.stats.malformed.fetch_add(1, Ordering::Relaxed);
                }
            },
            Frame::Prep { gtid, writes, hold } => {
                if let Some(b) = self.pool.branches.get_mut(&gtid) {
                    if b.expect.is_none() {
                        b.expect = Some((writes, hold));
                    }
                }
            }
        }
    }
}
