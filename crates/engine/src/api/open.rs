//! Opening the islands of a deployment: the one path that a [`super::Deployment`],
//! the server (which opens a `Deployment`) and `islands bench` take.
//!
//! Opening is two steps:
//! 1. [`open_islands`] judges the islands' log directories as a whole (a new
//!    database everywhere, or a loaded one everywhere: never a mix), checks
//!    that every island named by the configurations belongs to one deployment,
//!    and opens (recovers) each island given. It may be every island of the
//!    deployment, or only those that run in this process; the others' logs
//!    are theirs to judge.
//! 2. For a new database, [`load_islands`] loads every island at once, each on
//!    a thread pinned to one of its CPUs (first-touch placement of its rows),
//!    checkpoints each load, and only then marks each island loaded in its
//!    control file, so that a load that stops anywhere is never served.

use std::path::{Path, PathBuf};

use crate::island::{judge_deployment_dirs, Island, IslandConfig, Opening, RecoveryReport};
use crate::storage::TableDef;
use crate::Error;

/// What an opening accepts in the islands' log directories.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// A new database only: every directory empty or absent.
    Fresh,
    /// A loaded database only.
    Recover,
    /// Whichever the directories hold.
    Either,
}

/// Islands opened by [`open_islands`], in the order of their configurations.
pub struct Opened {
    pub islands: Vec<(Island, RecoveryReport)>,
    /// What the directories held (always [`Opening::Fresh`] without a log).
    pub opening: Opening,
}

impl Opened {
    /// Whether the islands hold a new database, to be loaded.
    pub fn fresh(&self) -> bool {
        self.opening == Opening::Fresh
    }

    /// The islands, without their recovery reports.
    pub fn islands(&self) -> Vec<Island> {
        self.islands.iter().map(|(i, _)| i.clone()).collect()
    }
}

/// The log directory of island `i` of a deployment whose logs are under `base`.
pub fn island_dir(base: &Path, i: usize) -> PathBuf {
    base.join(format!("island-{i}"))
}

/// The deployment id recorded in the first of `dirs` that holds a control file
/// (`None`: none does, the database is new). Each island's open checks its
/// own control file against the id it is given.
pub fn recorded_deployment(dirs: &[PathBuf]) -> Result<Option<u128>, Error> {
    for d in dirs {
        if d.is_dir() {
            if let Some(c) = crate::wal::read_control(d)? {
                return Ok(Some(c.deployment));
            }
        }
    }
    Ok(None)
}

/// Judges the log directories of `configs` (see the module documentation)
/// against `expect`, then opens each island with the tables `tables(id)`
/// gives for its island id. Refuses, before any island is opened (opening
/// one writes to its directory), a database whose load never completed, one
/// of whose islands' logs is lost, or one that `expect` does not accept.
pub fn open_islands(
    configs: Vec<IslandConfig>,
    tables: impl Fn(usize) -> Vec<TableDef>,
    expect: Expect,
) -> Result<Opened, Error> {
    let dirs: Vec<PathBuf> = configs
        .iter()
        .filter(|c| c.durability != crate::wal::Durability::Off)
        .filter_map(|c| c.log_dir.clone())
        .collect();
    // The deployment's island count: every configuration names it (1 for an
    // island opened on its own).
    let total = configs
        .iter()
        .map(|c| c.islands.max(1) as usize)
        .max()
        .unwrap_or(1);
    if configs.iter().any(|c| c.islands.max(1) as usize != total) {
        return Err(Error::Config(
            "the islands to open disagree on the deployment's island count".into(),
        ));
    }
    let opening = if dirs.is_empty() {
        Opening::Fresh
    } else {
        judge_deployment_dirs(&dirs, total)?
    };
    let listed = || {
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (expect, &opening) {
        (Expect::Recover, Opening::Fresh) => {
            return Err(Error::Config(format!(
                "no database to recover: {} hold(s) none",
                if dirs.is_empty() {
                    "the islands have no log and".to_string()
                } else {
                    listed()
                }
            )))
        }
        (Expect::Fresh, Opening::Recover { .. }) => {
            return Err(Error::Config(format!(
                "{} already hold(s) a database, and a new one is to be loaded (remove it, or \
                 recover it)",
                listed()
            )))
        }
        _ => {}
    }
    let mut islands = Vec::with_capacity(configs.len());
    for cfg in configs {
        let id = cfg.island_id as usize;
        islands.push(Island::open(cfg, &tables(id))?);
    }
    Ok(Opened { islands, opening })
}

/// Loads a new database into `islands`: `load(id, island)` for each island at
/// once, each on its own thread, pinned to `cpu(id)` when that is given (for
/// the first-touch placement of its rows; a pin refused by the machine is
/// ignored). Each island's load is checkpointed; once all are, each island is
/// marked loaded. The first error (or a panic of a load) is returned, and no
/// island is marked loaded then.
pub fn load_islands(
    islands: &[Island],
    cpu: impl Fn(usize) -> Option<usize> + Sync,
    load: impl Fn(usize, &Island) -> Result<(), Error> + Sync,
) -> Result<(), Error> {
    std::thread::scope(|scope| -> Result<(), Error> {
        let handles: Vec<_> = islands
            .iter()
            .map(|island| {
                let (load, cpu) = (&load, &cpu);
                scope.spawn(move || -> Result<(), Error> {
                    let id = island.config().island_id as usize;
                    if let Some(c) = cpu(id) {
                        let _ = crate::topology::pin_to(c);
                    }
                    load(id, island)?;
                    if island.wal().is_some() {
                        // The initial population becomes durable as a checkpoint.
                        island.checkpoint()?;
                    }
                    Ok(())
                })
            })
            .collect();
        let mut first = None;
        for h in handles {
            let r = h
                .join()
                .unwrap_or_else(|_| Err(Error::Config("a load thread panicked".into())));
            if let (Err(e), None) = (r, &first) {
                first = Some(e);
            }
        }
        first.map_or(Ok(()), Err)
    })?;
    for island in islands {
        island.mark_loaded()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::CcKind;
    use crate::storage::{ColType, PrimaryKind};
    use crate::wal::Durability;

    fn tables(_: usize) -> Vec<TableDef> {
        vec![TableDef::new(
            "t",
            &[("v", ColType::U64)],
            64,
            PrimaryKind::Hash,
        )]
    }

    fn configs(base: &Path, n: usize, deployment: u128) -> Vec<IslandConfig> {
        (0..n)
            .map(|i| {
                let mut c = IslandConfig::new(CcKind::NoWait, 1);
                c.name = format!("island-{i}");
                c.island_id = i as u32;
                c.islands = n as u32;
                c.deployment = Some(deployment);
                c.durability = Durability::Sync;
                c.log_dir = Some(island_dir(base, i));
                c
            })
            .collect()
    }

    #[test]
    fn a_load_that_fails_marks_no_island_loaded_and_a_complete_one_recovers() {
        let dir = tempfile::tempdir().unwrap();
        let id = crate::wal::new_deployment_id();
        let o = open_islands(configs(dir.path(), 2, id), tables, Expect::Fresh).unwrap();
        assert!(o.fresh());
        let islands = o.islands();
        let r = load_islands(
            &islands,
            |_| None,
            |i, _| {
                if i == 1 {
                    Err(Error::Config("load of island 1 failed".into()))
                } else {
                    Ok(())
                }
            },
        );
        assert!(r.unwrap_err().to_string().contains("island 1 failed"));
        for i in islands {
            i.shutdown();
        }
        // Never marked loaded: refused as a database whose load never completed.
        assert!(open_islands(configs(dir.path(), 2, id), tables, Expect::Either).is_err());

        let dir = tempfile::tempdir().unwrap();
        let o = open_islands(configs(dir.path(), 2, id), tables, Expect::Fresh).unwrap();
        let islands = o.islands();
        load_islands(
            &islands,
            |_| None,
            |_, island| {
                let mut l = island.loader()?;
                l.put(0, 7, |r| r.set_u64(crate::storage::Col(0), 7))?;
                Ok(())
            },
        )
        .unwrap();
        for i in islands {
            i.shutdown();
        }
        let dirs: Vec<PathBuf> = (0..2).map(|i| island_dir(dir.path(), i)).collect();
        assert_eq!(recorded_deployment(&dirs).unwrap(), Some(id));
        let e = open_islands(configs(dir.path(), 2, id), tables, Expect::Fresh)
            .err()
            .unwrap();
        assert!(e.to_string().contains("already hold"), "{e}");
        let o = open_islands(configs(dir.path(), 2, id), tables, Expect::Recover).unwrap();
        assert!(!o.fresh());
        for (i, _) in o.islands {
            i.shutdown();
        }
        // One island opened alone recovers too.
        let one = configs(dir.path(), 2, id).split_off(1);
        let o = open_islands(one, tables, Expect::Recover).unwrap();
        assert_eq!(o.islands.len(), 1);
        assert_eq!(o.islands[0].0.config().island_id, 1);
    }
}
