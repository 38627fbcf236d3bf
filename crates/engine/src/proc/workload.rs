//! The procedure contract: what an executor runs. A [`Workload`] makes
//! requests (generated on the executor's own thread, or submitted by
//! applications through [`crate::api::Client`]) and runs each as a stored
//! procedure against a [`Txn`]; the executor tells it how each request ended
//! ([`Outcome`]). [`Both`] serves two sources of requests on the same
//! executors.

use std::future::Future;

use crate::proc::rng::FastRng;
use crate::txn::{LockWait, Txn};
use crate::{Abort, Error};

/// A workload an executor can run: it makes requests and executes them.
pub trait Workload: Send + Sync {
    /// A request, reused by each worker (so it should own its buffers).
    type Req: Default + Send;

    /// Names of the transaction types, in index order.
    fn types(&self) -> Vec<&'static str>;

    /// Fills `req` with the next request of worker `worker`; returns its type index.
    fn next(&self, worker: usize, rng: &mut FastRng, req: &mut Self::Req) -> usize;

    /// Runs one request as a stored procedure.
    fn run<'a>(
        &'a self,
        tx: &'a mut Txn,
        req: &'a Self::Req,
    ) -> impl Future<Output = Result<(), Abort>> + 'a;

    /// Called once for each request that committed, with the request its
    /// last attempt ran (a distributed commit once it is decided; before it
    /// is durable in `sync` mode). For checkers that keep what committed
    /// transactions saw; the default does nothing.
    fn committed(&self, worker: usize, req: &Self::Req) {
        let _ = (worker, req);
    }

    /// The next request of worker `worker`, if there is one to start now:
    /// calls submitted from outside come and go, while a benchmark's
    /// generator always has one. The default asks [`Workload::next`].
    /// The executor loop asks this, not [`Workload::next`].
    fn poll_next(&self, worker: usize, rng: &mut FastRng, req: &mut Self::Req) -> Option<usize> {
        Some(self.next(worker, rng, req))
    }

    /// The request's outcome is final: its commit is acknowledged (durable
    /// in `sync` mode), the procedure rolled it back, it was retried
    /// [`Workload::max_attempts`] times, or its procedure panicked. Called
    /// once per request, by the executor loop; the default does nothing.
    fn finished(&self, worker: usize, req: &mut Self::Req, outcome: Outcome) {
        let _ = (worker, req, outcome);
    }

    /// Attempts after which `req`, if it keeps aborting on conflicts, is
    /// given up ([`Outcome::GaveUp`]); `None` (the default) retries for ever.
    fn max_attempts(&self, req: &Self::Req) -> Option<u32> {
        let _ = req;
        None
    }

    /// Whether `req`'s procedure, if it panics or fails with an error, only
    /// fails its request ([`Outcome::Panicked`], [`Outcome::Failed`]) and the
    /// executor goes on; otherwise (the default) either stops the run. A
    /// failed log stops the run whatever this says.
    fn isolates_failures(&self, req: &Self::Req) -> bool {
        let _ = req;
        false
    }

    /// A round of worker `worker` found nothing to do: no request to start,
    /// nothing received, nothing ready. `waiting`: transactions of the
    /// worker are in flight, each waiting for something that rings the
    /// worker's bell when it comes (the log writer, a peer's reply, a
    /// client). A workload fed from outside may sleep here a while on the
    /// bell; the default returns at once.
    fn idle(&self, worker: usize, waiting: bool) {
        let _ = (worker, waiting);
    }

    /// A round of worker `worker` did some work (it received batches, or
    /// started, polled or finished a transaction) after rounds in which it
    /// called [`Workload::idle`]: a workload that counts idle rounds starts
    /// again from zero. Called once per such change; the default does
    /// nothing.
    fn busy_again(&self, worker: usize) {
        let _ = worker;
    }

    /// The next request of worker `worker` whose procedure may suspend for
    /// something other than the engine's operations (an interactive
    /// transaction waits for its client's next statement): it runs in a
    /// slot of its own, beside the executor's ordinary requests, whether
    /// the executor runs those inline or in slots, and it is never retried
    /// ([`Workload::max_attempts`] should say 1). The executor asks only
    /// while it has such a slot free. The default has none.
    fn poll_suspending(&self, worker: usize, req: &mut Self::Req) -> Option<usize> {
        let _ = (worker, req);
        None
    }

    /// After a poll of a suspending request's procedure returned
    /// `Pending`: what it waits for, if not a remote reply. Read once per
    /// suspension (it is taken). The default: nothing of the kind.
    fn suspended(&self, req: &Self::Req) -> Option<Suspend> {
        let _ = req;
        None
    }

    /// Whether a request suspended for [`Suspend::Client`] has what it
    /// waits for (the executor polls it again). Called once per round for
    /// each such request: it should be an atomic load.
    fn resumable(&self, req: &Self::Req) -> bool {
        let _ = req;
        true
    }
}

/// What a suspending request's procedure waits for ([`Workload::suspended`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Suspend {
    /// Its client's next statement: polled again once
    /// [`Workload::resumable`] says so.
    Client,
    /// A local row's lock held by another transaction: polled again once
    /// the row would let it pass, or after a short while (its procedure
    /// keeps its own deadline).
    Lock(LockWait),
}

/// Requests from two sources on every executor: `first` is asked for one
/// before `second` (calls submitted from outside, which come and go, before a
/// generator, which always has one). Each request keeps its source's
/// procedures, hooks and policies; the transaction types are `first`'s, then
/// `second`'s.
pub struct Both<A, B> {
    first: A,
    second: B,
    /// `first`'s number of transaction types.
    offset: usize,
}

/// A request of [`Both`]: one buffer per source, so that a worker whose
/// requests alternate between them reuses both.
#[derive(Default)]
pub struct BothReq<A, B> {
    first: A,
    second: B,
    /// The request is `second`'s.
    of_second: bool,
}

impl<A: Workload, B: Workload> Both<A, B> {
    pub fn new(first: A, second: B) -> Both<A, B> {
        let offset = first.types().len();
        Both {
            first,
            second,
            offset,
        }
    }

    pub fn first(&self) -> &A {
        &self.first
    }

    pub fn second(&self) -> &B {
        &self.second
    }
}

impl<A: Workload, B: Workload> Workload for Both<A, B> {
    type Req = BothReq<A::Req, B::Req>;

    fn types(&self) -> Vec<&'static str> {
        let mut t = self.first.types();
        t.extend(self.second.types());
        t
    }

    fn next(&self, worker: usize, rng: &mut FastRng, req: &mut Self::Req) -> usize {
        match self.poll_next(worker, rng, req) {
            Some(ty) => ty,
            None => {
                req.of_second = true;
                self.offset + self.second.next(worker, rng, &mut req.second)
            }
        }
    }

    fn poll_next(&self, worker: usize, rng: &mut FastRng, req: &mut Self::Req) -> Option<usize> {
        if let Some(ty) = self.first.poll_next(worker, rng, &mut req.first) {
            req.of_second = false;
            return Some(ty);
        }
        let ty = self.second.poll_next(worker, rng, &mut req.second)?;
        req.of_second = true;
        Some(self.offset + ty)
    }

    async fn run<'a>(&'a self, tx: &'a mut Txn, req: &'a Self::Req) -> Result<(), Abort> {
        if req.of_second {
            self.second.run(tx, &req.second).await
        } else {
            self.first.run(tx, &req.first).await
        }
    }

    fn committed(&self, worker: usize, req: &Self::Req) {
        if req.of_second {
            self.second.committed(worker, &req.second)
        } else {
            self.first.committed(worker, &req.first)
        }
    }

    fn finished(&self, worker: usize, req: &mut Self::Req, outcome: Outcome) {
        if req.of_second {
            self.second.finished(worker, &mut req.second, outcome)
        } else {
            self.first.finished(worker, &mut req.first, outcome)
        }
    }

    fn max_attempts(&self, req: &Self::Req) -> Option<u32> {
        if req.of_second {
            self.second.max_attempts(&req.second)
        } else {
            self.first.max_attempts(&req.first)
        }
    }

    fn isolates_failures(&self, req: &Self::Req) -> bool {
        if req.of_second {
            self.second.isolates_failures(&req.second)
        } else {
            self.first.isolates_failures(&req.first)
        }
    }

    fn idle(&self, worker: usize, waiting: bool) {
        self.first.idle(worker, waiting);
        self.second.idle(worker, waiting);
    }

    fn busy_again(&self, worker: usize) {
        self.first.busy_again(worker);
        self.second.busy_again(worker);
    }

    fn poll_suspending(&self, worker: usize, req: &mut Self::Req) -> Option<usize> {
        if let Some(ty) = self.first.poll_suspending(worker, &mut req.first) {
            req.of_second = false;
            return Some(ty);
        }
        let ty = self.second.poll_suspending(worker, &mut req.second)?;
        req.of_second = true;
        Some(self.offset + ty)
    }

    fn suspended(&self, req: &Self::Req) -> Option<Suspend> {
        if req.of_second {
            self.second.suspended(&req.second)
        } else {
            self.first.suspended(&req.first)
        }
    }

    fn resumable(&self, req: &Self::Req) -> bool {
        if req.of_second {
            self.second.resumable(&req.second)
        } else {
            self.first.resumable(&req.first)
        }
    }
}

/// How a request ended, as [`Workload::finished`] hears it.
#[derive(Debug)]
pub enum Outcome {
    /// Committed and acknowledged under the island's durability mode.
    Committed,
    /// The procedure rolled the transaction back ([`Abort::User`]).
    UserAbort(&'static str),
    /// Aborted on conflicts as many times as [`Workload::max_attempts`] allows.
    GaveUp {
        attempts: u32,
        last: crate::AbortReason,
    },
    /// The procedure panicked; the transaction was rolled back.
    Panicked(String),
    /// The procedure failed with an error ([`Abort::Failed`]); rolled back.
    Failed(Error),
}
