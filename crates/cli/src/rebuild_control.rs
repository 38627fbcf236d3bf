//! `islands repair --rebuild-control`: rebuilds the control files (`CONTROL`) of a
//! deployment's islands that lost theirs (deleted, truncated, a bad checksum), as
//! conservatively as `pg_resetwal`: it prints what it decided, and refuses whatever it
//! cannot establish without guessing.
//!
//! The identity a control file holds comes from the other islands' valid control files
//! (deployment id, island count, site count, whether the load completed, and the workload
//! when it is one that is the same on every island), else from the operator's flags
//! (`--deployment`, `--workload`, `--sites`); the island's number from its directory's name
//! (`island-<i>`); the schema fingerprint from the workload's tables (checked against the
//! other islands'), or, for a workload whose tables are not known here (`api`), from the
//! other islands'. The extent (checkpoint, segments, last durable batch) comes from the
//! directory itself ([`islands::wal::rebuild_control`]). The rebuilt directory is then
//! read back as `islands check` reads it, without writing.

use std::path::{Path, PathBuf};

use islands::wal::{self, Control, LogIdentity, WalError};
use islands::Error;
use islands_workloads::spec::WorkloadSpec;

use crate::recovery::{island_dirs, name_of, Dirs};

/// What the operator gives beside the directories.
pub(crate) struct Given<'a> {
    pub deployment: Option<&'a str>,
    pub workload: Option<&'a str>,
    pub sites: Option<u32>,
}

/// One island directory and what its control file is now.
struct Found {
    dir: PathBuf,
    control: Option<Control>,
    /// Why the control file needs rebuilding (`None`: it is valid).
    damage: Option<String>,
}

/// Rebuilds every missing or damaged control file under `base`.
pub(crate) fn run(base: &Path, given: &Given<'_>) -> Result<(), Error> {
    let Dirs { dirs, whole } = island_dirs(base)?;
    if !whole {
        if let Some(parent) = base.parent().filter(|_| island_number(base).is_some()) {
            return Err(Error::Config(format!(
                "{} is one island of a deployment: give the deployment's directory ({}), so \
                 that the other islands' control files can be read",
                base.display(),
                parent.display()
            )));
        }
    }
    let mut found = Vec::with_capacity(dirs.len());
    for d in &dirs {
        let (control, damage) = match wal::read_control(d) {
            Ok(Some(c)) => (Some(c), None),
            Ok(None) => (None, Some("there is no control file".to_string())),
            Err(e @ WalError::CorruptControl { .. }) => (None, Some(e.to_string())),
            Err(e) => return Err(e.into()),
        };
        found.push(Found {
            dir: d.clone(),
            control,
            damage,
        });
    }
    if found.iter().all(|f| f.damage.is_none()) {
        println!(
            "every control file under {} is valid: nothing rebuilt",
            base.display()
        );
        return Ok(());
    }
    let valid: Vec<&Control> = found.iter().filter_map(|f| f.control.as_ref()).collect();
    let islands = dirs.len() as u32;
    let deployment = agreed(&valid, "deployment id", |c| c.deployment)?;
    let deployment = match (deployment, given.deployment) {
        (Some(d), None) => d,
        (Some(d), Some(g)) => {
            let g = parse_deployment(g)?;
            if g != d {
                return Err(Error::Config(format!(
                    "--deployment {g:032x} is not the deployment {d:032x} of the other islands' \
                     control files"
                )));
            }
            d
        }
        (None, Some(g)) => parse_deployment(g)?,
        (None, None) if islands == 1 => wal::new_deployment_id(),
        (None, None) => {
            return Err(Error::Config(format!(
                "no island under {} has a valid control file, so the deployment id its islands \
                 share is not known: give --deployment with 32 hex digits (any one, the same \
                 for all) if you are sure these directories are one database",
                base.display()
            )))
        }
    };
    if let Some(c) = valid.iter().find(|c| c.islands != islands) {
        return Err(Error::Config(format!(
            "{} holds {islands} island directories, but the valid control files say the \
             deployment has {} islands",
            base.display(),
            c.islands
        )));
    }
    let sites = match (agreed(&valid, "site count", |c| c.sites)?, given.sites) {
        (Some(s), Some(g)) if s != 0 && s != g => {
            return Err(Error::Config(format!(
                "--sites {g} is not the site count {s} of the other islands' control files"
            )))
        }
        (_, Some(g)) => g,
        (Some(s), None) => s,
        (None, None) => 0,
    };
    let loaded = agreed(&valid, "initial load", |c| c.loaded)?;
    let schema = agreed(&valid, "schema", |c| c.schema)?;
    let workload = match (given.workload, shared_workload(&valid)?) {
        (Some(g), Some(w)) if g != w => {
            return Err(Error::Config(format!(
                "--workload '{g}' is not the workload '{w}' of the other islands' control files"
            )))
        }
        (Some(g), _) => g.to_string(),
        (None, Some(w)) => w,
        (None, None) => {
            return Err(Error::Config(
                "the workload that made the database is not known from the other islands' \
                 control files (it differs from island to island, or none is valid): give \
                 --workload as `islands bench` recorded it (e.g. 'micro rows=2000 row_bytes=100 \
                 n=4 keys=0..1000')"
                    .into(),
            ))
        }
    };
    let schema = match (workload.parse::<WorkloadSpec>(), schema) {
        (Ok(spec), s) => {
            let own = islands::storage::schema_fingerprint(&spec.tables());
            if s.is_some_and(|s| s != own) {
                return Err(Error::Config(format!(
                    "workload '{workload}' has schema {own:016x}, and the other islands' \
                     control files say {:016x}",
                    s.unwrap_or_default()
                )));
            }
            own
        }
        (Err(_), Some(s)) => s,
        (Err(e), None) => {
            return Err(Error::Config(format!(
                "the tables of workload '{workload}' are not known ({e}), and no other island's \
                 control file gives their schema"
            )))
        }
    };
    for (i, f) in found.iter().enumerate() {
        let Some(why) = &f.damage else {
            println!("{}: CONTROL is valid; left as it is", f.dir.display());
            continue;
        };
        let island = if whole {
            i as u32
        } else {
            island_number(&f.dir).unwrap_or(0)
        };
        let id = LogIdentity {
            deployment: Some(deployment),
            island,
            islands,
            schema,
            workload: workload.clone(),
            sites,
        };
        println!("{}: rebuilding CONTROL: {why}", f.dir.display());
        let r = wal::rebuild_control(&f.dir, &id, loaded)
            .map_err(|e| Error::from(e).context(&name_of(&f.dir)))?;
        if let Some(k) = &r.kept {
            println!(
                "{}: the damaged file is kept as {}",
                f.dir.display(),
                k.display()
            );
        }
        for n in &r.notes {
            println!("{}: {n}", f.dir.display());
        }
        let c = &r.control;
        println!(
            "{}: rebuilt: deployment {:032x}, island {} of {}, schema {:016x}, workload '{}', \
             sites {}, load {}, checkpoint {}, segments {}..{}, durable through batch {}",
            f.dir.display(),
            c.deployment,
            c.island,
            c.islands,
            c.schema,
            c.workload,
            if c.sites == 0 {
                "not recorded".to_string()
            } else {
                c.sites.to_string()
            },
            if c.loaded { "complete" } else { "not complete" },
            c.checkpoint,
            c.first_segment,
            c.last_segment,
            c.durable
        );
        // Read back as a check reads it: nothing is written.
        wal::read_only(&f.dir, &id).map_err(|e| {
            Error::from(e).context(&format!(
                "{}: the rebuilt control file does not recover",
                name_of(&f.dir)
            ))
        })?;
    }
    eprintln!(
        "control files rebuilt; check the database with `islands check --log-dir {}`",
        base.display()
    );
    Ok(())
}

/// The value every valid control file holds (`None`: there is none); an error when they
/// disagree.
fn agreed<T: PartialEq + Copy + std::fmt::Debug>(
    valid: &[&Control],
    what: &str,
    of: impl Fn(&Control) -> T,
) -> Result<Option<T>, Error> {
    let mut seen = None;
    for c in valid {
        match seen {
            None => seen = Some(of(c)),
            Some(s) if s != of(c) => {
                return Err(Error::Config(format!(
                    "the valid control files disagree on the {what} ({s:?} and {:?}): they are \
                     not of one database, and nothing is rebuilt",
                    of(c)
                )))
            }
            Some(_) => {}
        }
    }
    Ok(seen)
}

/// The workload of the valid control files when it is the same on every island of a
/// deployment (TPC-C, a data set `islands serve` loaded, or tables not known here); a
/// workload that describes each island's own share of the rows (`keys=...`) is not.
fn shared_workload(valid: &[&Control]) -> Result<Option<String>, Error> {
    let mut seen: Option<&str> = None;
    for c in valid {
        match seen {
            None => seen = Some(&c.workload),
            Some(s) if s != c.workload => return Ok(None),
            Some(_) => {}
        }
    }
    Ok(seen
        .filter(|w| {
            !w.is_empty()
                && match w.parse::<WorkloadSpec>() {
                    Ok(WorkloadSpec::Tpcc { .. } | WorkloadSpec::Served(_)) => true,
                    Ok(_) => false,
                    Err(_) => true,
                }
        })
        .map(str::to_string))
}

fn parse_deployment(s: &str) -> Result<u128, Error> {
    u128::from_str_radix(s.trim(), 16).map_err(|_| {
        Error::Config(format!(
            "--deployment '{s}' is not a deployment id (32 hex digits, as `islands check` errors \
             print them)"
        ))
    })
}

/// `n` of a directory named `island-<n>`.
fn island_number(dir: &Path) -> Option<u32> {
    dir.file_name()?
        .to_str()?
        .strip_prefix("island-")?
        .parse()
        .ok()
}
