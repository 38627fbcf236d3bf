//! The I/O seam: segment files and directory syncs go through [`LogDevice`], so tests can
//! inject write and fdatasync failures into the very same writer code.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// One open log segment, written sequentially.
pub trait LogFile: Send {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()>;
    /// fdatasync: the written bytes (and the file length) are durable when this returns Ok.
    fn sync_data(&mut self) -> io::Result<()>;
    fn set_len(&mut self, len: u64) -> io::Result<()>;
}

/// Creates and opens segment files, and syncs the log directory.
pub trait LogDevice: Send + Sync {
    /// Creates a new, empty segment file (fails if it exists).
    fn create(&self, path: &Path) -> io::Result<Box<dyn LogFile>>;
    /// Opens an existing segment positioned at its end, for appending.
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn LogFile>>;
    /// fsync of the directory, so created / renamed / removed entries are durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct FsDevice;

struct FsFile(File);

impl LogFile for FsFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.write_all(buf)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        rustix::fs::fdatasync(&self.0).map_err(io::Error::from)
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
}

impl LogDevice for FsDevice {
    fn create(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        let f = OpenOptions::new().write(true).create_new(true).open(path)?;
        Ok(Box::new(FsFile(f)))
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        let f = OpenOptions::new().append(true).open(path)?;
        Ok(Box::new(FsFile(f)))
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}
