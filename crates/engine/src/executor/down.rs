//! Islands whose process is down, as the transport sees them
//! ([`crate::transport::Transport::peer_down`]).
//!
//! Each round reads the transport's peer epoch (one relaxed load); only
//! when it moved does the executor ask which islands are down. While some
//! island is down, every round aborts the coordinator's transactions that
//! still wait for its vote, fails the LOCK rounds (of a commit, or of an
//! ending's confirmation) that wait for its reply, and the worker loop
//! aborts home transactions, in call slots and block slots alike, that
//! touched it or wait for its reply ([`Executor::waits_on_down`]):
//! all with [`crate::AbortReason::IslandDown`], never retried (the caller
//! hears [`crate::Error::IslandDown`] at once rather than retrying into
//! timeouts). What is already decided stays: a commit decision waits in the
//! coordinator (and its log record stays pinned) until the island comes
//! back and acknowledges it; a branch this island prepared for a
//! transaction of the down island stays in doubt, its locks held, until
//! that coordinator answers after its recovery (presumed abort).
//!
//! An island can die and come back between two of these looks (the
//! epoch then moved twice, and the island is up again): its incarnation,
//! which the transport reports ([`crate::transport::Transport::peer_incarnation`]),
//! changed. Whatever waited on the incarnation that died fails then as
//! above: the island counts as down for [`BOUNCE_ROUNDS`] rounds.
//!
//! A clean stop of a process (`Deployment::shutdown` with islands as
//! processes) keeps those effects from arising: the cluster leaves
//! ([`super::Cluster::leave`]), so a transaction homed in another process
//! begins no new branch here (refused: its home aborts it and retries, and
//! hears [`crate::Error::IslandDown`] once this island is gone), while what
//! is in flight finishes, and the executors settle on their own state
//! alone (the peers' refused requests do not hold them). The deployment
//! then syncs the log and the transport says goodbye, which the peers take
//! as the island going down at once.

use super::Executor;
use crate::coord::{Gtid, IslandSet};
use crate::route::IslandId;

/// Rounds for which an island that restarted between two of the
/// executor's looks counts as down: this round (its pump: the coordinator,
/// the LOCK rounds, the forwarded calls) and the next (the worker loop's
/// slots, which it polls before its next pump).
const BOUNCE_ROUNDS: u8 = 2;

impl Executor {
    /// See the module documentation: called once per round, before the
    /// timers.
    pub(super) fn watch_peers(&mut self) {
        let epoch = self.transport.peer_epoch();
        if epoch != self.peer_epoch || self.bounce_rounds > 0 {
            self.peer_epoch = epoch;
            self.bounce_rounds = self.bounce_rounds.saturating_sub(1);
            let mut down = IslandSet::EMPTY;
            for i in 0..self.cl.island_count() as IslandId {
                if i == self.island {
                    continue;
                }
                if self.transport.peer_down(i) {
                    down.insert(i);
                }
                let now = self.transport.peer_incarnation(i);
                let seen = &mut self.incarnations[usize::from(i)];
                if *seen != 0 && now != 0 && now != *seen && !self.down.contains(i) {
                    // It died and came back between two looks: what waits
                    // on the incarnation that died fails as if it had been
                    // seen down.
                    self.bounced.insert(i);
                    self.bounce_rounds = BOUNCE_ROUNDS;
                }
                if now != 0 {
                    *seen = now;
                }
            }
            if self.bounce_rounds == 0 {
                self.bounced = IslandSet::EMPTY;
            }
            self.down = down.union(self.bounced);
        }
        if self.down.is_empty() {
            return;
        }
        let mut actions = std::mem::take(&mut self.actions);
        actions.clear();
        let aborted = &mut self.down_aborted;
        self.coord
            .abort_waiting_on(self.down, &mut actions, |gtid, island| {
                aborted.insert(gtid, island);
            });
        if !actions.is_empty() {
            self.early_stale = true;
            self.run_actions(&mut actions, true);
        }
        actions.clear();
        self.actions = actions;
        if !self.locking.is_empty() {
            self.fail_locking_on_down(self.down);
        }
    }

    /// The down island that the home transaction on context `c` touched or
    /// waits for a reply from, if any.
    pub fn waits_on_down(&mut self, c: u32) -> Option<IslandId> {
        if self.down.is_empty() {
            return None;
        }
        let d = self.pool.ctx(c).dist.as_ref()?;
        let mut needs = d.touched;
        if d.tag != 0 || d.req_ready {
            needs.insert(d.req_to);
        }
        let down = self.down;
        down.iter().find(|&i| needs.contains(i))
    }

    /// The down island that made the coordinator abort `gtid`, if it was
    /// one (taken: asked once per outcome).
    pub fn aborted_for_down(&mut self, gtid: Gtid) -> Option<IslandId> {
        if self.down_aborted.is_empty() {
            return None;
        }
        self.down_aborted.remove(&gtid)
    }

    /// Islands this executor counts as down.
    pub fn down_islands(&self) -> IslandSet {
        self.down
    }
}
