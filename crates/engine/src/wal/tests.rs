//! Tests of the log: round trips, torn and corrupt tails, rollover + checkpoints, injected
//! I/O failures, group commit, and garbage that must never panic recovery.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::format::read_frame;
use super::*;

/// A unique directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!(
            "islands-wal-{name}-{}-{nanos}-{n}",
            std::process::id()
        ));
        TempDir(dir)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn cfg(dir: &Path, durability: Durability) -> WalConfig {
    WalConfig::new(dir, durability)
}

fn set_seq(rec: &mut LogRecord, s: BatchSeq) {
    match rec {
        LogRecord::Commit { seq, .. }
        | LogRecord::Prepare { seq, .. }
        | LogRecord::Decision { seq, .. }
        | LogRecord::End { seq, .. } => *seq = s,
    }
}

/// Fills `buf` with a deterministic mix of records derived from `i`; returns them (seq 0).
fn fill(buf: &mut LogBuffer, i: u64) -> Vec<LogRecord> {
    let mut out = Vec::new();
    let row = |k: u64| -> Vec<u8> { (0..(k % 13) as u8).map(|b| b ^ i as u8).collect() };
    match i % 4 {
        0 | 1 => {
            buf.commit_begin(i);
            let mut writes = Vec::new();
            for k in 0..(i % 3 + 1) {
                let key = i * 100 + k;
                if k == 2 {
                    buf.delete(7, key);
                    writes.push(WriteEntry {
                        table: 7,
                        key,
                        row: None,
                        patch_at: None,
                    });
                } else if k == 1 && i % 2 == 1 {
                    let r = row(key);
                    buf.patch(k as u16, key, 16 + i as u32, &r);
                    writes.push(WriteEntry {
                        table: k as u16,
                        key,
                        row: Some(r),
                        patch_at: Some(16 + i as u32),
                    });
                } else {
                    let r = row(key);
                    buf.put(k as u16, key, &r);
                    writes.push(WriteEntry {
                        table: k as u16,
                        key,
                        row: Some(r),
                        patch_at: None,
                    });
                }
            }
            buf.record_end();
            out.push(LogRecord::Commit {
                seq: 0,
                tid: i,
                writes,
            });
        }
        2 => {
            buf.prepare_begin(i, i + 7);
            let r = row(i);
            buf.put(3, i, &r);
            buf.delete(4, i + 1);
            buf.record_end();
            out.push(LogRecord::Prepare {
                seq: 0,
                gtid: i,
                tid: i + 7,
                writes: vec![
                    WriteEntry {
                        table: 3,
                        key: i,
                        row: Some(r),
                        patch_at: None,
                    },
                    WriteEntry {
                        table: 4,
                        key: i + 1,
                        row: None,
                        patch_at: None,
                    },
                ],
            });
            buf.decision(i, i % 8 == 2);
            out.push(LogRecord::Decision {
                seq: 0,
                gtid: i,
                commit: i % 8 == 2,
            });
        }
        _ => {
            buf.end(i);
            out.push(LogRecord::End { seq: 0, gtid: i });
            // A commit with no writes is legal too.
            buf.commit_begin(i + 1000);
            buf.record_end();
            out.push(LogRecord::Commit {
                seq: 0,
                tid: i + 1000,
                writes: vec![],
            });
        }
    }
    out
}

/// Submits `n` batches made by `fill(first..first+n)`; returns the expected records.
fn write_batches(wal: &Wal, first: u64, n: u64) -> Vec<LogRecord> {
    let mut buf = LogBuffer::new();
    let mut expected = Vec::new();
    for i in first..first + n {
        let mut recs = fill(&mut buf, i);
        assert_eq!(buf.records(), recs.len());
        let seq = wal.submit(&mut buf).expect("submit");
        assert!(buf.is_empty() && buf.records() == 0);
        for r in &mut recs {
            set_seq(r, seq);
        }
        expected.extend(recs);
    }
    expected
}

/// Offsets of every frame in a segment file.
fn frame_offsets(data: &[u8]) -> Vec<usize> {
    let mut offs = Vec::new();
    let mut off = 0;
    while let Some((_, next)) = read_frame(data, off).expect("valid segment") {
        offs.push(off);
        off = next;
    }
    assert_eq!(off, data.len());
    offs
}

fn last_segment(dir: &Path) -> PathBuf {
    let listing = recovery::list_dir(dir).expect("list");
    listing.segments.last().expect("a segment").1.clone()
}

#[test]
fn durability_parses_and_displays() {
    for d in [Durability::Sync, Durability::Async, Durability::Off] {
        assert_eq!(d.to_string().parse::<Durability>(), Ok(d));
    }
    let err = "fsync".parse::<Durability>().unwrap_err().to_string();
    assert!(err.contains("sync, async, off"), "{err}");
}

#[test]
fn round_trip_all_record_kinds() {
    let tmp = TempDir::new("round-trip");
    let (wal, rec) = Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap();
    assert_eq!(rec, Recovery::default());
    assert_eq!(wal.next_seq(), 1);
    assert_eq!(wal.durable_seq(), 0);
    let mut expected = write_batches(&wal, 0, 20);
    // An empty batch is a valid batch and consumes a seq.
    let empty = wal.submit(&mut LogBuffer::new()).unwrap();
    assert_eq!(empty, 21);
    wal.wait_durable(empty).unwrap();
    assert!(wal.durable_seq() >= 21);
    let stats = wal.stats();
    assert_eq!(stats.batches_written, 21);
    assert!(stats.syncs >= 1 && stats.bytes_written > 0);
    wal.shutdown();
    wal.shutdown(); // idempotent
    assert!(matches!(
        wal.submit(&mut LogBuffer::new()),
        Err(WalError::ShutDown)
    ));
    drop(wal);

    let (wal, rec) = Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap();
    assert_eq!(rec.truncated, None);
    assert_eq!(rec.checkpoint, None);
    assert_eq!(rec.records, expected);
    assert_eq!(wal.next_seq(), 22);
    assert_eq!(wal.durable_seq(), 21);
    // Appending after a reopen continues the same log.
    expected.extend(write_batches(&wal, 100, 3));
    wal.wait_durable(24).unwrap();
    drop(wal);
    let (_wal, rec) = Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap();
    assert_eq!(rec.records, expected);
    assert_eq!(rec.records.last().map(LogRecord::seq), Some(24));
}

/// Each open is a new incarnation, recorded before the log is handed out;
/// the gtid reservation raised while the log runs survives it, and the next
/// open starts above it, whether the log closed cleanly or the process died
/// (a reservation lives in the control file, which a crash keeps).
#[test]
fn every_open_is_a_new_incarnation_above_the_last_gtid_reservation() {
    let tmp = TempDir::new("incarnation");
    let mut c = cfg(tmp.path(), Durability::Sync);
    c.gtid_reserve = 10;
    let (wal, _) = Wal::open(c.clone()).unwrap();
    assert_eq!((wal.incarnation(), wal.gtid_start()), (1, 1));
    assert_eq!(wal.gtid_reserved(), 11);
    assert_eq!(read_control(tmp.path()).unwrap().unwrap().gtid_reserved, 11);
    wal.reserve_gtids(35);
    wal.wait_gtids(35).unwrap();
    assert_eq!(wal.gtid_reserved(), 35);
    assert_eq!(read_control(tmp.path()).unwrap().unwrap().gtid_reserved, 35);
    // Asking for less than what is reserved changes nothing.
    wal.reserve_gtids(20);
    write_batches(&wal, 0, 2);
    assert_eq!(wal.gtid_reserved(), 35);
    drop(wal);
    let (wal, _) = Wal::open(c.clone()).unwrap();
    assert_eq!(wal.incarnation(), 2);
    assert_eq!(wal.gtid_start(), 35, "starts above the last reservation");
    assert_eq!(wal.gtid_reserved(), 45);
    // A reservation in the middle of a run, then a crash (no shutdown).
    wal.reserve_gtids(60);
    wal.wait_gtids(60).unwrap();
    std::mem::forget(wal);
    let ctl = read_control(tmp.path()).unwrap().unwrap();
    assert_eq!((ctl.incarnation, ctl.gtid_reserved), (2, 60));
}

/// With durability off nothing survives a restart: no incarnation, and
/// gtids are never held back.
#[test]
fn off_mode_has_no_incarnation_and_no_gtid_limit() {
    let tmp = TempDir::new("incarnation-off");
    let (wal, _) = Wal::open(cfg(tmp.path(), Durability::Off)).unwrap();
    assert_eq!(wal.incarnation(), 0);
    assert_eq!(wal.gtid_reserved(), u64::MAX);
    wal.reserve_gtids(5);
    wal.wait_gtids(5).unwrap();
}

#[test]
fn async_mode_writes_and_syncs_in_background() {
    let tmp = TempDir::new("async");
    let (wal, _) = Wal::open(cfg(tmp.path(), Durability::Async)).unwrap();
    let expected = write_batches(&wal, 0, 10);
    wal.wait_durable(10).unwrap();
    // The background sync happens within a few ms without any further submit.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while wal.stats().syncs == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "async log never synced"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(wal);
    let (_wal, rec) = Wal::open(cfg(tmp.path(), Durability::Async)).unwrap();
    assert_eq!(rec.records, expected);
}

#[test]
fn off_mode_writes_no_files() {
    let tmp = TempDir::new("off");
    let (wal, rec) = Wal::open(cfg(tmp.path(), Durability::Off)).unwrap();
    assert_eq!(rec, Recovery::default());
    let mut buf = LogBuffer::new();
    fill(&mut buf, 1);
    assert_eq!(wal.submit(&mut buf).unwrap(), 1);
    assert!(buf.is_empty());
    assert_eq!(wal.durable_seq(), 1);
    wal.wait_durable(1).unwrap();
    let info = wal
        .write_checkpoint(2, [(1u16, 2u64, 3u64, &b"x"[..])].into_iter())
        .unwrap();
    assert_eq!((info.path, info.rows), (None, 1));
    drop(wal);
    assert!(
        !tmp.path().exists(),
        "off mode created {}",
        tmp.path().display()
    );
}

#[test]
fn torn_tail_at_every_offset_of_the_last_record() {
    let tmp = TempDir::new("torn");
    let (wal, _) = Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap();
    let mut expected = write_batches(&wal, 0, 8);
    // The last batch ends with a commit record carrying a row.
    let mut buf = LogBuffer::new();
    buf.commit_begin(77);
    buf.put(1, 2, &[9u8; 40]);
    buf.record_end();
    let seq = wal.submit(&mut buf).unwrap();
    wal.wait_durable(seq).unwrap();
    drop(wal);

    let seg = last_segment(tmp.path());
    let original = std::fs::read(&seg).unwrap();
    let offs = frame_offsets(&original);
    let last_start = *offs.last().unwrap();
    // A crash before the log marked the last batch synced (its header at offs[len - 2]).
    crash_mark(tmp.path(), seq - 1, offs[offs.len() - 2]);

    // Cutting exactly at the record boundary is a clean log.
    std::fs::write(&seg, &original[..last_start]).unwrap();
    let (wal, rec) = Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap();
    assert_eq!(rec.truncated, None);
    assert_eq!(rec.records, expected);
    drop(wal);

    for cut in last_start + 1..original.len() {
        std::fs::write(&seg, &original[..cut]).unwrap();
        let (wal, rec) = Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap();
        assert_eq!(rec.records, expected, "cut at {cut}");
        let t = rec.truncated.expect("truncation reported");
        assert_eq!(t.file, seg);
        assert_eq!(t.offset, last_start as u64, "cut at {cut}");
        assert_eq!(t.bytes_truncated, (cut - last_start) as u64);
        assert!(
            t.to_string().contains(&format!("offset {last_start}")),
            "{t}"
        );
        assert_eq!(std::fs::metadata(&seg).unwrap().len(), last_start as u64);
        drop(wal);
    }

    // After a truncation, a later append is recovered after the surviving records.
    std::fs::write(&seg, &original[..original.len() - 1]).unwrap();
    let (wal, rec) = Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap();
    assert!(rec.truncated.is_some());
    // The torn batch's header survived, so the next seq follows it.
    assert_eq!(wal.next_seq(), seq + 1);
    expected.extend(write_batches(&wal, 500, 2));
    wal.wait_durable(seq + 2).unwrap();
    drop(wal);
    let (_wal, rec) = Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap();
    assert_eq!(rec.truncated, None);
    assert_eq!(rec.records, expected);
}

/// `OnDamage::Truncate` (the repair) cuts where a plain open refuses: at a
/// flipped body byte or length byte with valid records after it, and says
/// what it dropped.
#[test]
fn repair_cuts_a_flipped_byte_and_reports_what_it_dropped() {
    let tmp = TempDir::new("flip");
    let (wal, _) = Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap();
    let expected = write_batches(&wal, 0, 12);
    drop(wal);
    let seg = last_segment(tmp.path());
    let original = std::fs::read(&seg).unwrap();
    let offs = frame_offsets(&original);
    let victim = offs.len() / 2;
    let at = offs[victim];
    // How many log records (not batch headers) precede the victim frame.
    let is_record = |o: usize| original[o + format::HEADER_BYTES] != format::REC_BATCH;
    let before = offs[..victim].iter().filter(|&&o| is_record(o)).count();
    let after = offs[victim..].iter().filter(|&&o| is_record(o)).count();
    // Records of the batches after the victim's: found again at their headers.
    let next_batch = offs[victim + 1..]
        .iter()
        .position(|&o| !is_record(o))
        .map_or(offs.len(), |p| victim + 1 + p);
    let later = offs[next_batch..].iter().filter(|&&o| is_record(o)).count();

    // A flipped body byte (crc mismatch) and a flipped length byte (crc or length failure).
    for (flip, want) in [(at + 9, "crc mismatch"), (at, "")] {
        let mut bad = original.clone();
        bad[flip] ^= 0x40;
        std::fs::write(&seg, &bad).unwrap();
        let mut c = cfg(tmp.path(), Durability::Sync);
        assert!(matches!(
            Wal::open(c.clone()),
            Err(WalError::Damaged { offset, .. }) if offset == at as u64
        ));
        c.on_damage = OnDamage::Truncate;
        let (wal, rec) = Wal::open(c).unwrap();
        assert_eq!(rec.records, expected[..before].to_vec());
        let r = rec.repaired.expect("reported");
        assert!(r.lost(), "{r}");
        let r = r.cut.expect("a cut");
        let copy = tmp.path().join(SET_ASIDE_DIR).join(file_name(&seg));
        assert_eq!((r.file.clone(), r.offset), (seg.clone(), at as u64));
        assert!(r.reason.contains(want), "{r}");
        assert_eq!(r.bytes_dropped, (original.len() - at) as u64);
        // The cut segment's bytes are kept, as they were, in the set-aside directory.
        assert_eq!(r.copy.as_ref(), Some(&copy));
        assert_eq!(std::fs::read(&copy).unwrap(), bad);
        std::fs::remove_file(&copy).unwrap();
        // The records of later batches decode again (and those after the
        // damaged one in its batch, when its length field still holds); the
        // damaged one itself does not.
        let dropped = r.records_dropped as usize;
        assert!(
            dropped >= later && dropped < after,
            "{r}: {after} records from the damage on, {later} in later batches"
        );
        let tids_later: Vec<u64> = expected[expected.len() - later..]
            .iter()
            .filter_map(|r| match r {
                LogRecord::Commit { tid, .. } => Some(*tid),
                _ => None,
            })
            .collect();
        assert!(
            tids_later.iter().all(|t| r.tids.contains(t)),
            "{r}: {:?} against {tids_later:?}",
            r.tids
        );
        assert_eq!(std::fs::metadata(&seg).unwrap().len(), at as u64);
        drop(wal);
        // What the repair left opens without it.
        let (_wal, rec) = Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap();
        assert_eq!(rec.records, expected[..before].to_vec());
        assert_eq!(rec.truncated, None);
        drop(_wal);
        std::fs::write(&seg, &original).unwrap();
        // The repair lowered the control file's extent; the old bytes are
        // whole again, and the log recovers them all.
        let (_wal, rec) = Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap();
        assert_eq!(rec.records, expected);
    }
}

#[test]
fn rollover_checkpoint_and_segment_deletion() {
    let tmp = TempDir::new("ckpt");
    let mut c = cfg(tmp.path(), Durability::Sync);
    c.segment_bytes = 300;
    // Segments roll over to preallocated ones too, and checkpoints delete them.
    c.preallocate = true;
    let (wal, _) = Wal::open(c.clone()).unwrap();
    let mut expected = Vec::new();
    for i in 0..40 {
        expected.extend(write_batches(&wal, i, 1));
        // Small groups, so segments roll often.
        if i % 3 == 0 {
            wal.wait_durable(wal.next_seq() - 1).unwrap();
        }
    }
    wal.wait_durable(40).unwrap();
    let before = wal.segments();
    assert!(before.len() >= 4, "only {} segments", before.len());
    assert_eq!(wal.stats().segments_created as usize, before.len() - 1);

    let start_seq = 21;
    let rows: Vec<(u16, u64, u64, Vec<u8>)> = (0..50u64)
        .map(|k| ((k % 3) as u16, k, k * 10, vec![k as u8; (k % 7) as usize]))
        .collect();
    let info = wal
        .write_checkpoint(
            start_seq,
            rows.iter()
                .map(|(t, k, tid, r)| (*t, *k, *tid, r.as_slice())),
        )
        .unwrap();
    assert_eq!(info.rows, 50);
    assert!(info.segments_deleted > 0);
    let after = wal.segments();
    assert_eq!(after.len() + info.segments_deleted, before.len());
    for gone in &before[..info.segments_deleted] {
        assert!(!gone.exists(), "{} not deleted", gone.display());
    }
    // The first kept segment starts at or before start_seq; the one after it after it.
    let listing = recovery::list_dir(tmp.path()).unwrap();
    assert!(listing.segments[0].0 <= start_seq);
    assert!(listing.segments.get(1).is_none_or(|s| s.0 > start_seq));
    expected.extend(write_batches(&wal, 1000, 5));
    wal.wait_durable(45).unwrap();
    drop(wal);

    let (wal, rec) = Wal::open(c.clone()).unwrap();
    let ckpt = rec.checkpoint.expect("checkpoint loaded");
    assert_eq!(ckpt.start_seq, start_seq);
    assert_eq!(ckpt.rows, rows);
    let want: Vec<LogRecord> = expected
        .iter()
        .filter(|r| r.seq() >= start_seq)
        .cloned()
        .collect();
    assert_eq!(rec.records, want);
    assert_eq!(rec.truncated, None);
    assert_eq!(wal.next_seq(), 46);

    // A second checkpoint replaces the first.
    let info2 = wal.write_checkpoint(46, std::iter::empty()).unwrap();
    drop(wal);
    let listing = recovery::list_dir(tmp.path()).unwrap();
    assert_eq!(listing.checkpoints.len(), 1);
    assert_eq!(Some(&listing.checkpoints[0].1), info2.path.as_ref());
    let (wal, rec) = Wal::open(c).unwrap();
    assert_eq!(
        rec.checkpoint.map(|c| (c.start_seq, c.rows.len())),
        Some((46, 0))
    );
    assert!(rec.records.is_empty());
    assert_eq!(wal.next_seq(), 46);
}

/// The repair of damage in an older segment cuts it there and sets every later segment
/// aside (moved, not deleted), naming them.
#[test]
fn repair_of_an_early_segment_sets_later_segments_aside() {
    let (tmp, mut c, _) = small_segments_log("mid-segment", 200, 30);
    let segs: Vec<PathBuf> = recovery::list_dir(tmp.path())
        .unwrap()
        .segments
        .into_iter()
        .map(|s| s.1)
        .collect();
    assert!(segs.len() >= 3);
    let victim = &segs[1];
    let mut data = std::fs::read(victim).unwrap();
    let n = data.len();
    data[n - 2] ^= 1;
    std::fs::write(victim, &data).unwrap();
    c.on_damage = OnDamage::Truncate;
    let (_wal, rec) = Wal::open(c).unwrap();
    let r = rec.repaired.expect("reported");
    let aside = tmp.path().join(SET_ASIDE_DIR);
    let moved: Vec<(PathBuf, PathBuf)> = r
        .set_aside
        .iter()
        .map(|a| (a.file.clone(), a.to.clone()))
        .collect();
    let want: Vec<(PathBuf, PathBuf)> = segs[2..]
        .iter()
        .map(|s| (s.clone(), aside.join(file_name(s))))
        .collect();
    assert_eq!(moved, want, "{r}");
    assert!(segs[2..].iter().all(|s| !s.exists()));
    assert!(moved.iter().all(|(_, to)| to.exists()));
    let r = r.cut.expect("a cut");
    assert_eq!(&r.file, victim);
    // The cut segment as it was before the cut.
    assert_eq!(r.copy, Some(aside.join(file_name(victim))));
    assert_eq!(std::fs::read(aside.join(file_name(victim))).unwrap(), data);
    assert!(r.records_dropped > 0 && !r.tids.is_empty(), "{r}");
}

/// Wraps the real file system; fails writes or syncs on demand.
struct FailingDevice {
    fail_sync: Arc<AtomicBool>,
    fail_write: Arc<AtomicBool>,
    /// Each fdatasync sleeps this long (to make group commit observable on fast disks).
    sync_delay: Duration,
}

struct FailingFile {
    inner: Box<dyn LogFile>,
    fail_sync: Arc<AtomicBool>,
    fail_write: Arc<AtomicBool>,
    sync_delay: Duration,
}

impl LogFile for FailingFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        if self.fail_write.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected write failure"));
        }
        self.inner.write_all(buf)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        std::thread::sleep(self.sync_delay);
        if self.fail_sync.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected fdatasync failure"));
        }
        self.inner.sync_data()
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
}

impl FailingDevice {
    fn wrap(&self, inner: Box<dyn LogFile>) -> Box<dyn LogFile> {
        Box::new(FailingFile {
            inner,
            fail_sync: Arc::clone(&self.fail_sync),
            fail_write: Arc::clone(&self.fail_write),
            sync_delay: self.sync_delay,
        })
    }
}

impl LogDevice for FailingDevice {
    fn create(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        Ok(self.wrap(FsDevice.create(path)?))
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        Ok(self.wrap(FsDevice.open_append(path)?))
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        FsDevice.sync_dir(dir)
    }
}

fn failing_device(delay: Duration) -> (Arc<FailingDevice>, Arc<AtomicBool>, Arc<AtomicBool>) {
    let fail_sync = Arc::new(AtomicBool::new(false));
    let fail_write = Arc::new(AtomicBool::new(false));
    let dev = Arc::new(FailingDevice {
        fail_sync: Arc::clone(&fail_sync),
        fail_write: Arc::clone(&fail_write),
        sync_delay: delay,
    });
    (dev, fail_sync, fail_write)
}

#[test]
fn fdatasync_failure_poisons_the_log() {
    let tmp = TempDir::new("fail-sync");
    let (dev, fail_sync, _) = failing_device(Duration::ZERO);
    let (wal, _) = Wal::open_with_device(cfg(tmp.path(), Durability::Sync), dev).unwrap();
    write_batches(&wal, 0, 1);
    wal.wait_durable(1).unwrap();
    assert_eq!(wal.failed(), None);

    fail_sync.store(true, Ordering::SeqCst);
    let seq = wal.submit(&mut LogBuffer::new()).unwrap();
    assert_eq!(seq, 2);
    let err = wal.wait_durable(seq).unwrap_err();
    assert!(
        err.to_string().contains("injected fdatasync failure"),
        "{err}"
    );
    let failed = wal.failed().expect("poisoned");
    assert!(
        matches!(
            &failed,
            WalError::Io {
                op: "fdatasync log segment",
                ..
            }
        ),
        "{failed}"
    );
    assert_eq!(
        wal.durable_seq(),
        1,
        "durable_seq advanced past a failed sync"
    );

    // Poisoned forever: even when the device recovers, nothing more is accepted.
    fail_sync.store(false, Ordering::SeqCst);
    let err = wal.submit(&mut LogBuffer::new()).unwrap_err();
    assert!(
        matches!(&err, WalError::Poisoned(e) if **e == failed),
        "{err}"
    );
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(wal.durable_seq(), 1);
    assert_eq!(wal.failed(), Some(failed));
    let engine_err: crate::Error = err.into();
    assert!(matches!(engine_err, crate::Error::LogFailed(_)));
}

#[test]
fn write_failure_poisons_the_log() {
    let tmp = TempDir::new("fail-write");
    let (dev, _, fail_write) = failing_device(Duration::ZERO);
    let (wal, _) = Wal::open_with_device(cfg(tmp.path(), Durability::Async), dev).unwrap();
    fail_write.store(true, Ordering::SeqCst);
    let seq = wal.submit(&mut LogBuffer::new()).unwrap();
    assert!(wal.wait_durable(seq).is_err());
    assert!(matches!(
        wal.failed(),
        Some(WalError::Io {
            op: "write log segment",
            ..
        })
    ));
    assert_eq!(wal.durable_seq(), 0);
    assert!(wal.submit(&mut LogBuffer::new()).is_err());
}

fn concurrent_submitters(wal: &Arc<Wal>, threads: u64, per_thread: u64) -> Vec<LogRecord> {
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let wal = Arc::clone(wal);
            std::thread::spawn(move || {
                let mut buf = LogBuffer::new();
                let mut mine = Vec::new();
                for i in 0..per_thread {
                    let tid = t * 1_000_000 + i;
                    buf.commit_begin(tid);
                    buf.put(t as u16, i, &tid.to_le_bytes());
                    buf.record_end();
                    let seq = wal.submit(&mut buf).unwrap();
                    mine.push(LogRecord::Commit {
                        seq,
                        tid,
                        writes: vec![WriteEntry {
                            table: t as u16,
                            key: i,
                            row: Some(tid.to_le_bytes().to_vec()),
                            patch_at: None,
                        }],
                    });
                }
                mine
            })
        })
        .collect();
    let mut all: Vec<LogRecord> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    all.sort_by_key(LogRecord::seq);
    all
}

#[test]
fn group_commit_batches_concurrent_submitters() {
    let tmp = TempDir::new("group");
    let (wal, _) = Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap();
    let expected = concurrent_submitters(&wal, 8, 100);
    let batches = expected.len() as u64;
    wal.wait_durable(batches).unwrap();
    let stats = wal.stats();
    assert_eq!(stats.batches_written, batches);
    assert!(
        stats.syncs < batches,
        "{} syncs for {batches} batches",
        stats.syncs
    );
    drop(wal);
    let (_wal, rec) = Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap();
    assert_eq!(rec.records, expected);
}

#[test]
fn group_commit_with_a_slow_disk_takes_many_batches_per_sync() {
    let tmp = TempDir::new("group-slow");
    let (dev, _, _) = failing_device(Duration::from_millis(3));
    let (wal, _) = Wal::open_with_device(cfg(tmp.path(), Durability::Sync), dev).unwrap();
    let expected = concurrent_submitters(&wal, 4, 100);
    let batches = expected.len() as u64;
    wal.wait_durable(batches).unwrap();
    let syncs = wal.stats().syncs;
    assert!(syncs * 4 < batches, "{syncs} syncs for {batches} batches");
    drop(wal);
    let (_wal, rec) = Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap();
    assert_eq!(rec.records, expected);
}

#[test]
fn unusable_directory_is_a_clear_error() {
    let tmp = TempDir::new("bad-dir");
    std::fs::create_dir_all(tmp.path()).unwrap();
    let file = tmp.path().join("plain-file");
    std::fs::write(&file, b"x").unwrap();
    let dir = file.join("log");
    let err = Wal::open(cfg(&dir, Durability::Sync)).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("create log directory"), "{msg}");
    assert!(msg.contains(&dir.display().to_string()), "{msg}");
}

#[test]
fn submit_refuses_an_open_record() {
    let tmp = TempDir::new("open-record");
    let (wal, _) = Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap();
    let mut buf = LogBuffer::new();
    buf.commit_begin(1);
    assert_eq!(wal.submit(&mut buf), Err(WalError::OpenRecord));
    buf.record_end();
    assert_eq!(wal.submit(&mut buf), Ok(1));
    assert!(matches!(
        wal.wait_durable(5),
        Err(WalError::NotSubmitted { seq: 5, next: 2 })
    ));
}

#[test]
fn buffers_are_recycled() {
    let tmp = TempDir::new("recycle");
    let (wal, _) = Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap();
    let mut buf = LogBuffer::new();
    for i in 0..4 {
        fill(&mut buf, i);
        let seq = wal.submit(&mut buf).unwrap();
        wal.wait_durable(seq).unwrap();
    }
    // After warm-up the buffer handed back has capacity from an earlier batch.
    assert!(buf.bytes.capacity() > 0);
}

/// Writes a valid log of a few batches and returns (dir guard, segment path, its bytes, records).
fn valid_log(name: &str) -> (TempDir, PathBuf, Vec<u8>, Vec<LogRecord>) {
    let tmp = TempDir::new(name);
    let (wal, _) = Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap();
    let expected = write_batches(&wal, 0, 6);
    drop(wal);
    let seg = last_segment(tmp.path());
    let bytes = std::fs::read(&seg).unwrap();
    (tmp, seg, bytes, expected)
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// Garbage after a valid log never panics recovery and is cut off at the valid prefix.
        #[test]
        fn garbage_after_valid_records_truncates_to_the_prefix(
            garbage in proptest::collection::vec(any::<u8>(), 1..300)
        ) {
            // An all-zero tail is a preallocated segment's unwritten space,
            // accepted as the log's end without a cut (`SegEnd::Zeros`).
            prop_assume!(garbage.iter().any(|&b| b != 0));
            let (tmp, seg, valid, expected) = valid_log("garbage");
            let mut data = valid.clone();
            data.extend_from_slice(&garbage);
            std::fs::write(&seg, &data).unwrap();
            let (wal, rec) = Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap();
            prop_assert_eq!(&rec.records, &expected);
            let t = rec.truncated.expect("garbage reported");
            prop_assert_eq!(t.offset, valid.len() as u64);
            prop_assert_eq!(std::fs::metadata(&seg).unwrap().len(), valid.len() as u64);
            drop(wal);
        }

        /// A segment of pure garbage, or garbage with plausible frame headers, never panics.
        #[test]
        fn arbitrary_segment_bytes_never_panic(
            chunks in proptest::collection::vec(
                (0u32..64, proptest::collection::vec(any::<u8>(), 0..40)), 0..8)
        ) {
            let tmp = TempDir::new("arbitrary");
            drop(Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap());
            let mut data = Vec::new();
            for (len, body) in &chunks {
                data.extend_from_slice(&len.to_le_bytes());
                // Sometimes a correct crc, so decoding of checksummed garbage is exercised.
                let crc = crc32c::crc32c_append(crc32c::crc32c(&len.to_le_bytes()), body);
                let crc = if body.len() % 2 == 0 { crc } else { crc ^ 1 };
                data.extend_from_slice(&crc.to_le_bytes());
                data.extend_from_slice(body);
            }
            let seg = tmp.path().join(recovery::segment_name(1));
            std::fs::write(&seg, &data).unwrap();
            // Refused (a checksummed batch header of a later batch), or opened.
            let (wal, rec) = match Wal::open(cfg(tmp.path(), Durability::Sync)) {
                Err(WalError::Damaged { file, .. }) => {
                    prop_assert_eq!(file, seg.clone());
                    prop_assert_eq!(std::fs::read(&seg).unwrap(), data);
                    return Ok(());
                }
                r => r.unwrap(),
            };
            let len = std::fs::metadata(&seg).unwrap().len();
            match rec.truncated {
                Some(t) => prop_assert_eq!(t.offset, len),
                None => prop_assert_eq!(len, data.len() as u64),
            }
            // Whatever survived is a valid log that accepts appends.
            let seq = wal.submit(&mut LogBuffer::new()).unwrap();
            wal.wait_durable(seq).unwrap();
        }
    }
}

#[test]
fn a_directory_is_opened_by_one_log_at_a_time() {
    let tmp = TempDir::new("lock");
    let (wal, _) = Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap();
    let err = Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap_err();
    assert!(err.to_string().contains("in use"), "{err}");
    drop(wal);
    Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap();
}

#[test]
fn missing_segments_are_a_recovery_error() {
    let tmp = TempDir::new("missing");
    let mut c = cfg(tmp.path(), Durability::Sync);
    c.segment_bytes = 200;
    let (wal, _) = Wal::open(c.clone()).unwrap();
    for i in 0..20 {
        write_batches(&wal, i, 1);
        wal.wait_durable(i + 1).unwrap();
    }
    let segs = wal.segments();
    drop(wal);
    assert!(segs.len() >= 2);
    std::fs::remove_file(&segs[0]).unwrap();
    let err = Wal::open(c).unwrap_err();
    assert!(matches!(err, WalError::Missing { .. }), "{err}");
    assert!(err.to_string().contains("missing"), "{err}");
}

/// A checksummed batch header with a seq above the next one is a gap: a
/// later write, so damage. One with an older seq (an older file's bytes
/// after a torn write) is a torn tail.
#[test]
fn a_batch_seq_that_does_not_follow_is_a_gap_or_a_torn_tail() {
    let tmp = TempDir::new("seq-gap");
    let (wal, _) = Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap();
    let expected = write_batches(&wal, 0, 3);
    drop(wal);
    let seg = last_segment(tmp.path());
    let good = std::fs::read(&seg).unwrap();
    let mut data = good.clone();
    format::push_batch_header(&mut data, 9);
    std::fs::write(&seg, &data).unwrap();
    let err = refused(
        &cfg(tmp.path(), Durability::Sync),
        &file_name(&seg),
        "batch 4 was due",
    );
    assert!(
        err.to_string().contains(&format!("offset {}", good.len())),
        "{err}"
    );

    let mut data = good.clone();
    format::push_batch_header(&mut data, 2);
    std::fs::write(&seg, &data).unwrap();
    let (wal, rec) = Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap();
    assert_eq!(rec.records, expected);
    let t = rec.truncated.expect("reported");
    assert_eq!(t.offset, good.len() as u64);
    assert!(t.reason.contains("batch 4 was due"), "{t}");
    assert_eq!(wal.next_seq(), 4);
}

#[test]
fn wal_is_send_and_sync_and_checkpoints_check_their_seq() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Wal>();
    let tmp = TempDir::new("ckpt-seq");
    let (wal, _) = Wal::open(cfg(tmp.path(), Durability::Sync)).unwrap();
    write_batches(&wal, 0, 2);
    assert!(matches!(
        wal.write_checkpoint(4, std::iter::empty()),
        Err(WalError::Config(_))
    ));
    assert!(matches!(
        wal.write_checkpoint(0, std::iter::empty()),
        Err(WalError::Config(_))
    ));
    // A checkpoint at next_seq covers everything; the open segment is kept.
    let info = wal.write_checkpoint(3, std::iter::empty()).unwrap();
    assert_eq!(info.segments_deleted, 0);
    assert_eq!(wal.segments().len(), 1);
}

#[test]
fn async_shutdown_syncs_what_is_queued() {
    let tmp = TempDir::new("async-shutdown");
    let (wal, _) = Wal::open(cfg(tmp.path(), Durability::Async)).unwrap();
    let expected = write_batches(&wal, 0, 50);
    wal.shutdown();
    assert_eq!(wal.durable_seq(), 50);
    assert!(wal.stats().syncs >= 1);
    wal.wait_durable(50).unwrap();
    drop(wal);
    let (_wal, rec) = Wal::open(cfg(tmp.path(), Durability::Async)).unwrap();
    assert_eq!(rec.records, expected);
}

/// Segments are preallocated (written over a file of zeros, so an fdatasync
/// changes no metadata): recovery takes a segment's unused zeros for the end
/// of its records, not for a torn tail, and appending goes on after them. A
/// partial record in front of the zeros is still a torn tail.
#[test]
fn preallocated_segments_end_at_their_zeros() {
    let tmp = TempDir::new("prealloc");
    let mut c = cfg(tmp.path(), Durability::Sync);
    c.segment_bytes = 4096;
    c.preallocate = true;
    let (wal, _) = Wal::open(c.clone()).unwrap();
    let mut expected = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut i = 0;
    // Stop right after a roll-over to a preallocated segment: the last
    // segment then holds a few records and then zeros.
    while wal.stats().segments_preallocated < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "no spare segment in 30 s: {:?}",
            wal.stats()
        );
        expected.extend(write_batches(&wal, i, 2));
        wal.wait_durable(wal.next_seq() - 1).unwrap();
        i += 2;
    }
    drop(wal);
    let seg = last_segment(tmp.path());
    let data = std::fs::read(&seg).unwrap();
    assert_eq!(data.len(), 4096, "the last segment was preallocated");
    let end = data.len() - data.iter().rev().take_while(|&&b| b == 0).count();
    assert!(end > 0 && end < 4096, "records, then zeros: {end}");
    let spare = tmp.path().join(SPARE_NAME);
    assert!(!spare.exists(), "shutdown removes the spare");

    // A crash leaves a spare (whole or not): the next open removes it.
    std::fs::write(&spare, [0u8; 100]).unwrap();
    let (wal, rec) = Wal::open(c.clone()).unwrap();
    assert_eq!(rec.truncated, None);
    assert_eq!(rec.records, expected);
    assert!(!spare.exists(), "open removes a spare left behind");
    assert!(
        std::fs::metadata(&seg).unwrap().len() < 4096,
        "zeros trimmed"
    );
    expected.extend(write_batches(&wal, 1000, 3));
    wal.wait_durable(wal.next_seq() - 1).unwrap();
    drop(wal);
    let (wal, rec) = Wal::open(c.clone()).unwrap();
    assert_eq!(rec.truncated, None);
    assert_eq!(rec.records, expected);
    drop(wal);

    // A torn record in front of a preallocated segment's zeros.
    let mut torn = std::fs::read(&seg).unwrap();
    let good = torn.len();
    torn.extend_from_slice(&[40, 0, 0, 0, 1, 2, 3, 4, 5]);
    torn.resize(4096, 0);
    std::fs::write(&seg, &torn).unwrap();
    let (_wal, rec) = Wal::open(c).unwrap();
    assert_eq!(rec.records, expected);
    let t = rec.truncated.expect("a torn tail is reported");
    assert_eq!(t.offset, good as u64);
    assert_eq!(t.bytes_truncated, (4096 - good) as u64);
}

/// Every file of `dir` with a checksum of its bytes: what a refused recovery
/// must leave exactly as it found it.
fn dir_checksums(dir: &Path) -> std::collections::BTreeMap<String, (u64, u32)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let bytes = std::fs::read(e.path()).unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                (bytes.len() as u64, crc32c::crc32c(&bytes)),
            )
        })
        .collect()
}

/// A log of `batches` batches, one per group (so segments of
/// `segment_bytes` roll over often); returns the config and the records.
fn small_segments_log(
    name: &str,
    segment_bytes: u64,
    batches: u64,
) -> (TempDir, WalConfig, Vec<LogRecord>) {
    let tmp = TempDir::new(name);
    let mut c = cfg(tmp.path(), Durability::Sync);
    c.segment_bytes = segment_bytes;
    let (wal, _) = Wal::open(c.clone()).unwrap();
    let mut expected = Vec::new();
    for i in 0..batches {
        expected.extend(write_batches(&wal, i, 1));
        wal.wait_durable(i + 1).unwrap();
    }
    drop(wal);
    (tmp, c, expected)
}

/// Opening `c` fails, names `file` and `what`, and leaves every file of the
/// directory as it was.
fn refused(c: &WalConfig, file: &str, what: &str) -> WalError {
    let before = dir_checksums(&c.dir);
    let err = match Wal::open(c.clone()) {
        Ok((_, rec)) => panic!(
            "recovery accepted a damaged log ({} records, truncated: {:?})",
            rec.records.len(),
            rec.truncated
        ),
        Err(e) => e,
    };
    let msg = err.to_string();
    assert!(msg.contains(file), "the error names {file}: {msg}");
    assert!(msg.contains(what), "the error says '{what}': {msg}");
    assert_eq!(
        dir_checksums(&c.dir),
        before,
        "a refused recovery changed files"
    );
    err
}

fn file_name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

/// A flipped byte in a record that valid batches follow is damage to data
/// that was synced, not a torn tail: cutting there dropped every later
/// (acknowledged) batch.
#[test]
fn a_flipped_byte_followed_by_valid_records_is_refused() {
    let (tmp, c, _) = small_segments_log("flip-mid", 64 << 20, 12);
    let seg = last_segment(tmp.path());
    let original = std::fs::read(&seg).unwrap();
    let offs = frame_offsets(&original);
    let at = offs[offs.len() / 2];
    let mut bad = original.clone();
    bad[at + 9] ^= 0x40;
    std::fs::write(&seg, &bad).unwrap();
    refused(&c, &file_name(&seg), &format!("offset {at}"));
    // A flipped length byte too.
    let mut bad = original.clone();
    bad[at] ^= 0x40;
    std::fs::write(&seg, &bad).unwrap();
    refused(&c, &file_name(&seg), &format!("offset {at}"));
}

/// Damage in a segment that is not the newest: it was synced before the
/// next one was created, so no crash can have torn it.
#[test]
fn damage_in_an_older_segment_is_refused() {
    let (tmp, c, _) = small_segments_log("old-seg", 200, 30);
    let segs = recovery::list_dir(tmp.path()).unwrap().segments;
    assert!(segs.len() >= 3);
    let victim = &segs[1].1;
    let mut data = std::fs::read(victim).unwrap();
    let n = data.len();
    data[n - 2] ^= 1;
    std::fs::write(victim, &data).unwrap();
    refused(&c, &file_name(victim), "offset");
}

#[test]
fn a_deleted_middle_segment_is_refused() {
    let (tmp, c, _) = small_segments_log("gone-mid", 200, 30);
    let segs = recovery::list_dir(tmp.path()).unwrap().segments;
    assert!(segs.len() >= 3);
    std::fs::remove_file(&segs[1].1).unwrap();
    refused(&c, &file_name(&segs[2].1), "missing");
}

/// The newest segment renamed away (or to another number): the log looked
/// complete and ended early.
#[test]
fn a_renamed_last_segment_is_refused() {
    let (tmp, c, _) = small_segments_log("renamed-last", 200, 30);
    let segs = recovery::list_dir(tmp.path()).unwrap().segments;
    let last = &segs.last().unwrap().1;
    let away = tmp.path().join("saved.bak");
    std::fs::rename(last, &away).unwrap();
    refused(&c, &file_name(last), "missing");
    // Renamed to the name of a later segment.
    let later = tmp
        .path()
        .join(recovery::segment_name(segs.last().unwrap().0 + 100));
    std::fs::rename(&away, &later).unwrap();
    refused(&c, &file_name(last), "missing");
    // Without the control file's word, the scan finds the name does not fit.
    let mut ctl = control::read(tmp.path()).unwrap().unwrap();
    ctl.last_segment = 0;
    control::write(&FsDevice, tmp.path(), &ctl).unwrap();
    refused(&c, &file_name(&later), "batches");
}

/// A file named like an older segment: recovery read it first, cut it to
/// nothing and deleted every real segment after it.
#[test]
fn a_stray_file_named_like_a_segment_is_refused() {
    let (tmp, c, _) = small_segments_log("stray", 64 << 20, 5);
    let stray = tmp.path().join(recovery::segment_name(0));
    std::fs::write(&stray, b"not a log segment at all").unwrap();
    refused(&c, &file_name(&stray), "wal-00000000000000000000.log");
    std::fs::write(&stray, b"").unwrap();
    refused(&c, &file_name(&stray), "wal-00000000000000000000.log");
}

/// 16 KiB of zeros inside a segment, with records after them.
#[test]
fn zeroed_16k_inside_a_segment_is_refused() {
    let tmp = TempDir::new("zeros-mid");
    let c = cfg(tmp.path(), Durability::Sync);
    let (wal, _) = Wal::open(c.clone()).unwrap();
    let mut buf = LogBuffer::new();
    for i in 0..200u64 {
        buf.commit_begin(i);
        buf.put(1, i, &[i as u8; 300]);
        buf.record_end();
        let seq = wal.submit(&mut buf).unwrap();
        wal.wait_durable(seq).unwrap();
    }
    drop(wal);
    let seg = last_segment(tmp.path());
    let mut data = std::fs::read(&seg).unwrap();
    assert!(data.len() > 40_000);
    data[20_000..20_000 + 16_384].fill(0);
    std::fs::write(&seg, &data).unwrap();
    refused(&c, &file_name(&seg), "offset");
}

/// A directory with a log but no control file (written before there was one, or the
/// file was removed) is refused: without it, a missing segment looks like the end of
/// the log. A control file that does not check is refused, naming it.
#[test]
fn a_missing_or_corrupt_control_file_is_refused() {
    let (tmp, c, _) = small_segments_log("no-control", 200, 10);
    let ctl = tmp.path().join("CONTROL");
    let good = std::fs::read(&ctl).unwrap();
    std::fs::remove_file(&ctl).unwrap();
    let err = refused(&c, &tmp.path().display().to_string(), "no control file");
    assert!(matches!(err, WalError::NoControl { .. }), "{err}");
    let mut bad = good.clone();
    bad[30] ^= 4;
    std::fs::write(&ctl, &bad).unwrap();
    let err = refused(&c, "CONTROL", "checksum mismatch");
    assert!(matches!(err, WalError::CorruptControl { .. }), "{err}");
    std::fs::write(&ctl, &good).unwrap();
    Wal::open(c).unwrap();
}

/// Another island's or schema's directory is refused; so is another deployment's.
#[test]
fn a_directory_of_another_island_or_schema_is_refused() {
    let tmp = TempDir::new("identity");
    let mut c = cfg(tmp.path(), Durability::Sync);
    c.identity = LogIdentity {
        deployment: None,
        island: 1,
        islands: 2,
        schema: 7,
        workload: "micro rows=10 row_bytes=16 n=1 keys=5..10".into(),
        sites: 0,
    };
    let (wal, rec) = Wal::open(c.clone()).unwrap();
    assert_eq!(rec.control, None, "a new directory");
    write_batches(&wal, 0, 3);
    drop(wal);
    let deployment = control::read(tmp.path()).unwrap().unwrap().deployment;
    let mut other = c.clone();
    other.identity.island = 0;
    refused(&other, "CONTROL", "swapped");
    let mut other = c.clone();
    other.identity.schema = 8;
    refused(&other, "CONTROL", "schema");
    let mut other = c.clone();
    other.identity.deployment = Some(deployment ^ 1);
    refused(&other, "CONTROL", "another database");
    let mut other = c.clone();
    other.identity.workload = "micro rows=10 row_bytes=16 n=1 keys=0..5".into();
    refused(&other, "CONTROL", "workload");
    // The same identity, with the deployment named or not, opens.
    c.identity.deployment = Some(deployment);
    let (_wal, rec) = Wal::open(c).unwrap();
    assert_eq!(rec.control.map(|c| c.deployment), Some(deployment));
}

/// The repair accepts a log whose newest segment is gone, and says that the batches it
/// held are lost; a plain open then accepts what is left.
#[test]
fn repair_of_a_log_whose_last_segment_is_gone() {
    let (tmp, mut c, expected) = small_segments_log("repair-last", 200, 30);
    let segs = recovery::list_dir(tmp.path()).unwrap().segments;
    let (first_lost, last) = segs.last().unwrap().clone();
    std::fs::rename(&last, tmp.path().join("elsewhere")).unwrap();
    c.on_damage = OnDamage::Truncate;
    let (wal, rec) = Wal::open(c.clone()).unwrap();
    let r = rec.repaired.expect("reported");
    assert!(
        r.shortfall.as_ref().is_some_and(|s| s.contains("are lost")),
        "{r}"
    );
    let kept: Vec<LogRecord> = expected
        .iter()
        .filter(|r| r.seq() < first_lost)
        .cloned()
        .collect();
    assert_eq!(rec.records, kept);
    drop(wal);
    c.on_damage = OnDamage::Refuse;
    let (_wal, rec) = Wal::open(c).unwrap();
    assert_eq!(rec.records, kept);
}

/// A torn write followed by an older file's bytes (as a reused or preallocated file
/// could hold: valid frames of older batches) is a torn tail: those batches are below
/// the last good one, so they are no trace of a later write.
#[test]
fn a_torn_write_before_an_older_files_bytes_is_a_torn_tail() {
    let (tmp, c, expected) = small_segments_log("torn-old", 200, 20);
    let segs = recovery::list_dir(tmp.path()).unwrap().segments;
    assert!(segs.len() >= 3);
    let older = std::fs::read(&segs[0].1).unwrap();
    let last = &segs.last().unwrap().1;
    let mut data = std::fs::read(last).unwrap();
    let good = data.len();
    // Half a record header, then the older segment's frames.
    data.extend_from_slice(&[120, 0, 0, 0, 9]);
    data.extend_from_slice(&older);
    std::fs::write(last, &data).unwrap();
    let (_wal, rec) = Wal::open(c).unwrap();
    assert_eq!(rec.records, expected);
    let t = rec.truncated.expect("a torn tail");
    assert_eq!((t.offset, t.cut), (good as u64, true));
    assert_eq!(std::fs::metadata(last).unwrap().len(), good as u64);
}

/// A repair never drops a record that verifies. A copy of a segment under a low, a
/// middle and a high number, garbage and an empty file under a segment's name, and the
/// newest segment renamed to a later number are each refused by a plain open (nothing
/// changed); the repair sets the stray aside, or renames the segment back to the name its
/// first batch gives, keeps every record, and says it lost none; a plain open then
/// recovers every record. (A repair used to cut the stray to nothing and delete every
/// real segment after it, or delete the renamed newest segment.)
#[test]
fn repair_sets_strays_aside_and_keeps_every_record() {
    let (tmp, c, expected) = small_segments_log("strays", 400, 40);
    let dir = tmp.path();
    let segs = recovery::list_dir(dir).unwrap().segments;
    assert!(segs.len() >= 4, "{segs:?}");
    let mid = segs
        .windows(2)
        .find(|w| w[0].0 + 1 < w[1].0)
        .map(|w| w[0].0 + 1)
        .expect("a free name between two segments");
    let (last_seq, last) = segs.last().unwrap().clone();
    let first_bytes = std::fs::read(&segs[0].1).unwrap();
    let last_bytes = std::fs::read(&last).unwrap();
    let named = |seq: BatchSeq| dir.join(recovery::segment_name(seq));
    let mut repair = c.clone();
    repair.on_damage = OnDamage::Truncate;
    let aside = dir.join(SET_ASIDE_DIR);
    // (what, the file the repair must move, its bytes; the renamed newest segment: None)
    let cases: Vec<(&str, PathBuf, Option<Vec<u8>>)> = vec![
        (
            "a copy under a low number",
            named(0),
            Some(first_bytes.clone()),
        ),
        (
            "a copy under a middle number",
            named(mid),
            Some(first_bytes.clone()),
        ),
        (
            "a copy under a high number",
            named(last_seq + 50),
            Some(last_bytes.clone()),
        ),
        (
            "garbage under a middle number",
            named(mid),
            Some(b"not a segment".to_vec()),
        ),
        (
            "an empty file under a low number",
            named(0),
            Some(Vec::new()),
        ),
        ("the newest segment renamed", named(last_seq + 100), None),
    ];
    for (what, stray, bytes) in cases {
        match &bytes {
            Some(b) => std::fs::write(&stray, b).unwrap(),
            None => std::fs::rename(&last, &stray).unwrap(),
        }
        let refused_name = if bytes.is_some() { &stray } else { &last };
        refused(&c, &file_name(refused_name), "");
        let (wal, rec) = Wal::open(repair.clone()).unwrap();
        drop(wal);
        assert_eq!(rec.records, expected, "{what}: every record kept");
        let r = rec.repaired.expect("the repair says what it did");
        assert!(!r.lost(), "{what}: {r}");
        match &bytes {
            Some(b) => {
                assert_eq!(r.set_aside.len(), 1, "{what}: {r}");
                let a = &r.set_aside[0];
                assert_eq!(a.file, stray, "{what}: {r}");
                assert_eq!(a.to, aside.join(file_name(&stray)), "{what}");
                assert_eq!(&std::fs::read(&a.to).unwrap(), b, "{what}: moved as it was");
                assert!(!stray.exists(), "{what}");
            }
            None => {
                assert_eq!(
                    r.renamed,
                    vec![(stray.clone(), last.clone())],
                    "{what}: {r}"
                );
                assert!(r.set_aside.is_empty(), "{what}: {r}");
                assert_eq!(std::fs::read(&last).unwrap(), last_bytes, "{what}");
            }
        }
        let (wal, rec) = Wal::open(c.clone()).unwrap();
        assert_eq!(
            rec.records, expected,
            "{what}: a plain open after the repair"
        );
        assert_eq!((rec.truncated, rec.repaired), (None, None), "{what}");
        drop(wal);
        let _ = std::fs::remove_dir_all(&aside);
    }
}

/// Rewrites `SYNCED` as a crash leaves it when the log last marked itself fdatasync'ed
/// through batch `seq`, at `offset` of its newest segment: the mark of a log whose later
/// bytes a test then tears.
fn crash_mark(dir: &Path, seq: BatchSeq, offset: usize) {
    let segment = recovery::list_dir(dir).unwrap().segments.last().unwrap().0;
    let mark = synced::Mark {
        seq,
        segment,
        offset: offset as u64,
    };
    synced::write(&FsDevice, dir, &mark).unwrap();
}

/// The newest segment cut short at several offsets of a log that was shut down (its
/// `SYNCED` mark says how far it was fdatasync'ed): each cut loses synced, acknowledged
/// records, which no crash explains, and is refused naming the segment and `SYNCED`, with
/// no file changed; the check's read-only recovery refuses too. A repair takes the cut
/// and says the records are lost; a plain open then accepts what is left. Bytes appended after the mark (a torn write) are still a torn tail.
/// (Cutting the newest segment in half read as a torn tail and lost the records.)
#[test]
fn a_newest_segment_cut_below_the_synced_mark_is_refused() {
    let (tmp, c, expected) = small_segments_log("cut-newest", 64 << 20, 40);
    let dir = tmp.path();
    let seg = last_segment(dir);
    let original = std::fs::read(&seg).unwrap();
    let offs = frame_offsets(&original);
    let mark = synced::read(dir).unwrap().expect("a mark");
    assert_eq!(mark.offset, original.len() as u64, "{mark:?}");
    let identity = c.identity.clone();
    for cut in [
        original.len() / 2,
        offs[offs.len() / 2],
        offs[offs.len() - 1],
        original.len() - 1,
    ] {
        std::fs::write(&seg, &original[..cut]).unwrap();
        refused(&c, &file_name(&seg), "SYNCED");
        let err = read_only(dir, &identity).unwrap_err();
        assert!(err.to_string().contains("SYNCED"), "cut at {cut}: {err}");
        std::fs::write(&seg, &original).unwrap();
    }
    // A torn write after the synced end is no loss.
    let mut torn = original.clone();
    torn.extend_from_slice(&[90, 0, 0, 0, 1, 2]);
    std::fs::write(&seg, &torn).unwrap();
    let rec = read_only(dir, &identity).unwrap();
    assert_eq!(rec.records, expected);
    assert!(rec.truncated.is_some());
    // The repair takes a cut, says so, and keeps the segment's bytes.
    let cut = offs[offs.len() / 2];
    std::fs::write(&seg, &original[..cut]).unwrap();
    let mut repair = c.clone();
    repair.on_damage = OnDamage::Truncate;
    let (wal, rec) = Wal::open(repair).unwrap();
    drop(wal);
    let r = rec.repaired.expect("reported");
    assert!(
        r.lost() && r.shortfall.as_ref().is_some_and(|s| s.contains("SYNCED")),
        "{r}"
    );
    assert!(rec.records.len() < expected.len());
    assert_eq!(rec.records[..], expected[..rec.records.len()]);
    let (_wal, again) = Wal::open(c).unwrap();
    assert_eq!(again.records, rec.records);
}
