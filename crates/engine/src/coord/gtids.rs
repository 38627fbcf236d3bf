//! Gtid sequence numbers that no incarnation of an island hands out twice.
//!
//! A home island that aborted a transaction logged nothing about it (presumed abort), yet a
//! participant may still hold that transaction's branch prepared. An island that restarts
//! alone sees only its own log; were it to hand out the aborted transaction's gtid again,
//! the participant's `DecisionReq` would reach a coordinator committing another transaction
//! of that name, and the aborted branch would commit with it. So every sequence number an
//! island uses lies below a *reservation* that its control file recorded durably before the
//! number was used, and each open of the island (a new *incarnation*) starts above the last
//! reservation, whatever its log holds.
//!
//! Why a reservation and not the incarnation folded into the gtid: a gtid is a `u64` of
//! which 16 bits name the home island, so 48 bits are left for the sequence, and at
//! 10 M transactions/s one island uses 2^48 (2.8e14) in 326 days: the sequence alone nearly
//! fills them within a year, with no bit to spare for an incarnation that must never wrap.
//! A reservation costs no bit: a restart wastes at most what was reserved and unused.
//!
//! [`SeqDraw`] is one drawer's view (a worker's, in the executor; an island's, in the
//! simulator): it hands out numbers below the reservation it last saw, with one compare and
//! one add per number, and says when to ask for more. The glue keeps the reservation
//! durable (the wal's control file) and asks for more off the drawer's path, half a
//! reservation ahead of need, so in steady state a drawer never waits for it.

/// Sequence numbers reserved per request, per drawer; a restart wastes at most this many
/// (plus what was asked for and not yet used).
pub const GTID_RESERVE: u64 = 1 << 20;

/// What [`SeqDraw::renew`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Renewal {
    /// Ask the glue to make the reservation reach at least this (exclusive) bound.
    pub ask: Option<u64>,
    /// A number can be drawn now; otherwise the drawer waits for the reservation to grow.
    pub ready: bool,
}

/// A drawer of sequence numbers below a durable reservation. See the module's doc.
///
/// Invariant: every number [`SeqDraw::take`] returned is below the largest `limit` given to
/// [`SeqDraw::renew`], and numbers are returned in increasing order.
#[derive(Clone, Debug)]
pub struct SeqDraw {
    next: u64,
    /// The reservation as last seen: numbers below it are durable reservations.
    limit: u64,
    /// `take` draws without looking further while `next` is below this (at most `limit`).
    check_at: u64,
    /// How far ahead of `next` the reservation is kept.
    chunk: u64,
}

impl SeqDraw {
    /// A drawer that starts at `start` and has seen no reservation yet (the first
    /// [`SeqDraw::take`] returns `None`, and [`SeqDraw::renew`] then says what to do).
    pub fn new(start: u64, chunk: u64) -> SeqDraw {
        assert!(
            chunk >= 2,
            "a reservation chunk of {chunk} numbers is too small"
        );
        SeqDraw {
            next: start,
            limit: 0,
            check_at: 0,
            chunk,
        }
    }

    /// Draws above `seq` from now on (recovery found `seq` in a log).
    pub fn skip_past(&mut self, seq: u64) {
        self.next = self.next.max(seq.saturating_add(1));
        self.check_at = 0;
    }

    /// The next number, or `None` if the drawer must call [`SeqDraw::renew`] first. The
    /// cost on the transaction path: one compare and one add.
    #[inline]
    pub fn take(&mut self) -> Option<u64> {
        if self.next >= self.check_at {
            return None;
        }
        let s = self.next;
        self.next += 1;
        Some(s)
    }

    /// The number the next [`SeqDraw::take`] returns.
    pub fn peek(&self) -> u64 {
        self.next
    }

    /// With the reservation durable up to `limit` (exclusive): whether to ask for more (half
    /// a chunk before the draw reaches it) and whether a number can be drawn now.
    pub fn renew(&mut self, limit: u64) -> Renewal {
        self.limit = self.limit.max(limit);
        let low = self.limit.saturating_sub(self.next) <= self.chunk / 2;
        let ask = low.then(|| self.next.saturating_add(self.chunk));
        // Look again at the half-chunk mark, or, once more is asked for, at the limit
        // (by then the glue has usually made the new reservation durable).
        self.check_at = if low {
            self.limit
        } else {
            self.limit - self.chunk / 2
        };
        Renewal {
            ask,
            ready: self.next < self.limit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_stay_below_the_reservation_and_ask_half_a_chunk_ahead() {
        let mut d = SeqDraw::new(1, 8);
        assert_eq!(d.take(), None, "nothing reserved yet");
        assert_eq!(
            d.renew(9),
            Renewal {
                ask: None,
                ready: true
            }
        );
        for want in 1..=4 {
            assert_eq!(d.take(), Some(want));
        }
        // 5 left of 9: within half a chunk, ask for 5 + 8.
        assert_eq!(d.take(), None);
        assert_eq!(
            d.renew(9),
            Renewal {
                ask: Some(13),
                ready: true
            }
        );
        for want in 5..=8 {
            assert_eq!(d.take(), Some(want));
        }
        // The reservation did not grow: nothing above it is handed out.
        assert_eq!(d.take(), None);
        let r = d.renew(9);
        assert!(!r.ready && r.ask == Some(17), "{r:?}");
        assert_eq!(d.take(), None);
        // It grew: drawing goes on.
        assert!(d.renew(17).ready);
        assert_eq!(d.take(), Some(9));
    }

    #[test]
    fn a_skip_past_a_logged_number_is_honoured_at_once() {
        let mut d = SeqDraw::new(1, 8);
        d.renew(100);
        assert_eq!(d.take(), Some(1));
        d.skip_past(40);
        assert_eq!(d.take(), None, "a skip makes the drawer look again");
        assert!(d.renew(100).ready);
        assert_eq!(d.take(), Some(41));
        d.skip_past(200);
        assert_eq!(d.take(), None);
        let r = d.renew(100);
        assert!(!r.ready && r.ask == Some(201 + 8), "{r:?}");
    }
}
