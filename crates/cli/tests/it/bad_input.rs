//! Bad input to `islands bench` and `islands tpcc check`: one error line that
//! names the value, exit code 2, and no run on numbers the user did not give.

use std::process::{Command, Output};

fn islands(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_islands"))
        .args(args)
        .output()
        .expect("run the islands binary")
}

fn refused(args: &[&str], want: &str) {
    let out = islands(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(
        err.starts_with("error: ") && err.contains(want),
        "{args:?}: {err}"
    );
}

#[test]
fn bench_refuses_values_it_cannot_run() {
    // 4000000000 workers allocated gigabytes of worker specs and aborted.
    refused(
        &["bench", "--workers-per-island", "4000000000", "micro"],
        "--workers-per-island 4000000000",
    );
    // Negative numbers reach the checks instead of clap's "unexpected argument '-1'".
    refused(&["bench", "micro", "--skew", "-1"], "theta = -1");
    refused(&["bench", "--warmup", "-1", "micro"], "--warmup -1");
    refused(&["bench", "--islands", "-1", "micro"], "at least 1");
    refused(&["bench", "tpcc", "--warehouses", "0"], "--warehouses 0");
}

#[test]
fn tpcc_check_refuses_an_empty_directory_and_a_wrong_warehouse_count() {
    let base = std::env::temp_dir().join(format!("islands-cli-badinput-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let empty = base.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    // An empty directory held "a database" whose conditions all held.
    refused(
        &[
            "tpcc",
            "check",
            "--warehouses",
            "1",
            "--log-dir",
            empty.to_str().unwrap(),
        ],
        "is empty",
    );
    assert!(
        std::fs::read_dir(&empty).unwrap().next().is_none(),
        "checking an empty directory leaves it empty"
    );

    // `bench tpcc --warehouses 1` loads one warehouse (it loaded one per core).
    let db = base.join("db");
    let out = islands(&[
        "bench",
        "--workers",
        "1",
        "--durability",
        "sync",
        "--warmup",
        "0",
        "--duration",
        "0.2",
        "--progress",
        "quiet",
        "--log-dir",
        db.to_str().unwrap(),
        "tpcc",
        "--warehouses",
        "1",
        "--max-orders-per-district",
        "20000",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let check = |w: &str| {
        islands(&[
            "tpcc",
            "check",
            "--warehouses",
            w,
            "--max-orders-per-district",
            "20000",
            "--log-dir",
            db.to_str().unwrap(),
        ])
    };
    let out = check("1");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("hold for 1 warehouse(s)"));
    // More warehouses than the database holds "held" for all of them.
    let out = check("2");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("holds 1 warehouse(s), but --warehouses is 2"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn bench_config_without_durability_keeps_bench_defaults() {
    let base = std::env::temp_dir().join(format!("islands-cli-config-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let run = |toml: &str| {
        let f = base.join("f.toml");
        std::fs::write(&f, toml).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_islands"))
            .current_dir(&base)
            .args(["bench", "--config", f.to_str().unwrap()])
            .args(["--warmup", "0", "--duration", "0.1", "--progress", "quiet"])
            .args(["micro", "--rows", "1000"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    // The file's deployment defaults (sync, islands-data) turned the log on
    // and kept it in the working directory; bench's help says off.
    let out = run("[deployment]\nislands = 1\n");
    assert!(out.contains("durability off"), "{out}");
    assert!(!base.join("islands-data").exists());
    // A file that asks for a log but names no directory: a temporary one, removed.
    let out = run("[deployment]\nislands = 1\ndurability = \"sync\"\n");
    assert!(out.contains("durability sync"), "{out}");
    assert!(!out.contains("log in islands-data"), "{out}");
    assert!(!base.join("islands-data").exists());
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn tpcc_check_leaves_a_directory_without_a_log_as_it_was() {
    let base = std::env::temp_dir().join(format!("islands-cli-nolog-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let listing = |d: &std::path::Path| {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    // Unrelated files: the island was opened first, which left LOCK and
    // wal-00000000000000000001.log next to them, and then rejected it.
    let junk = base.join("junk");
    std::fs::create_dir_all(&junk).unwrap();
    std::fs::write(junk.join("notes.txt"), "not a log").unwrap();
    let before = listing(&junk);
    let dir = junk.to_str().unwrap();
    refused(
        &["tpcc", "check", "--warehouses", "1", "--log-dir", dir],
        "holds no log segment",
    );
    assert_eq!(listing(&junk), before);
    // The same for the island directories of a deployment.
    let deployment = base.join("deployment");
    std::fs::create_dir_all(deployment.join("island-0")).unwrap();
    let dir = deployment.to_str().unwrap();
    refused(
        &["tpcc", "check", "--warehouses", "1", "--log-dir", dir],
        "island-0 holds no log segment",
    );
    assert!(listing(&deployment.join("island-0")).is_empty());
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn tpcc_check_names_two_directories_of_one_island() {
    let base = std::env::temp_dir().join(format!("islands-cli-dupisland-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    for d in ["island-0", "island-01", "island-1"] {
        std::fs::create_dir_all(base.join(d)).unwrap();
    }
    // It said "island-2 is missing (found island-1)".
    refused(
        &[
            "tpcc",
            "check",
            "--warehouses",
            "1",
            "--log-dir",
            base.to_str().unwrap(),
        ],
        "island-01 and island-1 both name island 1",
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn bench_ipc_refuses_options_it_does_not_use() {
    // They were accepted and ignored.
    refused(&["bench", "ipc", "--islands", "5-2"], "--islands");
    refused(&["bench", "ipc", "--cc", "💥"], "--cc");
    refused(&["bench", "ipc", "--workers", "2147483648"], "--workers");
    refused(&["bench", "--durability", "sync", "ipc"], "--durability");
    refused(&["bench", "ipc", "--seed", "3"], "--seed");
    refused(
        &["bench", "ipc", "--checkpoint-every-mb", "3"],
        "--checkpoint-every-mb",
    );
    // What it uses is checked.
    refused(&["bench", "ipc", "--duration", "-1"], "--duration -1");
    refused(&["bench", "ipc", "--batch", "0"], "--batch 0");
    refused(&["bench", "ipc", "--cpus", "0,0"], "two different CPUs");
}

#[test]
fn a_command_without_its_subcommand_says_so() {
    for cmd in ["tpcc", "experiment"] {
        let out = islands(&[cmd]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {err}");
        assert!(
            err.starts_with("error: ") && err.contains("subcommand"),
            "{cmd}: {err}"
        );
    }
}

#[test]
fn a_bench_refused_for_a_used_island_directory_leaves_the_others_untouched() {
    let base = std::env::temp_dir().join(format!("islands-cli-usedisland-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(base.join("island-1")).unwrap();
    std::fs::write(base.join("island-1/notes.txt"), "someone's").unwrap();
    let dir = base.to_str().unwrap();
    refused(
        &[
            "bench",
            "--islands",
            "2",
            "--durability",
            "sync",
            "--log-dir",
            dir,
            "micro",
            "--rows",
            "1000",
        ],
        "island-1 is not empty",
    );
    // It opened island-0 first, leaving its LOCK and an empty segment.
    assert!(
        !base.join("island-0").exists(),
        "{:?}",
        std::fs::read_dir(base.join("island-0"))
            .map(|r| r.map(|e| e.unwrap().file_name()).collect::<Vec<_>>())
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_log_dir_without_durability_turns_the_log_on() {
    let base = std::env::temp_dir().join(format!("islands-cli-logdir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let dir = base.to_str().unwrap();
    let out = islands(&[
        "bench",
        "--log-dir",
        dir,
        "--workers",
        "1",
        "--warmup",
        "0",
        "--duration",
        "0.2",
        "--progress",
        "quiet",
        "micro",
        "--rows",
        "1000",
        "--update",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // It ran with no log and said nothing.
    assert!(stdout.contains("durability sync"), "{stdout}");
    assert!(
        std::fs::read_dir(base.join("island-0")).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("wal-")),
        "the log is in the given directory"
    );
    // An explicit --durability off still runs without a log.
    let off = base.join("off");
    let out = islands(&[
        "bench",
        "--durability",
        "off",
        "--log-dir",
        off.to_str().unwrap(),
        "--workers",
        "1",
        "--warmup",
        "0",
        "--duration",
        "0.1",
        "--progress",
        "quiet",
        "micro",
        "--rows",
        "1000",
    ]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("durability off"));
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn bench_refuses_data_that_cannot_fit_in_memory() {
    // 65535 warehouses aborted on a 32 GiB allocation (SIGABRT, no error
    // line); 1000 loaded until the OOM killer came.
    for w in ["65535", "1000"] {
        let out = islands(&["bench", "--durability", "sync", "tpcc", "--warehouses", w]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--warehouses {w}: {err}");
        assert!(
            err.starts_with("error: ")
                && err.contains("GiB")
                && err.contains("MemAvailable")
                && err.contains("stock"),
            "--warehouses {w}: the error names the estimate, its largest tables and the memory available: {err}"
        );
    }
    refused(&["bench", "ycsb", "--rows", "60000000000"], "MemAvailable");
}
