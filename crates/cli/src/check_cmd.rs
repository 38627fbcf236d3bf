//! `islands check` and `islands repair`: a deployment's log directories, read without
//! writing, or cut where they are damaged.
//!
//! A check reads each island's control file (its identity and the workload that made
//! it), recovers the island into memory from its checkpoint and log without writing a
//! byte to the directory ([`islands::wal::read_only`]), resolves the branches of
//! distributed transactions that a crash left in doubt from the logs' commit decisions
//! (as the coordinators would: presumed abort), and checks the workload's invariants.
//! A repair is the one command that cuts a damaged log, and it says what it dropped.

use std::path::{Path, PathBuf};

use clap::Args;
use islands::cc::CcKind;
use islands::island::{commit_decisions, Island, IslandConfig, RecoveryReport};
use islands::wal::{self, Control, Durability, LogIdentity, OnDamage, Wal, WalConfig};
use islands::Error;
use islands_workloads::spec::{self, WorkloadSpec};

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
pub struct RepairArgs {
    /// The log directory (all its islands, DIR/island-<i>), or one island's DIR/island-<i>.
    #[arg(long)]
    log_dir: PathBuf,
    /// Cut each damaged log at its damage: truncate the segment there and delete every
    /// later one. Acknowledged transactions after the damage are lost; the command lists
    /// the transactions it dropped and exits with code 3.
    #[arg(long, required = true)]
    truncate_damaged_log: bool,
}

/// The island directories under `base`: `base/island-<i>` for every i, in order, or `base`
/// itself when it holds no island directory (one island's). `whole` says which.
pub(crate) struct Dirs {
    pub dirs: Vec<PathBuf>,
    pub whole: bool,
}

pub(crate) fn island_dirs(base: &Path) -> Result<Dirs, Error> {
    if !base.is_dir() {
        return Err(Error::Config(format!(
            "{} is not a directory",
            base.display()
        )));
    }
    if std::fs::read_dir(base)
        .map(|mut r| r.next().is_none())
        .unwrap_or(false)
    {
        return Err(Error::Config(format!(
            "{} is empty: there is no log or checkpoint to recover (give the --log-dir of an \
             `islands bench --durability sync ...` run)",
            base.display()
        )));
    }
    let mut dirs: Vec<(usize, PathBuf)> = std::fs::read_dir(base)
        .map_err(|e| Error::Io(format!("cannot read {}: {e}", base.display())))?
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
            base.display(),
            name_of(&w[0].1),
            name_of(&w[1].1),
            i = w[0].0
        )));
    }
    if let Some((pos, (i, _))) = dirs.iter().enumerate().find(|(pos, (i, _))| pos != i) {
        return Err(Error::Config(format!(
            "{}: island-{pos} is missing (found island-{i}): every island of the deployment is needed",
            base.display()
        )));
    }
    let whole = !dirs.is_empty();
    let dirs = if whole {
        dirs.into_iter().map(|(_, d)| d).collect()
    } else {
        vec![base.to_path_buf()]
    };
    // Every directory must hold a log before any is read.
    for d in &dirs {
        if !wal::holds_log(d)? {
            return Err(Error::Config(format!(
                "{} holds no log segment (wal-*.log) or checkpoint (ckpt-*.ckp): give the --log-dir \
                 of an `islands bench --durability sync ...` run",
                d.display()
            )));
        }
    }
    Ok(Dirs { dirs, whole })
}

pub(crate) fn name_of(p: &Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// A log directory's control file, which every directory with a log has.
fn control_of(dir: &Path) -> Result<Control, Error> {
    wal::read_control(dir)?.ok_or_else(|| {
        Error::from(wal::WalError::NoControl {
            dir: dir.to_path_buf(),
        })
    })
}

/// A deployment (or one island of it) recovered into memory, nothing written.
pub(crate) struct Recovered {
    pub dirs: Vec<PathBuf>,
    pub islands: Vec<(Island, RecoveryReport)>,
    pub specs: Vec<WorkloadSpec>,
    /// Every island of the deployment (`false`: one island of several).
    pub whole: bool,
}

impl Recovered {
    pub fn islands(&self) -> Vec<&Island> {
        self.islands.iter().map(|(i, _)| i).collect()
    }
}

/// Recovers the deployment (or island) in `base` into memory without writing to it.
/// `expect` may refuse the workload the control files name before any log is read.
pub(crate) fn recover_read_only(
    base: &Path,
    expect: impl Fn(&Path, &WorkloadSpec) -> Result<(), Error>,
) -> Result<Recovered, Error> {
    let Dirs { dirs, whole } = island_dirs(base)?;
    let controls = dirs
        .iter()
        .map(|d| control_of(d))
        .collect::<Result<Vec<_>, _>>()?;
    let first = &controls[0];
    if whole && first.islands as usize != dirs.len() {
        return Err(Error::Recovery(format!(
            "{} holds {} island directories, but {}'s control file says its deployment has {} \
             islands",
            base.display(),
            dirs.len(),
            name_of(&dirs[0]),
            first.islands
        )));
    }
    let mut specs = Vec::new();
    for (d, c) in dirs.iter().zip(&controls) {
        if c.workload.is_empty() {
            return Err(Error::Recovery(format!(
                "{}: its control file names no workload, so its tables are not known",
                d.display()
            )));
        }
        let spec: WorkloadSpec = c.workload.parse()?;
        expect(d, &spec)?;
        specs.push(spec);
    }
    let mut recs = Vec::new();
    for (i, ((d, c), spec)) in dirs.iter().zip(&controls).zip(&specs).enumerate() {
        let identity = LogIdentity {
            deployment: Some(first.deployment),
            island: if whole { i as u32 } else { c.island },
            islands: if whole { dirs.len() as u32 } else { c.islands },
            schema: islands::storage::schema_fingerprint(&spec.tables()),
            workload: c.workload.clone(),
        };
        recs.push(wal::read_only(d, &identity).map_err(|e| Error::from(e).context(&name_of(d)))?);
    }
    // One island of several: its branches in doubt wait for their coordinators' logs.
    let decisions = (whole || first.islands == 1).then(|| commit_decisions(&recs));
    let decide = |g: u64| decisions.as_ref().map(|d| d.contains(&g));
    let mut islands = Vec::new();
    for (i, (rec, spec)) in recs.into_iter().zip(&specs).enumerate() {
        let mut cfg = IslandConfig::new(CcKind::NoWait, 1);
        cfg.name = name_of(&dirs[i]);
        let resolve: Option<&dyn Fn(u64) -> Option<bool>> =
            decisions.as_ref().map(|_| &decide as _);
        let (island, report) = Island::open_in_memory(cfg, &spec.tables(), rec, resolve)?;
        eprintln!("{}: {report}", dirs[i].display());
        if report.resolved != (0, 0) {
            eprintln!(
                "{}: resolved {} branch(es) left in doubt from the logs: {} committed, {} aborted",
                dirs[i].display(),
                report.resolved.0 + report.resolved.1,
                report.resolved.0,
                report.resolved.1
            );
        }
        if !report.in_doubt.is_empty() {
            return Err(Error::Recovery(format!(
                "{} holds {} prepared branches of distributed transactions: check the whole \
                 deployment (give its base log directory) so that they can be resolved",
                dirs[i].display(),
                report.in_doubt.len()
            )));
        }
        islands.push((island, report));
    }
    Ok(Recovered {
        dirs,
        islands,
        specs,
        whole,
    })
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

/// Prints violations, or `ok`; Ok(true) when there are none.
pub(crate) fn report(violations: &[String], ok: &str) -> Result<bool, Error> {
    if violations.is_empty() {
        println!("{ok}");
        return Ok(true);
    }
    for v in violations {
        println!("violation: {v}");
    }
    println!("{} violation(s)", violations.len());
    Ok(false)
}

/// `islands repair`: Ok(true) when some damaged log was cut.
pub fn run_repair(a: &RepairArgs) -> Result<bool, Error> {
    if !a.truncate_damaged_log {
        return Err(Error::Config(
            "islands repair needs --truncate-damaged-log (it cuts damaged logs, losing what \
             follows the damage)"
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
        };
        cfg.on_damage = OnDamage::Truncate;
        let (log, rec) = Wal::open(cfg).map_err(|e| Error::from(e).context(&name_of(d)))?;
        log.shutdown();
        if let Some(t) = &rec.truncated {
            println!("{}: {t}", d.display());
        }
        match &rec.repaired {
            None => println!("{}: no damage", d.display()),
            Some(r) => {
                cut = true;
                println!("{}: {r}", d.display());
                println!(
                    "{}: dropped transactions (tid): {}",
                    d.display(),
                    list(&r.tids)
                );
                println!(
                    "{}: dropped distributed transactions (gtid): {}",
                    d.display(),
                    list(&r.gtids)
                );
            }
        }
    }
    if cut {
        eprintln!(
            "the log was cut: transactions after the damage are lost, acknowledged or not; \
             check the database with `islands check`"
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
