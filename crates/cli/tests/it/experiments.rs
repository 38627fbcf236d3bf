//! `islands experiment NAME`: a sweep writes its CSV, JSON, SVG and PNG; an
//! interrupted sweep keeps the points it measured; bad names and values are
//! refused with the list of valid ones.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

fn islands() -> Command {
    Command::new(env!("CARGO_BIN_EXE_islands"))
}

fn temp(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("islands-exp-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn lines(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn a_sweep_writes_csv_json_and_both_figures() {
    let out = temp("multisite");
    let o = islands()
        .args([
            "experiment",
            "multisite",
            "--x",
            "0,100",
            "--reps",
            "2",
            "--duration",
            "0.2",
            "--warmup",
            "0",
            "--modes",
            "read",
            "--quiet",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{}{stdout}",
        String::from_utf8_lossy(&o.stderr)
    );
    let dir = out.join("multisite");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Deployments 1ISL … NISL that divide the cores, times 2 percentages.
    let deployments = (1..=cores).filter(|d| cores.is_multiple_of(*d)).count();
    let summary = lines(&dir.join("multisite.csv"));
    assert_eq!(summary.len(), 1 + 2 * deployments, "{summary:?}");
    assert!(summary[0].starts_with("panel,series,x,reps,throughput_median_tps"));
    for l in &summary[1..] {
        let f: Vec<&str> = l.split(',').collect();
        assert_eq!(f[3], "2", "two repetitions per point: {l}");
        let median: f64 = f[4].parse().unwrap();
        let (min, max): (f64, f64) = (f[5].parse().unwrap(), f[6].parse().unwrap());
        assert!(median > 0.0 && min <= median && median <= max, "{l}");
    }
    let runs = lines(&dir.join("multisite-runs.csv"));
    assert_eq!(runs.len(), 1 + 2 * 2 * deployments);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("multisite.json")).unwrap())
            .unwrap();
    assert_eq!(json["experiment"], "multisite");
    assert_eq!(json["interrupted"], false);
    let points = json["points"].as_array().unwrap();
    assert_eq!(points.len(), 2 * deployments);
    if cores > 1 {
        // Across islands, multisite transactions really ran 2PC.
        let dist = points
            .iter()
            .find(|p| p["series"] == format!("{cores}ISL") && p["x"] == 100.0)
            .unwrap();
        assert!(dist["distributed_pct"]["median"].as_f64().unwrap() > 50.0);
    }
    let svg = std::fs::read_to_string(dir.join("multisite.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("1ISL"));
    assert_eq!(
        &std::fs::read(dir.join("multisite.png")).unwrap()[1..4],
        b"PNG"
    );
    assert!(stdout.contains("verdict:"), "{stdout}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn ctrl_c_keeps_the_points_already_measured() {
    let out = temp("interrupt");
    let mut child = islands()
        .args([
            "experiment",
            "cost",
            "--x",
            "2,4,8,12,18,24,30,40",
            "--reps",
            "3",
            "--duration",
            "0.3",
            "--warmup",
            "0",
            "--modes",
            "read",
            "--out",
        ])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for two finished runs (progress lines), then interrupt.
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut seen = 0;
    let mut line = String::new();
    while seen < 2 {
        line.clear();
        if err.read_line(&mut line).unwrap() == 0 {
            break;
        }
        if line.starts_with('[') {
            seen += 1;
        }
    }
    assert_eq!(seen, 2, "the sweep printed progress");
    let k = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(k.success());
    let rest: Vec<String> = err.lines().map_while(Result::ok).collect();
    let o = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}\n{}", rest.join("\n"));
    assert!(stdout.contains("interrupted"), "{stdout}");
    let dir = out.join("cost");
    let summary = lines(&dir.join("cost.csv"));
    let total = 2 * (1..=4).count() * 8; // bound: far fewer than every point
    assert!(
        summary.len() >= 3 && summary.len() < 1 + total,
        "the measured points, not all: {summary:?}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("cost.json")).unwrap()).unwrap();
    assert_eq!(json["interrupted"], true);
    assert!(dir.join("cost.png").exists());
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn bad_experiment_names_and_values_are_refused() {
    let o = islands().args(["experiment", "fig99"]).output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        e.contains("no experiment 'fig99'") && e.contains("multisite") && e.contains("inserts"),
        "{e}"
    );
    for (args, want) in [
        (vec!["multisite", "--x", "150"], "0..=100"),
        (vec!["skew", "--x", "1.5"], "less than 1"),
        (vec!["cost", "--reps", "0"], "--reps"),
        (
            vec!["multisite", "--durability", "fast"],
            "off, async, sync",
        ),
        (vec!["multisite", "--modes", "write"], "read or update"),
        (vec!["scaling", "--cores", "999"], "--cores 999"),
    ] {
        let o = islands()
            .arg("experiment")
            .args(&args)
            .arg("--out")
            .arg(temp("bad"))
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && e.contains(want), "{args:?}: {e}");
    }
}

#[test]
fn an_output_path_that_cannot_be_a_directory_is_refused_before_the_plan_line() {
    let o = islands()
        .args(["experiment", "multisite", "--quick", "--out", "/dev/null"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("error: cannot create /dev/null/multisite"),
        "{err}"
    );
    assert!(!err.contains("points x"), "{err}");
}
