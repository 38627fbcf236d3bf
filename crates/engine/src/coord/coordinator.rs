//! The coordinator: drives the transactions whose home is this island through 2PC.
//!
//! Per transaction: `Preparing` (PrepareReq sent, collecting votes until the prepare
//! timeout) → `Deciding` (commit decision logged with force, waiting for durability) →
//! `Committing` (CommitReq sent to the yes-voters, resent every `commit_retry_us` until
//! each acks) → `End` logged unforced, state forgotten. A no vote or the prepare timeout
//! aborts at once: AbortReq (sent once, best effort) to every participant that may hold a
//! prepared branch, outcome reported, state forgotten, nothing logged (presumed abort).
//!
//! Presumed abort is safe because the coordinator forgets a committed transaction only
//! after every yes-voter has made its commit durable (CommitConf): whoever asks about an
//! unknown gtid afterwards is a stale duplicate or a participant of an aborted transaction.
//! After a crash the log tells which commits were decided but not ended. The decision
//! record carries no participant list (the wal's `decision` is `[gtid][commit]`), so a
//! recovered commit is re-sent to every island of the deployment; islands that have no
//! such branch (read-only, or already committed and forgotten) just ack.

use super::table::Table;
use super::{
    check_config, home_of, Action, Config, CoordError, Gtid, IslandId, IslandSet, LogRec, LogToken,
    Msg,
};

#[derive(Clone, Copy, Debug)]
enum Phase {
    Preparing { deadline_us: u64 },
    Deciding,
    Committing { retry_at_us: u64 },
}

#[derive(Clone, Copy, Debug)]
struct Txn {
    participants: IslandSet,
    /// Participants whose vote arrived (first vote counts, duplicates are ignored).
    voted: IslandSet,
    /// Voted yes and not read-only: they hold a prepared branch.
    yes: IslandSet,
    /// Committing: yes-voters that have not acked yet.
    pending: IslandSet,
    phase: Phase,
}

/// Counters; `violations` is a message that the protocol says cannot happen (a bug or a
/// corrupted/misrouted message), always zero in the simulator.
#[derive(Clone, Copy, Debug, Default)]
pub struct CoordStats {
    pub committed: u64,
    pub aborted: u64,
    pub resent_commits: u64,
    /// DecisionReq / yes votes for gtids this coordinator does not know: answered abort.
    pub presumed_aborts: u64,
    pub violations: u64,
}

/// 2PC coordinator of one island. See the module docs.
pub struct Coordinator {
    cfg: Config,
    txns: Table<Txn>,
    stats: CoordStats,
}

impl Coordinator {
    pub fn new(cfg: Config) -> Self {
        check_config(&cfg);
        Coordinator {
            cfg,
            txns: Table::new(cfg.max_in_flight),
            stats: CoordStats::default(),
        }
    }

    /// Transactions currently held (0 when quiescent).
    pub fn in_flight(&self) -> usize {
        self.txns.len()
    }

    /// Transactions held that an island outside `down` (islands whose process
    /// is down) still has to move: all but the commits whose decision is
    /// durable and that wait only for acknowledgements from `down`. Those
    /// need nothing more from this process: the decision stays in the log,
    /// unended, and a participant that restarts learns it from it (resent to
    /// every island after this island's own recovery, or asked for).
    /// Equal to [`Coordinator::in_flight`] when `down` is empty.
    pub fn held_beside(&self, down: IslandSet) -> usize {
        self.txns
            .iter()
            .filter(|(_, t)| {
                !matches!(t.phase, Phase::Committing { .. }) || !t.pending.minus(down).is_empty()
            })
            .count()
    }

    /// Whether `gtid` is in flight here (not yet ended, aborted or forgotten).
    pub fn holds(&self, gtid: Gtid) -> bool {
        self.txns.contains(gtid)
    }

    pub fn is_full(&self) -> bool {
        self.txns.is_full()
    }

    pub fn stats(&self) -> &CoordStats {
        &self.stats
    }

    /// Starts 2PC of `gtid` (home must be this island) over `participants` (the islands
    /// holding its branches, this island included if it holds one).
    pub fn begin_commit(
        &mut self,
        gtid: Gtid,
        participants: &[IslandId],
        now_us: u64,
        out: &mut Vec<Action>,
    ) -> Result<(), CoordError> {
        if home_of(gtid) != self.cfg.island {
            return Err(CoordError::NotHome {
                gtid,
                home: home_of(gtid),
                island: self.cfg.island,
            });
        }
        if participants.is_empty() {
            return Err(CoordError::NoParticipants);
        }
        let mut set = IslandSet::EMPTY;
        for &p in participants {
            if usize::from(p) >= self.cfg.islands {
                return Err(CoordError::BadIsland {
                    island: p,
                    islands: self.cfg.islands,
                });
            }
            set.insert(p);
        }
        if self.txns.contains(gtid) {
            return Err(CoordError::Duplicate(gtid));
        }
        let txn = Txn {
            participants: set,
            voted: IslandSet::EMPTY,
            yes: IslandSet::EMPTY,
            pending: IslandSet::EMPTY,
            phase: Phase::Preparing {
                deadline_us: now_us.saturating_add(self.cfg.timeouts.prepare_us),
            },
        };
        if self.txns.insert(gtid, txn).is_err() {
            return Err(CoordError::Full {
                max: self.txns.cap(),
            });
        }
        for to in set.iter() {
            out.push(Action::Send {
                to,
                msg: Msg::PrepareReq { gtid },
            });
        }
        Ok(())
    }

    /// While `gtid` is collecting votes: the participants whose vote has not
    /// arrived. `None` once it is decided (or unknown: aborted and forgotten).
    /// An executor that starts 2PC before its home branch is done (an early
    /// prepare of the remote branches) holds back the home island's
    /// PrepareReq and watches this until only the home island is missing.
    pub fn missing_votes(&self, gtid: Gtid) -> Option<IslandSet> {
        let txn = self.txns.get(gtid)?;
        match txn.phase {
            Phase::Preparing { .. } => Some(txn.participants.minus(txn.voted)),
            Phase::Deciding | Phase::Committing { .. } => None,
        }
    }

    /// Aborts `gtid` while it collects votes (its home branch failed after an
    /// early prepare): AbortReq to every participant that may hold a prepared
    /// branch, outcome reported, nothing logged. False if it is not
    /// collecting votes (already decided, or aborted and forgotten).
    pub fn abort_preparing(&mut self, gtid: Gtid, out: &mut Vec<Action>) -> bool {
        if self.missing_votes(gtid).is_none() {
            return false;
        }
        self.abort(gtid, out);
        true
    }

    /// Aborts every transaction still collecting votes whose missing votes
    /// include an island of `down` (its process is gone: the vote will not
    /// come), as [`Coordinator::abort_preparing`] does; calls `aborted` with
    /// each gtid and the first such island. Decided transactions are kept:
    /// a commit waits for the island to come back and acknowledge it.
    pub fn abort_waiting_on(
        &mut self,
        down: IslandSet,
        out: &mut Vec<Action>,
        mut aborted: impl FnMut(Gtid, IslandId),
    ) {
        if down.is_empty() {
            return;
        }
        for i in 0..self.txns.cap() {
            let Some((gtid, txn)) = self.txns.slot_mut(i) else {
                continue;
            };
            let Phase::Preparing { .. } = txn.phase else {
                continue;
            };
            let missing = txn.participants.minus(txn.voted);
            if let Some(island) = down.iter().find(|&d| missing.contains(d)) {
                self.abort(gtid, out);
                aborted(gtid, island);
            }
        }
    }

    /// A message from a participant.
    pub fn on_message(&mut self, from: IslandId, msg: Msg, now_us: u64, out: &mut Vec<Action>) {
        let gtid = msg.gtid();
        if home_of(gtid) != self.cfg.island || msg.to_participant() {
            self.stats.violations += 1;
            return;
        }
        match msg {
            Msg::PrepareConf { read_only, .. } => self.on_vote(from, gtid, Some(read_only), out),
            Msg::PrepareRef { .. } => self.on_vote(from, gtid, None, out),
            Msg::CommitConf { .. } => self.on_commit_conf(from, gtid, out),
            Msg::AbortConf { .. } => {} // aborts are fire-and-forget
            Msg::DecisionReq { .. } => self.on_decision_req(from, gtid, out),
            Msg::PrepareReq { .. } | Msg::CommitReq { .. } | Msg::AbortReq { .. } => {
                unreachable!("filtered above")
            }
        }
        let _ = now_us;
    }

    /// `vote`: `Some(read_only)` for yes, `None` for no.
    fn on_vote(&mut self, from: IslandId, gtid: Gtid, vote: Option<bool>, out: &mut Vec<Action>) {
        let Some(txn) = self.txns.get_mut(gtid) else {
            if vote == Some(false) {
                // A prepared branch of a transaction we aborted (or finished and forgot: then
                // the participant has committed and forgotten too, and the abort is a no-op).
                self.stats.presumed_aborts += 1;
                out.push(Action::Send {
                    to: from,
                    msg: Msg::AbortReq { gtid },
                });
            }
            return;
        };
        if !txn.participants.contains(from) {
            self.stats.violations += 1;
            return;
        }
        if !matches!(txn.phase, Phase::Preparing { .. }) || txn.voted.contains(from) {
            return; // a duplicate of a vote already counted
        }
        txn.voted.insert(from);
        match vote {
            None => self.abort(gtid, out),
            Some(read_only) => {
                if !read_only {
                    txn.yes.insert(from);
                }
                if txn.voted == txn.participants {
                    self.decide_commit(gtid, out);
                }
            }
        }
    }

    fn decide_commit(&mut self, gtid: Gtid, out: &mut Vec<Action>) {
        let txn = self.txns.get_mut(gtid).expect("deciding a known gtid");
        if txn.yes.is_empty() {
            // Everyone read-only: nothing to make durable, nobody to tell.
            self.txns.remove(gtid);
            self.stats.committed += 1;
            out.push(Action::Outcome {
                gtid,
                committed: true,
            });
            out.push(Action::Forget { gtid });
            return;
        }
        txn.phase = Phase::Deciding;
        out.push(Action::Log {
            rec: LogRec::Decision { gtid, commit: true },
            force: true,
            token: LogToken(gtid),
        });
    }

    /// Abort while preparing: tell everyone that may have prepared, forget, log nothing.
    fn abort(&mut self, gtid: Gtid, out: &mut Vec<Action>) {
        let txn = self.txns.remove(gtid).expect("aborting a known gtid");
        assert!(matches!(txn.phase, Phase::Preparing { .. }));
        // Not voted yet (may be prepared with the vote in flight) or voted yes.
        let tell = txn.participants.minus(txn.voted).union(txn.yes);
        for to in tell.iter() {
            out.push(Action::Send {
                to,
                msg: Msg::AbortReq { gtid },
            });
        }
        self.stats.aborted += 1;
        out.push(Action::Outcome {
            gtid,
            committed: false,
        });
        out.push(Action::Forget { gtid });
    }

    fn on_commit_conf(&mut self, from: IslandId, gtid: Gtid, out: &mut Vec<Action>) {
        let Some(txn) = self.txns.get_mut(gtid) else {
            return; // duplicate after End
        };
        match txn.phase {
            Phase::Committing { .. } => {
                txn.pending.remove(from);
                if txn.pending.is_empty() {
                    self.txns.remove(gtid);
                    // Unforced: if lost, recovery resends CommitReq and everyone acks again.
                    out.push(Action::Log {
                        rec: LogRec::End { gtid },
                        force: false,
                        token: LogToken(gtid),
                    });
                    out.push(Action::Forget { gtid });
                }
            }
            // No CommitReq was sent yet, so no participant can have committed.
            Phase::Preparing { .. } | Phase::Deciding => self.stats.violations += 1,
        }
    }

    fn on_decision_req(&mut self, from: IslandId, gtid: Gtid, out: &mut Vec<Action>) {
        let Some(txn) = self.txns.get_mut(gtid) else {
            // Presumed abort: unknown means aborted, or never decided before a crash.
            self.stats.presumed_aborts += 1;
            out.push(Action::Send {
                to: from,
                msg: Msg::AbortReq { gtid },
            });
            return;
        };
        match txn.phase {
            // Undecided: the participant asks again later (or gets our AbortReq on timeout).
            Phase::Preparing { .. } | Phase::Deciding => {}
            Phase::Committing { .. } => out.push(Action::Send {
                to: from,
                msg: Msg::CommitReq { gtid },
            }),
        }
    }

    /// A forced record asked for by this coordinator is durable.
    pub fn on_log_durable(&mut self, token: LogToken, now_us: u64, out: &mut Vec<Action>) {
        let gtid = token.0;
        let Some(txn) = self.txns.get_mut(gtid) else {
            return;
        };
        if !matches!(txn.phase, Phase::Deciding) {
            return;
        }
        txn.phase = Phase::Committing {
            retry_at_us: now_us.saturating_add(self.cfg.timeouts.commit_retry_us),
        };
        txn.pending = txn.yes;
        for to in txn.pending.iter() {
            out.push(Action::Send {
                to,
                msg: Msg::CommitReq { gtid },
            });
        }
        self.stats.committed += 1;
        out.push(Action::Outcome {
            gtid,
            committed: true,
        });
    }

    /// Timeouts: prepare deadline → abort; unacked commits → resend.
    pub fn on_tick(&mut self, now_us: u64, out: &mut Vec<Action>) {
        self.on_tick_unless_busy(now_us, out, |_, _, _| false);
    }

    /// [`Coordinator::on_tick`], where a transaction past its prepare
    /// deadline aborts only if `busy(gtid, missing, since_us)` is false:
    /// `missing` are the participants whose vote has not arrived, and
    /// `since_us` is when its PrepareReqs left. The glue says whether those
    /// participants could have answered by now: one busy elsewhere (a
    /// worker polling a long procedure) is not silent, and the transaction
    /// waits for it until a later tick.
    pub fn on_tick_unless_busy(
        &mut self,
        now_us: u64,
        out: &mut Vec<Action>,
        mut busy: impl FnMut(Gtid, IslandSet, u64) -> bool,
    ) {
        let retry_us = self.cfg.timeouts.commit_retry_us;
        let prepare_us = self.cfg.timeouts.prepare_us;
        for i in 0..self.txns.cap() {
            let Some((gtid, txn)) = self.txns.slot_mut(i) else {
                continue;
            };
            let phase = txn.phase;
            match phase {
                Phase::Preparing { deadline_us }
                    if now_us >= deadline_us
                        && !busy(
                            gtid,
                            txn.participants.minus(txn.voted),
                            deadline_us.saturating_sub(prepare_us),
                        ) =>
                {
                    self.abort(gtid, out);
                }
                Phase::Committing { retry_at_us } if now_us >= retry_at_us => {
                    txn.phase = Phase::Committing {
                        retry_at_us: now_us.saturating_add(retry_us),
                    };
                    for to in txn.pending.iter() {
                        self.stats.resent_commits += 1;
                        out.push(Action::Send {
                            to,
                            msg: Msg::CommitReq { gtid },
                        });
                    }
                }
                _ => {}
            }
        }
    }

    /// Rebuilds the state after a crash from the island's log (records in log order; the
    /// participant's records in it are skipped). Every commit decided and not ended is
    /// re-sent to all islands.
    pub fn recover<'a>(
        &mut self,
        records: impl IntoIterator<Item = &'a LogRec>,
        now_us: u64,
        out: &mut Vec<Action>,
    ) -> Result<(), CoordError> {
        self.txns.clear();
        let all = IslandSet::first(self.cfg.islands);
        for rec in records {
            if home_of(rec.gtid()) != self.cfg.island {
                continue;
            }
            match *rec {
                LogRec::Decision { gtid, commit: true } => {
                    if self.txns.contains(gtid) {
                        continue; // the home participant's own commit record
                    }
                    let txn = Txn {
                        participants: all,
                        voted: all,
                        yes: all,
                        pending: all,
                        phase: Phase::Committing {
                            retry_at_us: now_us.saturating_add(self.cfg.timeouts.commit_retry_us),
                        },
                    };
                    self.txns.insert_growing(gtid, txn);
                }
                LogRec::End { gtid } => {
                    self.txns.remove(gtid);
                }
                LogRec::Decision { commit: false, .. } | LogRec::Prepare { .. } => {}
            }
        }
        for i in 0..self.txns.cap() {
            if let Some((gtid, txn)) = self.txns.slot_mut(i) {
                for to in txn.pending.iter() {
                    out.push(Action::Send {
                        to,
                        msg: Msg::CommitReq { gtid },
                    });
                }
            }
        }
        Ok(())
    }
}
