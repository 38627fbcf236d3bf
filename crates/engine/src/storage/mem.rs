//! Zeroed memory for the large, randomly accessed structures (row arenas,
//! hash index slots), on transparent huge pages where the kernel has them.
//!
//! Rows and index slots are read at random over tens or hundreds of
//! megabytes. With 4 KiB pages nearly every such access also misses the TLB,
//! and the page walk stalls even a software prefetch. A 2 MiB page covers 512
//! times as much. Under perf (micro update, 100% multisite, 2 islands) the
//! row prefetch went from 7.3% to 3.3% of the samples with huge pages.
//!
//! Allocations of 2 MiB or more are mapped directly, start on a 2 MiB
//! boundary and are advised `MADV_HUGEPAGE`, so that they get huge pages also
//! where the kernel gives them only on request (`enabled = madvise`, Debian's
//! default). The allocator cannot be used for that: it zeroes an aligned
//! allocation itself, which maps small pages before any advice. Smaller
//! allocations come from the allocator. Without huge pages (disabled,
//! `never`, no memory to compact) everything works the same, on small pages.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ffi::c_void;
use std::ops::Deref;
use std::sync::atomic::AtomicU64;

const PAGE: usize = 4096;
const HUGE_PAGE: usize = 2 << 20;

/// Touches every page of fresh memory with a write, here and now, by the
/// thread that claims it (NUMA-local): an arena's chunk, an index's slots.
///
/// Why: untouched memory first *read* (an insert's lock word, a scan) is
/// mapped to the shared zero page, and the write that follows replaces it:
/// a copy-on-write fault that flushes the TLB of every core the process runs
/// on (an inter-processor interrupt each). TPC-C's inserts spent 12% of the
/// time in those flushes and another 8% zeroing pages a fault at a time.
/// A write fault on an unmapped page needs no flush. Memory of 2 MiB or more
/// is on huge pages where the kernel has them ([`map_zeroed`]): one fault
/// then maps 2 MiB.
///
/// # Safety
/// `p..p + bytes` must be memory this thread owns (freshly allocated).
pub(crate) unsafe fn prefault(p: *mut u8, bytes: usize) {
    let mut off = 0;
    while off < bytes {
        // SAFETY: in bounds (off < bytes); the memory is zero, and so stays.
        unsafe { std::ptr::write_volatile(p.add(off), 0) };
        off += PAGE;
    }
}

/// Zeroed memory for `layout` (size non-zero, alignment at most a page).
/// Aborts, as the allocator does, when there is no memory.
pub(crate) fn map_zeroed(layout: Layout) -> *mut u8 {
    let p = try_map_zeroed(layout);
    if p.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    p
}

/// [`map_zeroed`] that returns null when there is no memory, for the large
/// structures a table reserves when it is created (an error then names the
/// table, instead of an abort).
pub(crate) fn try_map_zeroed(layout: Layout) -> *mut u8 {
    let size = layout.size();
    debug_assert!(size > 0 && layout.align() <= PAGE);
    if size < HUGE_PAGE {
        // SAFETY: the layout has a non-zero size.
        return unsafe { alloc_zeroed(layout) };
    }
    use rustix::mm::{mmap_anonymous, munmap, Advice, MapFlags, ProtFlags};
    // Room to start on a 2 MiB boundary; the slack is unmapped again.
    let span = size + HUGE_PAGE;
    // SAFETY: a fresh private anonymous mapping, aliasing nothing.
    let base = match unsafe {
        mmap_anonymous(
            std::ptr::null_mut(),
            span,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE,
        )
    } {
        Ok(b) => b as usize,
        Err(_) => return std::ptr::null_mut(),
    };
    let start = base.next_multiple_of(HUGE_PAGE);
    let end = (start + size).next_multiple_of(PAGE);
    // SAFETY: the head and the tail lie in the mapping above, and nothing
    // uses them; the advice only changes how the rest is backed.
    unsafe {
        if start > base {
            let _ = munmap(base as *mut c_void, start - base);
        }
        if base + span > end {
            let _ = munmap(end as *mut c_void, base + span - end);
        }
        let _ = rustix::mm::madvise(
            start as *mut c_void,
            size / HUGE_PAGE * HUGE_PAGE,
            Advice::LinuxHugepage,
        );
    }
    start as *mut u8
}

/// Frees what [`map_zeroed`] returned.
///
/// # Safety
/// `p` came from `map_zeroed(layout)` with this `layout` and is freed once.
pub(crate) unsafe fn unmap_zeroed(p: *mut u8, layout: Layout) {
    if layout.size() < HUGE_PAGE {
        // SAFETY: the caller's contract: the allocator gave p for layout.
        unsafe { dealloc(p, layout) };
    } else {
        // SAFETY: the caller's contract; map_zeroed kept exactly this range.
        let _ =
            unsafe { rustix::mm::munmap(p as *mut c_void, layout.size().next_multiple_of(PAGE)) };
    }
}

/// An owned array of zeroed `AtomicU64`s from [`map_zeroed`].
pub(crate) struct ZeroedWords {
    ptr: *mut AtomicU64,
    len: usize,
}

// SAFETY: it owns its memory, and AtomicU64 is Sync.
unsafe impl Send for ZeroedWords {}
// SAFETY: shared access only hands out &[AtomicU64].
unsafe impl Sync for ZeroedWords {}

impl ZeroedWords {
    /// `len` words of zero (`len` > 0), every page already written by this
    /// thread: a page first read (a lookup that misses) would map the shared
    /// zero page, and the write after it would pay a copy-on-write fault
    /// and a TLB flush on every core (see [`prefault`]).
    /// `None` when the memory cannot be had (or `len` words overflow a layout).
    pub(crate) fn new(len: usize) -> Option<ZeroedWords> {
        let layout = Self::layout(len)?;
        let ptr = try_map_zeroed(layout);
        if ptr.is_null() {
            return None;
        }
        // SAFETY: freshly mapped for this layout, owned here.
        unsafe { prefault(ptr, layout.size()) };
        Some(ZeroedWords {
            ptr: ptr as *mut AtomicU64,
            len,
        })
    }

    fn layout(len: usize) -> Option<Layout> {
        Layout::array::<AtomicU64>(len.max(1)).ok()
    }
}

impl Deref for ZeroedWords {
    type Target = [AtomicU64];

    fn deref(&self) -> &[AtomicU64] {
        // SAFETY: `len` zero-initialised words (a valid AtomicU64 each),
        // owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for ZeroedWords {
    fn drop(&mut self) {
        let layout = Self::layout(self.len).expect("the layout it was made with");
        // SAFETY: from map_zeroed with this layout; dropped once.
        unsafe { unmap_zeroed(self.ptr as *mut u8, layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn small_and_huge_allocations_are_zero_writable_and_aligned() {
        for len in [
            1,
            100,
            (HUGE_PAGE / 8) - 1,
            HUGE_PAGE / 8,
            3 * HUGE_PAGE / 8 + 5,
        ] {
            let w = ZeroedWords::new(len).unwrap();
            assert_eq!(w.len(), len);
            assert!(w.iter().all(|x| x.load(Ordering::Relaxed) == 0));
            if len * 8 >= HUGE_PAGE {
                assert_eq!(w.as_ptr() as usize % HUGE_PAGE, 0, "len {len}");
            }
            w[len - 1].store(7, Ordering::Relaxed);
            w[0].store(9, Ordering::Relaxed);
            assert_eq!(
                w[len - 1].load(Ordering::Relaxed),
                if len == 1 { 9 } else { 7 }
            );
        }
    }
}
