//! Built-in data sets and stored procedures for `islands serve`, as
//! application catalogs ([`islands::api::Catalog`]).
//!
//! - `tpcb`: pgbench's TPC-B. `scale` branches, 10 tellers and 100,000
//!   accounts per branch (ids from 1, as pgbench numbers them), a history
//!   table. Every table is partitioned by branch (a site per branch), so a
//!   transaction whose account lies in another branch than the one it
//!   names is distributed, as in pgbench's script. Procedures:
//!   `tpcb(aid, tid, bid, delta)` (update the account, read its balance,
//!   update the teller and the branch, insert a history row; returns
//!   `abalance`) and `tpcb_balance(aid)` (pgbench `-S`'s select).
//! - `ycsb`: one table of `rows` rows keyed `0..rows` (the layout of
//!   [`crate::ycsb`]: a counter `f0`, a check word, a payload). Procedures:
//!   `ycsb_read(key)`, `ycsb_update(key, value)` (writes `f0`),
//!   `ycsb_rmw(key)` (reads `f0` and writes it plus one) and
//!   `ycsb_multi_read(keys int8[])` (one row per key, in the order given).
//! - `tpcc`: TPC-C at the spec's scale, `warehouses` warehouses, and its
//!   five transactions ([`crate::tpcc::served`]).
//! - `micro`: the paper's microbenchmark table ([`crate::micro`]), `rows`
//!   rows split into the deployment's sites as key ranges. Procedures:
//!   `micro_read(keys int8[])` and `micro_update(keys int8[])` (adds one to
//!   each row's value), one row per key, `key` and `val`, in the order
//!   given; a call runs on the island of its first key, so keys of one site
//!   make a local transaction and keys of others a multisite one.
//! - `bank`: `accounts` accounts (ids `0..accounts`, each opened with
//!   [`BANK_INITIAL`]) and a table of transfers keyed by an id the caller
//!   gives. Both are spread over 64 sites by id, so neighbouring accounts
//!   lie on different islands. Procedures: `transfer(id, src, dst,
//!   amount)` (moves `amount` and records the transfer under `id`; an
//!   overdraft, an unknown account or an id already used is a user abort;
//!   returns the source's new balance), `bank_balance(account)`,
//!   `bank_transfer(id)` (the recorded transfer, or a user abort) and
//!   `bank_total()` (the sum of the balances and the number of accounts:
//!   an audit, which reads every account and so may give up with a
//!   serialization failure under load).
//!
//! Invariants the procedures keep: in `tpcb` the sum of account balances
//! equals the sum of teller balances and of branch balances, and each
//! branch's `hist_seq` counts its history rows (which are keyed by branch
//! and that sequence); in `ycsb` every row's check word is
//! [`crate::row_check`] of its key and `f0`, and in `micro` of its key and
//! `val`; `tpcc` keeps the consistency conditions of Clause 3.3.2; in
//! `bank` the balances sum to `accounts * BANK_INITIAL`, none is negative,
//! and each account's balance is its opening balance plus what the
//! recorded transfers moved.

use islands::api::{sql_abort, Catalog, Load, Partition, ProcDef, SqlTable, Type, Value};
use islands::deploy::{DeployError, DeploySpec};
use islands::island::Island;
use islands::storage::schema::SqlType;
use islands::storage::{Col, ColType, PrimaryKind, TableDef, TableId};
use islands::{Abort, Error};

/// Accounts and tellers per branch, as pgbench has them.
pub const ACCOUNTS_PER_BRANCH: u64 = 100_000;
pub const TELLERS_PER_BRANCH: u64 = 10;

const BRANCHES: TableId = 0;
const TELLERS: TableId = 1;
const ACCOUNTS: TableId = 2;
const HISTORY: TableId = 3;
const BALANCE: Col = Col(0);
/// A branch's count of history rows (the last one's sequence number).
const HIST_SEQ: Col = Col(1);
/// The branch of a teller or an account (pgbench's `bid` column).
const BID: Col = Col(1);

/// Sites over which YCSB's keys are spread (`key % YCSB_SITES`).
const YCSB_SITES: u64 = 256;
const F0: Col = Col(0);
const CHECK: Col = Col(1);
const PAYLOAD: Col = Col(2);

/// A built-in data set with its procedures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Builtin {
    Tpcb { scale: u32 },
    Ycsb { rows: u64 },
    Tpcc { warehouses: u32 },
    Micro { rows: u64 },
    Bank { accounts: u64 },
}

/// Orders a district of a served TPC-C database holds at most (the
/// benchmark's default): a NewOrder beyond it fails with an error.
pub const TPCC_MAX_ORDERS_PER_DISTRICT: u32 = 1_000_000;

// The branch (0-based site) of each table's key.
fn branch_site(bid: u64) -> u32 {
    bid.saturating_sub(1) as u32
}
fn teller_site(tid: u64) -> u32 {
    (tid.saturating_sub(1) / TELLERS_PER_BRANCH) as u32
}
fn account_site(aid: u64) -> u32 {
    (aid.saturating_sub(1) / ACCOUNTS_PER_BRANCH) as u32
}
/// History rows are keyed `bid << 32 | seq`.
fn history_site(key: u64) -> u32 {
    branch_site(key >> 32)
}
fn ycsb_site(key: u64) -> u32 {
    (key % YCSB_SITES) as u32
}

/// Most history rows a deployment holds (memory is taken as rows come).
const HISTORY_ROWS: u64 = 1 << 28;

impl Builtin {
    /// Its name, as `--init` takes it.
    pub fn name(&self) -> &'static str {
        match self {
            Builtin::Tpcb { .. } => "tpcb",
            Builtin::Ycsb { .. } => "ycsb",
            Builtin::Tpcc { .. } => "tpcc",
            Builtin::Micro { .. } => "micro",
            Builtin::Bank { .. } => "bank",
        }
    }

    /// The sites a deployment of it must have: TPC-C's are its warehouses
    /// and TPC-B's its branches, so that they spread over the islands
    /// whatever the machine (the default, a site per core, would put a few
    /// branches of a large machine all on island 0). `None`: any number.
    pub fn sites(&self) -> Option<u32> {
        match *self {
            Builtin::Tpcc { warehouses } => Some(warehouses),
            Builtin::Tpcb { scale } => Some(scale),
            _ => None,
        }
    }

    /// What its sites are, in words.
    fn site_unit(&self) -> &'static str {
        match self {
            Builtin::Tpcb { .. } => "branches",
            _ => "warehouses",
        }
    }

    /// Gives `spec` the sites [`Builtin::sites`] asks for; a deployment
    /// that names another number of sites is refused.
    pub fn place(&self, spec: &mut DeploySpec) -> Result<(), Error> {
        let Some(sites) = self.sites() else {
            return Ok(());
        };
        match spec.sites {
            Some(s) if s != sites => Err(Error::Config(format!(
                "{self}: its sites are its {}, {sites}, but the deployment has sites = {s} \
                 (leave sites out)",
                self.site_unit()
            ))),
            _ => {
                spec.sites = Some(sites);
                Ok(())
            }
        }
    }

    /// A plan refused for it, said in its own terms: too few sites are too
    /// few warehouses or branches.
    pub fn plan_error(&self, e: DeployError) -> Error {
        match e {
            DeployError::MoreIslandsThanSites { islands, sites } if self.sites().is_some() => {
                let unit = self.site_unit();
                Error::Config(format!(
                    "{self}: {islands} islands but only {sites} sites: its sites are its {unit}, \
                     and every island needs at least one (load {islands} {unit} or more, or run \
                     fewer islands)"
                ))
            }
            e => e.into(),
        }
    }

    /// The parameter that sizes it, and its value: `scale`, `rows`,
    /// `warehouses` or `accounts`.
    pub fn size(&self) -> (&'static str, u64) {
        match *self {
            Builtin::Tpcb { scale } => ("scale", scale.into()),
            Builtin::Ycsb { rows } | Builtin::Micro { rows } => ("rows", rows),
            Builtin::Tpcc { warehouses } => ("warehouses", warehouses.into()),
            Builtin::Bank { accounts } => ("accounts", accounts),
        }
    }

    /// The data set `name` sized by `key = value` ([`Builtin::size`]), its
    /// size checked; an error says what is wrong.
    pub fn with_size(name: &str, key: &str, value: u64) -> Result<Builtin, Error> {
        let small = || {
            u32::try_from(value)
                .map_err(|_| Error::Config(format!("{name}: {key} {value} is out of range")))
        };
        let b = match name {
            "tpcb" => Builtin::Tpcb { scale: small()? },
            "ycsb" => Builtin::Ycsb { rows: value },
            "tpcc" => Builtin::Tpcc {
                warehouses: small()?,
            },
            "micro" => Builtin::Micro { rows: value },
            "bank" => Builtin::Bank { accounts: value },
            _ => {
                return Err(Error::Config(format!(
                    "unknown data set {name:?} (tpcb, ycsb, tpcc, micro or bank)"
                )))
            }
        };
        if b.size().0 != key {
            return Err(Error::Config(format!(
                "{name} is sized by {}, not {key}",
                b.size().0
            )));
        }
        b.check()?;
        Ok(b)
    }

    fn tpcc(warehouses: u32) -> crate::tpcc::TpccConfig {
        crate::tpcc::served::config(warehouses, TPCC_MAX_ORDERS_PER_DISTRICT)
    }

    fn micro(rows: u64) -> crate::micro::MicroConfig {
        crate::micro::MicroConfig {
            rows,
            ..Default::default()
        }
    }

    /// Checks the size parameter.
    pub fn check(&self) -> Result<(), Error> {
        match *self {
            Builtin::Tpcb { scale } if !(1..=10_000).contains(&scale) => Err(Error::Config(
                format!("tpcb: --scale {scale} is outside 1..=10000"),
            )),
            Builtin::Ycsb { rows } if !(1..=1 << 32).contains(&rows) => Err(Error::Config(
                format!("ycsb: --rows {rows} is outside 1..=2^32"),
            )),
            Builtin::Tpcc { warehouses } => Builtin::tpcc(warehouses).check(),
            Builtin::Micro { rows } => Builtin::micro(rows).check(),
            Builtin::Bank { accounts } if !(2..=BANK_MAX_ACCOUNTS).contains(&accounts) => {
                Err(Error::Config(format!(
                    "bank: --accounts {accounts} is outside 2..={BANK_MAX_ACCOUNTS}"
                )))
            }
            _ => Ok(()),
        }
    }

    /// Its tables and procedures.
    pub fn catalog(&self) -> Catalog {
        match *self {
            Builtin::Tpcb { scale } => tpcb_catalog(scale),
            Builtin::Ycsb { rows } => ycsb_catalog(rows),
            Builtin::Tpcc { warehouses } => {
                crate::tpcc::served::catalog(&Builtin::tpcc(warehouses))
            }
            Builtin::Micro { rows } => micro_catalog(rows),
            Builtin::Bank { accounts } => bank_catalog(accounts),
        }
    }

    /// Loads its rows into `load`'s island (only the rows it holds).
    pub fn load(&self, load: &mut Load<'_>) -> Result<(), Error> {
        match *self {
            Builtin::Tpcb { scale } => {
                let s = scale as u64;
                for bid in 1..=s {
                    if load.owns(BRANCHES, bid) {
                        load.put(BRANCHES, bid, |r| {
                            r.set_i64(BALANCE, 0);
                            r.set_u64(HIST_SEQ, 0);
                        })?;
                    }
                }
                for tid in 1..=s * TELLERS_PER_BRANCH {
                    if load.owns(TELLERS, tid) {
                        load.put(TELLERS, tid, |r| {
                            r.set_i64(BALANCE, 0);
                            r.set_i64(BID, ((tid - 1) / TELLERS_PER_BRANCH + 1) as i64);
                        })?;
                    }
                }
                for aid in 1..=s * ACCOUNTS_PER_BRANCH {
                    if load.owns(ACCOUNTS, aid) {
                        load.put(ACCOUNTS, aid, |r| {
                            r.set_i64(BALANCE, 0);
                            r.set_i64(BID, ((aid - 1) / ACCOUNTS_PER_BRANCH + 1) as i64);
                        })?;
                    }
                }
                Ok(())
            }
            Builtin::Ycsb { rows } => {
                let payload = vec![b'x'; 84];
                for k in 0..rows {
                    if load.owns(0, k) {
                        load.put(0, k, |r| {
                            r.set_u64(F0, k);
                            r.set_u64(CHECK, crate::row_check(k, k));
                            r.set_str(PAYLOAD, &payload);
                        })?;
                    }
                }
                Ok(())
            }
            Builtin::Tpcc { warehouses } => {
                crate::tpcc::served::load(load, &Builtin::tpcc(warehouses))
            }
            Builtin::Micro { rows } => {
                let cfg = Builtin::micro(rows);
                let payload = crate::micro::payload(&cfg);
                let mut img = Vec::new();
                for k in 0..rows {
                    if load.owns(crate::micro::TABLE, k) {
                        load.put_with(crate::micro::TABLE, k, &mut img, |r| {
                            crate::micro::initial_row(r, k, &payload)
                        })?;
                    }
                }
                Ok(())
            }
            Builtin::Bank { accounts } => bank_load(load, accounts),
        }
    }
}

impl std::fmt::Display for Builtin {
    /// Its name and size: `tpcc 4 warehouses`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Builtin::Tpcb { scale } => write!(f, "tpcb scale {scale}"),
            Builtin::Ycsb { rows } => write!(f, "ycsb {rows} rows"),
            Builtin::Tpcc { warehouses } => write!(f, "tpcc {warehouses} warehouse(s)"),
            Builtin::Micro { rows } => write!(f, "micro {rows} rows"),
            Builtin::Bank { accounts } => write!(f, "bank {accounts} accounts"),
        }
    }
}

fn tpcb_catalog(scale: u32) -> Catalog {
    let s = scale as u64;
    let mut c = Catalog::new();
    let b = c.table(
        TableDef::new(
            "pgbench_branches",
            &[
                ("bbalance", ColType::I64),
                ("hist_seq", ColType::U64),
                ("filler", ColType::Str(88)),
            ],
            s,
            PrimaryKind::Hash,
        ),
        Partition::BySite(branch_site),
    );
    let t = c.table(
        TableDef::new(
            "pgbench_tellers",
            &[
                ("tbalance", ColType::I64),
                ("bid", ColType::I64),
                ("filler", ColType::Str(84)),
            ],
            s * TELLERS_PER_BRANCH,
            PrimaryKind::Hash,
        ),
        Partition::BySite(teller_site),
    );
    let a = c.table(
        TableDef::new(
            "pgbench_accounts",
            &[
                ("abalance", ColType::I64),
                ("bid", ColType::I64),
                ("filler", ColType::Str(84)),
            ],
            s * ACCOUNTS_PER_BRANCH,
            PrimaryKind::Hash,
        ),
        Partition::BySite(account_site),
    );
    let h = c.table(
        TableDef::new(
            "pgbench_history",
            &[
                ("tid", ColType::I64),
                ("bid", ColType::I64),
                ("aid", ColType::I64),
                ("delta", ColType::I64),
                ("mtime", ColType::I64),
                ("filler", ColType::Str(22)),
            ],
            HISTORY_ROWS,
            // Its index grows with its rows (a hash index is made whole).
            PrimaryKind::Ordered,
        ),
        Partition::BySite(history_site),
    );
    debug_assert_eq!((b, t, a, h), (BRANCHES, TELLERS, ACCOUNTS, HISTORY));
    tpcb_sql(&mut c, s).expect("tpcb's SQL views fit its tables");
    c.procedure(
        ProcDef::new("tpcb", |tx, args, out| {
            Box::pin(async move {
                let (aid, tid, bid, delta) = (args.int(0), args.int(1), args.int(2), args.int(3));
                let key =
                    |v: i64, what: &'static str| u64::try_from(v).map_err(|_| Abort::User(what));
                let ah = tx
                    .get_for_update(ACCOUNTS, key(aid, "no such account")?)
                    .await?
                    .ok_or(Abort::User("no such account"))?;
                let abalance = tx.row_mut(ah).add_i64(BALANCE, delta)?;
                let th = tx
                    .get_for_update(TELLERS, key(tid, "no such teller")?)
                    .await?
                    .ok_or(Abort::User("no such teller"))?;
                tx.row_mut(th).add_i64(BALANCE, delta)?;
                let bkey = key(bid, "no such branch")?;
                let bh = tx
                    .get_for_update(BRANCHES, bkey)
                    .await?
                    .ok_or(Abort::User("no such branch"))?;
                let mut row = tx.row_mut(bh);
                row.add_i64(BALANCE, delta)?;
                let seq = row.add_u64(HIST_SEQ, 1)?;
                let hh = tx
                    .insert(HISTORY, bkey << 32 | seq)
                    .await?
                    .ok_or(Abort::User("history row exists"))?;
                let mut row = tx.row_mut(hh);
                row.set_i64(Col(0), tid);
                row.set_i64(Col(1), bid);
                row.set_i64(Col(2), aid);
                row.set_i64(Col(3), delta);
                out.push(vec![Value::Int(abalance)]);
                Ok(())
            })
        })
        .param("aid", Type::Int)
        .param("tid", Type::Int)
        .param("bid", Type::Int)
        .param("delta", Type::Int)
        .column("abalance", Type::Int)
        .home_by(2, BRANCHES),
    )
    .expect("a fresh catalog");
    c.procedure(
        ProcDef::new("tpcb_balance", |tx, args, out| {
            Box::pin(async move {
                let aid = u64::try_from(args.int(0)).map_err(|_| Abort::User("no such account"))?;
                let h = tx
                    .get(ACCOUNTS, aid)
                    .await?
                    .ok_or(Abort::User("no such account"))?;
                out.push(vec![Value::Int(tx.row(h).i64(BALANCE))]);
                Ok(())
            })
        })
        .param("aid", Type::Int)
        .column("abalance", Type::Int)
        .home_by(0, ACCOUNTS),
    )
    .expect("a fresh catalog");
    c
}

/// pgbench's tables as SQL sees them: `pgbench_branches (bid, bbalance,
/// filler)`, `pgbench_tellers (tid, bid, tbalance, filler)`,
/// `pgbench_accounts (aid, bid, abalance, filler)` and `pgbench_history
/// (tid, bid, aid, delta, mtime, filler)`. Branches, tellers and accounts
/// hold the ids pgbench loads (`1..=scale` etc.) and no others. The history
/// has no key in pgbench: an INSERT takes the next number of its branch's
/// `hist_seq` (locking the branch's row) and is keyed `bid << 32 | seq`, as
/// the `tpcb` procedure keys it, so each branch still counts its rows.
fn tpcb_sql(c: &mut Catalog, s: u64) -> Result<(), Error> {
    c.sql(
        BRANCHES,
        SqlTable::new()
            .key_column("bid", SqlType::Int4, 0, 31)
            .column("bbalance", SqlType::Int8, "bbalance")
            .column("filler", SqlType::Varchar(88), "filler")
            .domain(1, s),
    )?;
    c.sql(
        TELLERS,
        SqlTable::new()
            .key_column("tid", SqlType::Int4, 0, 31)
            .column("bid", SqlType::Int8, "bid")
            .column("tbalance", SqlType::Int8, "tbalance")
            .column("filler", SqlType::Varchar(84), "filler")
            .domain(1, s * TELLERS_PER_BRANCH),
    )?;
    c.sql(
        ACCOUNTS,
        SqlTable::new()
            .key_column("aid", SqlType::Int4, 0, 31)
            .column("bid", SqlType::Int8, "bid")
            .column("abalance", SqlType::Int8, "abalance")
            .column("filler", SqlType::Varchar(84), "filler")
            .domain(1, s * ACCOUNTS_PER_BRANCH),
    )?;
    c.sql(
        HISTORY,
        SqlTable::new()
            .hidden_key("bid", 32, 32)
            .hidden_key("seq", 0, 32)
            .column("tid", SqlType::Int8, "tid")
            .column("bid", SqlType::Int8, "bid")
            .column("aid", SqlType::Int8, "aid")
            .column("delta", SqlType::Int8, "delta")
            .column("mtime", SqlType::Timestamp, "mtime")
            .column("filler", SqlType::Varchar(22), "filler")
            .local_prefix(1)
            .domain(1, s)
            .keyless(BRANCHES, 1, |tx, row| {
                Box::pin(async move {
                    let bid = row[1]
                        .as_int()
                        .and_then(|b| u64::try_from(b).ok())
                        .ok_or(Abort::User(sql_abort::FOREIGN_KEY))?;
                    let h = tx
                        .get_for_update(BRANCHES, bid)
                        .await?
                        .ok_or(Abort::User(sql_abort::FOREIGN_KEY))?;
                    let seq = tx.row_mut(h).add_u64(HIST_SEQ, 1)?;
                    Ok(bid << 32 | seq)
                })
            }),
    )
}

fn ycsb_catalog(rows: u64) -> Catalog {
    let mut c = Catalog::new();
    let cfg = crate::ycsb::YcsbConfig {
        rows,
        ..crate::ycsb::YcsbConfig::silo()
    };
    let t = c.table(
        crate::ycsb::tables(&cfg, rows).remove(0),
        Partition::BySite(ycsb_site),
    );
    debug_assert_eq!(t, 0);
    let mut view = SqlTable::new()
        .key_column("ycsb_key", SqlType::Int8, 0, 63)
        .column("field0", SqlType::Int8, "f0");
    if cfg.row_bytes > 16 {
        view = view.column(
            "field1",
            SqlType::Varchar((cfg.row_bytes - 16) as u16),
            "payload",
        );
    }
    c.sql(
        t,
        view.domain(0, rows - 1)
            .on_write(|k, r| r.set_u64(CHECK, crate::row_check(k, r.u64(F0)))),
    )
    .expect("ycsb's SQL view fits its table");
    let key = |v: i64| u64::try_from(v).map_err(|_| Abort::User("missing key"));
    c.procedure(
        ProcDef::new("ycsb_read", move |tx, a, out| {
            Box::pin(async move {
                let h = tx
                    .get(0, key(a.int(0))?)
                    .await?
                    .ok_or(Abort::User("missing key"))?;
                out.push(vec![Value::Int(tx.row(h).u64(F0) as i64)]);
                Ok(())
            })
        })
        .param("key", Type::Int)
        .column("f0", Type::Int)
        .home_by(0, 0),
    )
    .expect("a fresh catalog");
    c.procedure(
        ProcDef::new("ycsb_update", move |tx, a, _| {
            Box::pin(async move {
                let k = key(a.int(0))?;
                let v = a.int(1) as u64;
                let h = tx
                    .get_for_update(0, k)
                    .await?
                    .ok_or(Abort::User("missing key"))?;
                let mut row = tx.row_mut(h);
                row.set_u64(F0, v);
                row.set_u64(CHECK, crate::row_check(k, v));
                Ok(())
            })
        })
        .param("key", Type::Int)
        .param("value", Type::Int)
        .home_by(0, 0),
    )
    .expect("a fresh catalog");
    c.procedure(
        ProcDef::new("ycsb_rmw", move |tx, a, out| {
            Box::pin(async move {
                let k = key(a.int(0))?;
                let h = tx
                    .get_for_update(0, k)
                    .await?
                    .ok_or(Abort::User("missing key"))?;
                let mut row = tx.row_mut(h);
                let v = row.add_u64(F0, 1)?;
                row.set_u64(CHECK, crate::row_check(k, v));
                out.push(vec![Value::Int(v as i64)]);
                Ok(())
            })
        })
        .param("key", Type::Int)
        .column("f0", Type::Int)
        .home_by(0, 0),
    )
    .expect("a fresh catalog");
    c.procedure(
        ProcDef::new("ycsb_multi_read", move |tx, a, out| {
            Box::pin(async move {
                let keys = a.ints(0);
                if keys.len() > crate::ycsb::MAX_OPS {
                    return Err(Abort::User("ycsb_multi_read takes at most 64 keys"));
                }
                for &k in keys {
                    let h = tx
                        .get(0, key(k)?)
                        .await?
                        .ok_or(Abort::User("missing key"))?;
                    out.push(vec![Value::Int(k), Value::Int(tx.row(h).u64(F0) as i64)]);
                }
                Ok(())
            })
        })
        .param("keys", Type::Ints)
        .column("key", Type::Int)
        .column("f0", Type::Int),
    )
    .expect("a fresh catalog");
    c
}

fn micro_catalog(rows: u64) -> Catalog {
    use crate::micro::{MAX_ROWS_PER_TXN, TABLE};
    let mut c = Catalog::new();
    let t = c.table(
        crate::micro::tables(&Builtin::micro(rows), rows).remove(0),
        Partition::Range { keys: rows },
    );
    debug_assert_eq!(t, TABLE);
    let cfg = Builtin::micro(rows);
    let mut view = SqlTable::new()
        .key_column("key", SqlType::Int8, 0, 63)
        .column("val", SqlType::Int8, "val");
    if cfg.row_bytes > 16 {
        view = view.column(
            "payload",
            SqlType::Varchar((cfg.row_bytes - 16) as u16),
            "payload",
        );
    }
    c.sql(
        t,
        view.domain(0, rows - 1).on_write(|k, r| {
            r.set_u64(Col(1), crate::row_check(k, r.i64(crate::micro::VAL) as u64))
        }),
    )
    .expect("micro's SQL view fits its table");
    for (name, update) in [("micro_read", false), ("micro_update", true)] {
        c.procedure(
            ProcDef::new(name, move |tx, a, out| {
                Box::pin(async move {
                    let keys = a.ints(0);
                    if keys.len() > MAX_ROWS_PER_TXN {
                        return Err(Abort::User("a call takes at most 1000 keys"));
                    }
                    let keys: Vec<u64> = keys
                        .iter()
                        .map(|&k| u64::try_from(k).map_err(|_| Abort::User("missing key")))
                        .collect::<Result<_, _>>()?;
                    tx.get_many(TABLE, &keys, update).await?;
                    for (i, &k) in keys.iter().enumerate() {
                        let h = tx.many_row(i).ok_or(Abort::User("missing key"))?;
                        let v = if update {
                            crate::micro::bump_val(&mut tx.row_mut(h), k)?
                        } else {
                            tx.row(h).i64(crate::micro::VAL)
                        };
                        out.push(vec![Value::Int(k as i64), Value::Int(v)]);
                    }
                    Ok(())
                })
            })
            .param("keys", Type::Ints)
            .column("key", Type::Int)
            .column("val", Type::Int)
            .home_by(0, TABLE),
        )
        .expect("a fresh catalog");
    }
    c
}

// ---- bank ---------------------------------------------------------------

/// Each account's opening balance.
pub const BANK_INITIAL: i64 = 1_000;
/// Most accounts `--init bank` makes.
pub const BANK_MAX_ACCOUNTS: u64 = 1 << 24;
/// Sites over which accounts and transfers are spread (`id % BANK_SITES`).
const BANK_SITES: u64 = 64;
/// Most transfers a deployment records (memory is taken as rows come).
const BANK_TRANSFERS: u64 = 1 << 28;

const BANK_ACCOUNTS: TableId = 0;
const BANK_TRANSFER_ROWS: TableId = 1;
const BANK_BALANCE: Col = Col(0);
const SRC: Col = Col(0);
const DST: Col = Col(1);
const AMOUNT: Col = Col(2);

fn bank_site(id: u64) -> u32 {
    (id % BANK_SITES) as u32
}

fn bank_load(load: &mut Load<'_>, accounts: u64) -> Result<(), Error> {
    for a in 0..accounts {
        if load.owns(BANK_ACCOUNTS, a) {
            load.put(BANK_ACCOUNTS, a, |r| r.set_i64(BANK_BALANCE, BANK_INITIAL))?;
        }
    }
    Ok(())
}

fn bank_catalog(accounts: u64) -> Catalog {
    let mut c = Catalog::new();
    let a = c.table(
        TableDef::new(
            "accounts",
            &[("balance", ColType::I64)],
            accounts,
            PrimaryKind::Hash,
        ),
        Partition::BySite(bank_site),
    );
    let t = c.table(
        TableDef::new(
            "transfers",
            &[
                ("src", ColType::I64),
                ("dst", ColType::I64),
                ("amount", ColType::I64),
            ],
            BANK_TRANSFERS,
            // Its index grows with its rows (a hash index is made whole).
            PrimaryKind::Ordered,
        ),
        Partition::BySite(bank_site),
    );
    debug_assert_eq!((a, t), (BANK_ACCOUNTS, BANK_TRANSFER_ROWS));
    c.sql(
        a,
        SqlTable::new()
            .key_column("id", SqlType::Int8, 0, 63)
            .column("balance", SqlType::Int8, "balance")
            .domain(0, accounts - 1),
    )
    .expect("bank's SQL views fit its tables");
    c.sql(
        t,
        SqlTable::new()
            .key_column("id", SqlType::Int8, 0, 63)
            .column("src", SqlType::Int8, "src")
            .column("dst", SqlType::Int8, "dst")
            .column("amount", SqlType::Int8, "amount"),
    )
    .expect("bank's SQL views fit its tables");
    let id = |v: i64, what: &'static str| u64::try_from(v).map_err(|_| Abort::User(what));
    c.procedure(
        ProcDef::new("transfer", move |tx, args, out| {
            Box::pin(async move {
                let (tid, amount) = (
                    id(args.int(0), "a transfer id is not negative")?,
                    args.int(3),
                );
                let src = id(args.int(1), "no such account")?;
                let dst = id(args.int(2), "no such account")?;
                if src == dst {
                    return Err(Abort::User("a transfer needs two accounts"));
                }
                if amount <= 0 {
                    return Err(Abort::User("a transfer moves a positive amount"));
                }
                let s = tx
                    .get_for_update(BANK_ACCOUNTS, src)
                    .await?
                    .ok_or(Abort::User("no such account"))?;
                let d = tx
                    .get_for_update(BANK_ACCOUNTS, dst)
                    .await?
                    .ok_or(Abort::User("no such account"))?;
                if tx.row(s).i64(BANK_BALANCE) < amount {
                    return Err(Abort::User("insufficient funds"));
                }
                let sb = tx.row_mut(s).sub_i64(BANK_BALANCE, amount)?;
                tx.row_mut(d).add_i64(BANK_BALANCE, amount)?;
                let h = tx
                    .insert(BANK_TRANSFER_ROWS, tid)
                    .await?
                    .ok_or(Abort::User("transfer id already used"))?;
                let mut row = tx.row_mut(h);
                row.set_i64(SRC, src as i64);
                row.set_i64(DST, dst as i64);
                row.set_i64(AMOUNT, amount);
                out.push(vec![Value::Int(sb)]);
                Ok(())
            })
        })
        .param("id", Type::Int)
        .param("src", Type::Int)
        .param("dst", Type::Int)
        .param("amount", Type::Int)
        .column("balance", Type::Int)
        .home_by(1, BANK_ACCOUNTS),
    )
    .expect("a fresh catalog");
    c.procedure(
        ProcDef::new("bank_balance", move |tx, args, out| {
            Box::pin(async move {
                let h = tx
                    .get(BANK_ACCOUNTS, id(args.int(0), "no such account")?)
                    .await?
                    .ok_or(Abort::User("no such account"))?;
                out.push(vec![Value::Int(tx.row(h).i64(BANK_BALANCE))]);
                Ok(())
            })
        })
        .param("account", Type::Int)
        .column("balance", Type::Int)
        .home_by(0, BANK_ACCOUNTS),
    )
    .expect("a fresh catalog");
    c.procedure(
        ProcDef::new("bank_transfer", move |tx, args, out| {
            Box::pin(async move {
                let h = tx
                    .get(BANK_TRANSFER_ROWS, id(args.int(0), "no such transfer")?)
                    .await?
                    .ok_or(Abort::User("no such transfer"))?;
                let row = tx.row(h);
                out.push(vec![
                    Value::Int(row.i64(SRC)),
                    Value::Int(row.i64(DST)),
                    Value::Int(row.i64(AMOUNT)),
                ]);
                Ok(())
            })
        })
        .param("id", Type::Int)
        .column("src", Type::Int)
        .column("dst", Type::Int)
        .column("amount", Type::Int)
        .home_by(0, BANK_TRANSFER_ROWS),
    )
    .expect("a fresh catalog");
    c.procedure(
        ProcDef::new("bank_total", move |tx, _, out| {
            Box::pin(async move {
                let mut total = 0i64;
                for a in 0..accounts {
                    let h = tx
                        .get(BANK_ACCOUNTS, a)
                        .await?
                        .ok_or(Abort::User("an account is missing"))?;
                    total += tx.row(h).i64(BANK_BALANCE);
                }
                out.push(vec![Value::Int(total), Value::Int(accounts as i64)]);
                Ok(())
            })
        })
        .column("total", Type::Int)
        .column("accounts", Type::Int),
    )
    .expect("a fresh catalog");
    c
}

// ---- checks ---------------------------------------------------------------

/// What [`Builtin::check_islands`] found: the violations, in words, and
/// what it checked, for the report when there are none.
pub struct Checked {
    pub violations: Vec<String>,
    pub checked: String,
}

/// Each row of `table` on every island: its key and its words.
fn rows_of(islands: &[&Island], table: TableId, mut f: impl FnMut(u64, &[u64])) {
    for island in islands {
        island
            .catalog()
            .table(table)
            .for_each_row(|key, _, words| f(key, words));
    }
}

impl Builtin {
    /// Checks the consistency conditions of the module documentation on a
    /// database recovered from a served directory: `islands` are every
    /// island of it when `whole`, else one island of several, whose rows
    /// alone prove nothing about sums over the deployment (then only what
    /// one island shows is checked, and `checked` says so).
    pub fn check_islands(&self, islands: &[&Island], whole: bool) -> Checked {
        let mut v = Vec::new();
        let checked = match *self {
            Builtin::Tpcb { scale } => check_tpcb(islands, scale, whole, &mut v),
            Builtin::Bank { accounts } => check_bank(islands, accounts, whole, &mut v),
            Builtin::Ycsb { rows } => check_counted("ycsb", islands, 0, rows, whole, "f0", &mut v),
            Builtin::Micro { rows } => check_counted(
                "micro",
                islands,
                crate::micro::TABLE,
                rows,
                whole,
                "val",
                &mut v,
            ),
            // Its own check: `islands tpcc check` (its control files say
            // `tpcc`, so `islands check` goes there).
            Builtin::Tpcc { warehouses } => format!(
                "nothing: TPC-C's {warehouses} warehouse(s) are checked by `islands tpcc check`"
            ),
        };
        v.truncate(crate::VIOLATIONS_MAX);
        Checked {
            violations: v,
            checked,
        }
    }
}

/// `rows` rows keyed `0..rows` whose second word is [`crate::row_check`]
/// of the key and the first (`first` names it).
fn check_counted(
    what: &str,
    islands: &[&Island],
    table: TableId,
    rows: u64,
    whole: bool,
    first: &str,
    v: &mut Vec<String>,
) -> String {
    let (mut present, mut outside, mut bad) = (0u64, 0u64, 0u64);
    rows_of(islands, table, |key, w| {
        if key >= rows {
            outside += 1;
        }
        present += 1;
        let want = crate::row_check(key, w[0]);
        if w[1] != want {
            if bad == 0 {
                v.push(format!(
                    "{what}: row {key} holds {first} {} with check word {:#x}, not {want:#x}",
                    w[0], w[1]
                ));
            }
            bad += 1;
        }
    });
    if bad > 1 {
        v.push(format!("{what}: {bad} rows with a wrong check word in all"));
    }
    if outside > 0 {
        v.push(format!("{what}: {outside} row(s) outside keys 0..{rows}"));
    }
    if whole && present != rows {
        v.push(format!(
            "{what}: {present} rows are present, {rows} were loaded"
        ));
    }
    if whole {
        format!("{what}: {rows} rows present, each with its check word")
    } else {
        format!(
            "{what}: this island's {present} rows carry their check words (row counts are \
             checked over the whole data directory)"
        )
    }
}

fn check_tpcb(islands: &[&Island], scale: u32, whole: bool, v: &mut Vec<String>) -> String {
    let s = scale as u64;
    let sum = |table: TableId, count: &mut u64| -> i128 {
        let mut total = 0i128;
        rows_of(islands, table, |_, w| {
            *count += 1;
            total += i128::from(w[0] as i64);
        });
        total
    };
    let (mut nb, mut nt, mut na) = (0, 0, 0);
    let (b, t, a) = (
        sum(BRANCHES, &mut nb),
        sum(TELLERS, &mut nt),
        sum(ACCOUNTS, &mut na),
    );
    // History rows: each branch's sequence numbers, and the sum of deltas.
    let mut seqs: std::collections::HashMap<u64, (u64, u64)> = Default::default();
    let mut h = 0i128;
    let mut nh = 0u64;
    rows_of(islands, HISTORY, |key, w| {
        nh += 1;
        h += i128::from(w[3] as i64);
        let e = seqs.entry(key >> 32).or_default();
        e.0 += 1;
        e.1 = e.1.max(key & 0xffff_ffff);
    });
    // Each branch's history rows are on its island: checked on one too.
    rows_of(islands, BRANCHES, |bid, w| {
        let (rows, last) = seqs.remove(&bid).unwrap_or_default();
        if rows != w[1] || last != w[1] {
            v.push(format!(
                "tpcb: branch {bid} counts {} history rows (hist_seq), but {rows} are present, \
                 numbered up to {last}",
                w[1]
            ));
        }
    });
    for (bid, (rows, _)) in seqs {
        v.push(format!(
            "tpcb: {rows} history row(s) of branch {bid}, which is not here"
        ));
    }
    if !whole {
        return format!(
            "tpcb: each of this island's {nb} branches counts its {nh} history rows (the \
             balances' sums are checked over the whole data directory)"
        );
    }
    for (what, n, want) in [
        ("branches", nb, s),
        ("tellers", nt, s * TELLERS_PER_BRANCH),
        ("accounts", na, s * ACCOUNTS_PER_BRANCH),
    ] {
        if n != want {
            v.push(format!(
                "tpcb: {n} {what} are present, scale {scale} loaded {want}"
            ));
        }
    }
    if !(a == t && t == b && b == h) {
        v.push(format!(
            "tpcb: the balances differ: accounts sum to {a}, tellers to {t}, branches to {b}, \
             and the history's deltas to {h}"
        ));
    }
    format!(
        "tpcb scale {scale}: {nb} branches, {nt} tellers and {na} accounts present; the \
         balances of accounts, tellers and branches and the {nh} history deltas all sum to {a}; \
         each branch counts its history rows"
    )
}

fn check_bank(islands: &[&Island], accounts: u64, whole: bool, v: &mut Vec<String>) -> String {
    let mut balance: std::collections::HashMap<u64, i64> = Default::default();
    let mut outside = 0;
    rows_of(islands, BANK_ACCOUNTS, |a, w| {
        if a >= accounts {
            outside += 1;
        }
        balance.insert(a, w[0] as i64);
    });
    if outside > 0 {
        v.push(format!("bank: {outside} account(s) outside 0..{accounts}"));
    }
    let negative = balance.values().filter(|&&b| b < 0).count();
    if negative > 0 {
        v.push(format!(
            "bank: {negative} account(s) hold a negative balance"
        ));
    }
    if !whole {
        return format!(
            "bank: none of this island's {} accounts is negative (the total and the transfers \
             are checked over the whole data directory)",
            balance.len()
        );
    }
    // Each account: its opening balance plus what the recorded transfers moved.
    let mut moved: std::collections::HashMap<u64, i128> = Default::default();
    let mut transfers = 0u64;
    rows_of(islands, BANK_TRANSFER_ROWS, |_, w| {
        transfers += 1;
        let amount = i128::from(w[2] as i64);
        *moved.entry(w[0]).or_default() -= amount;
        *moved.entry(w[1]).or_default() += amount;
    });
    let total: i128 = balance.values().map(|&b| i128::from(b)).sum();
    let want = i128::from(BANK_INITIAL) * accounts as i128;
    if balance.len() as u64 != accounts {
        v.push(format!(
            "bank: {} accounts are present, {accounts} were opened",
            balance.len()
        ));
    }
    if total != want {
        v.push(format!("bank: the balances sum to {total}, not {want}"));
    }
    let mut off = 0;
    for a in 0..accounts {
        let want = i128::from(BANK_INITIAL) + moved.get(&a).copied().unwrap_or(0);
        let has = balance.get(&a).map(|&b| i128::from(b));
        if has.is_some_and(|b| b != want) {
            if off == 0 {
                v.push(format!(
                    "bank: account {a} holds {}, but its opening balance and the recorded \
                     transfers make {want}",
                    has.unwrap_or_default()
                ));
            }
            off += 1;
        }
    }
    if off > 1 {
        v.push(format!(
            "bank: {off} accounts disagree with the recorded transfers"
        ));
    }
    format!(
        "bank: {accounts} accounts, none negative, summing to {want}; each is its opening \
         balance plus what the {transfers} recorded transfers moved"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use islands::api::{Deployment, Options};
    use islands::deploy::Islands;
    use islands::topology::Topology;

    /// A deployment of `islands` islands for `b` on a described machine of
    /// 24 cores, larger than the one the tests run on.
    fn on_large_machine(b: &Builtin, islands: u32) -> Result<Options, Error> {
        let mut spec = DeploySpec::new(Islands::Count(islands));
        spec.workers_per_island = Some(1);
        spec.durability = "off".into();
        b.place(&mut spec)?;
        let mut o = Options::new(spec);
        o.topology = Some(Topology::described("4x6").expect("a described machine"));
        o.pin = false;
        Ok(o)
    }

    /// pgbench's tpcb-like script, each statement with its parameters from
    /// `(aid, tid, bid, delta)`; `literal`: as `-M simple` sends it, the
    /// values written in.
    fn tpcb_like(
        aid: i64,
        tid: i64,
        bid: i64,
        delta: i64,
        literal: bool,
    ) -> Vec<(String, Vec<Value>)> {
        let script: [(&str, Vec<i64>); 5] = [
            ("UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2", vec![delta, aid]),
            ("SELECT abalance FROM pgbench_accounts WHERE aid = $1", vec![aid]),
            ("UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2", vec![delta, tid]),
            ("UPDATE pgbench_branches SET bbalance = bbalance + $1 WHERE bid = $2", vec![delta, bid]),
            (
                "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)",
                vec![tid, bid, aid, delta],
            ),
        ];
        script
            .into_iter()
            .map(|(sql, params)| {
                if literal {
                    let mut sql = sql.to_string();
                    for (i, v) in params.iter().enumerate().rev() {
                        sql = sql.replace(&format!("${}", i + 1), &v.to_string());
                    }
                    (sql, Vec::new())
                } else {
                    (
                        sql.to_string(),
                        params.into_iter().map(Value::Int).collect(),
                    )
                }
            })
            .collect()
    }

    /// A tpcb deployment of 2 branches on 2 islands whose catalog has two
    /// more procedures: `tpcb_sql(aid, tid, bid, delta, literal)` runs
    /// pgbench's tpcb-like script as SQL in one transaction (returning
    /// `abalance`), `sql2(text)` runs one SELECT of two integer columns.
    fn tpcb_with_sql() -> Deployment {
        let b = Builtin::Tpcb { scale: 2 };
        let views = std::sync::Arc::new(b.catalog());
        let mut c = b.catalog();
        let v = views.clone();
        c.procedure(
            ProcDef::new("tpcb_sql", move |tx, args, out| {
                let v = v.clone();
                Box::pin(async move {
                    let (aid, tid, bid, delta) =
                        (args.int(0), args.int(1), args.int(2), args.int(3));
                    for (sql, params) in tpcb_like(aid, tid, bid, delta, args.int(4) != 0) {
                        islands::server::tables::run_sql(tx, &v, &sql, &params, out).await?;
                    }
                    Ok(())
                })
            })
            .param("aid", Type::Int)
            .param("tid", Type::Int)
            .param("bid", Type::Int)
            .param("delta", Type::Int)
            .param("literal", Type::Int)
            .column("abalance", Type::Int)
            .home_by(2, BRANCHES),
        )
        .unwrap();
        let v = views.clone();
        c.procedure(
            ProcDef::new("sql2", move |tx, args, out| {
                let v = v.clone();
                Box::pin(async move {
                    islands::server::tables::run_sql(tx, &v, args.str(0), &[], out).await?;
                    Ok(())
                })
            })
            .param("sql", Type::Str)
            .column("a", Type::Int)
            .column("b", Type::Int),
        )
        .unwrap();
        let o = on_large_machine(&b, 2).unwrap();
        Deployment::open(o, c, |l| b.load(l)).unwrap()
    }

    #[test]
    fn pgbench_tpcb_like_as_sql_keeps_the_tpcb_conditions() {
        let b = Builtin::Tpcb { scale: 2 };
        let db = tpcb_with_sql();
        let client = db.client();
        let sql2 = |sql: &str| -> Vec<i64> {
            let r = client.call("sql2", &[Value::Str(sql.into())]).unwrap();
            r[0].iter()
                .map(|v| v.as_int().unwrap_or(i64::MIN))
                .collect()
        };
        assert_eq!(
            sql2("select count(*), count(*) from pgbench_branches"),
            [2, 2]
        );
        let mut x = 12345u64;
        let mut next = |n: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % n
        };
        let (mut total, mut calls) = (0i64, 0i64);
        let mut balance = std::collections::HashMap::new();
        for i in 0..120 {
            // Accounts of either branch, tellers and branches of either:
            // some transactions span both islands.
            let aid = 1 + next(2 * ACCOUNTS_PER_BRANCH) as i64;
            let tid = 1 + next(2 * TELLERS_PER_BRANCH) as i64;
            let bid = 1 + next(2) as i64;
            let delta = next(10_001) as i64 - 5000;
            let rows = client
                .call(
                    "tpcb_sql",
                    &[
                        aid.into(),
                        tid.into(),
                        bid.into(),
                        delta.into(),
                        Value::Int(i % 2),
                    ],
                )
                .unwrap();
            let b = balance.entry(aid).or_insert(0i64);
            *b += delta;
            assert_eq!(rows, vec![vec![Value::Int(*b)]], "abalance of {aid}");
            total += delta;
            calls += 1;
        }
        // The built-in procedure and the SQL script keep the same history.
        client
            .call(
                "tpcb",
                &[Value::Int(7), Value::Int(3), Value::Int(2), Value::Int(11)],
            )
            .unwrap();
        total += 11;
        calls += 1;
        assert_eq!(
            sql2("SELECT count(*), sum(delta) FROM pgbench_history"),
            [calls, total]
        );
        assert_eq!(
            sql2("SELECT count(*), sum(bbalance) FROM pgbench_branches"),
            [2, total]
        );
        assert_eq!(
            sql2("SELECT sum(tbalance), max(tid) FROM pgbench_tellers"),
            [total, 2 * TELLERS_PER_BRANCH as i64]
        );
        assert_eq!(
            sql2("SELECT aid, bid FROM pgbench_accounts WHERE aid = 100001"),
            [100_001, 2]
        );
        let islands: Vec<&Island> = db.islands().iter().collect();
        let checked = b.check_islands(&islands, true);
        assert!(checked.violations.is_empty(), "{:?}", checked.violations);
        // A history row of a branch that does not exist is refused.
        let e = client
            .call(
                "tpcb_sql",
                &[1.into(), 1.into(), 9.into(), 1.into(), 0.into()],
            )
            .unwrap_err();
        assert!(e.to_string().contains("foreign key"), "{e}");
        let checked = b.check_islands(&islands, true);
        assert!(checked.violations.is_empty(), "{:?}", checked.violations);
        db.shutdown().unwrap();
    }

    /// TPC-C's composite keys pack as the data set packs them: SQL finds
    /// loaded rows by their key columns, reads stored key columns that agree,
    /// and finds customers by last name through the secondary index.
    #[test]
    fn tpcc_rows_are_found_by_their_key_columns() {
        let b = Builtin::Tpcc { warehouses: 1 };
        let views = std::sync::Arc::new(b.catalog());
        let mut c = b.catalog();
        c.procedure(
            ProcDef::new("sql2", move |tx, args, out| {
                let v = views.clone();
                Box::pin(async move {
                    islands::server::tables::run_sql(tx, &v, args.str(0), &[], out).await?;
                    Ok(())
                })
            })
            .param("sql", Type::Str)
            .column("a", Type::Int)
            .column("b", Type::Int),
        )
        .unwrap();
        let db = Deployment::open(on_large_machine(&b, 1).unwrap(), c, |l| b.load(l)).unwrap();
        let client = db.client();
        let sql2 = |sql: &str| -> Vec<Vec<i64>> {
            let r = client
                .call("sql2", &[Value::Str(sql.into())])
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            r.iter()
                .map(|r| r.iter().map(|v| v.as_int().unwrap_or(i64::MIN)).collect())
                .collect()
        };
        assert_eq!(
            sql2(
                "SELECT c_w_id, c_d_id FROM customer WHERE c_w_id = 1 AND c_d_id = 2 AND c_id = 3"
            ),
            [[1, 2]]
        );
        assert_eq!(
            sql2("SELECT d_w_id, d_id FROM district WHERE d_w_id = 1 AND d_id = 10"),
            [[1, 10]]
        );
        let order = sql2(
            "SELECT o_ol_cnt, o_c_id FROM orders WHERE o_w_id = 1 AND o_d_id = 4 AND o_id = 5",
        );
        assert_eq!(order.len(), 1);
        let lines = order[0][0];
        assert_eq!(
            sql2(
                "SELECT count(*), max(ol_number) FROM order_line \
                 WHERE ol_w_id = 1 AND ol_d_id = 4 AND ol_o_id = 5"
            ),
            [[lines, lines]]
        );
        assert_eq!(
            sql2("SELECT ol_o_id, ol_number FROM order_line WHERE ol_w_id = 1 AND ol_d_id = 4 AND ol_o_id BETWEEN 5 AND 6 ORDER BY ol_o_id, ol_number LIMIT 2"),
            [[5, 1], [5, 2]]
        );
        // Customer 1 of every district is named BARBARBAR (Clause 4.3.2.3).
        let named = sql2(
            "SELECT count(*), min(c_id) FROM customer WHERE c_w_id = 1 AND c_d_id = 2 AND c_last = 'BARBARBAR'",
        );
        assert!(named[0][0] >= 1 && named[0][1] == 1, "{named:?}");
        assert_eq!(sql2("SELECT count(*), max(w_id) FROM warehouse"), [[1, 1]]);
        db.shutdown().unwrap();
    }

    #[test]
    fn the_data_sets_show_the_tables_and_columns_of_the_systems_they_imitate() {
        use islands::server::tables::describe;
        let cases: [(Builtin, &str, &[&str]); 12] = [
            (Builtin::Tpcb { scale: 1 }, "SELECT * FROM pgbench_accounts WHERE aid = 1", &["aid", "bid", "abalance", "filler"]),
            (Builtin::Tpcb { scale: 1 }, "SELECT * FROM pgbench_branches WHERE bid = 1", &["bid", "bbalance", "filler"]),
            (Builtin::Tpcb { scale: 1 }, "SELECT * FROM pgbench_tellers WHERE tid = 1", &["tid", "bid", "tbalance", "filler"]),
            (Builtin::Tpcb { scale: 1 }, "SELECT * FROM pgbench_history", &["tid", "bid", "aid", "delta", "mtime", "filler"]),
            (Builtin::Ycsb { rows: 10 }, "SELECT * FROM usertable WHERE ycsb_key = 1", &["ycsb_key", "field0", "field1"]),
            (Builtin::Bank { accounts: 10 }, "SELECT * FROM accounts WHERE id = 1", &["id", "balance"]),
            (Builtin::Bank { accounts: 10 }, "SELECT * FROM transfers WHERE id = 1", &["id", "src", "dst", "amount"]),
            (Builtin::Micro { rows: 10 }, "SELECT * FROM micro WHERE key = 1", &["key", "val", "payload"]),
            (Builtin::Tpcc { warehouses: 1 }, "SELECT * FROM warehouse WHERE w_id = 1", &["w_id", "w_name", "w_street_1", "w_street_2", "w_city", "w_state", "w_zip", "w_tax", "w_ytd"]),
            (Builtin::Tpcc { warehouses: 1 }, "SELECT d_next_o_id, d_id FROM district WHERE d_w_id = 1 AND d_id = 2", &["d_next_o_id", "d_id"]),
            (Builtin::Tpcc { warehouses: 1 }, "SELECT c_id, c_balance FROM customer WHERE c_w_id = 1 AND c_d_id = 2 AND c_last = 'BARBARBAR'", &["c_id", "c_balance"]),
            (Builtin::Tpcc { warehouses: 1 }, "SELECT ol_number, ol_amount FROM order_line WHERE ol_w_id = 1 AND ol_d_id = 1 AND ol_o_id = 5 ORDER BY ol_number", &["ol_number", "ol_amount"]),
        ];
        for (b, sql, want) in cases {
            let (cols, _) = describe(sql, &b.catalog()).unwrap_or_else(|e| panic!("{sql}: {e:?}"));
            let names: Vec<&str> = cols.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names, want, "{sql}");
        }
        let tpcc = Builtin::Tpcc { warehouses: 1 }.catalog();
        for sql in [
            "SELECT count(*) FROM new_order WHERE no_w_id = 1 AND no_d_id = 3",
            "SELECT max(o_id) FROM orders WHERE o_w_id = 1 AND o_d_id = 3 AND o_c_id = 7",
            "SELECT s_quantity FROM stock WHERE s_w_id = 1 AND s_i_id = 5",
            "SELECT i_price FROM item WHERE i_id BETWEEN 1 AND 10",
            "SELECT sum(h_amount) FROM history",
            "UPDATE stock SET s_quantity = s_quantity - 1 WHERE s_w_id = 1 AND s_i_id = 5",
        ] {
            describe(sql, &tpcc).unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        }
        for (sql, code) in [
            ("INSERT INTO history (h_c_id) VALUES (1)", "0A000"),
            ("INSERT INTO warehouse (w_id) VALUES (2)", "0A000"),
            ("SELECT * FROM pgbench_accounts", "42P01"),
        ] {
            assert_eq!(describe(sql, &tpcc).unwrap_err().0, code, "{sql}");
        }
    }

    #[test]
    fn tpcb_branches_spread_over_the_islands_of_a_large_machine() {
        let b = Builtin::Tpcb { scale: 4 };
        let o = on_large_machine(&b, 4).unwrap();
        // The island each branch, and each of its tellers and accounts, is loaded on.
        let owner = std::sync::Mutex::new(std::collections::BTreeMap::new());
        let db = Deployment::open(o, b.catalog(), |l| {
            for bid in 1..=4u64 {
                let mine = [
                    (BRANCHES, bid),
                    (TELLERS, (bid - 1) * TELLERS_PER_BRANCH + 1),
                    (ACCOUNTS, bid * ACCOUNTS_PER_BRANCH),
                ]
                .map(|(t, k)| l.owns(t, k));
                if mine.contains(&true) {
                    assert_eq!(mine, [true; 3], "branch {bid}: its rows on one island");
                    owner.lock().unwrap().insert(bid, l.island());
                }
            }
            b.load(l)
        })
        .unwrap();
        db.shutdown().unwrap();
        let owner: Vec<(u64, usize)> = owner.into_inner().unwrap().into_iter().collect();
        assert_eq!(
            owner,
            vec![(1, 0), (2, 1), (3, 2), (4, 3)],
            "one branch per island"
        );
    }

    #[test]
    fn tpcb_refuses_sites_other_than_its_branches_and_more_islands_than_branches() {
        let b = Builtin::Tpcb { scale: 2 };
        let mut spec = DeploySpec::new(Islands::Count(2));
        spec.sites = Some(8);
        let e = b.place(&mut spec).unwrap_err().to_string();
        assert!(
            e.contains("its sites are its branches, 2") && e.contains("sites = 8"),
            "{e}"
        );
        let o = on_large_machine(&b, 4).unwrap();
        let topology = o.topology.clone().unwrap();
        let e = islands::deploy::plan(&topology, &o.spec).unwrap_err();
        let e = b.plan_error(e).to_string();
        assert!(
            e.contains("4 islands but only 2 sites") && e.contains("load 4 branches or more"),
            "{e}"
        );
    }
}
