//! The shared files behind the rings and the bells.
//!
//! A [`Segment`] joins two islands `a < b`: a file named
//! `islands-<deployment hex>-<a>-<b>` (under `/dev/shm`, or a memfd passed
//! over a Unix socket) holding a small header and two rings, `a → b` then
//! `b → a`. A [`Bells`] segment, `islands-<deployment hex>-bells-<island>`,
//! holds the [`Bell`] of each endpoint of one island: the island sleeps on
//! them and its peers map the file to ring them.
//!
//! Headers (little endian, all fields 4- or 8-aligned; the magic is written
//! last, after everything else, so a reader that sees it sees the rest):
//! - segment: `magic u64, version u32, header bytes u32, ring capacity u64,
//!   deployment u128 (low, high), a u32, b u32, creator island u32, creator
//!   pid u32`, then the rings at [`SEGMENT_HEADER`];
//! - bells: `magic u64, version u32, header bytes u32, deployment u128,
//!   island u32, workers u32, creator pid u32`, then one bell per worker, each
//!   on its own 64-byte line from [`BELLS_HEADER`].
//!
//! A file is opened only if it is a regular file of ours with mode 0600 (no
//! symlink is followed) and its header matches what the opener expects
//! (magic, version, sizes, deployment, islands, workers); otherwise the
//! open is refused, naming what differs. A file whose creator process is
//! dead is stale: it is removed and created afresh. The creator removes its
//! file when it drops the segment (a clean shutdown), if the name still
//! refers to that file.

use super::map::Mapping;
use super::ring::Ring;
use crate::route::IslandId;
use crate::transport::Bell;
use std::fs::{File, OpenOptions};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const SEGMENT_MAGIC: u64 = u64::from_le_bytes(*b"ISLSHMSG");
pub const BELLS_MAGIC: u64 = u64::from_le_bytes(*b"ISLSHMBL");
/// The layout version of both headers.
pub const SHM_VERSION: u32 = 1;
pub const SEGMENT_HEADER: usize = 256;
pub const BELLS_HEADER: usize = 128;
/// Bytes between two bells (a cache line each: the owner's sleep and a
/// neighbour's ring do not share a line).
pub const BELL_STRIDE: usize = 64;
/// The default directory for the files.
pub const SHM_DIR: &str = "/dev/shm";
/// Largest number of bells in one segment.
pub const MAX_BELLS: u32 = 1 << 16;

/// Why a segment could not be created or opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShmError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: refused: {why}")]
    Refused { path: String, why: String },
    #[error("{path}: {field} is {got}, expected {want}")]
    Mismatch {
        path: String,
        field: &'static str,
        got: String,
        want: String,
    },
    #[error("{path}: not ready after {waited_ms} ms (its creator has not finished it)")]
    NotReady { path: String, waited_ms: u128 },
    #[error("{path}: island {island} already runs here as live process {pid}")]
    Busy {
        path: String,
        island: IslandId,
        pid: u32,
    },
    #[error("{0}")]
    Config(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ShmError + '_ {
    move |source| ShmError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// The name of the segment between islands `a` and `b` (in either order).
pub fn segment_name(deployment: u128, a: IslandId, b: IslandId) -> String {
    let (lo, hi) = (a.min(b), a.max(b));
    format!("islands-{deployment:032x}-{lo}-{hi}")
}

/// The name of island `island`'s bells segment.
pub fn bells_name(deployment: u128, island: IslandId) -> String {
    format!("islands-{deployment:032x}-bells-{island}")
}

/// Whether process `pid` exists (a process of another user counts).
fn alive(pid: u32) -> bool {
    let Some(p) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    !matches!(
        rustix::process::test_kill_process(p),
        Err(rustix::io::Errno::SRCH)
    )
}

fn my_pid() -> u32 {
    rustix::process::getpid().as_raw_nonzero().get() as u32
}

/// A file of ours, created or opened, with its identity (to remove it only
/// while its name still refers to it).
struct Backing {
    file: File,
    path: Option<PathBuf>,
    dev_ino: (u64, u64),
}

impl Backing {
    /// A file with no name to remove (a memfd, or one received as a descriptor).
    fn unnamed(file: File, m: &std::fs::Metadata) -> Backing {
        Backing {
            file,
            path: None,
            dev_ino: (m.dev(), m.ino()),
        }
    }
}

/// How a header is checked and filled: the creator's side writes, the
/// opener's side compares. `fields` are (offset, value, name) of u32 words
/// and `wide` of u64 words, after the magic.
struct Header {
    magic: u64,
    /// Bytes of the whole file, and of its header.
    len: usize,
    prefix: usize,
    wide: Vec<(usize, u64, &'static str)>,
    words: Vec<(usize, u32, &'static str)>,
    /// Offsets of the creator's island and pid words.
    creator_island_at: usize,
    creator_pid_at: usize,
}

impl Header {
    fn write(&self, map: &Mapping, island: IslandId) -> Result<(), ShmError> {
        let bad = || ShmError::Config("a header field is outside its mapping".into());
        for &(at, v, _) in &self.wide {
            map.u64_at(at).ok_or_else(bad)?.store(v, Ordering::Relaxed);
        }
        for &(at, v, _) in &self.words {
            map.u32_at(at).ok_or_else(bad)?.store(v, Ordering::Relaxed);
        }
        map.u32_at(self.creator_island_at)
            .ok_or_else(bad)?
            .store(u32::from(island), Ordering::Relaxed);
        map.u32_at(self.creator_pid_at)
            .ok_or_else(bad)?
            .store(my_pid(), Ordering::Relaxed);
        map.u64_at(0)
            .ok_or_else(bad)?
            .store(self.magic, Ordering::Release);
        Ok(())
    }

    /// `Ok(None)`: no magic yet. Reads each field once.
    fn check(&self, map: &Mapping, path: &Path) -> Result<Option<(u32, u32)>, ShmError> {
        let p = || path.display().to_string();
        let bad = || ShmError::Config("a header field is outside its mapping".into());
        let magic = map.u64_at(0).ok_or_else(bad)?.load(Ordering::Acquire);
        if magic == 0 {
            return Ok(None);
        }
        if magic != self.magic {
            return Err(ShmError::Mismatch {
                path: p(),
                field: "magic",
                got: format!("{magic:#018x}"),
                want: format!("{:#018x}", self.magic),
            });
        }
        for &(at, want, field) in &self.wide {
            let got = map.u64_at(at).ok_or_else(bad)?.load(Ordering::Relaxed);
            if got != want {
                return Err(ShmError::Mismatch {
                    path: p(),
                    field,
                    got: got.to_string(),
                    want: want.to_string(),
                });
            }
        }
        for &(at, want, field) in &self.words {
            let got = map.u32_at(at).ok_or_else(bad)?.load(Ordering::Relaxed);
            if got != want {
                return Err(ShmError::Mismatch {
                    path: p(),
                    field,
                    got: got.to_string(),
                    want: want.to_string(),
                });
            }
        }
        let island = map
            .u32_at(self.creator_island_at)
            .ok_or_else(bad)?
            .load(Ordering::Relaxed);
        let pid = map
            .u32_at(self.creator_pid_at)
            .ok_or_else(bad)?
            .load(Ordering::Relaxed);
        Ok(Some((island, pid)))
    }
}

/// What `attach_or_create` made of the file.
struct Attached {
    map: Arc<Mapping>,
    backing: Backing,
    created: bool,
    creator: (u32, u32),
}

/// Creates `dir/name` (0600, exclusive) or opens it if a live process made
/// it; replaces it if its creator is dead (only opens it, waiting up to
/// `wait` for it to appear, if not `create`). `init` fills a new mapping
/// (before the header's magic is written). A live creator of island `me`
/// other than this process is refused: the island already runs.
fn attach_or_create(
    path: &Path,
    header: &Header,
    me: IslandId,
    create: bool,
    wait: Duration,
    init: &dyn Fn(&Arc<Mapping>) -> Result<(), ShmError>,
) -> Result<Attached, ShmError> {
    let deadline = Instant::now() + wait;
    loop {
        if create {
            match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc_flags())
                .open(path)
            {
                Ok(file) => return make(path, file, header, me, init),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io(path)(e)),
            }
        }
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc_flags())
            .open(path)
        {
            Ok(f) => f,
            // Removed since (a stale file replaced), or not made yet.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if create || Instant::now() >= deadline {
                    if create {
                        continue;
                    }
                    return Err(io(path)(e));
                }
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            Err(e) => return Err(io(path)(e)),
        };
        let backing = check_file(path, file)?;
        let size = backing.file.metadata().map_err(io(path))?.len();
        // A file shorter than its header is still being made. Otherwise the
        // header says what the file is (a different ring size shows as that
        // field); a finished header on a file of the wrong size is refused.
        let ready = if size >= header.prefix as u64 {
            let len = (size as usize).min(header.len);
            let map = Arc::new(Mapping::of_file(backing.file.as_fd(), len).map_err(io(path))?);
            match header.check(&map, path)? {
                Some(_) if size != header.len as u64 => {
                    return Err(ShmError::Mismatch {
                        path: path.display().to_string(),
                        field: "size",
                        got: size.to_string(),
                        want: header.len.to_string(),
                    })
                }
                c => c.map(|c| (map, c)),
            }
        } else {
            None
        };
        match ready {
            Some((map, (island, pid))) => {
                if alive(pid) {
                    if island == u32::from(me) && pid != my_pid() {
                        return Err(ShmError::Busy {
                            path: path.display().to_string(),
                            island: me,
                            pid,
                        });
                    }
                    return Ok(Attached {
                        map,
                        backing,
                        created: false,
                        creator: (island, pid),
                    });
                }
                if !create {
                    return Err(ShmError::Refused {
                        path: path.display().to_string(),
                        why: format!("its creator (island {island}, pid {pid}) is gone"),
                    });
                }
                remove_if_same(path, backing.dev_ino);
            }
            None => {
                if Instant::now() >= deadline {
                    if create {
                        // Never finished, and long enough ago: stale.
                        remove_if_same(path, backing.dev_ino);
                        continue;
                    }
                    return Err(ShmError::NotReady {
                        path: path.display().to_string(),
                        waited_ms: wait.as_millis(),
                    });
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// Opening flags: never follow a symbolic link; close on exec.
fn libc_flags() -> i32 {
    (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC).bits() as i32
}

/// A regular file owned by us with mode 0600, or refused.
fn check_file(path: &Path, file: File) -> Result<Backing, ShmError> {
    let m = file.metadata().map_err(io(path))?;
    let refuse = |why: String| ShmError::Refused {
        path: path.display().to_string(),
        why,
    };
    if !m.file_type().is_file() {
        return Err(refuse("not a regular file".into()));
    }
    let uid = rustix::process::geteuid().as_raw();
    if m.uid() != uid {
        return Err(refuse(format!(
            "owned by uid {}, not by us ({uid})",
            m.uid()
        )));
    }
    let mode = m.mode() & 0o7777;
    if mode != 0o600 {
        return Err(refuse(format!("mode {mode:04o}, not 0600")));
    }
    Ok(Backing {
        file,
        path: Some(path.to_path_buf()),
        dev_ino: (m.dev(), m.ino()),
    })
}

/// A new file: sized, mapped, initialised, header written (magic last).
fn make(
    path: &Path,
    file: File,
    header: &Header,
    me: IslandId,
    init: &dyn Fn(&Arc<Mapping>) -> Result<(), ShmError>,
) -> Result<Attached, ShmError> {
    // The umask may have taken bits off 0600; the check on open wants 0600.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(io(path))?;
    let backing = check_file(path, file)?;
    let made = (|| {
        backing.file.set_len(header.len as u64).map_err(io(path))?;
        let map = Arc::new(Mapping::of_file(backing.file.as_fd(), header.len).map_err(io(path))?);
        init(&map)?;
        header.write(&map, me)?;
        Ok(map)
    })();
    match made {
        Ok(map) => Ok(Attached {
            map,
            backing,
            created: true,
            creator: (u32::from(me), my_pid()),
        }),
        Err(e) => {
            remove_if_same(path, backing.dev_ino);
            Err(e)
        }
    }
}

/// Removes `path` if it still names the file `dev_ino`.
fn remove_if_same(path: &Path, dev_ino: (u64, u64)) {
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if (m.dev(), m.ino()) == dev_ino {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A memfd of `len` bytes (no name in any directory, reachable only by the
/// descriptor), sealed against shrinking and growing: a peer that maps it
/// can never be made to touch pages past the end of the file (a SIGBUS).
fn memfd(name: &str, len: usize) -> Result<File, ShmError> {
    use rustix::fs::{MemfdFlags, SealFlags};
    let fd: OwnedFd =
        rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).map_err(
            |e| ShmError::Io {
                path: format!("memfd:{name}"),
                source: e.into(),
            },
        )?;
    let file = File::from(fd);
    file.set_len(len as u64).map_err(|e| ShmError::Io {
        path: format!("memfd:{name}"),
        source: e,
    })?;
    rustix::fs::fcntl_add_seals(&file, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
        .map_err(|e| ShmError::Io {
            path: format!("memfd:{name}"),
            source: e.into(),
        })?;
    Ok(file)
}

/// Refuses a received descriptor whose size could still change under our
/// mapping (a memfd without the shrink and grow seals, or any other file).
fn check_sealed(file: &File, path: &Path) -> Result<(), ShmError> {
    use rustix::fs::SealFlags;
    let want = SealFlags::SHRINK | SealFlags::GROW;
    match rustix::fs::fcntl_get_seals(file) {
        Ok(seals) if seals.contains(want) => Ok(()),
        _ => Err(ShmError::Refused {
            path: path.display().to_string(),
            why: "not a memfd sealed against shrinking and growing".into(),
        }),
    }
}

/// The two rings between islands `a < b` and who made them.
pub struct Segment {
    pub(super) map: Arc<Mapping>,
    backing: Backing,
    created: bool,
    me: IslandId,
    peer: IslandId,
    cap: usize,
    creator: (u32, u32),
}

impl Segment {
    /// Bytes of a segment whose rings have `cap` data bytes each.
    pub fn bytes(cap: usize) -> usize {
        SEGMENT_HEADER + 2 * Ring::bytes(cap)
    }

    fn header(deployment: u128, me: IslandId, peer: IslandId, cap: usize) -> Header {
        let (a, b) = (me.min(peer), me.max(peer));
        Header {
            magic: SEGMENT_MAGIC,
            len: Segment::bytes(cap),
            prefix: SEGMENT_HEADER,
            wide: vec![
                (16, cap as u64, "ring capacity"),
                (24, deployment as u64, "deployment (low half)"),
                (32, (deployment >> 64) as u64, "deployment (high half)"),
            ],
            words: vec![
                (8, SHM_VERSION, "version"),
                (12, SEGMENT_HEADER as u32, "header bytes"),
                (40, u32::from(a), "first island"),
                (44, u32::from(b), "second island"),
            ],
            creator_island_at: 48,
            creator_pid_at: 52,
        }
    }

    fn check_args(me: IslandId, peer: IslandId, cap: usize) -> Result<(), ShmError> {
        if me == peer {
            return Err(ShmError::Config(format!(
                "a segment joins two islands, not island {me} with itself"
            )));
        }
        if !cap.is_power_of_two() || !(super::MIN_CAP..=super::MAX_CAP).contains(&cap) {
            return Err(ShmError::Config(format!(
                "ring capacity {cap} is not a power of two in {}..={}",
                super::MIN_CAP,
                super::MAX_CAP
            )));
        }
        Ok(())
    }

    /// Opens the segment between `me` and `peer` in `dir`, creating it if
    /// it does not exist (or is stale). Waits up to `wait` for a segment its
    /// creator is still filling.
    pub fn open_or_create(
        dir: &Path,
        deployment: u128,
        me: IslandId,
        peer: IslandId,
        cap: usize,
        wait: Duration,
    ) -> Result<Segment, ShmError> {
        Segment::check_args(me, peer, cap)?;
        let path = dir.join(segment_name(deployment, me, peer));
        let header = Segment::header(deployment, me, peer, cap);
        let init = |map: &Arc<Mapping>| -> Result<(), ShmError> {
            for off in [SEGMENT_HEADER, SEGMENT_HEADER + Ring::bytes(cap)] {
                Ring::at(Arc::clone(map), off, cap)
                    .map_err(ShmError::Config)?
                    .reset();
            }
            Ok(())
        };
        let a = attach_or_create(&path, &header, me, true, wait, &init)?;
        Ok(Segment {
            map: a.map,
            backing: a.backing,
            created: a.created,
            me,
            peer,
            cap,
            creator: a.creator,
        })
    }

    /// A new segment in a memfd; the descriptor goes to the peer (over a
    /// Unix socket), which opens it with [`Segment::from_fd`].
    pub fn create_memfd(
        deployment: u128,
        me: IslandId,
        peer: IslandId,
        cap: usize,
    ) -> Result<Segment, ShmError> {
        Segment::check_args(me, peer, cap)?;
        let name = segment_name(deployment, me, peer);
        let header = Segment::header(deployment, me, peer, cap);
        let file = memfd(&name, header.len)?;
        let map =
            Arc::new(
                Mapping::of_file(file.as_fd(), header.len).map_err(|e| ShmError::Io {
                    path: format!("memfd:{name}"),
                    source: e,
                })?,
            );
        for off in [SEGMENT_HEADER, SEGMENT_HEADER + Ring::bytes(cap)] {
            Ring::at(Arc::clone(&map), off, cap)
                .map_err(ShmError::Config)?
                .reset();
        }
        header.write(&map, me)?;
        let m = file.metadata().map_err(|e| ShmError::Io {
            path: format!("memfd:{name}"),
            source: e,
        })?;
        Ok(Segment {
            map,
            backing: Backing::unnamed(file, &m),
            created: true,
            me,
            peer,
            cap,
            creator: (u32::from(me), my_pid()),
        })
    }

    /// Opens a segment received as a descriptor, checking its header.
    pub fn from_fd(
        fd: OwnedFd,
        deployment: u128,
        me: IslandId,
        peer: IslandId,
        cap: usize,
    ) -> Result<Segment, ShmError> {
        Segment::check_args(me, peer, cap)?;
        let path = PathBuf::from(format!("memfd:{}", segment_name(deployment, me, peer)));
        let header = Segment::header(deployment, me, peer, cap);
        let file = File::from(fd);
        check_sealed(&file, &path)?;
        let m = file.metadata().map_err(io(&path))?;
        if m.len() != header.len as u64 {
            return Err(ShmError::Mismatch {
                path: path.display().to_string(),
                field: "size",
                got: m.len().to_string(),
                want: header.len.to_string(),
            });
        }
        let map = Arc::new(Mapping::of_file(file.as_fd(), header.len).map_err(io(&path))?);
        let creator = header.check(&map, &path)?.ok_or(ShmError::NotReady {
            path: path.display().to_string(),
            waited_ms: 0,
        })?;
        Ok(Segment {
            map,
            backing: Backing::unnamed(file, &m),
            created: false,
            me,
            peer,
            cap,
            creator,
        })
    }

    /// A descriptor of the segment's file (to pass to the peer).
    pub fn fd(&self) -> std::io::Result<OwnedFd> {
        self.backing.file.as_fd().try_clone_to_owned()
    }

    /// The ring from `me` to `peer`.
    pub fn outgoing(&self) -> Ring {
        self.ring(self.me < self.peer)
    }

    /// The ring from `peer` to `me`.
    pub fn incoming(&self) -> Ring {
        self.ring(self.me > self.peer)
    }

    /// `first`: the ring from the lower island to the higher one.
    fn ring(&self, first: bool) -> Ring {
        let off = if first {
            SEGMENT_HEADER
        } else {
            SEGMENT_HEADER + Ring::bytes(self.cap)
        };
        match Ring::at(Arc::clone(&self.map), off, self.cap) {
            Ok(r) => r,
            // Sizes were checked when the segment was made or opened.
            Err(e) => unreachable!("{e}"),
        }
    }

    pub fn me(&self) -> IslandId {
        self.me
    }

    pub fn peer(&self) -> IslandId {
        self.peer
    }

    /// Whether this process made the file (and removes it when dropped).
    pub fn created(&self) -> bool {
        self.created
    }

    /// The island and process id that made the segment.
    pub fn creator(&self) -> (u32, u32) {
        self.creator
    }

    pub fn path(&self) -> Option<&Path> {
        self.backing.path.as_deref()
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if let (true, Some(p)) = (self.created, &self.backing.path) {
            remove_if_same(p, self.backing.dev_ino);
        }
    }
}

/// The bells of one island's endpoints, in a shared file.
pub struct Bells {
    pub(super) map: Arc<Mapping>,
    backing: Backing,
    created: bool,
    island: IslandId,
    workers: u32,
}

impl Bells {
    /// Bytes of a bells segment for `workers` bells.
    pub fn bytes(workers: u32) -> usize {
        BELLS_HEADER + workers as usize * BELL_STRIDE
    }

    fn header(deployment: u128, island: IslandId, workers: u32) -> Header {
        Header {
            magic: BELLS_MAGIC,
            len: Bells::bytes(workers),
            prefix: BELLS_HEADER,
            wide: vec![
                (16, deployment as u64, "deployment (low half)"),
                (24, (deployment >> 64) as u64, "deployment (high half)"),
            ],
            words: vec![
                (8, SHM_VERSION, "version"),
                (12, BELLS_HEADER as u32, "header bytes"),
                (32, u32::from(island), "island"),
                (36, workers, "workers"),
            ],
            creator_island_at: 32,
            creator_pid_at: 40,
        }
    }

    fn check_workers(workers: u32) -> Result<(), ShmError> {
        if workers == 0 || workers > MAX_BELLS {
            return Err(ShmError::Config(format!(
                "{workers} bells: expected 1..={MAX_BELLS}"
            )));
        }
        Ok(())
    }

    /// Creates this island's bells in `dir` (replacing a stale file of a
    /// dead process; refused if a live process has it).
    pub fn create(
        dir: &Path,
        deployment: u128,
        island: IslandId,
        workers: u32,
    ) -> Result<Bells, ShmError> {
        Bells::check_workers(workers)?;
        let path = dir.join(bells_name(deployment, island));
        let header = Bells::header(deployment, island, workers);
        let a = attach_or_create(
            &path,
            &header,
            island,
            true,
            Duration::from_millis(200),
            &|_| Ok(()),
        )?;
        if !a.created {
            return Err(ShmError::Busy {
                path: path.display().to_string(),
                island,
                pid: a.creator.1,
            });
        }
        Ok(Bells {
            map: a.map,
            backing: a.backing,
            created: true,
            island,
            workers,
        })
    }

    /// Opens a peer's bells, waiting up to `wait` for the peer to create them.
    pub fn open(
        dir: &Path,
        deployment: u128,
        island: IslandId,
        workers: u32,
        wait: Duration,
    ) -> Result<Bells, ShmError> {
        Bells::check_workers(workers)?;
        let path = dir.join(bells_name(deployment, island));
        let header = Bells::header(deployment, island, workers);
        // `me` is only compared with the creator's island for a live
        // creator of *our* island; opening a peer's bells, no island of
        // ours can match, so pass one that never does.
        let a = attach_or_create(&path, &header, IslandId::MAX, false, wait, &|_| Ok(()))?;
        Ok(Bells {
            map: a.map,
            backing: a.backing,
            created: false,
            island,
            workers,
        })
    }

    /// This island's bells in a memfd (for a peer reached by descriptor).
    pub fn create_memfd(
        deployment: u128,
        island: IslandId,
        workers: u32,
    ) -> Result<Bells, ShmError> {
        Bells::check_workers(workers)?;
        let name = bells_name(deployment, island);
        let header = Bells::header(deployment, island, workers);
        let file = memfd(&name, header.len)?;
        let map =
            Arc::new(
                Mapping::of_file(file.as_fd(), header.len).map_err(|e| ShmError::Io {
                    path: format!("memfd:{name}"),
                    source: e,
                })?,
            );
        header.write(&map, island)?;
        let m = file.metadata().map_err(|e| ShmError::Io {
            path: format!("memfd:{name}"),
            source: e,
        })?;
        Ok(Bells {
            map,
            backing: Backing::unnamed(file, &m),
            created: true,
            island,
            workers,
        })
    }

    /// A peer's bells received as a descriptor, header checked.
    pub fn from_fd(
        fd: OwnedFd,
        deployment: u128,
        island: IslandId,
        workers: u32,
    ) -> Result<Bells, ShmError> {
        Bells::check_workers(workers)?;
        let path = PathBuf::from(format!("memfd:{}", bells_name(deployment, island)));
        let header = Bells::header(deployment, island, workers);
        let file = File::from(fd);
        check_sealed(&file, &path)?;
        let m = file.metadata().map_err(io(&path))?;
        if m.len() != header.len as u64 {
            return Err(ShmError::Mismatch {
                path: path.display().to_string(),
                field: "size",
                got: m.len().to_string(),
                want: header.len.to_string(),
            });
        }
        let map = Arc::new(Mapping::of_file(file.as_fd(), header.len).map_err(io(&path))?);
        header.check(&map, &path)?.ok_or(ShmError::NotReady {
            path: path.display().to_string(),
            waited_ms: 0,
        })?;
        Ok(Bells {
            map,
            backing: Backing::unnamed(file, &m),
            created: false,
            island,
            workers,
        })
    }

    pub fn fd(&self) -> std::io::Result<OwnedFd> {
        self.backing.file.as_fd().try_clone_to_owned()
    }

    pub fn island(&self) -> IslandId {
        self.island
    }

    pub fn workers(&self) -> u32 {
        self.workers
    }

    /// The bell of worker `w` (`None` past the last worker).
    pub fn bell(&self, w: u32) -> Option<&Bell> {
        if w >= self.workers {
            return None;
        }
        let at = BELLS_HEADER + w as usize * BELL_STRIDE;
        // A Bell is `#[repr(C)]` around one AtomicU32: the word is the bell.
        let word = self.map.u32_at(at)?;
        // SAFETY: `Bell` is `#[repr(C)]` with a single `AtomicU32` field, so
        // it has the layout of the word it is cast from; the reference lives
        // as long as `self`, which holds the mapping.
        Some(unsafe { &*(word as *const std::sync::atomic::AtomicU32 as *const Bell) })
    }

    pub fn path(&self) -> Option<&Path> {
        self.backing.path.as_deref()
    }
}

impl Drop for Bells {
    fn drop(&mut self) {
        if let (true, Some(p)) = (self.created, &self.backing.path) {
            remove_if_same(p, self.backing.dev_ino);
        }
    }
}
