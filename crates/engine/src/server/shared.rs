//! What every server thread and connection shares: the deployment's
//! client, the figures `SHOW` reports, the per-thread counters of the
//! procedures' calls, and the cancel keys of the connections.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use pgwire::messages::startup::SecretKey;

use crate::api::{CancelFlag, Catalog, Client, IslandsView, ProcDef};
use crate::deploy::Plan;
use crate::executor::Cluster;
use crate::island::Island;
use crate::threads::ThreadRegistry;

/// Counters of one procedure's calls through one server thread: only that
/// thread writes them.
#[derive(Default)]
pub(crate) struct ProcCounters {
    pub(crate) committed: AtomicU64,
    pub(crate) serialization: AtomicU64,
    pub(crate) rollbacks: AtomicU64,
    pub(crate) errors: AtomicU64,
}

/// What the handlers read: the deployment's client and what `SHOW` reports.
pub(crate) struct Shared {
    pub(crate) client: Client,
    /// The deployment's catalog: its tables for SQL and pg_catalog.
    pub(crate) catalog: Catalog,
    pub(crate) procs: Vec<ProcDef>,
    pub(crate) plan: Plan,
    pub(crate) islands: Vec<Island>,
    /// Every island of the deployment and the connections to other processes.
    pub(crate) view: IslandsView,
    pub(crate) cluster: Arc<Cluster>,
    /// Server thread `t`'s counters of procedure `i` at `t * procs + i`.
    pub(crate) counters: Vec<CachePadded<ProcCounters>>,
    /// The deployment's threads, the server's own among them.
    pub(crate) threads: ThreadRegistry,
    /// Connections open now, accepted in all, refused (too many).
    pub(crate) open: AtomicU64,
    pub(crate) accepted: AtomicU64,
    pub(crate) refused: AtomicU64,
    /// Connections each server thread has (refused ones until they close).
    pub(crate) per_thread: Vec<CachePadded<AtomicU64>>,
    /// The cancel key and flag of each logged-in connection, by process id
    /// (unique: one generator gives them all).
    pub(crate) cancels: Mutex<HashMap<i32, (SecretKey, CancelFlag)>>,
}

impl Shared {
    pub(crate) fn lookup(&self, name: &str) -> Option<usize> {
        self.procs.iter().position(|p| p.name() == name)
    }

    /// Procedure `i`'s counters summed over the server threads: committed,
    /// serialization failures, rollbacks, other errors.
    pub(crate) fn proc_totals(&self, i: usize) -> [u64; 4] {
        let mut t = [0; 4];
        for c in self
            .counters
            .iter()
            .skip(i)
            .step_by(self.procs.len().max(1))
        {
            t[0] += c.committed.load(Ordering::Relaxed);
            t[1] += c.serialization.load(Ordering::Relaxed);
            t[2] += c.rollbacks.load(Ordering::Relaxed);
            t[3] += c.errors.load(Ordering::Relaxed);
        }
        t
    }

    /// A cancel request: cancels the call in flight on connection `pid`
    /// if `key` is its key; anything else is ignored.
    pub(crate) fn cancel(&self, pid: i32, key: &SecretKey) {
        if let Some((k, flag)) = self.cancels.lock().get(&pid) {
            if k.eq_value(key) {
                flag.cancel();
            }
        }
    }
}

/// A connection's entry in [`Shared::cancels`], removed when it drops.
pub(crate) struct CancelKey {
    shared: Arc<Shared>,
    pid: i32,
}

impl CancelKey {
    pub(crate) fn register(
        shared: &Arc<Shared>,
        pid: i32,
        key: SecretKey,
        flag: &CancelFlag,
    ) -> CancelKey {
        shared.cancels.lock().insert(pid, (key, flag.clone()));
        CancelKey {
            shared: Arc::clone(shared),
            pid,
        }
    }
}

impl Drop for CancelKey {
    fn drop(&mut self) {
        self.shared.cancels.lock().remove(&self.pid);
    }
}
