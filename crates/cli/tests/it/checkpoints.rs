//! `islands bench` checkpoints periodically while it runs, reports how many
//! and what the log directory holds at the end, and takes the policy from
//! the command line or the deployment file.

use std::process::Command;

fn islands(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_islands"))
        .args(args)
        .output()
        .expect("run the islands binary")
}

fn temp(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("islands-cli-ckpt-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Runs a short sync micro update bench with `extra` options; returns the
/// report's `log` object.
fn log_of(tag: &str, extra: &[&str]) -> serde_json::Value {
    let dir = temp(tag);
    let json = dir.with_extension("json");
    let mut args = vec![
        "bench",
        "--durability",
        "sync",
        "--workers",
        "1",
        "--warmup",
        "0",
        "--duration",
        "2",
        "--progress",
        "quiet",
        "--group-delay-us",
        "0",
    ];
    args.extend_from_slice(extra);
    let (d, j) = (dir.to_str().unwrap(), json.to_str().unwrap());
    args.extend_from_slice(&[
        "--log-dir",
        d,
        "--json",
        j,
        "micro",
        "--update",
        "--rows",
        "1000",
    ]);
    let out = islands(&args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("periodic during the run"), "{stdout}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&json);
    v["log"].clone()
}

#[test]
fn bench_checkpoints_as_its_options_say_and_reports_the_log_left() {
    let on = log_of(
        "on",
        &["--checkpoint-every-mb", "1", "--checkpoint-every-s", "0"],
    );
    let off = log_of(
        "off",
        &["--checkpoint-every-mb", "0", "--checkpoint-every-s", "0"],
    );
    let written = off["bytes"].as_u64().unwrap();
    assert!(written > 4 << 20, "the run wrote {written} bytes of log");
    assert_eq!(off["checkpoints"], 0, "{off}");
    assert!(
        off["segment_bytes_end"].as_u64().unwrap() >= written,
        "without checkpoints the whole log stays: {off}"
    );
    assert!(on["checkpoints"].as_u64().unwrap() >= 2, "{on}");
    // How much is left depends on how far behind the last checkpoint ran (a
    // loaded machine starves the checkpointer); some of it is gone.
    assert!(
        on["segment_bytes_end"].as_u64().unwrap() < on["bytes"].as_u64().unwrap(),
        "the checkpoints deleted the log before them: {on}"
    );
    assert!(on["checkpoint_bytes_end"].as_u64().unwrap() > 0, "{on}");
}

#[test]
fn the_deployment_file_sets_the_checkpoints_and_the_command_line_wins() {
    let cfg = temp("cfg").with_extension("toml");
    std::fs::write(
        &cfg,
        "[deployment]\nislands = 1\ncheckpoint_every_mb = 1\ncheckpoint_every_s = 0\n",
    )
    .unwrap();
    let c = cfg.to_str().unwrap();
    let from_file = log_of("file", &["--config", c]);
    assert!(
        from_file["checkpoints"].as_u64().unwrap() >= 2,
        "{from_file}"
    );
    let overridden = log_of("override", &["--config", c, "--checkpoint-every-mb", "0"]);
    assert_eq!(overridden["checkpoints"], 0, "{overridden}");
    let _ = std::fs::remove_file(&cfg);
}

#[test]
fn bench_refuses_a_checkpoint_interval_that_is_not_a_time() {
    let out = islands(&["bench", "--checkpoint-every-s", "-1", "micro"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with("error: ") && err.contains("--checkpoint-every-s -1"),
        "{err}"
    );
}
