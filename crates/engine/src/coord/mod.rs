//! Two-phase commit: the coordinator and participant state machines.
//!
//! This module owns the protocol logic of distributed transactions and nothing else: no I/O,
//! no threads, no clocks. [`Coordinator`] (one per island, for the transactions whose home
//! is that island) and [`Participant`] (one per island, for that island's branches of any
//! distributed transaction, the home island's own branch included) take inputs (a message, a
//! log record that became durable, a tick with the current time, the log after a crash) and
//! push [`Action`]s to an out-vector. The island glue performs them: it sends messages
//! through the transport, appends [`LogRec`]s to the island's wal, tells the client. Because
//! of this, the very same code runs under the deterministic simulator in `sim.rs`.
//!
//! Protocol: presumed abort. Only a commit decision is logged (forced) by the coordinator;
//! a coordinator that knows nothing about a transaction answers "abort". Participants force
//! their prepare record before voting yes and force their commit record before acking, so
//! the coordinator may forget (log `End`) once every yes-voter acked. Read-only participants
//! release at prepare and get no phase-2 message.
//!
//! Log records map one to one onto the wal's 2PC records (`LogBuffer::prepare_begin` +
//! the branch's writes + `record_end`, `LogBuffer::decision`, `LogBuffer::end`). Coordinator
//! and participant of one island share its log; roles never clash because the participant
//! writes only `Prepare` and `Decision`, the coordinator only `Decision { commit: true }`
//! and `End`, and a commit decision means the same thing to both.
//!
//! For the glue: gtids must never be reused, also across a restart of the home island alone:
//! an aborted transaction leaves nothing in its home's log, but may leave a prepared branch
//! in a participant's. Draw them with [`SeqDraw`] below a reservation the island's control
//! file holds durably (see `gtids.rs`, and the simulator, which restarts one island while
//! the others run). The wal's `decision` record is documented there as the coordinator's; the participant
//! writes its branch outcome with it too. The decision record carries no participant
//! list, so a recovered coordinator re-sends its unfinished commits to every island;
//! adding the list to the record would narrow that.
//! `on_tick` scans all slots (O(`max_in_flight`)); call it every few milliseconds, not per
//! message.
//!
//! Bounds: each machine holds at most `max_in_flight` transactions, fixed at construction;
//! island ids are below [`MAX_ISLANDS`] so that participant sets are one `u128`.

mod coordinator;
pub mod gtids;
mod msg;
mod participant;
mod table;

#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;

pub use coordinator::{CoordStats, Coordinator};
pub use gtids::{SeqDraw, GTID_RESERVE};
pub use msg::{DecodeError, Msg};
pub use participant::{Branches, PartStats, Participant, Vote};

use crate::route::IslandId;

/// Global transaction id: the top 16 bits are the home (coordinator) island, the low 48 a
/// sequence number the home island never reuses (also across restarts: see [`gtids`]).
pub type Gtid = u64;

/// Bits of a [`Gtid`] below the home island id.
pub const GTID_SEQ_BITS: u32 = 48;

/// Largest deployment the state machines handle (participant sets are a `u128`).
pub const MAX_ISLANDS: usize = 128;

/// Builds a gtid from its home island and a sequence number below 2^48.
pub fn gtid(home: IslandId, seq: u64) -> Gtid {
    assert!(
        seq < 1 << GTID_SEQ_BITS,
        "gtid sequence {seq} overflows 48 bits"
    );
    (u64::from(home) << GTID_SEQ_BITS) | seq
}

/// The home (coordinator) island of a gtid.
pub fn home_of(gtid: Gtid) -> IslandId {
    (gtid >> GTID_SEQ_BITS) as IslandId
}

/// A set of islands (ids below [`MAX_ISLANDS`]), iterated in ascending order.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct IslandSet(u128);

impl IslandSet {
    pub const EMPTY: IslandSet = IslandSet(0);

    /// Islands `0..n`.
    pub fn first(n: usize) -> IslandSet {
        assert!(n <= MAX_ISLANDS);
        if n == MAX_ISLANDS {
            IslandSet(u128::MAX)
        } else {
            IslandSet((1u128 << n) - 1)
        }
    }
    pub fn insert(&mut self, i: IslandId) {
        assert!(usize::from(i) < MAX_ISLANDS);
        self.0 |= 1 << i;
    }
    pub fn remove(&mut self, i: IslandId) {
        if usize::from(i) < MAX_ISLANDS {
            self.0 &= !(1 << i);
        }
    }
    pub fn contains(self, i: IslandId) -> bool {
        usize::from(i) < MAX_ISLANDS && self.0 & (1 << i) != 0
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }
    pub fn union(self, o: IslandSet) -> IslandSet {
        IslandSet(self.0 | o.0)
    }
    pub fn minus(self, o: IslandSet) -> IslandSet {
        IslandSet(self.0 & !o.0)
    }
    pub fn iter(self) -> impl Iterator<Item = IslandId> {
        let mut bits = self.0;
        std::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            let i = bits.trailing_zeros();
            bits &= bits - 1;
            Some(i as IslandId)
        })
    }
}

/// Names a forced log record; handed back through `on_log_durable` of the machine that
/// asked for the record. It is the record's gtid: a machine has at most one forced record
/// of a gtid outstanding at a time.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub struct LogToken(pub u64);

/// A 2PC log record, as the machines ask for it and read it back in `recover`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LogRec {
    /// Participant: the branch is prepared; the glue writes the branch's redo writes with it.
    Prepare { gtid: Gtid },
    /// Coordinator: commit decided (only commits are logged: presumed abort).
    /// Participant: the branch's outcome (commit forced, abort not).
    Decision { gtid: Gtid, commit: bool },
    /// Coordinator: every yes-voter acked the commit; the gtid is forgotten.
    End { gtid: Gtid },
}

impl LogRec {
    pub fn gtid(&self) -> Gtid {
        match *self {
            LogRec::Prepare { gtid } | LogRec::Decision { gtid, .. } | LogRec::End { gtid } => gtid,
        }
    }
}

/// An effect for the island glue to perform, in order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Action {
    Send {
        to: IslandId,
        msg: Msg,
    },
    /// Append `rec` to the island's log. With `force`, call `on_log_durable(token)` of the
    /// same machine once the record (and everything before it) is durable.
    Log {
        rec: LogRec,
        force: bool,
        token: LogToken,
    },
    /// Tell the client (the home transaction) the outcome.
    Outcome {
        gtid: Gtid,
        committed: bool,
    },
    /// The coordinator dropped all state of `gtid`.
    Forget {
        gtid: Gtid,
    },
}

/// Timeouts, in microseconds of whatever clock the glue passes as `now_us`.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// Coordinator: votes not all in after this long → abort.
    pub prepare_us: u64,
    /// Coordinator: resend `CommitReq` to participants that have not acked after this long.
    pub commit_retry_us: u64,
    /// Participant: a prepared branch that heard nothing for this long asks `DecisionReq`
    /// (and again every this long).
    pub decision_retry_us: u64,
    /// Participant: an executing branch that got no `PrepareReq` for this long is aborted
    /// (it has not voted, so it may; this frees branches whose home crashed).
    pub branch_idle_us: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            prepare_us: 100_000,
            commit_retry_us: 50_000,
            decision_retry_us: 200_000,
            branch_idle_us: 1_000_000,
        }
    }
}

/// Construction parameters of both machines.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// This island.
    pub island: IslandId,
    /// Islands in the deployment (ids `0..islands`).
    pub islands: usize,
    /// Transactions (coordinator) or branches (participant) held at once.
    pub max_in_flight: usize,
    pub timeouts: Timeouts,
}

/// Refusals of the state machines' entry points.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CoordError {
    #[error("{max} transactions already in flight (the limit set at construction)")]
    Full { max: usize },
    #[error("gtid {gtid:#x} has home island {home}, not this island {island}")]
    NotHome {
        gtid: Gtid,
        home: IslandId,
        island: IslandId,
    },
    #[error("gtid {0:#x} is already in flight")]
    Duplicate(Gtid),
    #[error("the branch of gtid {0:#x} finished here a moment ago (a late copy of its work)")]
    Finished(Gtid),
    #[error("island {island} is not in the deployment of {islands} islands")]
    BadIsland { island: IslandId, islands: usize },
    #[error("a distributed commit needs at least one participant")]
    NoParticipants,
}

fn check_config(cfg: &Config) {
    assert!(cfg.islands > 0 && cfg.islands <= MAX_ISLANDS);
    assert!(usize::from(cfg.island) < cfg.islands);
    assert!(cfg.max_in_flight > 0);
}
