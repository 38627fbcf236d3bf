//! `islands tpcc check`: recover a TPC-C island from its log directory and run
//! the consistency conditions of Clause 3.3.2 on it.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use islands::cc::CcKind;
use islands::island::{Island, IslandConfig};
use islands::wal::Durability;
use islands::Error;
use islands_workloads::tpcc::{self, TpccConfig};

#[derive(Args)]
pub struct TpccArgs {
    #[command(subcommand)]
    command: TpccCmd,
}

#[derive(Subcommand)]
enum TpccCmd {
    /// Recover an island's TPC-C database from its log directory (checkpoint + log)
    /// and check the consistency conditions 1-10 and 12 of Clause 3.3.2.
    /// A database written by `islands bench --durability sync --log-dir DIR tpcc` lives
    /// in DIR/island-0. Exit code 1 when a condition fails.
    Check(CheckArgs),
}

#[derive(Args)]
struct CheckArgs {
    /// The island's log directory (for example DIR/island-0).
    #[arg(long)]
    log_dir: PathBuf,
    /// Warehouses the database holds (as given to the benchmark).
    #[arg(long)]
    warehouses: u32,
    /// The order capacity the database was created with (as given to the benchmark).
    #[arg(long, default_value_t = 1_000_000)]
    max_orders_per_district: u32,
}

/// Ok(true) when every condition holds.
pub fn run(args: &TpccArgs) -> Result<bool, Error> {
    let TpccCmd::Check(a) = &args.command;
    if !a.log_dir.is_dir() {
        return Err(Error::Config(format!(
            "{} is not a directory",
            a.log_dir.display()
        )));
    }
    let cfg = TpccConfig {
        warehouses: a.warehouses,
        max_orders_per_district: a.max_orders_per_district,
        ..TpccConfig::default()
    };
    cfg.check()?;
    let island_cfg = IslandConfig::new(CcKind::None, 1).durable(Durability::Sync, &a.log_dir);
    let (island, report) = Island::open(island_cfg, &tpcc::schema::tables(&cfg))?;
    eprintln!("{}: {report}", a.log_dir.display());
    let violations = tpcc::check(&island, &cfg)?;
    island.shutdown();
    if violations.is_empty() {
        println!(
            "consistency conditions 1-10 and 12 hold for {} warehouse(s)",
            cfg.warehouses
        );
        Ok(true)
    } else {
        for v in &violations {
            println!("violation: {v}");
        }
        println!("{} violation(s)", violations.len());
        Ok(false)
    }
}
