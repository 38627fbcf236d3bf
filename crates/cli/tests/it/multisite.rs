//! `islands bench` on several islands: a deployment file, multisite
//! transactions through two-phase commit, and the refusals.

use std::process::{Command, Output};

fn islands(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_islands"))
        .args(args)
        .output()
        .expect("run the islands binary")
}

#[test]
fn a_deployment_file_runs_multisite_transactions_across_two_islands() {
    let dir = std::env::temp_dir().join(format!("islands-cli-multisite-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let toml = dir.join("deployment.toml");
    std::fs::write(
        &toml,
        "[deployment]\nislands = 2\nplacement = \"os\"\ncc = \"no_wait\"\ndurability = \"off\"\n",
    )
    .unwrap();
    let json = dir.join("result.json");
    let out = islands(&[
        "bench",
        "--config",
        toml.to_str().unwrap(),
        "--warmup",
        "0.1",
        "--duration",
        "0.5",
        "--progress",
        "quiet",
        "--json",
        json.to_str().unwrap(),
        "--phases",
        "micro",
        "--rows",
        "20000",
        "--multisite",
        "100",
        "--update",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(
        r["deployment"].as_str().unwrap().starts_with("2 islands"),
        "{r}"
    );
    let committed = r["committed"].as_u64().unwrap();
    let distributed = r["distributed"].as_u64().unwrap();
    assert!(committed > 0);
    // A multisite transaction has 9 rows drawn from all 20,000: almost all span both islands.
    assert!(
        distributed * 10 > committed * 9,
        "{distributed} of {committed} commits distributed"
    );
    // The phase counters add up to no more than the workers' time per
    // transaction, and distributed transactions spend some on messages.
    let p = &r["phases"];
    let us = |k: &str| p[k].as_f64().unwrap_or_else(|| panic!("no {k} in {p}"));
    let busy: f64 = [
        "execution_us_per_txn",
        "management_us_per_txn",
        "communication_us_per_txn",
        "locking_us_per_txn",
        "logging_us_per_txn",
    ]
    .iter()
    .map(|k| us(k))
    .sum();
    let wall =
        r["threads"].as_f64().unwrap() * r["measured_s"].as_f64().unwrap() * 1e6 / committed as f64;
    assert!(
        us("execution_us_per_txn") > 0.0 && us("communication_us_per_txn") > 0.0,
        "{p}"
    );
    assert!(
        busy + us("idle_us_per_txn") <= wall * 1.2,
        "{p}: {busy} us busy of {wall} us"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_insert_benchmark_runs_and_refuses_bad_sizes() {
    let out = islands(&[
        "bench",
        "--islands",
        "per-core",
        "--warmup",
        "0",
        "--duration",
        "0.3",
        "--progress",
        "quiet",
        "inserts",
        "--row-bytes",
        "64",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("inserts (one private table per client)"));
    let out = islands(&["bench", "inserts", "--row-bytes", "4"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: ") && err.contains("--row-bytes"),
        "{err}"
    );
}

#[test]
fn distributed_islands_refuse_a_scheme_that_cannot_serve_them() {
    for cc in ["occ", "none", "wait_die"] {
        let out = islands(&[
            "bench",
            "--islands",
            "2",
            "--placement",
            "os",
            "--cc",
            cc,
            "--duration",
            "0.2",
            "micro",
            "--rows",
            "2000",
            "--multisite",
            "10",
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--cc {cc}: {err}");
        assert!(
            err.starts_with("error:") && err.contains("no_wait"),
            "--cc {cc}: {err}"
        );
    }
}

#[test]
fn ycsb_runs_across_two_islands() {
    // It said "this build does not run distributed transactions yet".
    let out = islands(&[
        "bench",
        "--islands",
        "2",
        "--placement",
        "os",
        "--warmup",
        "0",
        "--duration",
        "0.3",
        "--progress",
        "quiet",
        "ycsb",
        "--preset",
        "dbx1000",
        "--rows",
        "20000",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("2 islands"), "{text}");
    // 16 keys from the whole table: nearly every transaction spans both islands.
    assert!(
        text.contains("ran two-phase commit across islands"),
        "{text}"
    );
    // Each island holds a share of the rows: at least one each.
    let out = islands(&["bench", "--islands", "2", "ycsb", "--rows", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--rows 1 is fewer than the 2 islands"),
        "{err}"
    );
}
