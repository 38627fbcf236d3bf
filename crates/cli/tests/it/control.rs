//! What the control files (`CONTROL`) record and how a damaged one is rebuilt: a database
//! whose load never completed is refused by `bench --resume` before anything runs, and
//! `islands repair --rebuild-control` rebuilds a flipped, truncated or deleted control
//! file so that `islands check` passes again with every record it recovered before.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn islands(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_islands"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run the islands binary")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    )
}

fn base(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("islands-cli-control-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// `islands bench` on two islands with a log in `dir`, for 0.3 s.
fn bench(dir: &Path, extra: &[&str], workload: &[&str], env: &[(&str, &str)]) -> Output {
    let mut args = vec![
        "bench",
        "--islands",
        "2",
        "--placement",
        "os",
        "--durability",
        "sync",
        "--warmup",
        "0",
        "--duration",
        "0.3",
        "--progress",
        "quiet",
        "--log-segment-bytes",
        "65536",
        "--log-dir",
        dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(workload);
    islands(&args, env)
}

const MICRO: [&str; 6] = ["micro", "--update", "--rows", "2000", "--n", "4"];
const TPCC2: [&str; 5] = [
    "tpcc",
    "--warehouses",
    "2",
    "--max-orders-per-district",
    "20000",
];

/// A load that failed midway (its checkpoint hit a full device) leaves control files
/// that say the load never completed: `--resume` refuses up front with exit 2, naming
/// the directory, and runs nothing on the empty tables.
#[test]
fn resume_refuses_a_database_whose_load_never_completed() {
    let b = base("half-load");
    let out = bench(&b, &[], &MICRO, &[("ISLANDS_TEST_LOG_CAPACITY", "20000")]);
    assert!(!out.status.success(), "the load fit: {}", text(&out));
    let out = bench(&b, &["--resume"], &MICRO, &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(
        t.contains("never completely loaded") && t.contains(&b.display().to_string()),
        "{t}"
    );
    assert!(!t.contains("txn/s"), "a run went on: {t}");
    let _ = std::fs::remove_dir_all(&b);
}

/// Spoils a control file.
type Damage = fn(&Path);

/// What `islands check` recovered, island by island: rows and records, without times.
fn recovered(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.contains("recovered"))
        .map(|l| l.split(" in ").next().unwrap_or(l).to_string())
        .collect()
}

/// A control file flipped, truncated or deleted (on either island) is refused by the
/// check; `repair --rebuild-control` rebuilds it from the checkpoint, the segments and
/// the other island's control file, and the check then passes, recovering every row and
/// record it recovered before. With every control file gone, the deployment id is not
/// known, and the repair refuses (changing nothing) until it is given.
#[test]
fn rebuild_control_restores_a_flipped_truncated_or_deleted_control_file() {
    let b = base("rebuild");
    let out = bench(&b, &[], &TPCC2, &[]);
    assert!(out.status.success(), "{}", text(&out));
    let dir = b.to_str().unwrap();
    let check = ["check", "--log-dir", dir];
    let rebuild = ["repair", "--log-dir", dir, "--rebuild-control"];
    let out = islands(&check, &[]);
    assert!(out.status.success(), "{}", text(&out));
    let before = recovered(&out);
    assert_eq!(before.len(), 2, "{}", text(&out));
    // Each island's line names its incarnation: the bench opened it at least once.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("recovered")).collect();
    assert!(
        lines
            .iter()
            .all(|l| l.contains("(incarnation ") && !l.contains("(incarnation 0)")),
        "{stderr}"
    );
    let damages: [(&str, Damage); 3] = [
        ("flipped", |p| {
            let mut d = std::fs::read(p).unwrap();
            d[30] ^= 4;
            std::fs::write(p, d).unwrap();
        }),
        ("truncated", |p| {
            let d = std::fs::read(p).unwrap();
            std::fs::write(p, &d[..d.len() / 2]).unwrap();
        }),
        ("deleted", |p| std::fs::remove_file(p).unwrap()),
    ];
    for island in [1, 0] {
        for (what, damage) in &damages {
            let ctl = b.join(format!("island-{island}")).join("CONTROL");
            damage(&ctl);
            let out = islands(&check, &[]);
            assert_eq!(out.status.code(), Some(2), "{what}: {}", text(&out));
            assert!(text(&out).contains("--rebuild-control"), "{}", text(&out));
            let out = islands(&rebuild, &[]);
            let t = text(&out);
            assert!(out.status.success(), "{what} island {island}: {t}");
            assert!(
                t.contains("rebuilt: deployment") && t.contains("load complete"),
                "{t}"
            );
            let out = islands(&check, &[]);
            assert!(out.status.success(), "{what}: {}", text(&out));
            assert_eq!(recovered(&out), before, "{what} island {island}");
        }
    }
    // Nothing to rebuild.
    let out = islands(&rebuild, &[]);
    assert!(text(&out).contains("nothing rebuilt"), "{}", text(&out));
    // Every control file gone: the deployment id is not known.
    for i in 0..2 {
        std::fs::remove_file(b.join(format!("island-{i}")).join("CONTROL")).unwrap();
    }
    let out = islands(&rebuild, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--deployment"), "{}", text(&out));
    assert!(!b.join("island-0").join("CONTROL").exists());
    let mut given = rebuild.to_vec();
    given.extend_from_slice(&["--deployment", "0123456789abcdef0123456789abcdef"]);
    let out = islands(&given, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--workload"), "{}", text(&out));
    given.extend_from_slice(&[
        "--workload",
        "tpcc warehouses=2 max_orders_per_district=20000",
    ]);
    let out = islands(&given, &[]);
    assert!(out.status.success(), "{}", text(&out));
    let out = islands(&check, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(recovered(&out), before);
    // And the benchmark goes on from it.
    let out = bench(&b, &["--resume"], &TPCC2, &[]);
    assert!(out.status.success(), "{}", text(&out));
    let _ = std::fs::remove_dir_all(&b);
}
