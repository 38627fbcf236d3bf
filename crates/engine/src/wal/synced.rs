//! The log's synced high-water mark: `SYNCED`, a small file that says how far the log
//! was fdatasync'ed, so that recovery can tell a segment that was cut short (its synced
//! records gone) from a torn tail (only unsynced bytes gone).
//!
//! A crash or a power cut cannot shorten a file below what an fdatasync made durable, so
//! a log whose records end before the mark lost records that were acknowledged, and is
//! refused as damage. The log writer rewrites the file (atomically: `SYNCED.tmp`,
//! fdatasync, rename, directory fsync) after a group it has published, at most once per
//! [`MARK_INTERVAL`], and once more when the log shuts down; the open writes it too, at
//! the end the recovery left. Layout (little-endian):
//!
//! ```text
//! [magic "ISLSYNC1"][seq u64][segment u64][offset u64][crc32c u32 of everything before it]
//! ```
//!
//! Every batch up to `seq` was written and fdatasync'ed, and the segment named after batch
//! `segment` held at least `offset` bytes of records then. A directory without the file
//! (a log written before it existed) is judged without it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::device::{write_atomically, LogDevice};
use super::{BatchSeq, WalError};

pub(crate) const SYNCED_NAME: &str = "SYNCED";
pub(crate) const SYNCED_TMP: &str = "SYNCED.tmp";
const MAGIC: &[u8; 8] = b"ISLSYNC1";
const BYTES: usize = 8 + 8 * 3 + 4;

/// How often, at most, the writer rewrites the mark while it writes.
pub const MARK_INTERVAL: Duration = Duration::from_secs(1);

/// How far the log was synced (see the module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mark {
    pub seq: BatchSeq,
    pub segment: BatchSeq,
    pub offset: u64,
}

pub(crate) fn path(dir: &Path) -> PathBuf {
    dir.join(SYNCED_NAME)
}

impl Mark {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(BYTES);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.segment.to_le_bytes());
        out.extend_from_slice(&self.offset.to_le_bytes());
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    fn decode(b: &[u8]) -> Result<Mark, String> {
        if b.len() != BYTES {
            return Err(format!("{} bytes, where {BYTES} were expected", b.len()));
        }
        if &b[..8] != MAGIC {
            return Err("bad magic".into());
        }
        let crc = u32::from_le_bytes([b[32], b[33], b[34], b[35]]);
        if crc32c::crc32c(&b[..32]) != crc {
            return Err("checksum mismatch".into());
        }
        let u = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        Ok(Mark {
            seq: u(8),
            segment: u(16),
            offset: u(24),
        })
    }
}

/// Reads `dir`'s mark: `Ok(None)` without the file, an error naming it when it does not
/// check.
pub(crate) fn read(dir: &Path) -> Result<Option<Mark>, WalError> {
    let p = path(dir);
    let bytes = match std::fs::read(&p) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(WalError::io("read", &p, e)),
    };
    Mark::decode(&bytes)
        .map(Some)
        .map_err(|reason| WalError::CorruptControl { file: p, reason })
}

/// Rewrites `dir`'s mark atomically and durably.
pub(crate) fn write(dev: &dyn LogDevice, dir: &Path, mark: &Mark) -> Result<(), WalError> {
    write_atomically(dev, dir, SYNCED_TMP, SYNCED_NAME, &mark.encode())
        .map_err(|(op, path, e)| WalError::io(op, &path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_round_trips_and_a_flipped_byte_is_caught() {
        let m = Mark {
            seq: 7,
            segment: 3,
            offset: 4096,
        };
        let b = m.encode();
        assert_eq!(Mark::decode(&b), Ok(m));
        for i in 0..b.len() {
            let mut bad = b.clone();
            bad[i] ^= 1;
            assert!(Mark::decode(&bad).is_err(), "byte {i}");
        }
        assert!(Mark::decode(&b[..20]).is_err());
    }
}
