//! `islands experiment placement` through the real binary: a tiny run prints
//! every placement with a throughput, a described machine is only planned,
//! and bad input is one `error:` line with exit code 2.

use std::process::{Command, Output};

fn islands(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_islands"))
        .args(["experiment", "placement"])
        .args(args)
        .output()
        .expect("run the islands binary")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_tiny_run_prints_every_placement_with_a_throughput() {
    let dir = std::env::temp_dir().join(format!("islands-placement-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("p.json");
    let out = islands(&[
        "--rows",
        "5000",
        "--duration",
        "0.2",
        "--warmup",
        "0.05",
        "--reps",
        "2",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    // One row per transaction kind and placement; the median is the fifth
    // column from the right (the CPU column may hold spaces).
    let mut seen = Vec::new();
    for line in stdout.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || !(f[0] == "read-only" || f[0] == "update") {
            continue;
        }
        let median: u64 = f[f.len() - 5]
            .replace(',', "")
            .parse()
            .unwrap_or_else(|_| panic!("no median in: {line}"));
        assert!(median > 0, "{line}");
        seen.push((f[0].to_string(), f[1].to_string()));
    }
    for mode in ["read-only", "update"] {
        for placement in ["spread", "grouped", "os"] {
            assert!(
                seen.contains(&(mode.to_string(), placement.to_string())),
                "no {mode} / {placement} row in:\n{stdout}"
            );
        }
    }
    assert_eq!(seen.len(), 6, "{stdout}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let cells = report["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 6);
    for c in cells {
        assert!(c["throughput_tps"]["median"].as_f64().unwrap() > 0.0, "{c}");
        assert_eq!(c["rates_tps"].as_array().unwrap().len(), 2, "{c}");
    }
    assert_eq!(report["verdict"]["observed"].as_array().unwrap().len(), 4);
    assert!(stdout.contains("\nverdict: "), "{stdout}");
    // On one socket the output says that spread and grouped are the same.
    let topology = Command::new(env!("CARGO_BIN_EXE_islands"))
        .arg("topology")
        .output()
        .unwrap();
    if text(&topology.stdout).contains("(1 socket") {
        assert!(stdout.contains("has 1 socket"), "{stdout}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_described_machine_is_planned_not_run() {
    let out = islands(&["--topology", "4x6", "--workers", "4"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.contains("spread: 4 workers on CPUs 0,6,12,18, 4 of 4 sockets"),
        "{stdout}"
    );
    assert!(
        stdout.contains("grouped: 4 workers on CPUs 0-3, 1 of 4 sockets"),
        "{stdout}"
    );
    assert!(stdout.contains("os: 4 workers, not pinned"), "{stdout}");
    assert!(stdout.contains("CPUs that do not exist here"), "{stdout}");
    assert!(!stdout.contains("txn/s"), "nothing ran: {stdout}");
}

#[test]
fn a_bad_placement_is_one_error_line_and_exit_code_2() {
    let out = islands(&["--placements", "spread,sideways"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr.trim_end(),
        "error: bad placement 'sideways': use grouped, spread or os"
    );
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
}
