//! The control file: a small record, one per log directory, of whose log this is and how
//! far it reaches, so that recovery can tell a damaged or foreign directory from a short log.
//!
//! `CONTROL` is rewritten whole and atomically (`CONTROL.tmp`, fdatasync, rename, directory
//! fsync; see [`super::device::write_atomically`]) when the log opens, when it rolls over to
//! a new segment, when a checkpoint is written and when the initial load is marked
//! complete, and when the island reserves more gtids (about once per million transactions of
//! a worker); never per batch. Layout (little-endian), version 3:
//!
//! ```text
//! [magic "ISLCTRL1"][version u32][body_len u32][body][crc32c u32 of everything before it]
//! body = [deployment u128][island u32][islands u32][schema u64]
//!        [checkpoint u64][durable u64][first_segment u64][last_segment u64]
//!        [workload_len u16][workload bytes (UTF-8)]
//!        [loaded u8: 0|1][sites u32]
//!        [incarnation u64][gtid_reserved u64]
//! ```
//!
//! `loaded` says the database's initial load completed and was checkpointed on every
//! island (a directory is made with 0; the opener that loads sets it, [`super::Wal::mark_loaded`]);
//! an opener must not serve a directory whose load never completed. `sites` is how many
//! sites the deployment's keys were spread over when it was made (0: not recorded); with
//! `islands`, it fixes which island holds each key (sites are split evenly, in order, over
//! the islands), so a reopen must route with the same count.
//!
//! `incarnation` counts the opens of the log: each open increments it and writes it, durably,
//! before the island hands out its first gtid. `gtid_reserved` bounds (exclusive) the gtid
//! sequence numbers of the island's workers (a worker's own count, below its number in a
//! gtid's low bits): no worker of any incarnation used one at or above it, so a new
//! incarnation starts there and never names a transaction like one of an earlier
//! incarnation (see `coord/gtids.rs`). The log writer raises it ahead of need.
//!
//! Version 2 (no `incarnation`, no `gtid_reserved`) is still read, as incarnation 0 with no
//! reservation; its gtids are then known only from the logs (as before incarnations).
//! Version 1 (no `loaded`, no `sites`, and neither of those) is still read too: its load is taken as complete when
//! it names a checkpoint (the load is the first thing checkpointed; a version-1 directory
//! whose load was killed names none), and its site count as not recorded. The next write
//! upgrades either to version 3.
//!
//! What recovery demands of it (see `Wal::open`): the identity matches the one the opener
//! expects ([`LogIdentity`]); the checkpoint it names (or a newer one) exists; the segments
//! `first_segment` and `last_segment` exist (the chain of batch seqs between them is checked
//! by the scan); and the log, with the checkpoint, reaches batch `durable`.

use std::path::{Path, PathBuf};

use super::device::{write_atomically, LogDevice};
use super::{BatchSeq, WalError};

pub(crate) const CONTROL_NAME: &str = "CONTROL";
pub(crate) const CONTROL_TMP: &str = "CONTROL.tmp";
const MAGIC: &[u8; 8] = b"ISLCTRL1";
/// The format this code writes (it reads this one and versions 1 and 2).
pub const CONTROL_VERSION: u32 = 3;
/// Longest workload description a control file holds.
pub const WORKLOAD_MAX_BYTES: usize = 1024;
const FIXED_BODY_BYTES: usize = 16 + 4 + 4 + 8 + 8 * 4 + 2 + 1 + 4 + 8 + 8;

/// Whose log a directory holds: what an opener expects, and what a new directory records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogIdentity {
    /// The deployment (all islands of one database share it). `None`: whatever the
    /// directory holds; a new directory gets a random one.
    pub deployment: Option<u128>,
    /// This island's number in its deployment, and how many islands it has.
    pub island: u32,
    pub islands: u32,
    /// A fingerprint of the tables (names, columns, row sizes):
    /// [`crate::storage::schema_fingerprint`].
    pub schema: u64,
    /// The workload that created the database, with the parameters that shape its data
    /// (e.g. `tpcc warehouses=2 max_orders_per_district=1000000`). Empty: not known, and
    /// not checked.
    pub workload: String,
    /// How many sites the deployment's keys are spread over (see the module's doc). 0: not
    /// known, and not checked.
    pub sites: u32,
}

impl Default for LogIdentity {
    fn default() -> Self {
        LogIdentity {
            deployment: None,
            island: 0,
            islands: 1,
            schema: 0,
            workload: String::new(),
            sites: 0,
        }
    }
}

/// The contents of a control file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Control {
    pub deployment: u128,
    pub island: u32,
    pub islands: u32,
    pub schema: u64,
    pub workload: String,
    /// Start seq of the newest checkpoint (0: none).
    pub checkpoint: BatchSeq,
    /// Every batch up to this one was durable when this file was written.
    pub durable: BatchSeq,
    /// The oldest segment (by its name's seq) that must exist (0: none yet).
    pub first_segment: BatchSeq,
    /// The newest segment created (0: none yet).
    pub last_segment: BatchSeq,
    /// The database's initial load completed (and was checkpointed) on every island.
    pub loaded: bool,
    /// The deployment's site count when it was made (0: not recorded).
    pub sites: u32,
    /// Opens of this log so far (0: none recorded, or a version-2 file).
    pub incarnation: u64,
    /// No worker of this island used a gtid sequence number at or above this (0: no
    /// reservation recorded). See the module's doc.
    pub gtid_reserved: u64,
}

impl Control {
    /// The identity this control file records: what an opener of its
    /// directory expects when it takes the directory as it is (a check, a
    /// repair) rather than from a deployment's configuration.
    pub fn identity(&self) -> LogIdentity {
        LogIdentity {
            deployment: Some(self.deployment),
            island: self.island,
            islands: self.islands,
            schema: self.schema,
            workload: self.workload.clone(),
            sites: self.sites,
        }
    }

    /// A control file for a new directory of `id` (a random deployment id if it names none).
    pub(crate) fn new(id: &LogIdentity) -> Control {
        Control {
            deployment: id.deployment.unwrap_or_else(new_deployment_id),
            island: id.island,
            islands: id.islands,
            schema: id.schema,
            workload: id.workload.clone(),
            checkpoint: 0,
            durable: 0,
            first_segment: 0,
            last_segment: 0,
            loaded: false,
            sites: id.sites,
            incarnation: 0,
            gtid_reserved: 0,
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let w = self.workload.as_bytes();
        let w = &w[..w.len().min(WORKLOAD_MAX_BYTES)];
        let mut body = Vec::with_capacity(FIXED_BODY_BYTES + w.len());
        body.extend_from_slice(&self.deployment.to_le_bytes());
        body.extend_from_slice(&self.island.to_le_bytes());
        body.extend_from_slice(&self.islands.to_le_bytes());
        body.extend_from_slice(&self.schema.to_le_bytes());
        for v in [
            self.checkpoint,
            self.durable,
            self.first_segment,
            self.last_segment,
        ] {
            body.extend_from_slice(&v.to_le_bytes());
        }
        body.extend_from_slice(&(w.len() as u16).to_le_bytes());
        body.extend_from_slice(w);
        body.push(u8::from(self.loaded));
        body.extend_from_slice(&self.sites.to_le_bytes());
        body.extend_from_slice(&self.incarnation.to_le_bytes());
        body.extend_from_slice(&self.gtid_reserved.to_le_bytes());
        let mut out = Vec::with_capacity(20 + body.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&CONTROL_VERSION.to_le_bytes());
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&body);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes a control file's bytes; the error says what is wrong.
    pub(crate) fn decode(data: &[u8]) -> Result<Control, String> {
        if data.len() < 20 || &data[..8] != MAGIC {
            return Err("not a control file (no ISLCTRL1 header)".into());
        }
        let u32_at = |o: usize| u32::from_le_bytes(data[o..o + 4].try_into().expect("4 bytes"));
        let version = u32_at(8);
        if !(1..=CONTROL_VERSION).contains(&version) {
            return Err(format!(
                "format version {version}; this islands reads versions 1 to {CONTROL_VERSION}"
            ));
        }
        let body_len = u32_at(12) as usize;
        if data.len() != 16 + body_len + 4 {
            return Err(format!(
                "{} bytes, its header says {}",
                data.len(),
                16 + body_len + 4
            ));
        }
        let crc = u32_at(16 + body_len);
        if crc32c::crc32c(&data[..16 + body_len]) != crc {
            return Err("checksum mismatch".into());
        }
        let mut c = super::format::Cursor::new(&data[16..16 + body_len]);
        let bad = || "truncated body".to_string();
        let deployment = u128::from_le_bytes(c.take(16).ok_or_else(bad)?.try_into().expect("16"));
        let island = c.u32().ok_or_else(bad)?;
        let islands = c.u32().ok_or_else(bad)?;
        let schema = c.u64().ok_or_else(bad)?;
        let checkpoint = c.u64().ok_or_else(bad)?;
        let durable = c.u64().ok_or_else(bad)?;
        let first_segment = c.u64().ok_or_else(bad)?;
        let last_segment = c.u64().ok_or_else(bad)?;
        let n = c.u16().ok_or_else(bad)? as usize;
        let workload = std::str::from_utf8(c.take(n).ok_or_else(bad)?)
            .map_err(|_| "workload is not UTF-8".to_string())?
            .to_string();
        let (loaded, sites) = if version == 1 {
            (checkpoint != 0, 0)
        } else {
            let loaded = match c.take(1).ok_or_else(bad)?[0] {
                0 => false,
                1 => true,
                b => return Err(format!("load flag {b} is neither 0 nor 1")),
            };
            (loaded, c.u32().ok_or_else(bad)?)
        };
        let (incarnation, gtid_reserved) = if version < 3 {
            (0, 0)
        } else {
            (c.u64().ok_or_else(bad)?, c.u64().ok_or_else(bad)?)
        };
        if !c.is_done() {
            return Err("trailing bytes in the body".into());
        }
        Ok(Control {
            deployment,
            island,
            islands,
            schema,
            workload,
            checkpoint,
            durable,
            first_segment,
            last_segment,
            loaded,
            sites,
            incarnation,
            gtid_reserved,
        })
    }

    /// Whether this directory is the one `want` describes; the error names the file and
    /// both values.
    pub(crate) fn check(&self, path: &Path, want: &LogIdentity) -> Result<(), WalError> {
        let refuse = |why: String| {
            Err(WalError::Identity {
                file: path.to_path_buf(),
                reason: why,
            })
        };
        if self.island != want.island || self.islands != want.islands {
            return refuse(format!(
                "it belongs to island {} of a {}-island deployment, not to island {} of {}: \
                 were island directories renamed or swapped?",
                self.island, self.islands, want.island, want.islands
            ));
        }
        if let Some(d) = want.deployment {
            if d != self.deployment {
                return refuse(format!(
                    "it belongs to deployment {:032x}, not to {d:032x} (that of the other islands): \
                     it comes from another database",
                    self.deployment
                ));
            }
        }
        if self.schema != want.schema {
            return refuse(format!(
                "it was written with schema {:016x}, and the tables given now are schema {:016x} \
                 (tables, columns or row sizes differ)",
                self.schema, want.schema
            ));
        }
        if !want.workload.is_empty() && !self.workload.is_empty() && want.workload != self.workload
        {
            return refuse(format!(
                "it holds workload '{}', not '{}'",
                self.workload, want.workload
            ));
        }
        if want.sites != 0 && self.sites != 0 && want.sites != self.sites {
            return refuse(format!(
                "the database was made with its keys spread over {} sites, and this open plans \
                 {}: every key would be looked for on another island than the one that holds \
                 it (give sites = {} in the deployment)",
                self.sites, want.sites, self.sites
            ));
        }
        Ok(())
    }
}

pub(crate) fn path(dir: &Path) -> PathBuf {
    dir.join(CONTROL_NAME)
}

/// Reads `dir`'s control file: `Ok(None)` if there is none.
pub fn read(dir: &Path) -> Result<Option<Control>, WalError> {
    let path = path(dir);
    let data = match std::fs::read(&path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(WalError::io("read control file", &path, e)),
    };
    Control::decode(&data)
        .map(Some)
        .map_err(|reason| WalError::CorruptControl { file: path, reason })
}

/// Writes `ctl` to `dir` atomically through `device`.
pub(crate) fn write(device: &dyn LogDevice, dir: &Path, ctl: &Control) -> Result<(), WalError> {
    write_atomically(device, dir, CONTROL_TMP, CONTROL_NAME, &ctl.encode()).map_err(
        |(op, path, e)| {
            let op = match op {
                "create" => "create control file",
                "write" => "write control file",
                "fdatasync" => "fdatasync control file",
                "rename" => "rename control file",
                "remove" => "remove old temporary control file",
                _ => "fsync log directory",
            };
            WalError::io(op, &path, e)
        },
    )
}

/// What [`rebuild`] wrote, and why.
#[derive(Clone, Debug)]
pub struct Rebuilt {
    pub control: Control,
    /// Where the damaged control file's bytes were kept (`None`: there was none).
    pub kept: Option<PathBuf>,
    /// Decisions worth telling the operator, in words.
    pub notes: Vec<String>,
}

/// Rebuilds `dir`'s control file, as `islands repair --rebuild-control` does: the identity
/// comes from `id` (the caller establishes it: from the sibling islands' control files
/// and the operator's flags), the extent from the directory itself: the newest checkpoint
/// (which must validate), the oldest and newest segments, and the last good batch of an
/// unbroken chain of segments from the checkpoint on (a torn tail is left to the next
/// open to cut). `loaded`: what the sibling islands record of the initial load (`None`:
/// no sibling says; then a checkpoint is the evidence, as the load ends with one).
///
/// Refused, with nothing written, when anything is ambiguous: a stray file, a newest
/// checkpoint that does not validate, a gap before the first segment or between
/// segments, damage that is no torn tail, or siblings that say the load completed where
/// this directory holds no checkpoint. The directory is locked as an open log locks it,
/// so a running process's directory is refused too. A control file that was there (and
/// does not decode) is kept as `CONTROL.bad-<seconds since the epoch>`.
pub fn rebuild(dir: &Path, id: &LogIdentity, loaded: Option<bool>) -> Result<Rebuilt, WalError> {
    use super::recovery;
    let refuse = |file: &Path, reason: String| WalError::Damaged {
        file: file.to_path_buf(),
        offset: 0,
        reason: format!("{reason}; the control file is not rebuilt"),
    };
    let deployment = id
        .deployment
        .ok_or_else(|| WalError::Config("rebuilding a control file needs its deployment".into()))?;
    let _lock = super::lock_dir(dir)?;
    let listing = recovery::list_dir(dir)?;
    if let Some(stray) = listing.strays.first() {
        return Err(refuse(
            stray,
            "it is named like a log file but is none: move it out of the log directory".into(),
        ));
    }
    if listing.segments.is_empty() && listing.checkpoints.is_empty() {
        return Err(WalError::Config(format!(
            "{} holds no log segment and no checkpoint: there is nothing to rebuild a control \
             file from",
            dir.display()
        )));
    }
    let checkpoint = recovery::load_checkpoint(&listing.checkpoints)?;
    let start_seq = checkpoint.as_ref().map_or(0, |c| c.start_seq);
    let scan = recovery::scan(listing.segments.clone())?;
    let mut notes = Vec::new();
    match &scan.end {
        recovery::End::Damaged(f) => {
            return Err(WalError::Damaged {
                file: scan.segments[f.segment].1.clone(),
                offset: f.offset,
                reason: format!(
                    "{}; the control file is not rebuilt over a damaged log",
                    f.reason
                ),
            })
        }
        recovery::End::Torn(f) => notes.push(format!(
            "{} ends in a torn write at offset {} ({}): the next open cuts it",
            scan.segments[f.segment].1.display(),
            f.offset,
            f.reason
        )),
        recovery::End::Clean | recovery::End::Zeros { .. } => {}
    }
    if let Some((_, first)) = scan.segments.first() {
        if scan.first_seq > start_seq.max(1) {
            return Err(refuse(
                first,
                format!(
                    "the oldest segment starts at batch {}, but batches from {} on are in no \
                     checkpoint (segments before it are gone)",
                    scan.first_seq,
                    start_seq.max(1)
                ),
            ));
        }
    }
    let loaded = match (loaded, checkpoint.is_some()) {
        (Some(true), false) => {
            return Err(WalError::Config(format!(
                "{} holds no checkpoint, but the other islands' control files say the \
                 database's load completed (every island's load ends with a checkpoint): this \
                 directory is not the one they were loaded with",
                dir.display()
            )))
        }
        (Some(l), _) => l,
        (None, has) => {
            notes.push(format!(
                "initial load {}: {} checkpoint",
                if has { "complete" } else { "not complete" },
                if has { "it holds a" } else { "it holds no" }
            ));
            has
        }
    };
    let mut control = Control::new(id);
    control.deployment = deployment;
    control.checkpoint = start_seq;
    control.durable = scan.max_seq.max(start_seq.saturating_sub(1));
    control.first_segment = listing.segments.first().map_or(0, |s| s.0);
    control.last_segment = listing.segments.last().map_or(0, |s| s.0);
    control.loaded = loaded;
    notes.push(
        "the island's incarnation and gtid reservation are not known (they were in the lost \
         control file): reopen it together with every island of its deployment, whose logs \
         then show the gtids it used"
            .into(),
    );
    let path = path(dir);
    let kept = match std::fs::read(&path) {
        Ok(old) => {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let keep = dir.join(format!("{CONTROL_NAME}.bad-{secs}"));
            std::fs::write(&keep, old)
                .map_err(|e| WalError::io("keep old control file", &keep, e))?;
            Some(keep)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(WalError::io("read control file", &path, e)),
    };
    write(&super::FsDevice, dir, &control)?;
    Ok(Rebuilt {
        control,
        kept,
        notes,
    })
}

/// A random 128-bit id: from the kernel's random source, or else from the clock, the
/// process id and the standard library's per-process random hash keys.
pub fn new_deployment_id() -> u128 {
    use std::io::Read;
    let mut b = [0u8; 16];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok()
    {
        return u128::from_le_bytes(b);
    }
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    let lo = h.finish();
    h.write_u64(lo);
    (u128::from(h.finish()) << 64) | u128::from(lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Control {
        Control {
            deployment: 0x0123_4567_89ab_cdef_0011_2233_4455_6677,
            island: 1,
            islands: 2,
            schema: 0xfeed,
            workload: "micro rows=10 row_bytes=16".into(),
            checkpoint: 5,
            durable: 9,
            first_segment: 3,
            last_segment: 8,
            loaded: true,
            sites: 6,
            incarnation: 12,
            gtid_reserved: 3 << 20,
        }
    }

    /// `c` as version 1 wrote it: no load flag, no site count.
    fn encode_v1(c: &Control) -> Vec<u8> {
        encode_old(c, 1, 5 + 16)
    }

    /// `c` as version `version` wrote it: its body without the last `cut` bytes.
    fn encode_old(c: &Control, version: u32, cut: usize) -> Vec<u8> {
        let mut body = c.encode()[16..].to_vec();
        body.truncate(body.len() - 4 - cut);
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&version.to_le_bytes());
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&body);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    #[test]
    fn version_1_reads_with_its_load_complete_iff_it_names_a_checkpoint() {
        let mut c = sample();
        let old = Control::decode(&encode_v1(&c)).unwrap();
        assert!(old.loaded);
        assert_eq!(old.sites, 0);
        assert_eq!((old.checkpoint, old.durable), (c.checkpoint, c.durable));
        c.checkpoint = 0;
        assert!(!Control::decode(&encode_v1(&c)).unwrap().loaded);
        let mut v4 = c.encode();
        v4[8] = 4;
        let e = Control::decode(&v4).unwrap_err();
        assert!(e.contains("version 4"), "{e}");
    }

    #[test]
    fn version_2_reads_as_incarnation_0_without_a_reservation() {
        let c = sample();
        let old = Control::decode(&encode_old(&c, 2, 16)).unwrap();
        assert_eq!((old.incarnation, old.gtid_reserved), (0, 0));
        assert_eq!((old.loaded, old.sites), (c.loaded, c.sites));
        assert_eq!(old.workload, c.workload);
        let v3 = Control::decode(&c.encode()).unwrap();
        assert_eq!((v3.incarnation, v3.gtid_reserved), (12, 3 << 20));
    }

    #[test]
    fn round_trip_and_every_flipped_byte_is_refused() {
        let c = sample();
        let bytes = c.encode();
        assert_eq!(Control::decode(&bytes), Ok(c));
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(Control::decode(&bad).is_err(), "flip at byte {i} accepted");
        }
        for n in 0..bytes.len() {
            assert!(Control::decode(&bytes[..n]).is_err(), "cut at {n} accepted");
        }
    }

    #[test]
    fn identity_checks_name_what_differs() {
        let c = sample();
        let p = Path::new("/x/CONTROL");
        let mut want = LogIdentity {
            deployment: Some(c.deployment),
            island: 1,
            islands: 2,
            schema: 0xfeed,
            workload: String::new(),
            sites: 0,
        };
        assert!(c.check(p, &want).is_ok());
        want.island = 0;
        let e = c.check(p, &want).unwrap_err().to_string();
        assert!(e.contains("/x/CONTROL") && e.contains("swapped"), "{e}");
        want.island = 1;
        want.deployment = Some(7);
        let e = c.check(p, &want).unwrap_err().to_string();
        assert!(e.contains("another database"), "{e}");
        want.deployment = None;
        want.schema = 1;
        let e = c.check(p, &want).unwrap_err().to_string();
        assert!(e.contains("schema"), "{e}");
        want.schema = 0xfeed;
        want.workload = "ycsb rows=10 row_bytes=16".into();
        let e = c.check(p, &want).unwrap_err().to_string();
        assert!(e.contains("workload"), "{e}");
        want.workload = String::new();
        want.sites = 6;
        assert!(c.check(p, &want).is_ok());
        want.sites = 4;
        let e = c.check(p, &want).unwrap_err().to_string();
        assert!(e.contains("6 sites") && e.contains("sites = 6"), "{e}");
    }
}
