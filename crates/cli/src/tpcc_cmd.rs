//! `islands tpcc check`: recover a TPC-C deployment from its log directories into
//! memory, writing nothing there, and run the consistency conditions of Clause 3.3.2.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use islands::island::Island;
use islands::Error;
use islands_workloads::tpcc::{self, TpccConfig};

use crate::recovery::{recover_read_only, report};

#[derive(Args)]
pub struct TpccArgs {
    #[command(subcommand)]
    command: TpccCmd,
}

#[derive(Subcommand)]
enum TpccCmd {
    /// Recover a TPC-C database from its log directories (checkpoint + log) into memory,
    /// writing nothing to them, and check the consistency conditions 1-10 and 12 of
    /// Clause 3.3.2. A database written by `islands bench --durability sync --log-dir DIR
    /// tpcc` lives in DIR/island-<i>: give DIR to recover every island together (branches
    /// of distributed transactions left in doubt by a crash are resolved from the logs'
    /// decisions first), or one DIR/island-<i>. Exit code 1 when a condition fails.
    Check(CheckArgs),
}

#[derive(Args)]
struct CheckArgs {
    /// The benchmark's log directory DIR (all its islands), or one island's DIR/island-<i>.
    #[arg(long)]
    log_dir: PathBuf,
    /// Warehouses the database holds (as given to the benchmark).
    #[arg(long)]
    warehouses: u32,
    /// The order capacity the database was created with (default: what its control file
    /// says; given, it must be the same).
    #[arg(long)]
    max_orders_per_district: Option<u32>,
}

/// Ok(true) when every condition holds.
pub fn run(args: &TpccArgs) -> Result<bool, Error> {
    let TpccCmd::Check(a) = &args.command;
    TpccConfig {
        warehouses: a.warehouses,
        max_orders_per_district: a.max_orders_per_district.unwrap_or(1_000_000),
        ..TpccConfig::default()
    }
    .check()?;
    check(&a.log_dir, Some(a.warehouses), a.max_orders_per_district)
}

/// Recovers the TPC-C deployment (or island) in `base` into memory, writing nothing
/// there, and checks the consistency conditions; `warehouses` and `max_orders`, when
/// given, must be what the database was made with. Ok(true) when every condition holds.
pub fn check(base: &Path, warehouses: Option<u32>, max_orders: Option<u32>) -> Result<bool, Error> {
    let r = recover_read_only(base, |dir, spec| {
        let Some(cfg) = spec.tpcc() else {
            return Err(Error::Config(format!(
                "{} holds workload '{spec}', not TPC-C: check it with `islands check`",
                dir.display()
            )));
        };
        if let Some(w) = warehouses.filter(|&w| w != cfg.warehouses) {
            return Err(Error::Config(format!(
                "{} holds {} warehouse(s), but --warehouses is {w}: give the number the benchmark \
                 ran with",
                dir.display(),
                cfg.warehouses
            )));
        }
        if let Some(m) = max_orders.filter(|&m| m != cfg.max_orders_per_district) {
            return Err(Error::Config(format!(
                "{} was made with --max-orders-per-district {}, not {m}",
                dir.display(),
                cfg.max_orders_per_district
            )));
        }
        Ok(())
    })?;
    let cfg = r.specs[0].tpcc().expect("checked: TPC-C");
    let agreed = crate::check_cmd::check_two_pc(&r);
    let islands = r.islands();
    // The warehouses the islands hold, as their rows say.
    let mut found = 0;
    for (island, dir) in islands.iter().zip(&r.dirs) {
        match warehouses_of(island) {
            None => {
                return Err(Error::Recovery(format!(
                    "{} holds no warehouse: no TPC-C database was recovered from it",
                    dir.display()
                )))
            }
            Some(w) if w.end - 1 > cfg.warehouses => {
                return Err(Error::Recovery(format!(
                    "{} holds warehouse {}, but its database has {}",
                    dir.display(),
                    w.end - 1,
                    cfg.warehouses
                )))
            }
            Some(w) => found += w.len(),
        }
    }
    if r.whole && found != cfg.warehouses as usize {
        return Err(Error::Recovery(format!(
            "{} holds {found} warehouse(s), but its control files say {}",
            base.display(),
            cfg.warehouses
        )));
    }
    let violations: Vec<String> = if r.whole {
        let all: Vec<Island> = islands.iter().map(|i| (*i).clone()).collect();
        tpcc::check::check_islands(&all, &cfg)?
    } else {
        tpcc::check(islands[0], &cfg)?
    }
    .iter()
    .map(|v| v.to_string())
    .collect();
    let ok = if found == cfg.warehouses as usize {
        format!(
            "consistency conditions 1-10 and 12 hold for {} warehouse(s)",
            cfg.warehouses
        )
    } else {
        format!(
            "consistency conditions 1-10 and 12 hold for the {found} of the {} warehouse(s) that \
             this island holds",
            cfg.warehouses
        )
    };
    Ok(report(&violations, &ok)? && agreed)
}

/// The warehouses an island holds, as its rows say; `None` when it holds none.
fn warehouses_of(island: &Island) -> Option<std::ops::Range<u32>> {
    let mut lo = u32::MAX;
    let mut hi = 0;
    island
        .catalog()
        .table(tpcc::schema::WAREHOUSE)
        .for_each_row(|k, _, _| {
            lo = lo.min(k as u32);
            hi = hi.max(k as u32);
        });
    (hi > 0).then_some(lo..hi + 1)
}
