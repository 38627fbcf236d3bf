//! YCSB-style transactions over one table of `rows` rows.
//!
//! A transaction makes `ops` requests; each is a read (with probability
//! `read_pct`) or a read-modify-write of one row, its key drawn from a Zipfian
//! distribution with skew θ (θ = 0 is uniform). The two reference
//! configurations:
//! - DBx1000: 10,485,760 rows of 100 bytes, 16 requests per transaction, 90% reads, θ = 0.6;
//! - Silo: 10,000,000 rows, 1 request per transaction, 80% reads / 20% writes, uniform.
//!
//! On several islands (the keys split evenly over them, as the benchmark's
//! router splits them), keys are by default drawn from the whole table, so
//! a transaction is distributed whenever one of its keys is another
//! island's. With [`Homes`] (`--multisite PCT`), each worker has a home
//! island, as in the microbenchmark and in H-Store's partitioned YCSB: a
//! transaction draws every key from its home island's keys, except PCT% of
//! them, which touch exactly one other island (chosen uniformly): their
//! first key is on the home island, their second on the other, and each
//! further key on either with equal chance (a transaction of one request
//! reads or writes the other island's key alone). Keys are Zipfian within
//! their island's range.
//!
//! Invariants, checked by [`check`] (for `islands check`): every key of each island's
//! range is present, and each row's check word is [`crate::row_check`] of its key and its
//! counter `f0` (loaded as the key, incremented by each read-modify-write, which writes
//! both).

use std::collections::BTreeMap;

use islands::deploy::EvenSplit;
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
    homed: Option<Homed>,
}

/// Home islands of the workers and the share of transactions that leave
/// theirs (see the module documentation).
#[derive(Clone, Debug)]
pub struct Homes {
    /// Islands the keys are split over, evenly ([`EvenSplit`]).
    pub islands: u32,
    /// Percentage of transactions that touch one other island's keys.
    pub multisite_pct: u32,
    /// Home island of each worker, by the worker number the driver gives
    /// [`Workload::next`].
    pub of_worker: Vec<u32>,
}

/// [`Homes`], ready to draw from.
struct Homed {
    split: EvenSplit,
    /// Keys within each island's range.
    zipfs: Vec<Zipf>,
    multisite_pct: u32,
    of_worker: Vec<u32>,
}

/// Transaction types of a homed run.
pub const LOCAL: usize = 0;
pub const MULTISITE: usize = 1;

impl Ycsb {
    /// Keys drawn from the whole table.
    pub fn new(cfg: YcsbConfig) -> Result<Ycsb, Error> {
        cfg.check()?;
        let zipf = Zipf::new(cfg.rows, cfg.theta).map_err(Error::Config)?;
        Ok(Ycsb {
            cfg,
            zipf,
            homed: None,
        })
    }

    /// Keys drawn from each worker's home island, `homes.multisite_pct`%
    /// of transactions touching one other island.
    pub fn homed(cfg: YcsbConfig, homes: Homes) -> Result<Ycsb, Error> {
        let mut y = Ycsb::new(cfg)?;
        if homes.multisite_pct > 100 {
            return Err(Error::Config(format!(
                "--multisite {} is more than 100 (percent)",
                homes.multisite_pct
            )));
        }
        let split = EvenSplit::new(y.cfg.rows, homes.islands).ok_or_else(|| {
            Error::Config(format!(
                "{} rows cannot be split over {} islands",
                y.cfg.rows, homes.islands
            ))
        })?;
        if homes.of_worker.is_empty() {
            return Err(Error::Config("no worker has a home island".into()));
        }
        if let Some(h) = homes.of_worker.iter().find(|&&h| h >= homes.islands) {
            return Err(Error::Config(format!(
                "home island {h} does not exist ({} islands)",
                homes.islands
            )));
        }
        let zipfs = (0..homes.islands)
            .map(|i| {
                let r = split.range(i);
                Zipf::new(r.end - r.start, y.cfg.theta).map_err(Error::Config)
            })
            .collect::<Result<_, _>>()?;
        y.homed = Some(Homed {
            split,
            zipfs,
            multisite_pct: homes.multisite_pct,
            of_worker: homes.of_worker,
        });
        Ok(y)
    }
}

impl Homed {
    #[inline]
    fn key(&self, island: u32, rng: &mut FastRng) -> u64 {
        self.split.range(island).start + self.zipfs[island as usize].sample(rng)
    }

    /// Fills `ops` for a transaction of `worker`; returns its type.
    #[inline]
    fn next(
        &self,
        worker: usize,
        read_pct: u32,
        rng: &mut FastRng,
        ops: &mut [(u64, bool)],
    ) -> usize {
        let home = self.of_worker[worker % self.of_worker.len()];
        let islands = self.split.parts();
        let multisite = islands > 1 && self.multisite_pct > 0 && rng.percent(self.multisite_pct);
        if !multisite {
            for op in ops.iter_mut() {
                *op = (self.key(home, rng), !rng.percent(read_pct));
            }
            return LOCAL;
        }
        let other = rng.below(u64::from(islands - 1)) as u32;
        let other = if other >= home { other + 1 } else { other };
        let alone = ops.len() == 1;
        for (i, op) in ops.iter_mut().enumerate() {
            let island = match i {
                0 if alone => other,
                0 => home,
                1 => other,
                _ if rng.percent(50) => home,
                _ => other,
            };
            *op = (self.key(island, rng), !rng.percent(read_pct));
        }
        MULTISITE
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
        if self.homed.is_some() {
            vec!["local", "multisite"]
        } else {
            vec!["ycsb"]
        }
    }

    #[inline]
    fn next(&self, worker: usize, rng: &mut FastRng, req: &mut YcsbReq) -> usize {
        req.n = self.cfg.ops;
        if let Some(h) = &self.homed {
            return h.next(worker, self.cfg.read_pct, rng, &mut req.ops[..self.cfg.ops]);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(ops: usize) -> YcsbConfig {
        YcsbConfig {
            rows: 1000,
            ops,
            theta: 0.5,
            ..YcsbConfig::silo()
        }
    }

    fn homes(pct: u32) -> Homes {
        Homes {
            islands: 4,
            multisite_pct: pct,
            of_worker: vec![0, 1, 2, 3],
        }
    }

    /// The islands (of 4, 250 keys each) of each of `n` transactions of
    /// worker `w`, with their types.
    fn draws(y: &Ycsb, w: usize, n: usize) -> Vec<(usize, Vec<u64>)> {
        let mut rng = FastRng::new(42);
        let mut req = YcsbReq::default();
        (0..n)
            .map(|_| {
                let ty = y.next(w, &mut rng, &mut req);
                (ty, req.ops[..req.n].iter().map(|&(k, _)| k / 250).collect())
            })
            .collect()
    }

    #[test]
    fn at_zero_percent_every_key_is_on_the_home_island() {
        let y = Ycsb::homed(cfg(16), homes(0)).unwrap();
        for w in 0..4 {
            for (ty, islands) in draws(&y, w, 2_000) {
                assert_eq!(ty, LOCAL);
                assert!(
                    islands.iter().all(|&i| i == w as u64),
                    "worker {w}: {islands:?}"
                );
            }
        }
    }

    #[test]
    fn pct_of_transactions_touch_exactly_one_other_island_chosen_uniformly() {
        let y = Ycsb::homed(cfg(8), homes(20)).unwrap();
        let n = 20_000;
        let mut multi = 0;
        let mut others = [0u32; 4];
        for (ty, islands) in draws(&y, 2, n) {
            let mut set = islands.clone();
            set.sort_unstable();
            set.dedup();
            if ty == LOCAL {
                assert_eq!(set, vec![2], "{islands:?}");
                continue;
            }
            multi += 1;
            assert_eq!(set.len(), 2, "home and one other: {islands:?}");
            assert_eq!(islands[0], 2, "the first key is the home island's");
            assert_ne!(islands[1], 2, "the second is the other's");
            others[islands[1] as usize] += 1;
        }
        let share = f64::from(multi) / n as f64;
        assert!((0.18..0.22).contains(&share), "{share} multisite");
        assert_eq!(others[2], 0);
        for i in [0, 1, 3] {
            let s = f64::from(others[i]) / f64::from(multi);
            assert!(
                (0.28..0.39).contains(&s),
                "island {i}: {s} of the multisite"
            );
        }
    }

    #[test]
    fn a_one_request_multisite_transaction_touches_the_other_island_only() {
        let y = Ycsb::homed(cfg(1), homes(100)).unwrap();
        for (ty, islands) in draws(&y, 1, 2_000) {
            assert_eq!(ty, MULTISITE);
            assert_ne!(islands[0], 1);
        }
    }

    #[test]
    fn without_homes_keys_come_from_the_whole_table() {
        let y = Ycsb::new(cfg(16)).unwrap();
        let spread = draws(&y, 0, 1_000)
            .iter()
            .filter(|(_, i)| i.iter().any(|&x| x != i[0]))
            .count();
        assert!(spread > 900, "{spread} of 1000 transactions cross islands");
    }

    #[test]
    fn bad_homes_are_refused() {
        let mut h = homes(101);
        assert!(Ycsb::homed(cfg(1), h.clone()).is_err());
        h.multisite_pct = 10;
        h.of_worker = vec![4];
        let e = Ycsb::homed(cfg(1), h.clone()).err().unwrap();
        assert!(e.to_string().contains("home island 4"), "{e}");
        h.of_worker.clear();
        assert!(Ycsb::homed(cfg(1), h.clone()).is_err());
        h.of_worker = vec![0];
        h.islands = 2000;
        assert!(Ycsb::homed(cfg(1), h).is_err(), "more islands than rows");
    }
}
