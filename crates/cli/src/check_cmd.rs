//! `islands check` and `islands repair`: a deployment's log directories, read without
//! writing, or cut where they are damaged.
//!
//! A check reads each island's control file (its identity and the workload that made
//! it), recovers the island into memory from its checkpoint and log without writing a
//! byte to the directory ([`islands::wal::read_only`]), resolves the branches of
//! distributed transactions that a crash left in doubt from the logs' commit decisions
//! (as the coordinators would: presumed abort), and checks the workload's invariants.
//! Over the logs of several islands it also checks two-phase commit: every island
//! logged the same decision for each distributed transaction, and no gtid names two
//! transactions (see [`check_two_pc`]).
//! A repair is the one command that cuts a damaged log, and it says what it dropped.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;
use islands::coord::{home_of, Gtid, LogRec};
use islands::island::Island;
use islands::wal::{self, Durability, OnDamage, Wal, WalConfig};
use islands::Error;
use islands_workloads::spec::{self, WorkloadSpec};

use crate::recovery::{
    control_of, island_dirs, name_of, recover_read_only, report, Dirs, Recovered,
};

/// Exit code of `islands repair` when it cut damaged log (acknowledged work may be lost).
pub const EXIT_LOG_CUT: u8 = 3;

#[derive(Args)]
pub struct CheckArgs {
    /// The log directory of an `islands bench --durability sync|async --log-dir DIR` run (all
    /// its islands, DIR/island-<i>), or one island's DIR/island-<i>. Given all the islands,
    /// the check also reads their two-phase-commit records: every island that logged a
    /// decision for a distributed transaction logged the same one, and no log prepares,
    /// decides or ends one gtid more often than a single transaction would (a gtid used
    /// twice). Checkpoints truncate the logs: only the records still in them are checked.
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
    let agreed = check_two_pc(&r);
    if let WorkloadSpec::Served(b) = &r.specs[0] {
        // One island's directory is the whole database when it is the only one.
        let whole = r.whole || control_of(&r.dirs[0])?.islands == 1;
        let c = b.check_islands(&r.islands(), whole);
        return Ok(report(&c.violations, &format!("consistent: {}", c.checked))? && agreed);
    }
    let pairs: Vec<(&Island, &WorkloadSpec)> =
        r.islands.iter().map(|(i, _)| i).zip(&r.specs).collect();
    let violations = spec::check(&pairs)?;
    let what = if r.whole {
        format!("{} island(s)", r.dirs.len())
    } else {
        format!("island {}", name_of(&r.dirs[0]))
    };
    let held = report(
        &violations,
        &format!("{} invariants hold on {what}", r.specs[0].name()),
    )?;
    Ok(held && agreed)
}

/// Checks the two-phase-commit records of the recovered logs ([`two_pc_violations`]) and
/// prints what it found: `2PC: N distributed transactions, every island agrees`, or each
/// violation. Nothing is printed for logs without 2PC records of one island alone. True
/// when there is no violation.
pub(crate) fn check_two_pc(r: &Recovered) -> bool {
    let logs: Vec<IslandLog> = r
        .islands
        .iter()
        .zip(&r.dirs)
        .enumerate()
        .map(|(i, ((_, rep), dir))| IslandLog {
            island: rep.control.as_ref().map_or(i as u32, |c| c.island),
            name: name_of(dir),
            records: &rep.two_pc,
        })
        .collect();
    let (gtids, violations) = two_pc_violations(&logs);
    if violations.is_empty() {
        if logs.len() > 1 {
            println!("2PC: {gtids} distributed transactions, every island agrees");
        } else if gtids > 0 {
            println!(
                "2PC: {gtids} distributed transactions in {}'s log, no gtid used twice",
                logs[0].name
            );
        }
        return true;
    }
    for v in &violations {
        println!("violation: 2PC: {v}");
    }
    println!(
        "2PC: {} violation(s) in {gtids} distributed transactions",
        violations.len()
    );
    false
}

/// One island's two-phase-commit records, in log order.
pub(crate) struct IslandLog<'a> {
    pub island: u32,
    pub name: String,
    pub records: &'a [LogRec],
}

/// What one log holds of one gtid.
#[derive(Default)]
struct Logged {
    prepares: u32,
    commits: u32,
    aborts: u32,
    ends: u32,
}

/// The distributed transactions the logs name (distinct gtids) and every way the logs
/// break two-phase commit (presumed abort, see `islands::coord`):
///
/// - islands logged different decisions for one gtid, or one island both;
/// - a log prepares a gtid twice, or decides it more often than its roles there do: a
///   participant decides its branch once, and its home island twice at most (the
///   coordinator's commit decision, and its own branch's); a gtid named by two
///   transactions, as an island that restarted and handed out a gtid again would make;
/// - a log ends a gtid twice, or an island other than its home ends it (only the
///   coordinator writes `End`).
///
/// The order of records within a log is not checked: a branch's records may go to the log
/// in different batches than its coordinator's.
pub(crate) fn two_pc_violations(logs: &[IslandLog<'_>]) -> (usize, Vec<String>) {
    // For each gtid, what each log (by position in `logs`) holds of it.
    let mut seen: BTreeMap<Gtid, Vec<(usize, Logged)>> = BTreeMap::new();
    for (at, log) in logs.iter().enumerate() {
        for r in log.records {
            let per = seen.entry(r.gtid()).or_default();
            if per.last().is_none_or(|(i, _)| *i != at) {
                per.push((at, Logged::default()));
            }
            let Some((_, l)) = per.last_mut() else {
                continue;
            };
            match *r {
                LogRec::Prepare { .. } => l.prepares += 1,
                LogRec::Decision { commit: true, .. } => l.commits += 1,
                LogRec::Decision { commit: false, .. } => l.aborts += 1,
                LogRec::End { .. } => l.ends += 1,
            }
        }
    }
    let mut v = Vec::new();
    for (&g, per) in &seen {
        let home = u32::from(home_of(g));
        let what = format!("gtid {g:#x} (home island {home})");
        let (mut commit_by, mut abort_by) = (Vec::new(), Vec::new());
        for (at, l) in per {
            let log = &logs[*at];
            let name = &log.name;
            if l.commits > 0 {
                commit_by.push(log);
            }
            if l.aborts > 0 {
                abort_by.push(log);
            }
            if l.commits > 0 && l.aborts > 0 {
                v.push(format!(
                    "{what}: {name} logged both commit ({}x) and abort ({}x)",
                    l.commits, l.aborts
                ));
            }
            if l.prepares > 1 {
                v.push(format!(
                    "{what}: {name}'s log prepares it {} times: one gtid names several \
                     transactions",
                    l.prepares
                ));
            }
            let most = if log.island == home { 2 } else { 1 };
            if l.commits > most || l.aborts > 1 {
                v.push(format!(
                    "{what}: {name}'s log decides it {} times (at most {most} at {}): one gtid \
                     names several transactions",
                    l.commits + l.aborts,
                    if most == 2 {
                        "its home island"
                    } else {
                        "a participant"
                    }
                ));
            }
            if l.ends > 1 {
                v.push(format!(
                    "{what}: {name}'s log ends it {} times: one gtid names several transactions",
                    l.ends
                ));
            }
            if l.ends > 0 && log.island != home {
                v.push(format!(
                    "{what}: {name} logged its End, which only its home island's coordinator \
                     writes"
                ));
            }
        }
        let split = commit_by
            .iter()
            .any(|c| abort_by.iter().any(|a| a.island != c.island));
        if split {
            let names = |logs: &[&IslandLog]| {
                logs.iter()
                    .map(|l| l.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            v.push(format!(
                "{what}: the islands disagree: commit logged by {}, abort logged by {}",
                names(&commit_by),
                names(&abort_by)
            ));
        }
    }
    (seen.len(), v)
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
        cfg.identity = c.identity();
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

#[cfg(test)]
mod tests {
    use super::*;
    use islands::coord::gtid;

    fn prepare(g: Gtid) -> LogRec {
        LogRec::Prepare { gtid: g }
    }
    fn decide(g: Gtid, commit: bool) -> LogRec {
        LogRec::Decision { gtid: g, commit }
    }
    fn end(g: Gtid) -> LogRec {
        LogRec::End { gtid: g }
    }

    fn check(logs: &[Vec<LogRec>]) -> (usize, Vec<String>) {
        let logs: Vec<IslandLog> = logs
            .iter()
            .enumerate()
            .map(|(i, r)| IslandLog {
                island: i as u32,
                name: format!("island-{i}"),
                records: r,
            })
            .collect();
        two_pc_violations(&logs)
    }

    /// What a run logs: a commit with the home's own branch (two commit decisions at
    /// the home), an abort a participant logged alone, a commit whose home log a
    /// checkpoint cut, and a branch left in doubt.
    #[test]
    fn a_deployment_that_kept_the_protocol_passes() {
        let (a, b, c, d) = (gtid(0, 1), gtid(0, 2), gtid(1, 7), gtid(2, 9));
        let logs = [
            vec![
                prepare(a),
                decide(a, true),
                decide(a, true),
                end(a),
                prepare(d),
            ],
            vec![prepare(a), decide(a, true), prepare(b), decide(b, false)],
            vec![prepare(c), decide(c, true)],
        ];
        assert_eq!(check(&logs), (4, vec![]));
    }

    #[test]
    fn islands_that_logged_different_decisions_are_named() {
        let g = gtid(0, 5);
        let logs = [
            vec![prepare(g), decide(g, true)],
            vec![],
            vec![prepare(g), decide(g, false)],
        ];
        let (n, v) = check(&logs);
        assert_eq!(n, 1);
        assert_eq!(
            v,
            [format!(
                "gtid {g:#x} (home island 0): the islands disagree: commit logged by island-0, \
                 abort logged by island-2"
            )]
        );
    }

    #[test]
    fn one_island_that_logged_both_decisions_is_named() {
        let g = gtid(1, 3);
        let (_, v) = check(&[vec![prepare(g), decide(g, false), decide(g, true)]]);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].contains("island-0 logged both commit (1x) and abort (1x)"),
            "{v:?}"
        );
    }

    /// A gtid handed out again by a later incarnation of its home: a second Prepare at
    /// a participant, a third commit decision at the home, a second End.
    #[test]
    fn a_gtid_used_twice_is_named() {
        let g = gtid(0, 4);
        let twice = [prepare(g), decide(g, true)].repeat(2);
        let (_, v) = check(&[vec![], twice]);
        assert!(
            v.iter()
                .any(|v| v.contains("island-1's log prepares it 2 times")),
            "{v:?}"
        );
        assert!(
            v.iter()
                .any(|v| v
                    .contains("island-1's log decides it 2 times (at most 1 at a participant)")),
            "{v:?}"
        );
        let home = [prepare(g), decide(g, true), decide(g, true), end(g)].repeat(2);
        let (_, v) = check(&[home, vec![]]);
        assert!(
            v.iter()
                .any(|v| v.contains("decides it 4 times (at most 2 at its home island)")),
            "{v:?}"
        );
        assert!(v.iter().any(|v| v.contains("ends it 2 times")), "{v:?}");
    }

    #[test]
    fn an_end_away_from_the_home_island_is_named() {
        let g = gtid(2, 1);
        let (_, v) = check(&[vec![end(g)]]);
        assert!(v[0].contains("island-0 logged its End"), "{v:?}");
    }
}
