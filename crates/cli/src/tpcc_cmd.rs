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
    /// Recover a TPC-C database from its log directories (checkpoint + log) and check
    /// the consistency conditions 1-10 and 12 of Clause 3.3.2. A database written by
    /// `islands bench --durability sync --log-dir DIR tpcc` lives in DIR/island-<i>: give
    /// DIR to recover every island together (branches of distributed transactions left
    /// in doubt by a crash are resolved between them first), or one DIR/island-<i>.
    /// Exit code 1 when a condition fails.
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
    let mut dirs: Vec<(usize, PathBuf)> = std::fs::read_dir(&a.log_dir)
        .map_err(|e| Error::Io(format!("cannot read {}: {e}", a.log_dir.display())))?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let i: usize = name.strip_prefix("island-")?.parse().ok()?;
            e.path().is_dir().then_some((i, e.path()))
        })
        .collect();
    dirs.sort();
    let violations = if dirs.is_empty() {
        let island_cfg = IslandConfig::new(CcKind::None, 1).durable(Durability::Sync, &a.log_dir);
        let (island, report) = Island::open(island_cfg, &tpcc::schema::tables(&cfg))?;
        eprintln!("{}: {report}", a.log_dir.display());
        if !report.in_doubt.is_empty() {
            return Err(Error::Recovery(format!(
                "{} holds {} prepared branches of distributed transactions: check the whole deployment \
                 (give its base log directory) so that they can be resolved",
                a.log_dir.display(),
                report.in_doubt.len()
            )));
        }
        let v = tpcc::check(&island, &cfg)?;
        island.shutdown();
        v
    } else {
        if let Some((pos, (i, _))) = dirs.iter().enumerate().find(|(pos, (i, _))| pos != i) {
            return Err(Error::Config(format!(
                "{}: island-{pos} is missing (found island-{i}): every island of the deployment is needed",
                a.log_dir.display()
            )));
        }
        check_deployment(&dirs, &cfg)?
    };
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

/// Recovers every island of a deployment, lets their executors resolve the
/// branches a crash left in doubt (the coordinators' logs decide), and checks
/// the islands together.
fn check_deployment(
    dirs: &[(usize, PathBuf)],
    cfg: &TpccConfig,
) -> Result<Vec<tpcc::Violation>, Error> {
    use islands::dist::run::{run_to_completion, ClusterWorker};
    use islands::dist::{Cluster, ClusterOptions};
    let opts = ClusterOptions {
        inflight: 1,
        // Room for every branch a crash can leave in doubt (the most a bench run
        // allows per island).
        max_branches: 4000,
        ..Default::default()
    };
    let mut opened = Vec::new();
    let mut ranges = Vec::new();
    let mut in_doubt = 0;
    for (i, dir) in dirs {
        let mut icfg = IslandConfig::new(CcKind::NoWait, 1).durable(Durability::Sync, dir);
        icfg.name = format!("island-{i}");
        icfg.contexts = opts.contexts_needed(1);
        let (island, report) = Island::open(icfg, &tpcc::schema::tables(cfg))?;
        eprintln!("{}: {report}", dir.display());
        in_doubt += report.in_doubt.len();
        // The island's warehouses, as its rows say.
        let mut lo = u32::MAX;
        let mut hi = 0;
        island
            .catalog()
            .table(tpcc::schema::WAREHOUSE)
            .for_each_row(|k, _, _| {
                lo = lo.min(k as u32);
                hi = hi.max(k as u32);
            });
        if hi == 0 {
            return Err(Error::Recovery(format!(
                "{} holds no warehouse: not a TPC-C island",
                dir.display()
            )));
        }
        ranges.push(lo..hi + 1);
        opened.push((island, report));
    }
    let islands: Vec<Island> = opened.iter().map(|(i, _)| i.clone()).collect();
    if dirs.len() > 1 {
        let router = tpcc::TpccRouter::new(&ranges)?;
        let n = opened.len();
        let cl = Cluster::new(opened, vec![1; n], std::sync::Arc::new(router), opts)?;
        let workers: Vec<ClusterWorker> = (0..n)
            .map(|i| ClusterWorker {
                island: i,
                worker: 0,
                cpu: None,
                limit: Some(0),
            })
            .collect();
        let homes = ranges.iter().map(|r| r.start).collect();
        let w = tpcc::Tpcc::new(cfg.clone(), homes)?;
        run_to_completion(&cl, &workers, std::sync::Arc::new(w), 1)?;
        if in_doubt > 0 {
            eprintln!("resolved {in_doubt} branch(es) left in doubt by the crash");
        }
    }
    let v = tpcc::check::check_islands(&islands, cfg)?;
    for i in &islands {
        i.shutdown();
    }
    Ok(v)
}
