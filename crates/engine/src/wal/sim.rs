//! A log device for tests that models the page cache, and a power cut.
//!
//! [`SimDevice`] writes through to the real files (so recovery reads them as usual) and
//! keeps, per file, what a power cut would leave of it:
//!
//! - file data: what the last fdatasync of the file saw is durable; bytes written since
//!   are in the page cache only. A power cut keeps the unsynced bytes up to a 512-byte
//!   sector boundary chosen at random (none of them, all of them, or a prefix: the log
//!   assumes a device that persists a file's unsynced writes in order, see `wal`), and
//!   the old contents after that.
//! - names: a created, renamed or removed file's entry is durable once its directory is
//!   fsync'ed; a power cut before that undoes the change (a created file vanishes, a
//!   renamed one has its old name, a removed one is back).
//!
//! [`SimDevice::power_cut`] rewrites the directories to what the cut left and makes the
//! device fail every later operation (the machine is off), so the writers poison their
//! logs and the test's transactions stop. A seed decides every choice, so a cut replays.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use parking_lot::Mutex;

use super::device::{LogDevice, LogFile};
use super::format::{read_frame, HEADER_BYTES, REC_BATCH};

/// The sector size a torn write is cut at.
pub const SECTOR_BYTES: usize = 512;

struct Inode {
    /// What the running process sees (the page cache).
    data: Vec<u8>,
    /// What its last fdatasync made durable.
    synced: Vec<u8>,
}

#[derive(Default)]
struct State {
    inodes: Vec<Inode>,
    /// The names the running process sees.
    names: HashMap<PathBuf, usize>,
    /// The names as of each directory's last fsync.
    durable_names: HashMap<PathBuf, usize>,
    dead: bool,
}

impl State {
    fn check_alive(&self) -> io::Result<()> {
        if self.dead {
            return Err(io::Error::other("simulated power cut: the device is off"));
        }
        Ok(())
    }

    /// The inode of `path`; a file the device has not seen yet (it was there before the
    /// device was made) is taken as durable as it is.
    fn inode_of(&mut self, path: &Path) -> io::Result<usize> {
        if let Some(&i) = self.names.get(path) {
            return Ok(i);
        }
        let data = std::fs::read(path)?;
        let i = self.inodes.len();
        self.inodes.push(Inode {
            synced: data.clone(),
            data,
        });
        self.names.insert(path.to_path_buf(), i);
        self.durable_names.insert(path.to_path_buf(), i);
        Ok(i)
    }

    fn new_inode(&mut self, path: &Path, data: Vec<u8>, synced: Vec<u8>) -> usize {
        let i = self.inodes.len();
        self.inodes.push(Inode { data, synced });
        self.names.insert(path.to_path_buf(), i);
        i
    }
}

/// See the module documentation. Cheap to clone (one shared state).
#[derive(Clone, Default)]
pub struct SimDevice {
    state: Arc<Mutex<State>>,
    /// How long an fdatasync takes: what it makes durable is what was written when it
    /// began, and a power cut meanwhile finds those bytes still unsynced.
    sync_delay: std::time::Duration,
}

/// What a power cut left of one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CutFile {
    pub path: PathBuf,
    /// Bytes that were written but not synced, and how many of them the cut kept.
    pub unsynced: u64,
    pub kept: u64,
}

struct SimFile {
    state: Arc<Mutex<State>>,
    sync_delay: std::time::Duration,
    inode: usize,
    pos: u64,
    real: File,
}

impl LogFile for SimFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let mut st = self.state.lock();
        st.check_alive()?;
        self.real.write_all_at(buf, self.pos)?;
        let data = &mut st.inodes[self.inode].data;
        let (at, end) = (self.pos as usize, self.pos as usize + buf.len());
        if data.len() < end {
            data.resize(end, 0);
        }
        data[at..end].copy_from_slice(buf);
        self.pos = end as u64;
        Ok(())
    }
    fn sync_data(&mut self) -> io::Result<()> {
        let written = {
            let st = self.state.lock();
            st.check_alive()?;
            st.inodes[self.inode].data.clone()
        };
        if !self.sync_delay.is_zero() {
            std::thread::sleep(self.sync_delay);
        }
        let mut st = self.state.lock();
        st.check_alive()?;
        st.inodes[self.inode].synced = written;
        Ok(())
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        let mut st = self.state.lock();
        st.check_alive()?;
        self.real.set_len(len)?;
        st.inodes[self.inode].data.resize(len as usize, 0);
        self.pos = self.pos.min(len);
        Ok(())
    }
}

impl SimDevice {
    pub fn new() -> SimDevice {
        SimDevice::default()
    }

    /// A device whose fdatasyncs take `delay` (see `sync_delay`).
    pub fn with_sync_delay(delay: std::time::Duration) -> SimDevice {
        SimDevice {
            sync_delay: delay,
            ..SimDevice::default()
        }
    }

    fn file(&self, inode: usize, pos: u64, real: File) -> Box<dyn LogFile> {
        Box::new(SimFile {
            state: Arc::clone(&self.state),
            sync_delay: self.sync_delay,
            inode,
            pos,
            real,
        })
    }

    /// Cuts the power: every file goes back to what was durable, plus a prefix of its
    /// unsynced bytes cut at a sector boundary (chosen by `seed`), every directory to its
    /// entries as of its last fsync; the real files are rewritten so, and every later
    /// operation of the device fails. Returns what happened to each file that had
    /// unsynced bytes.
    pub fn power_cut(&self, seed: u64) -> Vec<CutFile> {
        let mut st = self.state.lock();
        st.dead = true;
        let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut cut = Vec::new();
        let mut contents: Vec<(PathBuf, Vec<u8>)> = Vec::new();
        let mut durable: Vec<(&PathBuf, &usize)> = st.durable_names.iter().collect();
        durable.sort();
        for (path, &i) in durable {
            let ino = &st.inodes[i];
            let (d, s) = (&ino.data, &ino.synced);
            let first_diff = d.iter().zip(s.iter()).position(|(a, b)| a != b);
            let Some(from) = first_diff.or((d.len() != s.len()).then(|| d.len().min(s.len())))
            else {
                contents.push((path.clone(), s.clone()));
                continue;
            };
            let start = from / SECTOR_BYTES * SECTOR_BYTES;
            let end = d.len().max(s.len());
            let sectors = (end - start).div_ceil(SECTOR_BYTES);
            let keep_to = match next() % 4 {
                0 => start,
                1 => end,
                _ => (start + (next() as usize % (sectors + 1)) * SECTOR_BYTES).min(end),
            };
            let mut out = d[..keep_to.min(d.len())].to_vec();
            if s.len() > out.len() {
                out.extend_from_slice(&s[out.len()..]);
            }
            cut.push(CutFile {
                path: path.clone(),
                unsynced: (end - from) as u64,
                kept: keep_to.saturating_sub(from) as u64,
            });
            contents.push((path.clone(), out));
        }
        let known: Vec<PathBuf> = st
            .names
            .keys()
            .chain(st.durable_names.keys())
            .cloned()
            .collect();
        for p in known {
            let _ = std::fs::remove_file(&p);
        }
        for (p, bytes) in contents {
            std::fs::write(&p, bytes).expect("rewrite a file after the simulated power cut");
        }
        cut
    }
}

impl LogDevice for SimDevice {
    fn create(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        let mut st = self.state.lock();
        st.check_alive()?;
        if st.names.contains_key(path) {
            return Err(io::Error::from(io::ErrorKind::AlreadyExists));
        }
        let real = OpenOptions::new().write(true).create_new(true).open(path)?;
        let i = st.new_inode(path, Vec::new(), Vec::new());
        Ok(self.file(i, 0, real))
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        let mut st = self.state.lock();
        st.check_alive()?;
        let i = st.inode_of(path)?;
        let real = OpenOptions::new().write(true).open(path)?;
        let pos = st.inodes[i].data.len() as u64;
        Ok(self.file(i, pos, real))
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        st.check_alive()?;
        let in_dir = |p: &Path| p.parent() == Some(dir);
        st.durable_names.retain(|p, _| !in_dir(p));
        let now: Vec<(PathBuf, usize)> = st
            .names
            .iter()
            .filter(|(p, _)| in_dir(p))
            .map(|(p, &i)| (p.clone(), i))
            .collect();
        st.durable_names.extend(now);
        Ok(())
    }
    fn preallocate(&self, path: &Path, bytes: u64, _stop: &AtomicBool) -> io::Result<bool> {
        let mut st = self.state.lock();
        st.check_alive()?;
        let real = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        real.set_len(bytes)?;
        let zeros = vec![0u8; bytes as usize];
        // Written and fdatasync'ed, as `FsDevice::preallocate` does.
        st.new_inode(path, zeros.clone(), zeros);
        Ok(true)
    }
    fn adopt(&self, from: &Path, to: &Path) -> io::Result<Box<dyn LogFile>> {
        let mut st = self.state.lock();
        st.check_alive()?;
        let i = st.inode_of(from)?;
        let real = OpenOptions::new().write(true).open(from)?;
        std::fs::rename(from, to)?;
        st.names.remove(from);
        st.names.insert(to.to_path_buf(), i);
        Ok(self.file(i, 0, real))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        st.check_alive()?;
        let i = st.inode_of(from)?;
        std::fs::rename(from, to)?;
        st.names.remove(from);
        st.names.insert(to.to_path_buf(), i);
        Ok(())
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut st = self.state.lock();
        st.check_alive()?;
        st.inode_of(path)?;
        std::fs::remove_file(path)?;
        st.names.remove(path);
        Ok(())
    }
}

/// Flips one byte of a frame of the log in `dir` that a later batch follows (in its
/// segment or a later one): damage to data that was synced, which recovery must refuse.
/// `seed` picks the frame and the byte. Returns the file and the frame's offset; `None`
/// if the log has no frame with a later batch after it.
pub fn damage_mid_log(dir: &Path, seed: u64) -> io::Result<Option<(PathBuf, u64)>> {
    let listing = super::recovery::list_dir(dir).map_err(|e| io::Error::other(e.to_string()))?;
    // Every frame that a batch header follows somewhere after it.
    let mut frames: Vec<(PathBuf, usize, usize)> = Vec::new();
    let mut pending: Vec<(PathBuf, usize, usize)> = Vec::new();
    for (_, path) in &listing.segments {
        let data = std::fs::read(path)?;
        let mut off = 0;
        while let Ok(Some((body, next))) = read_frame(&data, off) {
            if body[0] == REC_BATCH {
                frames.append(&mut pending);
            }
            pending.push((path.clone(), off, next - off));
            off = next;
        }
    }
    if frames.is_empty() {
        return Ok(None);
    }
    let (path, off, len) = frames[(seed % frames.len() as u64) as usize].clone();
    let mut data = std::fs::read(&path)?;
    // A byte of the body, past the length and crc (a flipped length could make the frame
    // look like the torn end of a segment that the zeros of a preallocated file follow).
    let body = len - HEADER_BYTES;
    let at = off + HEADER_BYTES + (seed / 7 % body as u64) as usize;
    data[at] ^= 1 << (seed % 8);
    std::fs::write(&path, data)?;
    Ok(Some((path, off as u64)))
}
