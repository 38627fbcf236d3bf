//! A TPC-C run killed with SIGKILL in `sync` mode, recovered, and checked
//! against the consistency conditions of Clause 3.3.2.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use islands::cc::CcKind;
use islands::island::{Island, IslandConfig};
use islands::wal::Durability;
use islands_workloads::tpcc::{self, TpccConfig};

fn seed() -> u64 {
    std::env::var("ISLANDS_TPCC_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

/// Runs `islands bench <deployment> --durability sync … tpcc --warehouses 2`
/// with its log in `dir`, waits until the load is done, and kills it with
/// SIGKILL at a moment chosen by `seed`.
fn bench_and_kill(deployment: &[&str], dir: &std::path::Path, seed: u64) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_islands"))
        .arg("bench")
        .args(deployment)
        .args(["--durability", "sync", "--warmup", "0", "--duration", "120"])
        .args([
            "--progress",
            "plain",
            "--seed",
            &seed.to_string(),
            "--log-dir",
        ])
        .arg(dir)
        .args(["tpcc", "--warehouses", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the islands binary");
    // Wait until the run has started (the load is done and checkpointed).
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    loop {
        let line = lines
            .next()
            .expect("the benchmark ended before it started running")
            .unwrap();
        if line.contains("loaded in") {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    // Kill it at a random moment of the run.
    std::thread::sleep(Duration::from_millis(300 + seed % 1200));
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "the benchmark was supposed to be killed");
}

#[test]
fn tpcc_killed_in_sync_mode_recovers_consistent() {
    let seed = seed();
    println!("tpcc crash seed {seed} (replay with ISLANDS_TPCC_CRASH_SEED={seed})");
    let dir =
        std::env::temp_dir().join(format!("islands-tpcc-crash-{}-{seed}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    bench_and_kill(&["--workers", "2", "--cc", "occ"], &dir, seed);

    let cfg = TpccConfig {
        warehouses: 2,
        ..TpccConfig::default()
    };
    let island_dir = dir.join("island-0");
    let (island, report) = Island::open(
        IslandConfig::new(CcKind::None, 1).durable(Durability::Sync, &island_dir),
        &tpcc::schema::tables(&cfg),
    )
    .unwrap();
    println!("{report}");
    assert!(
        report.checkpoint_rows > 0,
        "the initial population was checkpointed"
    );
    let violations = tpcc::check(&island, &cfg).unwrap();
    assert!(
        violations.is_empty(),
        "seed {seed}: {} violations after recovery, first: {}",
        violations.len(),
        violations[0]
    );
    island.shutdown();
    drop(island);
    let _ = std::fs::remove_dir_all(&dir);
}

/// TPC-C on two islands (remote stock and customers through two-phase
/// commit), killed with SIGKILL in `sync` mode, then `islands tpcc check` on
/// the deployment's log directory: it recovers both islands, resolves the
/// branches the kill left in doubt, and the conditions hold across them.
#[test]
fn tpcc_on_two_islands_killed_in_sync_mode_recovers_consistent() {
    let seed = seed();
    println!("2-island tpcc crash seed {seed} (replay with ISLANDS_TPCC_CRASH_SEED={seed})");
    let dir =
        std::env::temp_dir().join(format!("islands-tpcc-crash2-{}-{seed}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    bench_and_kill(&["--islands", "2", "--placement", "os"], &dir, seed);

    let out = Command::new(env!("CARGO_BIN_EXE_islands"))
        .args(["tpcc", "check", "--warehouses", "2", "--log-dir"])
        .arg(&dir)
        .output()
        .expect("run islands tpcc check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stderr}{stdout}");
    assert!(
        out.status.success() && stdout.contains("hold"),
        "seed {seed}: the recovered deployment is inconsistent:\n{stderr}\n{stdout}"
    );
    assert!(
        stderr.contains("island-0") && stderr.contains("island-1"),
        "both islands were recovered"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
