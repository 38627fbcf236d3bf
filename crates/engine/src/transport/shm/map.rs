//! A shared mapping: `MAP_SHARED` pages that another process (a peer that
//! opened the same file, or a forked child) sees byte for byte.
//!
//! The mapping owns its pages and unmaps them when dropped; rings and bells
//! that point into it keep an `Arc<Mapping>` so the pages outlive them.

use std::os::fd::AsFd;
use std::ptr::NonNull;

/// `len` bytes mapped read-write and shared.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory; every access through it goes through
// raw pointers or atomics, and the types built on it (rings, bells) keep the
// single-producer/single-consumer discipline themselves.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Anonymous shared pages (zeroed): shared with threads of this process
    /// and with children forked after the call.
    pub fn anonymous(len: usize) -> std::io::Result<Mapping> {
        use rustix::mm::{mmap_anonymous, MapFlags, ProtFlags};
        if len == 0 {
            return Err(std::io::Error::other("a mapping of 0 bytes"));
        }
        // SAFETY: a fresh mapping at an address the kernel picks aliases
        // nothing of ours.
        let p = unsafe {
            mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
            )
        }?;
        Ok(Mapping {
            ptr: NonNull::new(p.cast()).ok_or_else(|| std::io::Error::other("mmap gave NULL"))?,
            len,
        })
    }

    /// The first `len` bytes of the file `fd` (which must be at least that long).
    pub fn of_file(fd: impl AsFd, len: usize) -> std::io::Result<Mapping> {
        use rustix::mm::{mmap, MapFlags, ProtFlags};
        if len == 0 {
            return Err(std::io::Error::other("a mapping of 0 bytes"));
        }
        // SAFETY: as above; the file's pages are only ever reached through
        // raw pointers and atomics, never through references to plain data.
        let p = unsafe {
            mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )
        }?;
        Ok(Mapping {
            ptr: NonNull::new(p.cast()).ok_or_else(|| std::io::Error::other("mmap gave NULL"))?,
            len,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first byte (page aligned).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The 4-byte word at `at`, as an atomic. `None` if `at` is not 4-aligned
    /// or the word is past the end.
    pub fn u32_at(&self, at: usize) -> Option<&std::sync::atomic::AtomicU32> {
        if !at.is_multiple_of(4) || at.checked_add(4)? > self.len {
            return None;
        }
        // SAFETY: in bounds and aligned (the mapping is page aligned); an
        // AtomicU32 may alias memory another process writes atomically.
        Some(unsafe { &*(self.ptr.as_ptr().add(at) as *const std::sync::atomic::AtomicU32) })
    }

    /// The 8-byte word at `at`, as an atomic. `None` if `at` is not 8-aligned
    /// or the word is past the end.
    pub fn u64_at(&self, at: usize) -> Option<&std::sync::atomic::AtomicU64> {
        if !at.is_multiple_of(8) || at.checked_add(8)? > self.len {
            return None;
        }
        // SAFETY: as for `u32_at`.
        Some(unsafe { &*(self.ptr.as_ptr().add(at) as *const std::sync::atomic::AtomicU64) })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the pages were mapped by `anonymous` or `of_file` with this length,
        // and every user holds the `Arc<Mapping>` it points into.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
