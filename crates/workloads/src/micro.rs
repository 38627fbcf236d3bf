//! The paper's partition-sensitive microbenchmark (Porobic et al., Section 5.2).
//!
//! One table of `rows` rows (240,000 in the paper), range-partitioned into
//! `sites`. Every worker has a home site. A *local* transaction reads or
//! updates `n` rows of its home site; a *multisite* transaction touches one row
//! of its home site and `n - 1` rows chosen from the whole data range. Keys are
//! uniform within their range, or Zipfian with skew θ.
//!
//! Invariants, checked by [`check`] (for `islands check`): every key of each island's
//! range is present; each row's check word is [`crate::row_check`] of its key and value
//! (an update writes both); and the values sum to a multiple of `n`, since a committed
//! update transaction adds one to each of its `n` keys (a key drawn twice gets two).

use std::collections::BTreeMap;

use islands::deploy::EvenSplit;
use islands::island::Island;
use islands::proc::rng::FastRng;
use islands::proc::zipf::Zipf;
use islands::proc::Workload;
use islands::storage::{Col, ColType, PrimaryKind, RowMut, TableDef};
use islands::txn::Txn;
use islands::{Abort, Error};

use crate::{check_rows, LoadProgress};

pub const TABLE: u16 = 0;
pub(crate) const VAL: Col = Col(0);
const CHECK: Col = Col(1);
const PAYLOAD: Col = Col(2);

/// Most rows one transaction may touch (the paper's Fig. 10 goes to 100).
pub const MAX_ROWS_PER_TXN: usize = 1000;

#[derive(Clone, Debug)]
pub struct MicroConfig {
    pub rows: u64,
    pub row_bytes: usize,
    pub sites: u64,
    /// Rows per transaction.
    pub n: usize,
    pub update: bool,
    pub multisite_pct: u32,
    pub theta: f64,
}

impl Default for MicroConfig {
    fn default() -> Self {
        MicroConfig {
            rows: 240_000,
            row_bytes: 256,
            sites: 1,
            n: 10,
            update: false,
            multisite_pct: 0,
            theta: 0.0,
        }
    }
}

impl MicroConfig {
    pub fn check(&self) -> Result<(), Error> {
        check_rows(self.rows)?;
        if self.sites == 0 || self.sites > self.rows || self.sites > u32::MAX as u64 {
            return Err(Error::Config(format!(
                "--sites {} must be between 1 and --rows ({})",
                self.sites, self.rows
            )));
        }
        if self.n == 0 || self.n > MAX_ROWS_PER_TXN {
            return Err(Error::Config(format!(
                "--n {} (rows per transaction) is outside 1..={MAX_ROWS_PER_TXN}",
                self.n
            )));
        }
        if self.row_bytes < 16 || self.row_bytes > 4096 {
            return Err(Error::Config(format!(
                "--row-bytes {} is outside 16..=4096",
                self.row_bytes
            )));
        }
        if self.multisite_pct > 100 {
            return Err(Error::Config(format!(
                "--multisite {} is more than 100 (percent)",
                self.multisite_pct
            )));
        }
        Zipf::new(self.rows, self.theta).map_err(Error::Config)?;
        Ok(())
    }

    pub fn parameters(&self) -> BTreeMap<String, String> {
        [
            ("rows", self.rows.to_string()),
            ("row_bytes", self.row_bytes.to_string()),
            ("sites", self.sites.to_string()),
            ("rows_per_txn", self.n.to_string()),
            (
                "mode",
                if self.update { "update" } else { "read-only" }.to_string(),
            ),
            ("multisite_pct", self.multisite_pct.to_string()),
            ("theta", self.theta.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// The key range `[lo, hi)` of a site: sites split the keys evenly
    /// (sizes differ by at most one), as deployments split sites over islands.
    pub fn site_range(&self, site: u64) -> (u64, u64) {
        let r = self.split().range(site as u32);
        (r.start, r.end)
    }

    /// The site that holds `key`.
    pub fn site_of(&self, key: u64) -> u64 {
        self.split().part_of(key) as u64
    }

    fn split(&self) -> EvenSplit {
        EvenSplit::new(self.rows, self.sites as u32).expect("checked: 1 <= sites <= rows")
    }

    /// The keys of a range of sites (what one island holds).
    pub fn keys_of_sites(&self, sites: std::ops::Range<u64>) -> std::ops::Range<u64> {
        self.site_range(sites.start).0..self.site_range(sites.end - 1).1
    }
}

/// The table, sized for `rows` rows (all of them, or one island's share).
pub fn tables(cfg: &MicroConfig, rows: u64) -> Vec<TableDef> {
    let mut cols = vec![("val", ColType::I64), ("check", ColType::U64)];
    if cfg.row_bytes > 16 {
        cols.push(("payload", ColType::Str((cfg.row_bytes - 16) as u16)));
    }
    vec![TableDef::new(
        "micro",
        &cols,
        rows.max(1),
        PrimaryKind::Hash,
    )]
}

/// The payload column's bytes (empty: rows of 16 bytes have none).
pub(crate) fn payload(cfg: &MicroConfig) -> Vec<u8> {
    vec![b'p'; cfg.row_bytes.saturating_sub(16)]
}

/// Row `key` as the load leaves it: value 0.
pub(crate) fn initial_row(r: &mut RowMut, key: u64, payload: &[u8]) {
    set_val(r, key, 0);
    if !payload.is_empty() {
        r.set_str(PAYLOAD, payload);
    }
}

/// Sets row `key`'s value to `v`, and its check word with it.
#[inline]
pub(crate) fn set_val(r: &mut RowMut, key: u64, v: i64) {
    r.set_i64(VAL, v);
    r.set_u64(CHECK, crate::row_check(key, v as u64));
}

/// Adds one to row `key`'s value, and sets its check word with it; returns
/// the new value. Overflow is an error, and the row is left as it was.
#[inline]
pub(crate) fn bump_val(r: &mut RowMut, key: u64) -> Result<i64, Error> {
    let v = r.add_i64(VAL, 1)?;
    r.set_u64(CHECK, crate::row_check(key, v as u64));
    Ok(v)
}

/// Loads the rows of `sites` (all of them for a single island).
pub fn load(
    island: &Island,
    cfg: &MicroConfig,
    keys: std::ops::Range<u64>,
    quiet: bool,
) -> Result<(), Error> {
    let mut l = island.loader()?;
    let mut img = Vec::new();
    let mut progress = LoadProgress::new("micro", keys.end - keys.start, quiet);
    let payload = payload(cfg);
    for (i, k) in keys.enumerate() {
        l.put_with(TABLE, k, &mut img, |r| initial_row(r, k, &payload))?;
        progress.tick(i as u64 + 1);
    }
    Ok(())
}

pub struct Micro {
    pub cfg: MicroConfig,
    /// Skew within one site, and over the whole range (multisite picks).
    site_zipf: Vec<Zipf>,
    all_zipf: Zipf,
    /// Home site of each worker.
    homes: Vec<u64>,
}

impl Micro {
    /// `homes[w]` is worker `w`'s home site.
    pub fn new(cfg: MicroConfig, homes: Vec<u64>) -> Result<Micro, Error> {
        cfg.check()?;
        if let Some(h) = homes.iter().find(|&&h| h >= cfg.sites) {
            return Err(Error::Config(format!(
                "home site {h} does not exist ({} sites)",
                cfg.sites
            )));
        }
        let site_zipf = (0..cfg.sites)
            .map(|s| {
                let (lo, hi) = cfg.site_range(s);
                Zipf::new(hi - lo, cfg.theta).map_err(Error::Config)
            })
            .collect::<Result<_, _>>()?;
        let all_zipf = Zipf::new(cfg.rows, cfg.theta).map_err(Error::Config)?;
        Ok(Micro {
            cfg,
            site_zipf,
            all_zipf,
            homes,
        })
    }
}

/// One transaction's keys; `multisite` says how it was chosen.
#[derive(Default)]
pub struct MicroReq {
    pub keys: Vec<u64>,
    pub multisite: bool,
}

pub const LOCAL: usize = 0;
pub const MULTISITE: usize = 1;

impl Workload for Micro {
    type Req = MicroReq;

    fn types(&self) -> Vec<&'static str> {
        vec!["local", "multisite"]
    }

    fn next(&self, worker: usize, rng: &mut FastRng, req: &mut MicroReq) -> usize {
        let home = self.homes[worker % self.homes.len()];
        let (lo, _) = self.cfg.site_range(home);
        req.keys.clear();
        req.multisite = self.cfg.multisite_pct > 0 && rng.percent(self.cfg.multisite_pct);
        let z = &self.site_zipf[home as usize];
        if req.multisite {
            req.keys.push(lo + z.sample(rng));
            for _ in 1..self.cfg.n {
                req.keys.push(self.all_zipf.sample(rng));
            }
            MULTISITE
        } else {
            for _ in 0..self.cfg.n {
                req.keys.push(lo + z.sample(rng));
            }
            LOCAL
        }
    }

    async fn run<'a>(&'a self, tx: &'a mut Txn, req: &'a MicroReq) -> Result<(), Abort> {
        // One batched read: on several islands, one request per island holds
        // all its keys (the local ones are read in place).
        tx.get_many(TABLE, &req.keys, self.cfg.update).await?;
        for i in 0..req.keys.len() {
            let h = tx.many_row(i).ok_or(Abort::User("missing key"))?;
            if self.cfg.update {
                bump_val(&mut tx.row_mut(h), req.keys[i])?;
            } else {
                std::hint::black_box(tx.row(h).i64(VAL));
            }
        }
        Ok(())
    }
}

/// Checks the invariants of the module documentation over `islands`, each with the key
/// range it holds; returns the violations found (a few, in words).
pub fn check(islands: &[(&Island, std::ops::Range<u64>)], n: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut sum: i128 = 0;
    for (island, keys) in islands {
        crate::check_key_range(
            "micro",
            island,
            TABLE,
            keys,
            |key, words| {
                // The value and the check word are the row's first two words.
                let (val, check) = (words[0], words[1]);
                sum += i128::from(val as i64);
                let want = crate::row_check(key, val);
                (check != want).then(|| {
                    format!(
                        "row {key} holds value {} with check word {check:#x}, not {want:#x}",
                        val as i64
                    )
                })
            },
            &mut out,
        );
    }
    if sum % n.max(1) as i128 != 0 {
        out.push(format!(
            "micro: the values sum to {sum}, not a multiple of {n} (rows per transaction): \
             a transaction was applied in part"
        ));
    }
    out.truncate(crate::VIOLATIONS_MAX);
    out
}
