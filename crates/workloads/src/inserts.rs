//! The insert microbenchmark of Xi, Mishima and Yokota ("A Database System
//! Performance Study with Micro Benchmarks on a Many-core System"): every
//! client inserts records into a private table, one record per transaction.
//! There is no logical contention between clients, so what limits throughput
//! is what they share: the log (its buffer, its writer, the device's
//! bandwidth) and the allocator. On one island all clients share one log; one
//! island per client gives each its own log, the paper's multi-instance fix.
//! With the log off, what remains is the engine itself.
//!
//! What a check can know was acknowledged: a client inserts records 0, 1, 2, … of its
//! table one transaction after another, and each commit's record goes to its island's log
//! after the previous one's, so whatever a crash keeps of a client's inserts is a prefix
//! of them. [`check`] demands exactly that (keys `0..count`, each row's `seq` its key): a
//! hole is an insert that was durable (a later one is) and is lost. Whether the last
//! acknowledged insert survived only the client knows (the crash tests compare that).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use islands::proc::rng::FastRng;
use islands::proc::Workload;
use islands::storage::{Col, ColType, PrimaryKind, TableDef};
use islands::txn::Txn;
use islands::{Abort, AbortReason, Error};

const SEQ: Col = Col(0);
const PAYLOAD: Col = Col(1);

#[derive(Clone, Debug)]
pub struct InsertsConfig {
    /// Bytes of a record (an 8-byte sequence number and a payload).
    pub row_bytes: usize,
    /// Most records one client's table holds (memory is taken as rows come).
    pub rows_per_client: u64,
}

impl Default for InsertsConfig {
    fn default() -> Self {
        InsertsConfig {
            row_bytes: 100,
            rows_per_client: 1 << 26,
        }
    }
}

impl InsertsConfig {
    pub fn check(&self) -> Result<(), Error> {
        if self.row_bytes < 16 || self.row_bytes > 4096 {
            return Err(Error::Config(format!(
                "--row-bytes {} is outside 16..=4096",
                self.row_bytes
            )));
        }
        if self.rows_per_client == 0 || self.rows_per_client > 1 << 32 {
            return Err(Error::Config(format!(
                "--rows-per-client {} is outside 1..=2^32",
                self.rows_per_client
            )));
        }
        Ok(())
    }

    pub fn parameters(&self) -> BTreeMap<String, String> {
        [
            ("row_bytes", self.row_bytes.to_string()),
            ("rows_per_client", self.rows_per_client.to_string()),
            ("tables", "one private table per client".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

/// Checks every client table of `island` (see the module documentation); returns the
/// violations found (a few, in words).
pub fn check(island: &islands::island::Island) -> Vec<String> {
    let mut out = Vec::new();
    for t in island.catalog().tables.iter() {
        let mut count = 0u64;
        let mut max = None;
        let mut bad = None;
        t.for_each_row(|key, _, words| {
            count += 1;
            max = max.max(Some(key));
            // The sequence number is the row's first word.
            if words[0] != key && bad.is_none() {
                bad = Some((key, words[0]));
            }
        });
        let name = &island.config().name;
        if let Some(max) = max {
            if max + 1 != count {
                out.push(format!(
                    "inserts: {name}: table {} holds {count} records with keys up to {max}: \
                     {} insert(s) before the last one present are missing",
                    t.name,
                    max + 1 - count
                ));
            }
        }
        if let Some((key, seq)) = bad {
            out.push(format!(
                "inserts: {name}: table {} record {key} holds sequence number {seq}",
                t.name
            ));
        }
    }
    out.truncate(crate::VIOLATIONS_MAX);
    out
}

/// The private tables of an island with `clients` clients: table `j` is its
/// `j`-th client's, empty at start, ordered by the client's sequence number.
pub fn tables(cfg: &InsertsConfig, clients: usize) -> Vec<TableDef> {
    (0..clients.max(1))
        .map(|j| {
            TableDef::new(
                &format!("client_{j}"),
                &[
                    ("seq", ColType::U64),
                    ("payload", ColType::Str((cfg.row_bytes - 8) as u16)),
                ],
                cfg.rows_per_client,
                PrimaryKind::Ordered,
            )
        })
        .collect()
}

pub struct Inserts {
    pub cfg: InsertsConfig,
    /// Per client (global worker index): its table on its island.
    table_of: Vec<u16>,
    /// Per client: the next sequence number. Only its own worker touches it;
    /// padded so that clients do not share a cache line.
    next_seq: Vec<CachePadded<AtomicU64>>,
    payload: Vec<u8>,
}

impl Inserts {
    /// `table_of[w]`: the private table of worker `w` (its rank on its island).
    pub fn new(cfg: InsertsConfig, table_of: Vec<u16>) -> Result<Inserts, Error> {
        cfg.check()?;
        let payload = vec![b'x'; cfg.row_bytes - 8];
        let next_seq = table_of
            .iter()
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect();
        Ok(Inserts {
            cfg,
            table_of,
            next_seq,
            payload,
        })
    }
}

impl Inserts {
    /// Worker `worker`'s next insert is record `seq` of its table (a run that goes on
    /// over a recovered database starts after the records it holds).
    pub fn start_at(&self, worker: usize, seq: u64) {
        self.next_seq[worker].store(seq, Ordering::Relaxed);
    }
}

#[derive(Default)]
pub struct InsertReq {
    pub table: u16,
    pub seq: u64,
}

impl Workload for Inserts {
    type Req = InsertReq;

    fn types(&self) -> Vec<&'static str> {
        vec!["insert"]
    }

    fn next(&self, worker: usize, _: &mut FastRng, req: &mut InsertReq) -> usize {
        req.table = self.table_of[worker];
        // Taken once per request, retries reuse it: a key is never skipped
        // twice nor inserted twice.
        req.seq = self.next_seq[worker].fetch_add(1, Ordering::Relaxed);
        0
    }

    async fn run<'a>(&'a self, tx: &'a mut Txn, req: &'a InsertReq) -> Result<(), Abort> {
        if req.seq >= self.cfg.rows_per_client {
            return Err(Abort::Failed(Error::Config(format!(
                "a client's table is full ({} records): raise --rows-per-client or shorten the run",
                self.cfg.rows_per_client
            ))));
        }
        let h = tx
            .insert(req.table, req.seq)
            .await?
            .ok_or(Abort::Conflict(AbortReason::DuplicateKey))?;
        let mut r = tx.row_mut(h);
        r.set_u64(SEQ, req.seq);
        r.set_str(PAYLOAD, &self.payload);
        Ok(())
    }
}
