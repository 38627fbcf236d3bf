//! YCSB-style transactions over one table of `rows` rows.
//!
//! A transaction makes `ops` requests; each is a read (with probability
//! `read_pct`) or a read-modify-write of one row, its key drawn from a Zipfian
//! distribution with skew θ (θ = 0 is uniform). The two reference
//! configurations:
//! - DBx1000: 10,485,760 rows of 100 bytes, 16 requests per transaction, 90% reads, θ = 0.6;
//! - Silo: 10,000,000 rows, 1 request per transaction, 80% reads / 20% writes, uniform.
//!
//! Invariants, checked by [`check`] (for `islands check`): every key of each island's
//! range is present, and each row's check word is [`crate::row_check`] of its key and its
//! counter `f0` (loaded as the key, incremented by each read-modify-write, which writes
//! both).

use std::collections::BTreeMap;

use islands::island::Island;
use islands::proc::rng::FastRng;
use islands::proc::zipf::Zipf;
use islands::proc::Workload;
use islands::storage::{Col, ColType, Prefetch, PrimaryKind, TableDef};
use islands::txn::Txn;
use islands::{Abort, Error};

use crate::{check_rows, LoadProgress};

pub const TABLE: u16 = 0;
const F0: Col = Col(0);
const CHECK: Col = Col(1);
const PAYLOAD: Col = Col(2);

/// One YCSB request on `tx` (in an `async` body returning `Result<_, Abort>`):
/// read row `key`, or read it for update and bump its counter, keeping its
/// check word. A macro, not an `async fn`, so that [`Ycsb::run`]'s loop awaits
/// the engine's futures directly instead of a nested one per request.
macro_rules! ycsb_request {
    ($tx:expr, $key:expr, $write:expr) => {{
        let (key, write) = ($key, $write);
        if write {
            let h = $tx
                .get_for_update(TABLE, key)
                .await?
                .ok_or(Abort::User("missing key"))?;
            let mut row = $tx.row_mut(h);
            let v = row.add_u64(F0, 1)?;
            row.set_u64(CHECK, crate::row_check(key, v));
        } else {
            let h = $tx
                .get(TABLE, key)
                .await?
                .ok_or(Abort::User("missing key"))?;
            std::hint::black_box($tx.row(h).u64(F0));
        }
    }};
}

/// Most requests one transaction may make.
pub const MAX_OPS: usize = 64;

#[derive(Clone, Debug)]
pub struct YcsbConfig {
    pub rows: u64,
    pub row_bytes: usize,
    pub ops: usize,
    pub read_pct: u32,
    pub theta: f64,
    /// Issue prefetch hints for all keys of a transaction before reading them.
    pub prefetch: bool,
}

impl YcsbConfig {
    pub fn dbx1000() -> YcsbConfig {
        YcsbConfig {
            rows: 10_485_760,
            row_bytes: 100,
            ops: 16,
            read_pct: 90,
            theta: 0.6,
            prefetch: true,
        }
    }

    pub fn silo() -> YcsbConfig {
        YcsbConfig {
            rows: 10_000_000,
            row_bytes: 100,
            ops: 1,
            read_pct: 80,
            theta: 0.0,
            prefetch: true,
        }
    }

    pub fn preset(name: &str) -> Result<YcsbConfig, Error> {
        match name {
            "dbx1000" => Ok(Self::dbx1000()),
            "silo" => Ok(Self::silo()),
            _ => Err(Error::Config(format!(
                "unknown YCSB preset '{name}' (valid: dbx1000, silo)"
            ))),
        }
    }

    pub fn check(&self) -> Result<(), Error> {
        check_rows(self.rows)?;
        if self.row_bytes < 16 || self.row_bytes > 4096 {
            return Err(Error::Config(format!(
                "--row-bytes {} is outside 16..=4096",
                self.row_bytes
            )));
        }
        if self.ops == 0 || self.ops > MAX_OPS {
            return Err(Error::Config(format!(
                "--ops {} is outside 1..={MAX_OPS}",
                self.ops
            )));
        }
        if self.read_pct > 100 {
            return Err(Error::Config(format!(
                "--read-pct {} is more than 100",
                self.read_pct
            )));
        }
        Zipf::new(self.rows, self.theta).map_err(Error::Config)?;
        Ok(())
    }

    pub fn parameters(&self) -> BTreeMap<String, String> {
        [
            ("rows", self.rows.to_string()),
            ("row_bytes", self.row_bytes.to_string()),
            ("ops_per_txn", self.ops.to_string()),
            ("read_pct", self.read_pct.to_string()),
            ("theta", self.theta.to_string()),
            ("prefetch", self.prefetch.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

/// The table definition, sized for `rows` rows (all of them, or one island's share).
pub fn tables(cfg: &YcsbConfig, rows: u64) -> Vec<TableDef> {
    let mut cols = vec![("f0", ColType::U64), ("check", ColType::U64)];
    if cfg.row_bytes > 16 {
        cols.push(("payload", ColType::Str((cfg.row_bytes - 16) as u16)));
    }
    vec![TableDef::new(
        "usertable",
        &cols,
        rows.max(1),
        PrimaryKind::Hash,
    )]
}

/// Loads the rows with keys in `keys` (0..rows for a single island).
pub fn load(
    island: &Island,
    cfg: &YcsbConfig,
    keys: std::ops::Range<u64>,
    quiet: bool,
) -> Result<(), Error> {
    let mut l = island.loader()?;
    let mut img = Vec::new();
    let mut progress = LoadProgress::new("usertable", keys.end - keys.start, quiet);
    let payload = vec![b'x'; cfg.row_bytes.saturating_sub(16)];
    for (i, k) in keys.enumerate() {
        l.put_with(TABLE, k, &mut img, |r| {
            r.set_u64(F0, k);
            r.set_u64(CHECK, crate::row_check(k, k));
            if !payload.is_empty() {
                r.set_str(PAYLOAD, &payload);
            }
        })?;
        progress.tick(i as u64 + 1);
    }
    Ok(())
}

pub struct Ycsb {
    cfg: YcsbConfig,
    zipf: Zipf,
}

impl Ycsb {
    pub fn new(cfg: YcsbConfig) -> Result<Ycsb, Error> {
        cfg.check()?;
        let zipf = Zipf::new(cfg.rows, cfg.theta).map_err(Error::Config)?;
        Ok(Ycsb { cfg, zipf })
    }
}

/// One transaction's requests: `(key, write)` pairs.
pub struct YcsbReq {
    n: usize,
    ops: [(u64, bool); MAX_OPS],
}

impl Default for YcsbReq {
    fn default() -> Self {
        YcsbReq {
            n: 0,
            ops: [(0, false); MAX_OPS],
        }
    }
}

impl Workload for Ycsb {
    type Req = YcsbReq;

    fn types(&self) -> Vec<&'static str> {
        vec!["ycsb"]
    }

    #[inline]
    fn next(&self, _worker: usize, rng: &mut FastRng, req: &mut YcsbReq) -> usize {
        req.n = self.cfg.ops;
        for op in req.ops[..self.cfg.ops].iter_mut() {
            *op = (self.zipf.sample(rng), !rng.percent(self.cfg.read_pct));
        }
        0
    }

    async fn run<'a>(&'a self, tx: &'a mut Txn, req: &'a YcsbReq) -> Result<(), Abort> {
        let ops = &req.ops[..req.n];
        if self.cfg.prefetch && ops.len() > 1 {
            for &(key, _) in ops {
                tx.prefetch(TABLE, key, Prefetch::Index);
            }
            for &(key, _) in ops {
                tx.prefetch(TABLE, key, Prefetch::Row);
            }
        }
        for &(key, write) in ops {
            ycsb_request!(tx, key, write);
        }
        Ok(())
    }
}

/// One YCSB request as a future of its own (for callers outside the
/// benchmark's loop, such as the calls command's procedure).
pub async fn op(tx: &mut Txn, key: u64, write: bool) -> Result<(), Abort> {
    ycsb_request!(tx, key, write);
    Ok(())
}

/// Checks the invariants of the module documentation over `islands`, each with the key
/// range it holds; returns the violations found (a few, in words).
pub fn check(islands: &[(&Island, std::ops::Range<u64>)]) -> Vec<String> {
    let mut out = Vec::new();
    for (island, keys) in islands {
        crate::check_key_range(
            "ycsb",
            island,
            TABLE,
            keys,
            |key, words| {
                // The counter and the check word are the row's first two words.
                let (f0, check) = (words[0], words[1]);
                let want = crate::row_check(key, f0);
                (check != want).then(|| {
                    format!("row {key} holds f0 {f0} with check word {check:#x}, not {want:#x}")
                })
            },
            &mut out,
        );
    }
    out.truncate(crate::VIOLATIONS_MAX);
    out
}
