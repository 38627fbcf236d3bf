//! `islands tpcc check`: recover a TPC-C island from its log directory and run
//! the consistency conditions of Clause 3.3.2 on it.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use islands::cc::CcKind;
use islands::island::{CheckpointPolicy, Island, IslandConfig};
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
    if std::fs::read_dir(&a.log_dir)
        .map(|mut r| r.next().is_none())
        .unwrap_or(false)
    {
        return Err(Error::Config(format!(
            "{} is empty: there is no log or checkpoint to recover (give the --log-dir of an \
             `islands bench --durability sync ... tpcc` run)",
            a.log_dir.display()
        )));
    }
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
    // Two names of one number (island-01 and island-1) would otherwise
    // shift every later island and report one as missing.
    if let Some(w) = dirs.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(Error::Config(format!(
            "{}: {} and {} both name island {i} (islands bench writes island-{i}): move the one that \
             is not the deployment's away",
            a.log_dir.display(),
            name_of(&w[0].1),
            name_of(&w[1].1),
            i = w[0].0
        )));
    }
    // Opening an island creates a lock file and a log segment: check that
    // every directory holds a log before any is opened, so that one this
    // check rejects is left as it was.
    let islands_dirs: Vec<&Path> = if dirs.is_empty() {
        vec![&a.log_dir]
    } else {
        dirs.iter().map(|(_, d)| d.as_path()).collect()
    };
    for d in islands_dirs {
        if !islands::wal::holds_log(d)? {
            return Err(Error::Config(format!(
                "{} holds no log segment (wal-*.log) or checkpoint (ckpt-*.ckp): give the --log-dir \
                 of an `islands bench --durability sync ... tpcc` run",
                d.display()
            )));
        }
    }
    let violations = if dirs.is_empty() {
        let mut island_cfg =
            IslandConfig::new(CcKind::None, 1).durable(Durability::Sync, &a.log_dir);
        // A check writes no checkpoint of its own.
        island_cfg.checkpoint = CheckpointPolicy::OFF;
        let (island, report) = Island::open(island_cfg, &tpcc::schema::tables(&cfg))
            .map_err(|e| sized_wrong(&a.log_dir, &cfg, e))?;
        eprintln!("{}: {report}", a.log_dir.display());
        if !report.in_doubt.is_empty() {
            return Err(Error::Recovery(format!(
                "{} holds {} prepared branches of distributed transactions: check the whole deployment \
                 (give its base log directory) so that they can be resolved",
                a.log_dir.display(),
                report.in_doubt.len()
            )));
        }
        // One island of a deployment holds some of the warehouses, but none
        // above --warehouses.
        let found = warehouses_of(&island);
        let err = match &found {
            None => Some(wrong_count(&a.log_dir, 0, &cfg)),
            Some(r) if r.end - 1 > cfg.warehouses => Some(Error::Config(format!(
                "{} holds warehouse {}, but --warehouses is {}: give the number the benchmark ran with",
                a.log_dir.display(),
                r.end - 1,
                cfg.warehouses
            ))),
            Some(_) => None,
        };
        if let Some(e) = err {
            island.shutdown();
            return Err(e);
        }
        let v = tpcc::check(&island, &cfg)?;
        island.shutdown();
        (v, found.map_or(0, |r| r.len()))
    } else {
        if let Some((pos, (i, _))) = dirs.iter().enumerate().find(|(pos, (i, _))| pos != i) {
            return Err(Error::Config(format!(
                "{}: island-{pos} is missing (found island-{i}): every island of the deployment is needed",
                a.log_dir.display()
            )));
        }
        (check_deployment(&dirs, &cfg)?, cfg.warehouses as usize)
    };
    let (violations, checked) = violations;
    if violations.is_empty() {
        if checked == cfg.warehouses as usize {
            println!(
                "consistency conditions 1-10 and 12 hold for {} warehouse(s)",
                cfg.warehouses
            );
        } else {
            println!(
                "consistency conditions 1-10 and 12 hold for the {checked} of the {} warehouse(s) that this island holds",
                cfg.warehouses
            );
        }
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
        icfg.checkpoint = CheckpointPolicy::OFF;
        icfg.name = format!("island-{i}");
        icfg.contexts = opts.contexts_needed(1);
        let (island, report) =
            Island::open(icfg, &tpcc::schema::tables(cfg)).map_err(|e| sized_wrong(dir, cfg, e))?;
        eprintln!("{}: {report}", dir.display());
        in_doubt += report.in_doubt.len();
        // The island's warehouses, as its rows say.
        let Some(range) = warehouses_of(&island) else {
            return Err(Error::Recovery(format!(
                "{} holds no warehouse: not a TPC-C island",
                dir.display()
            )));
        };
        ranges.push(range);
        opened.push((island, report));
    }
    let found: usize = ranges.iter().map(|r| r.len()).sum();
    if found != cfg.warehouses as usize {
        let base = dirs[0].1.parent().unwrap_or(&dirs[0].1);
        return Err(wrong_count(base, found, cfg));
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

fn name_of(p: &Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
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

/// A database with another number of warehouses than --warehouses says: its
/// checks would pass or fail for the wrong reason.
fn wrong_count(dir: &Path, found: usize, cfg: &TpccConfig) -> Error {
    if found == 0 {
        return Error::Recovery(format!(
            "{} holds no warehouse: no TPC-C database was recovered from it",
            dir.display()
        ));
    }
    Error::Config(format!(
        "{} holds {found} warehouse(s), but --warehouses is {}: give the number the benchmark ran with",
        dir.display(),
        cfg.warehouses
    ))
}

/// Recovery into tables sized by --warehouses and --max-orders-per-district
/// overflows them when those are smaller than the benchmark's.
fn sized_wrong(dir: &Path, cfg: &TpccConfig, e: Error) -> Error {
    match e {
        Error::TableFull { table, capacity } => Error::Recovery(format!(
            "{}: the log holds more rows of table '{table}' than the {capacity} that --warehouses {} \
             and --max-orders-per-district {} make room for: give the values the benchmark ran with",
            dir.display(),
            cfg.warehouses,
            cfg.max_orders_per_district
        )),
        e => e,
    }
}
