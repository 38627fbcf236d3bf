//! Recovery: when its executor starts, a worker takes its share of the
//! branches its island's log left in doubt and of the commits its
//! coordinator had not finished, and resolves them with its peers.

use super::serve::Engine;
use super::{Executor, WORKER_BITS};
use crate::coord::{home_of, Gtid, LogRec, GTID_SEQ_BITS};
use crate::Error;

impl Executor {
    /// Recovery: this worker's in-doubt branches and undecided commits.
    pub(super) fn recover(&mut self) -> Result<(), Error> {
        let now = self.now_us();
        let rep = &self.cl.recovered[self.island as usize];
        let mine_as_home =
            |g: Gtid| home_of(g) == self.island && self.cl.home_worker(g) == self.worker;
        // Never reuse a gtid: a home that aborted a transaction logged
        // nothing about it (presumed abort), while a participant may still
        // hold its branch prepared; a new transaction of that name would
        // answer the participant's DecisionReq, and the aborted branch would
        // commit with it. The worker's draw starts above the gtid reservation
        // of every earlier incarnation of this island (`coord/gtids.rs`), which
        // is what keeps an island that restarts alone safe. Above what the
        // logs of the islands opened here show, too: it costs nothing, and it
        // covers a log written before reservations (a control file of
        // version 2 or older, or a rebuilt one).
        for r in self.cl.recovered.iter().flat_map(|rep| &rep.two_pc) {
            let g = r.gtid();
            if mine_as_home(g) {
                self.gtids
                    .skip_past((g & ((1 << GTID_SEQ_BITS) - 1)) >> WORKER_BITS);
            }
        }
        let coord_recs: Vec<LogRec> = rep
            .two_pc
            .iter()
            .filter(|r| mine_as_home(r.gtid()))
            .copied()
            .collect();
        let part_recs: Vec<LogRec> = rep
            .two_pc
            .iter()
            .filter(|r| self.cl.branch_worker(self.island, r.gtid()) == self.worker)
            .copied()
            .collect();
        for d in &rep.in_doubt {
            if self.cl.branch_worker(self.island, d.gtid) == self.worker {
                self.pool.in_doubt.insert(d.gtid, d.clone());
            }
        }
        let mut actions = Vec::new();
        self.coord
            .recover(&coord_recs, now, &mut actions)
            .map_err(|e| Error::Recovery(format!("coordinator: {e}")))?;
        // The decisions the coordinator still has to finish stay pinned
        // until their End, as in the run that made them: a checkpoint before
        // every participant acknowledged would drop them otherwise, and a
        // second crash would turn those commits into presumed aborts.
        for r in &coord_recs {
            let LogRec::Decision { gtid, commit: true } = *r else {
                continue;
            };
            if !self.coord.holds(gtid) || self.coord_pins.contains_key(&gtid) {
                continue;
            }
            if let Some(&seq) = rep.decision_batches.get(&gtid) {
                if seq != 0 {
                    self.shared.log.lock().pin(seq);
                    self.coord_pins.insert(gtid, seq);
                }
            }
        }
        self.run_actions(&mut actions, true);
        let mut eng = Engine(&mut self.pool);
        self.part
            .recover(&part_recs, now, &mut eng, &mut actions)
            .map_err(|e| Error::Recovery(format!("participant: {e}")))?;
        self.run_actions(&mut actions, false);
        if let Some(e) = self.pool.failed.take() {
            return Err(e);
        }
        self.outbox.flush(&*self.transport, self.me);
        Ok(())
    }
}
