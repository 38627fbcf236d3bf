//! `islands bench --processes`: one process per island joined by `uds` or
//! `shm`, their reports merged into one (commits the sum of the processes',
//! latency from the summed histograms, traffic per distributed commit), and
//! a process that fails failing the run with its own error.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `islands bench --processes` with `args`, killing it after `limit`;
/// returns its output and its run directory (which must be gone after it).
fn bench(args: &[&str], env: &[(&str, &str)], limit: Duration) -> (Output, std::path::PathBuf) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_islands"));
    cmd.args(["bench", "--processes", "--progress", "quiet"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let t = Instant::now();
    let mut child = cmd.spawn().expect("run the islands binary");
    let run_dir = std::env::temp_dir().join(format!("islands-bench-{}-procs", child.id()));
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?}: still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (child.wait_with_output().unwrap(), run_dir)
}

fn temp(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("islands-cli-bprocs-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The options of a short 2-island micro run on a described machine.
fn micro_run<'a>(transport: &'a str, json: &'a str, duration: &'a str) -> Vec<&'a str> {
    vec![
        "--transport",
        transport,
        "--topology",
        "1x2",
        "--islands",
        "2",
        "--workers-per-island",
        "1",
        "--warmup",
        "0.3",
        "--duration",
        duration,
        "--json",
        json,
    ]
}

/// The merged report's figures against its processes' own.
fn check_merged(r: &serde_json::Value) {
    assert_eq!(r["processes"], 2, "{r}");
    let per = r["per_process"].as_array().unwrap();
    assert_eq!(per.len(), 2, "{r}");
    let committed = r["committed"].as_u64().unwrap();
    assert!(committed > 0, "{r}");
    let each: Vec<u64> = per
        .iter()
        .map(|p| p["committed"].as_u64().unwrap())
        .collect();
    assert!(
        each.iter().all(|&c| c > 0),
        "every island committed: {each:?}"
    );
    assert_eq!(committed, each.iter().sum::<u64>());
    let tps = r["throughput_tps"].as_f64().unwrap();
    let each_tps: f64 = per
        .iter()
        .map(|p| p["throughput_tps"].as_f64().unwrap())
        .sum();
    assert!(
        tps > 0.0 && (tps - each_tps).abs() <= 1e-6 * tps,
        "{tps} vs {each_tps}"
    );
    // The latency figures come from both processes' histograms, summed.
    assert_eq!(r["latency"]["samples"].as_u64().unwrap(), committed, "{r}");
    assert!(r["distributed"].as_u64().unwrap() > 0, "{r}");
    let x = &r["traffic"];
    assert!(x["distributed_commits"].as_u64().unwrap() > 0, "{x}");
    let frames = x["frames"].as_f64().unwrap();
    let per_commit = x["frames_per_distributed_commit"].as_f64().unwrap();
    assert!(per_commit > 0.0, "{x}");
    assert!(
        (per_commit - frames / x["distributed_commits"].as_f64().unwrap()).abs() < 1e-9,
        "{x}"
    );
}

#[test]
fn two_island_processes_over_uds_and_shm_merge_their_reports() {
    let dir = temp("merge");
    for transport in ["uds", "shm"] {
        let json = dir.join(format!("{transport}.json"));
        let mut args = micro_run(transport, json.to_str().unwrap(), "1");
        // Durability off: with a log, two-phase commit's forced records
        // sometimes stall for the whole of a 1-second run on a loaded machine.
        args.extend(["--durability", "off"]);
        args.extend(["micro", "--rows", "20000", "--update", "--multisite", "20"]);
        let (out, run_dir) = bench(&args, &[], Duration::from_secs(120));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{transport}: {stderr}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("processes   2, one per island"),
            "{transport}: {stdout}"
        );
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        check_merged(&r);
        assert!(
            !run_dir.exists(),
            "{transport}: the run directory {} is left",
            run_dir.display()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_process_that_fails_fails_the_run_with_its_error() {
    let dir = temp("fail");
    let log = dir.join("log");
    let json = dir.join("r.json");
    let mut args = micro_run("uds", json.to_str().unwrap(), "60");
    args.extend(["--log-dir", log.to_str().unwrap()]);
    args.extend(["micro", "--rows", "2000", "--update", "--multisite", "20"]);
    // Every process's log device fills up after 2 MB.
    let env = [("ISLANDS_TEST_LOG_CAPACITY", "2000000")];
    let (out, run_dir) = bench(&args, &env, Duration::from_secs(50));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("process exited with exit code 1") && stderr.contains("No space left"),
        "the parent names the process and passes its error on: {stderr}"
    );
    assert!(!json.exists(), "no report of a run that failed");
    assert!(
        !run_dir.exists(),
        "the run directory {} is left",
        run_dir.display()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn what_a_run_of_processes_cannot_do_is_refused() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["--transport", "inproc", "micro"],
            "--transport inproc joins islands of one process",
        ),
        (&["--islands", "1", "micro"], "this plan has one island"),
        (&["--islands", "2", "inserts"], "runs micro, ycsb or tpcc"),
        (
            &[
                "--islands",
                "2",
                "--resume",
                "--log-dir",
                "/nonexistent",
                "micro",
            ],
            "--resume",
        ),
    ];
    for (args, says) in cases {
        let (out, _) = bench(args, &[], Duration::from_secs(30));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
