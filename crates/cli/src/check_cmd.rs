//! `islands check` and `islands repair`: a deployment's log directories, read without
//! writing, or cut where they are damaged.
//!
//! A check reads each island's control file (its identity and the workload that made
//! it), recovers the island into memory from its checkpoint and log without writing a
//! byte to the directory ([`islands::wal::read_only`]), resolves the branches of
//! distributed transactions that a crash left in doubt from the logs' commit decisions
//! (as the coordinators would: presumed abort), and checks the workload's invariants.
//! A repair is the one command that cuts a damaged log, and it says what it dropped.

use std::path::PathBuf;

use clap::Args;
use islands::island::Island;
use islands::wal::{self, Durability, LogIdentity, OnDamage, Wal, WalConfig};
use islands::Error;
use islands_workloads::spec::{self, WorkloadSpec};

use crate::recovery::{control_of, island_dirs, name_of, recover_read_only, report, Dirs};

/// Exit code of `islands repair` when it cut damaged log (acknowledged work may be lost).
pub const EXIT_LOG_CUT: u8 = 3;

#[derive(Args)]
pub struct CheckArgs {
    /// The log directory of an `islands bench --durability sync|async --log-dir DIR` run (all
    /// its islands, DIR/island-<i>), or one island's DIR/island-<i>.
    #[arg(long)]
    log_dir: PathBuf,
}

#[derive(Args)]
#[command(group(
    clap::ArgGroup::new("repair")
        .required(true)
        .args(["truncate_damaged_log", "rebuild_control"])
))]
pub struct RepairArgs {
    /// The log directory (all its islands, DIR/island-<i>), or one island's DIR/island-<i>.
    #[arg(long)]
    log_dir: PathBuf,
    /// Repair each damaged log: set aside (into its set-aside/ directory) files that are not
    /// part of it, rename misnamed segments back, and cut it at its damage: truncate the
    /// segment there and set every later one aside. No file is deleted. Acknowledged
    /// transactions after the damage are lost; the command lists what it kept, set aside
    /// and dropped, and exits with code 3 when it dropped records.
    #[arg(long)]
    truncate_damaged_log: bool,
    /// Rebuild each island's missing or damaged control file (CONTROL) from its newest
    /// checkpoint, its segments and the other islands' control files; anything ambiguous
    /// is refused. Give the deployment's directory.
    #[arg(long)]
    rebuild_control: bool,
    /// With --rebuild-control: the deployment id (32 hex digits), when no island has a
    /// valid control file to take it from.
    #[arg(long, requires = "rebuild_control")]
    deployment: Option<String>,
    /// With --rebuild-control: the workload that made the database, as its control
    /// files recorded it, when the other islands' do not say it.
    #[arg(long, requires = "rebuild_control")]
    workload: Option<String>,
    /// With --rebuild-control: the site count the database was made with, when the
    /// other islands' control files do not say it.
    #[arg(long, requires = "rebuild_control")]
    sites: Option<u32>,
}

/// `islands check`: Ok(true) when every invariant holds.
pub fn run_check(a: &CheckArgs) -> Result<bool, Error> {
    let spec_of = wal::read_control(&island_dirs(&a.log_dir)?.dirs[0])?;
    let is_tpcc = spec_of
        .and_then(|c| c.workload.parse::<WorkloadSpec>().ok())
        .is_some_and(|s| s.tpcc().is_some());
    if is_tpcc {
        return crate::tpcc_cmd::check(&a.log_dir, None, None);
    }
    let r = recover_read_only(&a.log_dir, |_, _| Ok(()))?;
    if let WorkloadSpec::Served(b) = &r.specs[0] {
        // One island's directory is the whole database when it is the only one.
        let whole = r.whole || control_of(&r.dirs[0])?.islands == 1;
        let c = b.check_islands(&r.islands(), whole);
        return report(&c.violations, &format!("consistent: {}", c.checked));
    }
    let pairs: Vec<(&Island, &WorkloadSpec)> =
        r.islands.iter().map(|(i, _)| i).zip(&r.specs).collect();
    let violations = spec::check(&pairs)?;
    let what = if r.whole {
        format!("{} island(s)", r.dirs.len())
    } else {
        format!("island {}", name_of(&r.dirs[0]))
    };
    report(
        &violations,
        &format!("{} invariants hold on {what}", r.specs[0].name()),
    )
}

/// `islands repair`: Ok(true) when some log lost records (it was cut at damage, or ends
/// before what its control files say was durable). A repair deletes no file: what it
/// takes out of a log goes into the log directory's `set-aside/`.
pub fn run_repair(a: &RepairArgs) -> Result<bool, Error> {
    if a.rebuild_control {
        if a.truncate_damaged_log {
            return Err(Error::Config(
                "give --rebuild-control or --truncate-damaged-log, not both: rebuild the \
                 control files first, then cut a damaged log"
                    .into(),
            ));
        }
        let given = crate::rebuild_control::Given {
            deployment: a.deployment.as_deref(),
            workload: a.workload.as_deref(),
            sites: a.sites,
        };
        crate::rebuild_control::run(&a.log_dir, &given)?;
        return Ok(false);
    }
    if !a.truncate_damaged_log {
        return Err(Error::Config(
            "islands repair needs --truncate-damaged-log (it cuts damaged logs, losing what \
             follows the damage) or --rebuild-control"
                .into(),
        ));
    }
    let Dirs { dirs, .. } = island_dirs(&a.log_dir)?;
    let mut cut = false;
    for d in &dirs {
        let c = control_of(d)?;
        let mut cfg = WalConfig::new(d, Durability::Sync);
        cfg.identity = LogIdentity {
            deployment: Some(c.deployment),
            island: c.island,
            islands: c.islands,
            schema: c.schema,
            workload: c.workload.clone(),
            sites: c.sites,
        };
        cfg.on_damage = OnDamage::Truncate;
        let (log, rec) = Wal::open(cfg).map_err(|e| Error::from(e).context(&name_of(d)))?;
        let kept = log.segments();
        log.shutdown();
        let d = d.display();
        if let Some(t) = &rec.truncated {
            println!("{d}: {t}");
        }
        match &rec.repaired {
            None => println!("{d}: no damage"),
            Some(r) => {
                cut |= r.lost();
                if let Some(c) = &r.cut {
                    println!("{d}: {c}");
                    println!("{d}: dropped transactions (tid): {}", list(&c.tids));
                    println!(
                        "{d}: dropped distributed transactions (gtid): {}",
                        list(&c.gtids)
                    );
                }
                if let Some(s) = &r.shortfall {
                    println!("{d}: {s}");
                }
                for (from, to) in &r.renamed {
                    println!(
                        "{d}: renamed {} to {}: the name its first batch gives",
                        from.display(),
                        to.display()
                    );
                }
                for a in &r.set_aside {
                    println!("{d}: {a}");
                }
            }
        }
        // What the log holds now.
        let segments = match (kept.first(), kept.last()) {
            (Some(a), Some(b)) if a != b => format!("{} to {}", name_of(a), name_of(b)),
            (Some(a), _) => name_of(a),
            _ => "none".into(),
        };
        let batches = match (rec.records.first(), rec.records.last()) {
            (Some(a), Some(b)) => format!("batches {}..={}", a.seq(), b.seq()),
            _ => "no batch".into(),
        };
        let checkpoint = rec.checkpoint.as_ref().map_or(String::new(), |c| {
            format!(", after the checkpoint of batches below {}", c.start_seq)
        });
        println!(
            "{d}: kept {} segment(s) ({segments}): {} record(s) in {batches}{checkpoint}",
            kept.len(),
            rec.records.len(),
        );
    }
    if cut {
        eprintln!(
            "the log was cut: transactions after the damage are lost, acknowledged or not \
             (every file the repair took out of a log is in its {}/ directory); check the \
             database with `islands check`",
            wal::SET_ASIDE_DIR
        );
    }
    Ok(cut)
}

fn list(ids: &[u64]) -> String {
    if ids.is_empty() {
        return "none found".into();
    }
    let shown: Vec<String> = ids.iter().take(50).map(|t| format!("{t:#x}")).collect();
    let more = ids.len().saturating_sub(50);
    if more > 0 {
        format!("{} and {more} more", shown.join(" "))
    } else {
        shown.join(" ")
    }
}
