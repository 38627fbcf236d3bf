//! Helpers shared by the integration tests.

use islands::api::{Catalog, Load, Options, Partition, ProcDef, Type, Value};
use islands::cc::CcKind;
use islands::deploy::{DeploySpec, Islands};
use islands::island::{Island, IslandConfig};
use islands::storage::{Col, ColType, PrimaryKind, TableDef, TableId};
use islands::Abort;

pub const ALL_CC: [CcKind; 4] = [CcKind::None, CcKind::NoWait, CcKind::WaitDie, CcKind::Occ];

/// Accounts table: key = account number, one balance column.
pub fn accounts(capacity: u64) -> TableDef {
    TableDef::new(
        "accounts",
        &[("balance", ColType::I64), ("pad", ColType::Str(24))],
        capacity,
        PrimaryKind::Hash,
    )
}

pub const BALANCE: Col = Col(0);

pub fn open_bank(cc: CcKind, workers: usize, accounts_n: u64, initial: i64) -> Island {
    let (island, _) = Island::open(
        IslandConfig::new(cc, workers),
        &[self::accounts(accounts_n * 2)],
    )
    .unwrap();
    {
        let mut l = island.loader().unwrap();
        for k in 0..accounts_n {
            l.put(0, k, |r| r.set_i64(BALANCE, initial)).unwrap();
        }
    }
    island
}

/// A unique empty directory under the system temp dir.
#[allow(dead_code)]
pub fn temp_dir(tag: &str) -> std::path::PathBuf {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!("islands-test-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The site-spread bank of the deployment tests (`api`, `blocks`): its
/// accounts are spread over [`SITES`] sites, [`PER_SITE`] a site, each
/// opened with [`INITIAL`] in its balance column [`BAL`].
pub const SITES: u64 = 4;
pub const PER_SITE: u64 = 100;
pub const INITIAL: i64 = 1000;
pub const BAL: Col = Col(0);

/// Adds the site-spread accounts table (`capacity` rows) to `c`.
pub fn site_accounts(c: &mut Catalog, capacity: u64) -> TableId {
    c.table(
        TableDef::new(
            "accounts",
            &[("balance", ColType::I64)],
            capacity,
            PrimaryKind::Ordered,
        ),
        Partition::BySite(|k| (k / PER_SITE) as u32),
    )
}

/// Loads the accounts of table `accounts` each site holds.
pub fn load_site_accounts(load: &mut Load<'_>, accounts: TableId) -> Result<(), islands::Error> {
    for site in load.sites() {
        for k in site as u64 * PER_SITE..(site as u64 + 1) * PER_SITE {
            load.put(accounts, k, |r| r.set_i64(BAL, INITIAL))?;
        }
    }
    Ok(())
}

/// Options of `islands` islands over the [`SITES`] sites, unpinned (tests
/// run side by side on a small machine), logging to `dir` if given.
pub fn site_options(islands: u32, durability: &str, dir: Option<&std::path::Path>) -> Options {
    let mut s = DeploySpec::new(Islands::Count(islands));
    s.durability = durability.into();
    s.sites = Some(SITES as u32);
    if let Some(d) = dir {
        s.log_dir = d.to_path_buf();
    }
    let mut o = Options::new(s);
    o.pin = false;
    o
}

/// `transfer(from, to, amount)` between accounts of table `accounts`
/// (balance column [`BAL`]), homed at the source account; a missing account
/// or a short balance rolls it back.
#[allow(dead_code)]
pub fn transfer_proc(accounts: TableId) -> ProcDef {
    ProcDef::new("transfer", move |tx, a, _| {
        Box::pin(async move {
            let (from, to, amount) = (a.int(0) as u64, a.int(1) as u64, a.int(2));
            let f = tx
                .get_for_update(accounts, from)
                .await?
                .ok_or(Abort::User("no such source account"))?;
            let t = tx
                .get_for_update(accounts, to)
                .await?
                .ok_or(Abort::User("no such target account"))?;
            if tx.row(f).i64(BAL) < amount {
                return Err(Abort::User("insufficient funds"));
            }
            let fb = tx.row(f).i64(BAL);
            tx.row_mut(f).set_i64(BAL, fb - amount);
            let tb = tx.row(t).i64(BAL);
            tx.row_mut(t).set_i64(BAL, tb + amount);
            Ok(())
        })
    })
    .param("from", Type::Int)
    .param("to", Type::Int)
    .param("amount", Type::Int)
    .home_by(0, accounts)
}

/// `balance(account)` of table `accounts`: one row, its balance.
#[allow(dead_code)]
pub fn balance_proc(accounts: TableId) -> ProcDef {
    ProcDef::new("balance", move |tx, a, out| {
        Box::pin(async move {
            let h = tx
                .get(accounts, a.int(0) as u64)
                .await?
                .ok_or(Abort::User("no such account"))?;
            out.push(vec![Value::Int(tx.row(h).i64(BAL))]);
            Ok(())
        })
    })
    .param("account", Type::Int)
    .column("balance", Type::Int)
    .home_by(0, accounts)
}
