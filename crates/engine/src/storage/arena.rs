//! Row arenas: fixed-size row slots in chunks that never move.
//!
//! A row id is an index into the arena. Chunks are allocated zeroed on first
//! use by the thread that claims them, so an island's rows are first touched by
//! the island's own pinned workers (NUMA-local). Slots are claimed by workers in
//! blocks (one shared `fetch_add` per block) and deleted slots go to the deleting
//! worker's free list; a slot is type-stable memory, so a reader that raced with
//! a delete detects it through the row's version word and key, never through a
//! dangling pointer.
//!
//! Slot layout (in 8-byte words): `[tid, lock, key, data...]`.

use std::alloc::Layout;

use super::mem::{map_zeroed, prefault, unmap_zeroed};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

pub type RowId = u64;

pub(crate) const W_TID: usize = 0;
pub(crate) const W_LOCK: usize = 1;
pub(crate) const W_KEY: usize = 2;
pub(crate) const HEADER_WORDS: usize = 3;

/// Rows claimed from the shared cursor at a time.
const CLAIM_BLOCK: u64 = 64;

pub struct Arena {
    stride: usize,
    chunk_shift: u32,
    chunks: Box<[AtomicPtr<AtomicU64>]>,
    next: AtomicU64,
    capacity: u64,
}

/// A worker's private allocation state for one arena.
#[derive(Default)]
pub struct RowCache {
    next: u64,
    end: u64,
    free: Vec<RowId>,
}

/// Rows per chunk of an arena whose rows hold `data_words` words: about
/// 2 MiB per chunk, at least 64 rows.
fn rows_per_chunk(data_words: usize) -> u64 {
    let stride = HEADER_WORDS + data_words;
    ((2usize << 20) / (stride * 8)).max(64).next_power_of_two() as u64
}

impl Arena {
    /// An arena for `capacity` rows of `data_words` words. Only its table
    /// of chunk pointers is allocated now; an error when even that cannot be.
    pub fn new(data_words: usize, capacity: u64) -> Result<Arena, String> {
        let stride = HEADER_WORDS + data_words;
        let rows_per_chunk = rows_per_chunk(data_words);
        let chunk_shift = rows_per_chunk.trailing_zeros();
        let n_chunks = usize::try_from(capacity.div_ceil(rows_per_chunk).max(1))
            .map_err(|_| format!("{capacity} rows are more than this machine can address"))?;
        let mut chunks = Vec::new();
        chunks.try_reserve_exact(n_chunks).map_err(|_| {
            format!(
                "cannot allocate the {} bytes of chunk pointers of an arena for {capacity} rows",
                n_chunks as u64 * 8
            )
        })?;
        chunks.extend((0..n_chunks).map(|_| AtomicPtr::new(std::ptr::null_mut())));
        Ok(Arena {
            stride,
            chunk_shift,
            chunks: chunks.into_boxed_slice(),
            next: AtomicU64::new(0),
            capacity,
        })
    }

    /// Bytes an arena for `capacity` rows of `data_words` words takes once
    /// it holds `rows` of them: its chunk pointers, and the chunks the rows
    /// fill (claimed whole, as rows come).
    pub fn bytes_for(data_words: usize, capacity: u64, rows: u64) -> u64 {
        let per_chunk = rows_per_chunk(data_words);
        let chunk_bytes = per_chunk * (HEADER_WORDS + data_words) as u64 * 8;
        let pointers = capacity.div_ceil(per_chunk).max(1).saturating_mul(8);
        let chunks = rows.min(capacity).div_ceil(per_chunk);
        pointers.saturating_add(chunks.saturating_mul(chunk_bytes))
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Upper bound (exclusive) of row ids ever handed out.
    pub fn high_water(&self) -> u64 {
        self.next.load(Ordering::Acquire).min(self.capacity)
    }

    fn chunk_layout(&self) -> Layout {
        Layout::array::<AtomicU64>(self.stride << self.chunk_shift).expect("chunk layout")
    }

    fn ensure_chunk(&self, c: usize) {
        if !self.chunks[c].load(Ordering::Acquire).is_null() {
            return;
        }
        let layout = self.chunk_layout();
        let p = map_zeroed(layout) as *mut AtomicU64;
        // The rows this arena can ever use in this chunk (a small table's
        // single chunk is mostly never used).
        let rows = (self.capacity - ((c as u64) << self.chunk_shift)).min(1 << self.chunk_shift);
        let bytes = (rows as usize * self.stride * 8).min(layout.size());
        // SAFETY: `p..p + bytes` lies in the allocation above.
        unsafe { prefault(p as *mut u8, bytes) };
        if self.chunks[c]
            .compare_exchange(std::ptr::null_mut(), p, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // SAFETY: p came from map_zeroed with this layout and was never shared.
            unsafe { unmap_zeroed(p as *mut u8, layout) };
        }
    }

    /// Takes a free slot for `cache`'s owner. `None` when the arena is full.
    pub fn alloc(&self, cache: &mut RowCache) -> Option<RowId> {
        if let Some(r) = cache.free.pop() {
            return Some(r);
        }
        if cache.next == cache.end {
            let start = self.next.fetch_add(CLAIM_BLOCK, Ordering::AcqRel);
            if start >= self.capacity {
                return None;
            }
            let end = (start + CLAIM_BLOCK).min(self.capacity);
            let first = (start >> self.chunk_shift) as usize;
            let last = ((end - 1) >> self.chunk_shift) as usize;
            for c in first..=last {
                self.ensure_chunk(c);
            }
            cache.next = start;
            cache.end = end;
        }
        let r = cache.next;
        cache.next += 1;
        Some(r)
    }

    /// Returns a slot to its owner's free list; the caller has already marked it absent.
    pub fn free(&self, cache: &mut RowCache, rid: RowId) {
        cache.free.push(rid);
    }

    /// The words of row `rid`. The row must have been allocated.
    #[inline]
    pub fn row(&self, rid: RowId) -> &[AtomicU64] {
        let c = (rid >> self.chunk_shift) as usize;
        let i = (rid & ((1 << self.chunk_shift) - 1)) as usize;
        let p = self.chunks[c].load(Ordering::Acquire);
        assert!(!p.is_null(), "row {rid} lies in an unallocated chunk");
        // SAFETY: the chunk holds `stride << chunk_shift` words and i < 1 << chunk_shift;
        // chunks are never freed while the arena lives.
        unsafe { std::slice::from_raw_parts(p.add(i * self.stride), self.stride) }
    }

    /// Whether `rid` was handed out (for scans over the whole arena).
    pub fn is_allocated(&self, rid: RowId) -> bool {
        rid < self.high_water() && {
            let c = (rid >> self.chunk_shift) as usize;
            !self.chunks[c].load(Ordering::Acquire).is_null()
        }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        let layout = self.chunk_layout();
        for c in self.chunks.iter() {
            let p = c.load(Ordering::Acquire);
            if !p.is_null() {
                // SAFETY: mapped in ensure_chunk with this layout, dropped once.
                unsafe { unmap_zeroed(p as *mut u8, layout) };
            }
        }
    }
}
