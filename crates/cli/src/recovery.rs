//! A deployment's log directories read without writing a byte to them: the
//! island directories under a base, their control files, every island
//! recovered into memory (branches left in doubt resolved from the logs'
//! decisions), and the report of a check's violations. `islands check` and
//! `islands tpcc check` both stand on it.

use std::path::{Path, PathBuf};

use islands::cc::CcKind;
use islands::island::{commit_decisions, Island, IslandConfig, RecoveryReport};
use islands::wal::{self, Control, LogIdentity};
use islands::Error;
use islands_workloads::spec::WorkloadSpec;

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
pub(crate) fn control_of(dir: &Path) -> Result<Control, Error> {
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
            sites: c.sites,
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
        eprintln!(
            "{}: {report} (incarnation {})",
            dirs[i].display(),
            controls[i].incarnation
        );
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
