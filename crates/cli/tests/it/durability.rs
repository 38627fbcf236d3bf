//! What `islands check`, `islands tpcc check`, `islands repair` and `islands bench
//! --resume` do with a log directory: damage in the middle of a log is refused (naming
//! the file and offset) and every file is left as it was; a check writes nothing, not
//! even when it refuses; only the repair cuts, and it says what it dropped.

use std::collections::BTreeMap;
use std::hash::Hasher;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn islands(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_islands"))
        .args(args)
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
    let d = std::env::temp_dir().join(format!("islands-cli-dura-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Every file under `dir` (recursively) with a hash of its bytes.
fn checksums(dir: &Path) -> BTreeMap<PathBuf, (u64, u64)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                let bytes = std::fs::read(&p).unwrap();
                let mut h = std::hash::DefaultHasher::new();
                h.write(&bytes);
                out.insert(p, (bytes.len() as u64, h.finish()));
            }
        }
    }
    out
}

/// `islands bench --durability sync --log-dir dir …` for 0.3 s, with
/// segments of `segment_bytes`; panics if it fails.
fn bench(dir: &Path, segment_bytes: &str, deployment: &[&str], workload: &[&str]) {
    let mut args = vec!["bench"];
    args.extend_from_slice(deployment);
    args.extend_from_slice(&[
        "--durability",
        "sync",
        "--warmup",
        "0",
        "--duration",
        "0.3",
        "--progress",
        "quiet",
        "--log-segment-bytes",
        segment_bytes,
        "--log-dir",
        dir.to_str().unwrap(),
    ]);
    args.extend_from_slice(workload);
    let out = islands(&args);
    assert!(out.status.success(), "{args:?}: {}", text(&out));
}

const MICRO: [&str; 6] = ["micro", "--update", "--rows", "2000", "--n", "4"];
const TPCC2: [&str; 5] = [
    "tpcc",
    "--warehouses",
    "2",
    "--max-orders-per-district",
    "20000",
];
const TWO_ISLANDS: [&str; 4] = ["--islands", "2", "--placement", "os"];

/// Segments of a log directory, oldest first.
fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("wal-"))
        .collect();
    v.sort();
    v
}

/// Offsets of the frames of a segment (`[len u32][crc u32][body]`).
fn frames(data: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + 8 <= data.len() {
        let len = u32::from_le_bytes(data[off..off + 4].try_into().unwrap()) as usize;
        if len == 0 || off + 8 + len > data.len() {
            break;
        }
        out.push(off);
        off += 8 + len;
    }
    out
}

/// `args` fails with exit code 2, its error names every string of `want`, and no file
/// under `dir` changed.
fn refused_untouched(args: &[&str], dir: &Path, want: &[&str]) -> String {
    let before = checksums(dir);
    let out = islands(args);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {t}");
    for w in want {
        assert!(t.contains(w), "{args:?}: the error does not say '{w}': {t}");
    }
    assert_eq!(checksums(dir), before, "{args:?} changed files: {t}");
    t
}

/// A byte flipped in the middle of a segment that later records follow: `tpcc check`
/// said the conditions held (it cut the log there, dropping the later segments' commits).
#[test]
fn a_flipped_byte_mid_log_is_refused_by_the_checks() {
    let b = base("flip");
    bench(
        &b,
        "200000",
        &["--workers", "1"],
        &[
            "tpcc",
            "--warehouses",
            "1",
            "--max-orders-per-district",
            "20000",
        ],
    );
    let island = b.join("island-0");
    let segs = segments(&island);
    assert!(segs.len() >= 2, "{segs:?}");
    let data = std::fs::read(&segs[0]).unwrap();
    let offs = frames(&data);
    let at = offs[offs.len() / 2];
    let mut bad = data.clone();
    bad[at + 12] ^= 0x40;
    std::fs::write(&segs[0], &bad).unwrap();
    let name = segs[0].display().to_string();
    let offset = format!("offset {at}");
    let dir = b.to_str().unwrap();
    refused_untouched(
        &["tpcc", "check", "--warehouses", "1", "--log-dir", dir],
        &b,
        &["log damaged", &name, &offset, "islands repair"],
    );
    refused_untouched(
        &["check", "--log-dir", dir],
        &b,
        &["log damaged", &name, &offset],
    );
    // A run that would go on from it is refused too.
    refused_untouched(
        &[
            "bench",
            "--workers",
            "1",
            "--durability",
            "sync",
            "--log-dir",
            dir,
            "--resume",
            "--progress",
            "quiet",
            "tpcc",
            "--warehouses",
            "1",
            "--max-orders-per-district",
            "20000",
        ],
        &b,
        &["log damaged", &name],
    );
    let _ = std::fs::remove_dir_all(&b);
}

/// A deleted middle segment, a renamed last segment, a stray file named like a segment,
/// 16 KiB of zeros inside a segment: each is refused, naming the file, and changes nothing.
#[test]
fn missing_renamed_stray_and_zeroed_segments_are_refused() {
    let b = base("segs");
    bench(&b, "65536", &["--workers", "1"], &MICRO);
    let island = b.join("island-0");
    let dir = b.to_str().unwrap();
    let check = ["check", "--log-dir", dir];
    let segs = segments(&island);
    assert!(segs.len() >= 4, "{segs:?}");
    let keep = |p: &Path| std::fs::read(p).unwrap();
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();

    // The middle segment deleted.
    let mid = keep(&segs[1]);
    std::fs::remove_file(&segs[1]).unwrap();
    refused_untouched(&check, &b, &["log damaged", &name(&segs[2]), "missing"]);
    std::fs::write(&segs[1], &mid).unwrap();

    // The last segment renamed away.
    let last = segs.last().unwrap();
    let away = island.join("old.log");
    std::fs::rename(last, &away).unwrap();
    refused_untouched(&check, &b, &["log incomplete", &name(last), "missing"]);
    std::fs::rename(&away, last).unwrap();

    // A stray file named like an older segment.
    let stray = island.join("wal-00000000000000000000.log");
    std::fs::write(&stray, b"a file that is not a segment").unwrap();
    refused_untouched(&check, &b, &["log damaged", &name(&stray)]);
    std::fs::remove_file(&stray).unwrap();

    // 16 KiB of zeros inside the first segment.
    let first = keep(&segs[0]);
    let mut zeroed = first.clone();
    zeroed[20_000..20_000 + 16_384].fill(0);
    std::fs::write(&segs[0], &zeroed).unwrap();
    refused_untouched(&check, &b, &["log damaged", &name(&segs[0]), "offset"]);
    std::fs::write(&segs[0], &first).unwrap();

    // Whole again, it checks.
    let out = islands(&check);
    assert!(out.status.success(), "{}", text(&out));
    let _ = std::fs::remove_dir_all(&b);
}

/// Two islands' directories swapped: recovery resolved in-doubt branches under the wrong
/// identities and reported violations (or none: `tpcc check` said TPC-C's conditions
/// held). Now each directory's control file says whose it is.
#[test]
fn swapped_island_directories_are_refused() {
    let b = base("swap");
    bench(&b, "65536", &TWO_ISLANDS, &MICRO);
    let (i0, i1, tmp) = (b.join("island-0"), b.join("island-1"), b.join("tmp"));
    std::fs::rename(&i0, &tmp).unwrap();
    std::fs::rename(&i1, &i0).unwrap();
    std::fs::rename(&tmp, &i1).unwrap();
    let dir = b.to_str().unwrap();
    refused_untouched(
        &["check", "--log-dir", dir],
        &b,
        &["island-0", "island 1 of a 2-island deployment", "swapped"],
    );
    let _ = std::fs::remove_dir_all(&b);
}

/// Appends a torn write (a frame header whose body never arrived) to the newest segment
/// of `island`: what a recovery that writes would cut.
fn tear(island: &Path) {
    let last = segments(island).pop().unwrap();
    let mut data = std::fs::read(&last).unwrap();
    data.extend_from_slice(&[200, 0, 0, 0, 1, 2, 3, 4, 2, 9, 9]);
    std::fs::write(&last, &data).unwrap();
}

/// A check recovers into memory and writes nothing: no byte of any file changes and no
/// file appears, though the logs end in torn tails (a recovery that writes cuts them)
/// and two islands' branches are resolved. A check refused for a wrong --warehouses
/// leaves every file as it was too (it had already cut the log).
#[test]
fn checks_write_nothing() {
    let b = base("readonly");
    bench(&b, "65536", &TWO_ISLANDS, &TPCC2);
    tear(&b.join("island-0"));
    tear(&b.join("island-1"));
    let dir = b.to_str().unwrap();
    for args in [
        vec!["tpcc", "check", "--warehouses", "2", "--log-dir", dir],
        vec!["check", "--log-dir", dir],
    ] {
        let before = checksums(&b);
        let out = islands(&args);
        let t = text(&out);
        assert!(out.status.success() && t.contains("hold"), "{args:?}: {t}");
        assert!(
            t.contains("torn tail") && t.contains("left as they are"),
            "{t}"
        );
        assert_eq!(checksums(&b), before, "{args:?} changed files");
    }
    refused_untouched(
        &["tpcc", "check", "--warehouses", "3", "--log-dir", dir],
        &b,
        &["holds 2 warehouse(s), but --warehouses is 3"],
    );
    let island = b.join("island-1");
    refused_untouched(
        &[
            "tpcc",
            "check",
            "--warehouses",
            "1",
            "--log-dir",
            island.to_str().unwrap(),
        ],
        &b,
        &["--warehouses is 1"],
    );
    let _ = std::fs::remove_dir_all(&b);
}

/// `islands check` on each built-in workload's database: its invariants hold after a
/// run, and after `--resume` goes on from it.
#[test]
fn check_and_resume_every_workload() {
    // TPC-C's load is the slow one: one warehouse on one island.
    let one_warehouse: [&str; 5] = [
        "tpcc",
        "--warehouses",
        "1",
        "--max-orders-per-district",
        "20000",
    ];
    let runs: [(&[&str], &[&str]); 4] = [
        (&TWO_ISLANDS, &MICRO),
        (
            &TWO_ISLANDS,
            &["ycsb", "--rows", "3000", "--read-pct", "50", "--ops", "4"],
        ),
        (&TWO_ISLANDS, &["inserts", "--rows-per-client", "100000000"]),
        (&["--workers", "1"], &one_warehouse),
    ];
    for (i, (deployment, w)) in runs.iter().enumerate() {
        let b = base(&format!("workload-{i}"));
        bench(&b, "1000000", deployment, w);
        let dir = b.to_str().unwrap();
        let out = islands(&["check", "--log-dir", dir]);
        assert!(out.status.success(), "{w:?}: {}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("hold"),
            "{}",
            text(&out)
        );
        // A second run on the same directory is refused, as before.
        let mut args = vec!["bench"];
        args.extend_from_slice(deployment);
        args.extend_from_slice(&["--durability", "sync", "--log-dir", dir, "--progress"]);
        args.extend_from_slice(&["quiet", "--warmup", "0", "--duration", "0.2"]);
        let mut fresh = args.clone();
        fresh.extend_from_slice(w);
        refused_untouched(&fresh, &b, &["is not empty"]);
        // With --resume it goes on, and the invariants still hold.
        args.push("--resume");
        args.extend_from_slice(w);
        let out = islands(&args);
        assert!(out.status.success(), "{args:?}: {}", text(&out));
        let out = islands(&["check", "--log-dir", dir]);
        assert!(out.status.success(), "after --resume {w:?}: {}", text(&out));
        let _ = std::fs::remove_dir_all(&b);
    }
}

/// --resume checks that the database is this deployment's and workload's.
#[test]
fn resume_refuses_another_deployment_or_workload() {
    let b = base("resume");
    bench(&b, "1000000", &["--workers", "1"], &MICRO);
    let dir = b.to_str().unwrap();
    let run = |extra: &[&str], w: &[&str]| {
        let mut args = vec![
            "bench",
            "--durability",
            "sync",
            "--log-dir",
            dir,
            "--resume",
        ];
        args.extend_from_slice(&["--progress", "quiet", "--warmup", "0", "--duration", "0.2"]);
        args.extend_from_slice(extra);
        args.extend_from_slice(w);
        args.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let strs = |v: &[String]| v.iter().map(String::as_str).collect::<Vec<_>>().join(" ");
    let a = run(&["--islands", "2", "--placement", "os"], &MICRO);
    let args: Vec<&str> = a.iter().map(String::as_str).collect();
    refused_untouched(&args, &b, &["1 island(s)", "this run's deployment has 2"]);
    let a = run(
        &["--workers", "1"],
        &["micro", "--update", "--rows", "3000", "--n", "4"],
    );
    let args: Vec<&str> = a.iter().map(String::as_str).collect();
    let t = refused_untouched(&args, &b, &["micro rows=2000"]);
    assert!(t.contains("rows=3000"), "{}: {t}", strs(&a));
    let a = run(&["--workers", "1"], &["ycsb", "--rows", "2000"]);
    let args: Vec<&str> = a.iter().map(String::as_str).collect();
    refused_untouched(&args, &b, &["schema"]);
    let _ = std::fs::remove_dir_all(&b);
}

/// `islands repair --truncate-damaged-log` is the one command that cuts: it names what
/// it dropped and exits 3; the log then checks. On an undamaged log it exits 0.
#[test]
fn repair_cuts_at_the_damage_and_says_what_it_dropped() {
    let b = base("repair");
    bench(&b, "65536", &["--workers", "1"], &MICRO);
    let dir = b.to_str().unwrap();
    let repair = ["repair", "--log-dir", dir, "--truncate-damaged-log"];
    let out = islands(&repair);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("no damage"), "{}", text(&out));
    // Without the flag nothing is done.
    let out = islands(&["repair", "--log-dir", dir]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));

    let segs = segments(&b.join("island-0"));
    let data = std::fs::read(&segs[1]).unwrap();
    let at = frames(&data)[3];
    let mut bad = data.clone();
    bad[at + 10] ^= 1;
    std::fs::write(&segs[1], &bad).unwrap();
    let out = islands(&repair);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(3), "{t}");
    assert!(
        t.contains(&format!("offset {at}")) && t.contains("dropped transactions (tid): 0x"),
        "{t}"
    );
    assert_eq!(std::fs::metadata(&segs[1]).unwrap().len(), at as u64);
    assert!(!segs[2].exists(), "later segments are deleted");
    let out = islands(&["check", "--log-dir", dir]);
    assert!(out.status.success(), "{}", text(&out));
    let _ = std::fs::remove_dir_all(&b);
}

/// The line `islands repair` prints of what a log holds after it.
fn kept_line(t: &str) -> String {
    t.lines()
        .find(|l| l.contains(": kept "))
        .unwrap_or_else(|| panic!("no 'kept' line: {t}"))
        .to_string()
}

/// The seq a segment's name gives.
fn seq_of(p: &Path) -> u64 {
    let name = p.file_name().unwrap().to_string_lossy();
    name["wal-".len().."wal-".len() + 20].parse().unwrap()
}

/// `islands repair` never deletes a segment whose records verify. A copy of the first
/// segment under a lower number (`wal-…00.log`), a copy of a segment under a middle and a
/// higher number, and the newest segment renamed to a later number are each refused by
/// `check`, which points to the repair; the repair sets the copy aside (renames the
/// segment back), exits 0, and keeps every segment and record it kept on the intact log;
/// `check` then passes. (It cut the stray to nothing and deleted every real segment
/// behind it, exit 3, and `check` passed on an empty database.)
#[test]
fn repair_keeps_every_segment_behind_a_stray_or_renamed_file() {
    let b = base("stray");
    bench(&b, "65536", &["--workers", "1"], &MICRO);
    let island = b.join("island-0");
    let dir = b.to_str().unwrap();
    let repair = ["repair", "--log-dir", dir, "--truncate-damaged-log"];
    let out = islands(&repair);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let intact = kept_line(&text(&out));
    let segs = segments(&island);
    assert!(segs.len() >= 3, "{segs:?}");
    let named = |seq: u64| island.join(format!("wal-{seq:020}.log"));
    let last = segs.last().unwrap().clone();
    // A free name between two segments (one that holds more than one batch).
    let mid = segs
        .windows(2)
        .map(|w| (seq_of(&w[0]) + 1, seq_of(&w[1])))
        .find(|(m, next)| m < next)
        .map(|(m, _)| m)
        .unwrap_or_else(|| panic!("every segment holds one batch: {segs:?}"));
    let high = seq_of(&last) + 1000;
    let cases = [
        ("a copy under a low number", named(0), Some(&segs[0])),
        ("a copy under a middle number", named(mid), Some(&segs[0])),
        ("a copy under a high number", named(high), Some(&last)),
        ("the newest segment renamed", named(high), None),
    ];
    for (what, stray, copy_of) in cases {
        match copy_of {
            Some(src) => std::fs::copy(src, &stray).map(|_| ()),
            None => std::fs::rename(&last, &stray),
        }
        .unwrap();
        refused_untouched(&["check", "--log-dir", dir], &b, &["islands repair"]);
        let out = islands(&repair);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(0), "{what}: {t}");
        assert_eq!(kept_line(&t), intact, "{what}: {t}");
        let moved = if copy_of.is_some() {
            "set aside"
        } else {
            "renamed"
        };
        assert!(
            t.contains(moved) && t.contains(&stray.display().to_string()),
            "{what}: {t}"
        );
        assert!(!stray.exists() && last.exists(), "{what}: {t}");
        let out = islands(&["check", "--log-dir", dir]);
        assert!(out.status.success(), "{what}: {}", text(&out));
        std::fs::remove_dir_all(island.join("set-aside")).ok();
    }
    let _ = std::fs::remove_dir_all(&b);
}

/// The newest segment of a log that was shut down, cut at several offsets (in half, at a
/// frame boundary, one byte short): each cut loses records its `SYNCED` mark says were
/// fdatasync'ed, and `check` refuses it (exit 2, naming the segment and `SYNCED`, every
/// file left as it was) instead of reading it as a torn tail. A torn write appended
/// after the synced end still checks. (Cut in half, `check` exited 0: "torn tail …
/// ignored", the records lost.)
#[test]
fn a_newest_segment_cut_short_is_refused() {
    let b = base("cut-newest");
    bench(&b, "1000000", &["--workers", "1"], &MICRO);
    let island = b.join("island-0");
    let dir = b.to_str().unwrap();
    let last = segments(&island).pop().unwrap();
    let original = std::fs::read(&last).unwrap();
    let offs = frames(&original);
    let name = last.file_name().unwrap().to_string_lossy().into_owned();
    for cut in [original.len() / 2, offs[offs.len() / 2], original.len() - 1] {
        std::fs::write(&last, &original[..cut]).unwrap();
        refused_untouched(
            &["check", "--log-dir", dir],
            &b,
            &["log damaged", &name, "SYNCED", "islands repair"],
        );
        std::fs::write(&last, &original).unwrap();
    }
    tear(&island);
    let out = islands(&["check", "--log-dir", dir]);
    assert!(out.status.success(), "{}", text(&out));
    let _ = std::fs::remove_dir_all(&b);
}
