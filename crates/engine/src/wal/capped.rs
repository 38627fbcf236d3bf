//! A log device of fixed capacity, for tests of a full file system: the
//! real file system underneath, but once the bytes written through it (by
//! every log sharing it) reach `capacity`, a write fails with ENOSPC, as on
//! a small file system that filled up. A write that would cross the limit
//! writes the part that fits and fails, as `write(2)` does on a full disk.
//! `islands bench` uses it when the test hook `ISLANDS_TEST_LOG_CAPACITY`
//! is set (see the CLI's `bench_cmd`).

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::device::{FsDevice, LogDevice, LogFile};

/// See the module documentation. Clones share one capacity.
#[derive(Clone, Debug)]
pub struct CappedDevice {
    left: Arc<AtomicU64>,
}

impl CappedDevice {
    /// A device that accepts `capacity` bytes of segment writes in all.
    pub fn new(capacity: u64) -> CappedDevice {
        CappedDevice {
            left: Arc::new(AtomicU64::new(capacity)),
        }
    }

    /// Bytes that can still be written.
    pub fn left(&self) -> u64 {
        self.left.load(Ordering::Acquire)
    }

    fn wrap(&self, inner: Box<dyn LogFile>) -> Box<dyn LogFile> {
        Box::new(CappedFile {
            inner,
            left: Arc::clone(&self.left),
        })
    }
}

struct CappedFile {
    inner: Box<dyn LogFile>,
    left: Arc<AtomicU64>,
}

impl LogFile for CappedFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let want = buf.len() as u64;
        let got = self
            .left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                Some(left.saturating_sub(want))
            })
            .unwrap_or(0)
            .min(want);
        self.inner.write_all(&buf[..got as usize])?;
        if got < want {
            return Err(io::Error::from_raw_os_error(
                rustix::io::Errno::NOSPC.raw_os_error(),
            ));
        }
        Ok(())
    }
    fn sync_data(&mut self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
}

impl LogDevice for CappedDevice {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_device_writes_what_fits_and_then_fails_with_enospc() {
        let dir = std::env::temp_dir().join(format!("islands-capped-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let dev = CappedDevice::new(10);
        let shared = dev.clone();
        let mut a = dev.create(&dir.join("a")).unwrap();
        let mut b = shared.create(&dir.join("b")).unwrap();
        a.write_all(b"123456").unwrap();
        let e = b.write_all(b"abcdef").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(28), "{e}");
        assert_eq!(dev.left(), 0);
        assert!(a.write_all(b"x").is_err(), "the capacity is shared");
        assert_eq!(std::fs::read(dir.join("b")).unwrap(), b"abcd");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
