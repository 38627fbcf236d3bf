//! `islands bench` on a log whose file system fills up: the run stops within
//! a bounded time, prints its report (the figures up to the stop) and the
//! error once, and exits 1. The full file system is the test hook
//! `ISLANDS_TEST_LOG_CAPACITY` (every island's log on one device that fails
//! writes with ENOSPC after that many bytes), so the test needs neither root
//! nor a small file system.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs bench with `args` and the log capacity `bytes`, killing it after
/// `limit` (a hang fails the test instead of hanging it).
fn bench_on_a_full_device(tag: &str, args: &[&str], bytes: u64, limit: Duration) {
    let dir =
        std::env::temp_dir().join(format!("islands-cli-deadlog-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let t = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_islands"))
        .arg("bench")
        .args(["--durability", "sync", "--warmup", "0", "--duration", "60"])
        .args(["--progress", "plain", "--log-dir"])
        .arg(&dir)
        .args(args)
        .env("ISLANDS_TEST_LOG_CAPACITY", bytes.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the islands binary");
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(&dir);
            panic!("{args:?}: still running {limit:?} after its log device filled up");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "the error is printed once: {stderr}");
    assert!(
        errors[0].contains("No space left on device") && errors[0].contains("island-"),
        "the error names the full device and the island's log: {}",
        errors[0]
    );
    assert!(
        stdout.contains("throughput") && stdout.contains("the run stopped after"),
        "the report of what ran before the stop is printed: {stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_full_log_device_stops_a_single_island_bench() {
    // The capacity leaves room for the load's checkpoint (about 2 MB of
    // 10,000 rows), which goes through the same device: the run fills it.
    bench_on_a_full_device(
        "one",
        &["--workers", "2", "micro", "--update", "--rows", "10000"],
        4 << 20,
        Duration::from_secs(10),
    );
}

#[test]
fn a_full_log_device_stops_a_bench_with_two_phase_commit_in_flight() {
    for round in 0..3 {
        bench_on_a_full_device(
            &format!("2pc-{round}"),
            &[
                "--islands",
                "2",
                "micro",
                "--update",
                "--multisite",
                "100",
                "--rows",
                "10000",
            ],
            (4096 + 64 * round) << 10,
            Duration::from_secs(10),
        );
    }
}
