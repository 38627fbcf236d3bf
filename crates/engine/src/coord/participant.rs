//! The participant: this island's branches of distributed transactions (the home island's
//! own branch included), from execution to the decision.
//!
//! Per branch: `Active` (executing; aborted if no PrepareReq comes within `branch_idle_us`)
//! → on PrepareReq the engine votes: no → PrepareRef, abort; read-only → PrepareConf
//! {read_only}, release, forget; yes → `Preparing` (Prepare record forced) → durable →
//! PrepareConf, `Prepared` (in doubt; asks DecisionReq every `decision_retry_us`) →
//! CommitReq → `Committing` (Decision{commit} forced) → durable → CommitConf, forget; or
//! AbortReq → abort, Decision{abort} unforced (losing it only means asking again, and the
//! answer is abort), AbortConf, forget.
//!
//! What is logged and why: the Prepare record (with the branch's redo writes) is forced
//! before voting yes, so a yes vote survives a crash. The commit record is forced before
//! CommitConf, because after the last CommitConf the coordinator forgets and would answer
//! a later question with abort. Recovery: a Prepare without a later Decision is in doubt:
//! the engine re-acquires the branch ([`Branches::restore`]) and the participant asks the
//! home island. A Prepare followed by a commit Decision (the participant's, or on the home
//! island the coordinator's own) is committed; the engine redoes it from the log.
//!
//! Messages about unknown gtids: CommitReq → CommitConf (a duplicate after commit, or a
//! recovered coordinator asking everyone); AbortReq → abort in the engine (a no-op if it
//! has no such branch) and AbortConf; PrepareReq → a fresh vote, which is no when the
//! engine has lost or finished the branch.
//!
//! That last answer holds only if a finished branch stays finished: the engine opens a
//! branch on the first remote operation of a gtid it does not hold ([`on_branch_begin`]),
//! and a late copy of a finished branch's operations would open a second branch of the
//! same gtid, which the late copies of its writes and PrepareReq would prepare (a yes vote
//! the coordinator, still committing, ignores) and the coordinator's resent CommitReq would
//! commit, installing the transaction's old after-images over later updates. Over a
//! transport that never duplicates a message nor delivers one late (a FIFO channel per
//! pair of endpoints) no such copy exists. Over one that may, the glue calls
//! [`Participant::keep_tombstones`] with a time longer than the latest a copy may arrive:
//! the participant then remembers every branch it finished (committed, aborted, voted no
//! or read-only) for that long, and [`on_branch_begin`] refuses such a gtid
//! ([`CoordError::Finished`]), like TCP's TIME_WAIT. Tombstones expire in `on_tick`, after
//! the messages of the same round: a copy that became due before a tombstone's expiry is
//! handled while the tombstone is there.
//!
//! [`on_branch_begin`]: Participant::on_branch_begin

use std::collections::{HashMap, VecDeque};

use super::table::Table;
use super::{
    check_config, home_of, Action, Config, CoordError, Gtid, IslandId, IslandSet, LogRec, LogToken,
    Msg,
};

/// The engine's answer to a prepare.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Vote {
    /// Validated, locked, redo writes ready for the Prepare record.
    Yes,
    /// Valid and wrote nothing: the participant releases it at once with `commit`.
    ReadOnly,
    /// Cannot commit (conflict, lost after a crash, unknown): aborted with `abort`.
    No,
}

/// The local engine as the participant sees it. The glue writes the branch's redo writes
/// into the Prepare record the participant asks for.
pub trait Branches {
    /// Validates and locks the branch `gtid` (unknown → `No`).
    fn prepare(&mut self, gtid: Gtid) -> Vote;
    /// Installs the branch's writes and releases it. Called once, for a branch that voted
    /// `Yes` (or `ReadOnly`).
    fn commit(&mut self, gtid: Gtid);
    /// Drops the branch and releases it; a no-op for an unknown gtid.
    fn abort(&mut self, gtid: Gtid);
    /// Recovery: re-acquire a prepared branch from its Prepare record (writes pending,
    /// locks held) until the decision arrives.
    fn restore(&mut self, gtid: Gtid);
}

#[derive(Clone, Copy, Debug)]
enum State {
    Active { idle_deadline_us: u64 },
    Preparing,
    Prepared { ask_at_us: u64 },
    Committing,
}

/// Counters; `violations` counts messages the protocol says cannot happen.
#[derive(Clone, Copy, Debug, Default)]
pub struct PartStats {
    pub voted_yes: u64,
    pub voted_read_only: u64,
    pub voted_no: u64,
    pub committed: u64,
    pub aborted: u64,
    pub idle_aborts: u64,
    pub decision_reqs: u64,
    pub refused_full: u64,
    pub violations: u64,
}

/// 2PC participant of one island. See the module docs.
pub struct Participant {
    cfg: Config,
    branches: Table<State>,
    stats: PartStats,
    /// Branches finished here lately, kept only over a transport that may deliver a copy
    /// of a message late ([`Participant::keep_tombstones`]).
    tombstones: Option<Tombstones>,
}

/// Gtids whose branch finished here less than `keep_us` ago.
struct Tombstones {
    keep_us: u64,
    /// (expiry, gtid) in the order laid (so by expiry: the clock does not go back).
    queue: VecDeque<(u64, Gtid)>,
    /// Gtid → expiry of its latest tombstone (an older entry of `queue` leaves it alone).
    live: HashMap<Gtid, u64>,
}

impl Participant {
    pub fn new(cfg: Config) -> Self {
        check_config(&cfg);
        Participant {
            cfg,
            branches: Table::new(cfg.max_in_flight),
            stats: PartStats::default(),
            tombstones: None,
        }
    }

    /// From now on remembers each branch that finishes here for `keep_us` and refuses to
    /// begin it again meanwhile (see the module docs): for a transport that may duplicate
    /// a message or deliver it late, `keep_us` longer than the latest a copy may arrive.
    pub fn keep_tombstones(&mut self, keep_us: u64) {
        self.tombstones = Some(Tombstones {
            keep_us,
            queue: VecDeque::new(),
            live: HashMap::new(),
        });
    }

    /// Tombstones held (0 unless [`Participant::keep_tombstones`] was called).
    pub fn tombstones(&self) -> usize {
        self.tombstones.as_ref().map_or(0, |t| t.live.len())
    }

    /// The branch of `gtid` finished here (or never will begin: aborted before it did).
    fn finished(&mut self, gtid: Gtid, now_us: u64) {
        if let Some(t) = &mut self.tombstones {
            let expiry = now_us.saturating_add(t.keep_us);
            t.queue.push_back((expiry, gtid));
            t.live.insert(gtid, expiry);
        }
    }

    /// Branches currently held (0 when quiescent).
    pub fn in_flight(&self) -> usize {
        self.branches.len()
    }

    /// Branches held that do not wait only for a coordinator in `down`
    /// (islands whose process is down): all but the branches of a down
    /// island's transactions that are active (nothing logged: dropping one
    /// is its abort, and that coordinator cannot have decided a commit
    /// without this branch's vote) or prepared (in doubt: the Prepare record
    /// keeps it for recovery, which asks the coordinator once it is back).
    /// Equal to [`Participant::in_flight`] when `down` is empty.
    pub fn held_beside(&self, down: IslandSet) -> usize {
        self.branches
            .iter()
            .filter(|&(gtid, s)| {
                !(down.contains(home_of(gtid))
                    && matches!(s, State::Active { .. } | State::Prepared { .. }))
            })
            .count()
    }

    pub fn stats(&self) -> &PartStats {
        &self.stats
    }

    /// The engine started (or did more work on) a branch of `gtid` here: start (or restart)
    /// its idle timer. Refused when full; the engine should then drop the branch.
    pub fn on_branch_begin(&mut self, gtid: Gtid, now_us: u64) -> Result<(), CoordError> {
        let idle_deadline_us = now_us.saturating_add(self.cfg.timeouts.branch_idle_us);
        match self.branches.get_mut(gtid) {
            Some(s @ State::Active { .. }) => {
                *s = State::Active { idle_deadline_us };
                Ok(())
            }
            Some(_) => Err(CoordError::Duplicate(gtid)),
            None if self
                .tombstones
                .as_ref()
                .is_some_and(|t| t.live.contains_key(&gtid)) =>
            {
                Err(CoordError::Finished(gtid))
            }
            None => self
                .branches
                .insert(gtid, State::Active { idle_deadline_us })
                .map_err(|_| {
                    self.stats.refused_full += 1;
                    CoordError::Full {
                        max: self.cfg.max_in_flight,
                    }
                }),
        }
    }

    /// A message from a coordinator.
    pub fn on_message<B: Branches>(
        &mut self,
        from: IslandId,
        msg: Msg,
        now_us: u64,
        engine: &mut B,
        out: &mut Vec<Action>,
    ) {
        let gtid = msg.gtid();
        if !msg.to_participant() || from != home_of(gtid) {
            self.stats.violations += 1;
            return;
        }
        let home = from;
        let state = self.branches.get_mut(gtid).map(|s| *s);
        match msg {
            Msg::PrepareReq { .. } => match state {
                None | Some(State::Active { .. }) => self.prepare(gtid, now_us, engine, out),
                Some(State::Prepared { .. }) => out.push(Action::Send {
                    to: home,
                    msg: Msg::PrepareConf {
                        gtid,
                        read_only: false,
                    },
                }),
                // The yes vote goes out when the Prepare record is durable / decided already.
                Some(State::Preparing) | Some(State::Committing) => {}
            },
            Msg::CommitReq { .. } => match state {
                Some(State::Prepared { .. }) => {
                    engine.commit(gtid);
                    *self.branches.get_mut(gtid).expect("known") = State::Committing;
                    out.push(Action::Log {
                        rec: LogRec::Decision { gtid, commit: true },
                        force: true,
                        token: LogToken(gtid),
                    });
                }
                Some(State::Committing) => {} // acked once durable
                None => out.push(Action::Send {
                    to: home,
                    msg: Msg::CommitConf { gtid },
                }),
                // The coordinator commits only after our yes vote, sent only when prepared.
                Some(State::Active { .. }) | Some(State::Preparing) => {
                    self.stats.violations += 1;
                }
            },
            Msg::AbortReq { .. } => match state {
                Some(State::Committing) => self.stats.violations += 1,
                Some(State::Preparing) | Some(State::Prepared { .. }) => {
                    engine.abort(gtid);
                    self.branches.remove(gtid);
                    self.finished(gtid, now_us);
                    self.stats.aborted += 1;
                    out.push(Action::Log {
                        rec: LogRec::Decision {
                            gtid,
                            commit: false,
                        },
                        force: false,
                        token: LogToken(gtid),
                    });
                    out.push(Action::Send {
                        to: home,
                        msg: Msg::AbortConf { gtid },
                    });
                }
                Some(State::Active { .. }) | None => {
                    if state.is_some() {
                        self.branches.remove(gtid);
                        self.stats.aborted += 1;
                    }
                    engine.abort(gtid);
                    // Unknown too: a late copy of an operation it overtook must not begin it.
                    self.finished(gtid, now_us);
                    out.push(Action::Send {
                        to: home,
                        msg: Msg::AbortConf { gtid },
                    });
                }
            },
            _ => unreachable!("filtered above"),
        }
    }

    /// First PrepareReq of a branch (tracked as Active, or unknown here).
    fn prepare<B: Branches>(
        &mut self,
        gtid: Gtid,
        now_us: u64,
        engine: &mut B,
        out: &mut Vec<Action>,
    ) {
        let home = home_of(gtid);
        let tracked = self.branches.contains(gtid);
        let vote = if !tracked && self.branches.is_full() {
            self.stats.refused_full += 1;
            Vote::No
        } else {
            engine.prepare(gtid)
        };
        match vote {
            Vote::No => {
                self.stats.voted_no += 1;
                engine.abort(gtid);
                self.branches.remove(gtid);
                self.finished(gtid, now_us);
                out.push(Action::Send {
                    to: home,
                    msg: Msg::PrepareRef { gtid },
                });
            }
            Vote::ReadOnly => {
                self.stats.voted_read_only += 1;
                engine.commit(gtid);
                self.branches.remove(gtid);
                self.finished(gtid, now_us);
                out.push(Action::Send {
                    to: home,
                    msg: Msg::PrepareConf {
                        gtid,
                        read_only: true,
                    },
                });
            }
            Vote::Yes => {
                self.stats.voted_yes += 1;
                if tracked {
                    *self.branches.get_mut(gtid).expect("tracked") = State::Preparing;
                } else {
                    let inserted = self.branches.insert(gtid, State::Preparing);
                    assert!(inserted.is_ok(), "checked not full above");
                }
                out.push(Action::Log {
                    rec: LogRec::Prepare { gtid },
                    force: true,
                    token: LogToken(gtid),
                });
            }
        }
    }

    /// A forced record asked for by this participant is durable.
    pub fn on_log_durable(&mut self, token: LogToken, now_us: u64, out: &mut Vec<Action>) {
        let gtid = token.0;
        let home = home_of(gtid);
        match self.branches.get_mut(gtid) {
            Some(s @ State::Preparing) => {
                *s = State::Prepared {
                    ask_at_us: now_us.saturating_add(self.cfg.timeouts.decision_retry_us),
                };
                out.push(Action::Send {
                    to: home,
                    msg: Msg::PrepareConf {
                        gtid,
                        read_only: false,
                    },
                });
            }
            Some(State::Committing) => {
                self.branches.remove(gtid);
                self.finished(gtid, now_us);
                self.stats.committed += 1;
                out.push(Action::Send {
                    to: home,
                    msg: Msg::CommitConf { gtid },
                });
            }
            // Aborted meanwhile (a stale Prepare token), or nothing forced.
            _ => {}
        }
    }

    /// Timeouts: idle unprepared branches are aborted; in-doubt branches ask; tombstones
    /// expire.
    pub fn on_tick<B: Branches>(&mut self, now_us: u64, engine: &mut B, out: &mut Vec<Action>) {
        if let Some(t) = &mut self.tombstones {
            while let Some(&(expiry, gtid)) = t.queue.front() {
                if expiry > now_us {
                    break;
                }
                t.queue.pop_front();
                if t.live.get(&gtid) == Some(&expiry) {
                    t.live.remove(&gtid);
                }
            }
        }
        let retry_us = self.cfg.timeouts.decision_retry_us;
        for i in 0..self.branches.cap() {
            let Some((gtid, state)) = self.branches.slot_mut(i) else {
                continue;
            };
            match *state {
                State::Active { idle_deadline_us } if now_us >= idle_deadline_us => {
                    self.branches.remove(gtid);
                    engine.abort(gtid);
                    self.finished(gtid, now_us);
                    self.stats.idle_aborts += 1;
                }
                State::Prepared { ask_at_us } if now_us >= ask_at_us => {
                    *state = State::Prepared {
                        ask_at_us: now_us.saturating_add(retry_us),
                    };
                    self.stats.decision_reqs += 1;
                    out.push(Action::Send {
                        to: home_of(gtid),
                        msg: Msg::DecisionReq { gtid },
                    });
                }
                _ => {}
            }
        }
    }

    /// Rebuilds the state after a crash from the island's log (records in log order).
    /// Every in-doubt branch is restored in the engine and asks its home at once.
    pub fn recover<'a, B: Branches>(
        &mut self,
        records: impl IntoIterator<Item = &'a LogRec>,
        now_us: u64,
        engine: &mut B,
        out: &mut Vec<Action>,
    ) -> Result<(), CoordError> {
        self.branches.clear();
        // Messages die with the process: no copy of one from before the crash can come.
        if let Some(t) = &mut self.tombstones {
            t.queue.clear();
            t.live.clear();
        }
        let ask_at_us = now_us.saturating_add(self.cfg.timeouts.decision_retry_us);
        for rec in records {
            match *rec {
                LogRec::Prepare { gtid } => {
                    if self.branches.contains(gtid) {
                        continue;
                    }
                    self.branches
                        .insert_growing(gtid, State::Prepared { ask_at_us });
                }
                LogRec::Decision { gtid, .. } => {
                    self.branches.remove(gtid);
                }
                LogRec::End { .. } => {}
            }
        }
        for i in 0..self.branches.cap() {
            if let Some((gtid, _)) = self.branches.slot_mut(i) {
                engine.restore(gtid);
                self.stats.decision_reqs += 1;
                out.push(Action::Send {
                    to: home_of(gtid),
                    msg: Msg::DecisionReq { gtid },
                });
            }
        }
        Ok(())
    }
}
