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
//! Chunks are faulted in ahead of need by the island's prefault thread
//! ([`Prefaulter`]): when the claim cursor enters a chunk, the thread maps and
//! writes the next [`PREFAULT_AHEAD`] chunks and publishes each with one
//! compare-and-swap on its chunk pointer, so a worker that claims rows there
//! finds them ready and takes no page fault (the kernel clearing a fresh
//! 2 MiB page) on its commit path. The thread runs on the CPUs of the threads
//! that claim rows (the island's pinned workers), so first-touch placement
//! stays NUMA-local. A worker that finds its chunk not mapped yet (the thread
//! fell behind, or the island has none) maps it itself, as before, and counts
//! a fallback.
//!
//! Slot layout (in 8-byte words): `[tid, lock, key, data...]`.

use std::alloc::Layout;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{JoinHandle, Thread};

use super::mem::{map_zeroed, prefault, unmap_zeroed};

pub type RowId = u64;

pub(crate) const W_TID: usize = 0;
pub(crate) const W_LOCK: usize = 1;
pub(crate) const W_KEY: usize = 2;
pub(crate) const HEADER_WORDS: usize = 3;

/// Rows claimed from the shared cursor at a time. Chunks hold a power of two
/// rows, at least this many, so a block never straddles two chunks.
const CLAIM_BLOCK: u64 = 64;

/// Chunks the prefault thread keeps mapped past the one the claim cursor is
/// in: the rows of one whole chunk (about 2 MiB) are the thread's lead time.
pub(crate) const PREFAULT_AHEAD: u64 = 1;

pub struct Arena {
    stride: usize,
    chunk_shift: u32,
    chunks: Box<[AtomicPtr<AtomicU64>]>,
    next: AtomicU64,
    capacity: u64,
    /// The island's prefault thread, woken when the claim cursor enters a
    /// new chunk; unset: claimers map every chunk themselves.
    prefaulter: OnceLock<Arc<Prefaulter>>,
    /// Chunks the prefault thread mapped (and published).
    prefaulted: AtomicU64,
    /// Chunks a claiming thread found unmapped and mapped itself.
    fallbacks: AtomicU64,
}

/// What an arena's (or an island's) chunk mapping did: how many chunks came
/// ready from the prefault thread, and how many the claiming thread had to
/// fault in itself on its commit path (the load's included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefaultStats {
    pub prefaulted: u64,
    pub fallbacks: u64,
}

impl std::ops::AddAssign for PrefaultStats {
    fn add_assign(&mut self, o: PrefaultStats) {
        self.prefaulted += o.prefaulted;
        self.fallbacks += o.fallbacks;
    }
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
            prefaulter: OnceLock::new(),
            prefaulted: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
        })
    }

    /// Has `p`'s thread map this arena's chunks ahead of its claim cursor
    /// (see [`Arena::prefault_ahead`]); the first prefaulter given stays.
    pub(crate) fn attach(&self, p: &Arc<Prefaulter>) {
        let _ = self.prefaulter.set(Arc::clone(p));
    }

    pub fn prefault_stats(&self) -> PrefaultStats {
        PrefaultStats {
            prefaulted: self.prefaulted.load(Ordering::Relaxed),
            fallbacks: self.fallbacks.load(Ordering::Relaxed),
        }
    }

    /// Maps the chunk the claim cursor is in and the [`PREFAULT_AHEAD`]
    /// after it, those not mapped yet (the prefault thread's work). An
    /// arena nothing was ever claimed from is left alone. Returns the chunks
    /// this call mapped and published.
    pub(crate) fn prefault_ahead(&self) -> u64 {
        let next = self.next.load(Ordering::Acquire);
        if next == 0 || next >= self.capacity {
            return 0;
        }
        let first = (next >> self.chunk_shift) as usize;
        let last = (first + PREFAULT_AHEAD as usize).min(self.chunks.len() - 1);
        let mut mapped = 0;
        for c in first..=last {
            if self.ensure_chunk(c) {
                mapped += 1;
            }
        }
        self.prefaulted.fetch_add(mapped, Ordering::Relaxed);
        mapped
    }

    /// Bytes an arena for `capacity` rows of `data_words` words takes once
    /// it holds `rows` of them: its chunk pointers, the chunks the rows
    /// fill (claimed whole, as rows come) and those the prefault thread maps
    /// ahead of them.
    pub fn bytes_for(data_words: usize, capacity: u64, rows: u64) -> u64 {
        let per_chunk = rows_per_chunk(data_words);
        let chunk_bytes = per_chunk * (HEADER_WORDS + data_words) as u64 * 8;
        let n_chunks = capacity.div_ceil(per_chunk).max(1);
        let pointers = n_chunks.saturating_mul(8);
        let filled = rows.min(capacity).div_ceil(per_chunk);
        let ahead = if rows == 0 { 0 } else { PREFAULT_AHEAD };
        let chunks = filled.saturating_add(ahead).min(n_chunks);
        pointers.saturating_add(chunks.saturating_mul(chunk_bytes))
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Rows in one chunk (a power of two).
    #[cfg(test)]
    pub(crate) fn rows_per_chunk(&self) -> u64 {
        1 << self.chunk_shift
    }

    /// Whether chunk `c` is mapped.
    #[cfg(test)]
    pub(crate) fn chunk_mapped(&self, c: usize) -> bool {
        self.chunks
            .get(c)
            .is_some_and(|p| !p.load(Ordering::Acquire).is_null())
    }

    /// Upper bound (exclusive) of row ids ever handed out.
    pub fn high_water(&self) -> u64 {
        self.next.load(Ordering::Acquire).min(self.capacity)
    }

    fn chunk_layout(&self) -> Layout {
        Layout::array::<AtomicU64>(self.stride << self.chunk_shift).expect("chunk layout")
    }

    /// Maps chunk `c` (zeroed, every page written by this thread) unless it
    /// is mapped already. True when this call published it.
    fn ensure_chunk(&self, c: usize) -> bool {
        if !self.chunks[c].load(Ordering::Acquire).is_null() {
            return false;
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
            return false;
        }
        true
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
            let c = (start >> self.chunk_shift) as usize;
            if self.chunks[c].load(Ordering::Acquire).is_null() {
                // Not mapped ahead: fault it in here, on the claimer's path.
                self.ensure_chunk(c);
                self.fallbacks.fetch_add(1, Ordering::Relaxed);
            }
            if start & ((1 << self.chunk_shift) - 1) == 0 {
                // The first block of chunk c: time to map the next.
                if let Some(p) = self.prefaulter.get() {
                    p.request();
                }
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

/// Words of the CPU mask that the threads asking for chunks leave for the
/// prefault thread (one bit per CPU a `CpuSet` can name).
const CPU_WORDS: usize = rustix::thread::CpuSet::MAX_CPU.div_ceil(64);

/// An island's prefault thread and its wake-up: it maps arena chunks ahead of
/// the claim cursors ([`Arena::prefault_ahead`]) whenever a claimer enters a
/// new chunk, and sleeps otherwise (no polling). The hand-over is the chunk
/// pointer's compare-and-swap; asking costs a claimer an affinity read and an
/// unpark, once per chunk, never a lock.
pub(crate) struct Prefaulter {
    stop: AtomicBool,
    /// The union of the affinities of the threads that asked since the
    /// thread last woke: it runs there, so its first touch puts the chunks on
    /// the NUMA node of the workers that will fill them.
    cpus: [AtomicU64; CPU_WORDS],
    thread: OnceLock<Thread>,
    handle: parking_lot::Mutex<Option<JoinHandle<()>>>,
}

impl Prefaulter {
    /// A prefaulter without its thread yet ([`Prefaulter::spawn`]): until
    /// then requests only record the asking CPUs.
    pub(crate) fn new() -> Arc<Prefaulter> {
        Arc::new(Prefaulter {
            stop: AtomicBool::new(false),
            cpus: std::array::from_fn(|_| AtomicU64::new(0)),
            thread: OnceLock::new(),
            handle: parking_lot::Mutex::new(None),
        })
    }

    /// Starts the thread, named `name`. It calls `enter` once where it
    /// starts (a registration held while it runs), then `pass` at start and
    /// after each wake-up until [`Prefaulter::stop`], or until `pass`
    /// returns false (what it prefaults for is gone).
    pub(crate) fn spawn<G>(
        self: &Arc<Self>,
        name: String,
        enter: impl FnOnce() -> G + Send + 'static,
        mut pass: impl FnMut() -> bool + Send + 'static,
    ) -> std::io::Result<()> {
        let me = Arc::clone(self);
        let handle = std::thread::Builder::new().name(name).spawn(move || {
            let _registered = enter();
            let mut pinned = [0u64; CPU_WORDS];
            while !me.stop.load(Ordering::Acquire) {
                me.follow_askers(&mut pinned);
                if !pass() {
                    return;
                }
                std::thread::park();
            }
        })?;
        let _ = self.thread.set(handle.thread().clone());
        *self.handle.lock() = Some(handle);
        Ok(())
    }

    /// A claimer entered a new chunk: wake the thread, to run where the
    /// claimer may run.
    fn request(&self) {
        if let Ok(set) = rustix::thread::sched_getaffinity(None) {
            for (w, word) in self.cpus.iter().enumerate() {
                let bits = (0..64)
                    .filter(|b| {
                        let c = w * 64 + b;
                        c < rustix::thread::CpuSet::MAX_CPU && set.is_set(c)
                    })
                    .fold(0u64, |m, b| m | 1 << b);
                if bits != 0 {
                    word.fetch_or(bits, Ordering::Relaxed);
                }
            }
        }
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }

    /// Pins the calling (prefault) thread to the CPUs the askers since its
    /// last wake-up may run on, unless it runs there already.
    fn follow_askers(&self, pinned: &mut [u64; CPU_WORDS]) {
        let mut asked = [0u64; CPU_WORDS];
        for (a, w) in asked.iter_mut().zip(&self.cpus) {
            *a = w.swap(0, Ordering::Relaxed);
        }
        if asked.iter().all(|&w| w == 0) || asked == *pinned {
            return;
        }
        let mut set = rustix::thread::CpuSet::new();
        for (w, bits) in asked.iter().enumerate() {
            for b in 0..64 {
                if bits & (1 << b) != 0 {
                    set.set(w * 64 + b);
                }
            }
        }
        if rustix::thread::sched_setaffinity(None, &set).is_ok() {
            *pinned = asked;
        }
    }

    /// Tells the thread to end (at once if it sleeps; after its pass if it
    /// maps). Does not wait: see [`Prefaulter::shutdown`].
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
    }

    /// Stops the thread and waits until it has ended.
    pub(crate) fn shutdown(&self) {
        self.stop();
        let handle = self.handle.lock().take();
        if let Some(h) = handle {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Rows of one chunk of an arena with one data word.
    fn per_chunk() -> u64 {
        rows_per_chunk(1)
    }

    /// Claims every row of `arena` in order through one cache, writing each
    /// row's key; calls `entered(c)` after the first row of each chunk `c`.
    fn claim_all(arena: &Arena, mut entered: impl FnMut(u64)) -> u64 {
        let mut cache = RowCache::default();
        let mut n = 0;
        while let Some(r) = arena.alloc(&mut cache) {
            assert_eq!(r, n, "rows come in order from one claimer");
            let row = arena.row(r);
            assert!(row.iter().all(|w| w.load(Ordering::Relaxed) == 0));
            row[W_KEY].store(r + 1, Ordering::Relaxed);
            if r % per_chunk() == 0 {
                entered(r / per_chunk());
            }
            n += 1;
        }
        n
    }

    #[test]
    fn without_a_prefaulter_every_chunk_is_a_counted_fallback() {
        let chunks = 5;
        let arena = Arena::new(1, chunks * per_chunk() - 3).unwrap();
        assert_eq!(claim_all(&arena, |_| {}), arena.capacity());
        assert_eq!(
            arena.prefault_stats(),
            PrefaultStats {
                prefaulted: 0,
                fallbacks: chunks
            }
        );
        for r in 0..arena.capacity() {
            assert_eq!(arena.row(r)[W_KEY].load(Ordering::Relaxed), r + 1);
        }
    }

    /// Waits (10 s at most: a loaded machine) until `f` holds.
    fn wait_for(what: &str, f: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn start(arena: &Arc<Arena>) -> Arc<Prefaulter> {
        let p = Prefaulter::new();
        arena.attach(&p);
        let weak = Arc::downgrade(arena);
        p.spawn(
            "test-prefault".into(),
            || (),
            move || match weak.upgrade() {
                Some(a) => {
                    a.prefault_ahead();
                    true
                }
                None => false,
            },
        )
        .unwrap();
        p
    }

    /// A claimer that moves on at a steady pace (here: once the thread had
    /// its chance) finds every chunk after the first mapped ahead of it.
    #[test]
    fn chunks_come_from_the_prefaulter_under_a_steady_claimer() {
        let chunks = 6;
        let arena = Arc::new(Arena::new(1, chunks * per_chunk()).unwrap());
        let p = start(&arena);
        let n = claim_all(&arena, |c| {
            if c + 1 < chunks {
                wait_for("the next chunk", || arena.chunk_mapped(c as usize + 1));
            }
        });
        assert_eq!(n, arena.capacity());
        // The first chunk is the claimer's; the thread may have raced it
        // there (both mapped it, one published).
        let s = arena.prefault_stats();
        assert_eq!(s.fallbacks, 1, "{s:?}");
        assert!((chunks - 1..=chunks).contains(&s.prefaulted), "{s:?}");
        for r in 0..n {
            assert_eq!(arena.row(r)[W_KEY].load(Ordering::Relaxed), r + 1);
        }
        p.shutdown();
        assert!(p.handle.lock().is_none());
    }

    /// The prefaulter maps no further than the chunk after the cursor's, and
    /// nothing of an arena no row was claimed from.
    #[test]
    fn prefault_ahead_is_bounded() {
        let arena = Arena::new(1, 10 * per_chunk()).unwrap();
        assert_eq!(arena.prefault_ahead(), 0);
        let mut cache = RowCache::default();
        arena.alloc(&mut cache).unwrap();
        assert_eq!(arena.prefault_ahead(), PREFAULT_AHEAD);
        assert_eq!(arena.prefault_ahead(), 0);
        let mapped = arena
            .chunks
            .iter()
            .filter(|c| !c.load(Ordering::Acquire).is_null())
            .count() as u64;
        assert_eq!(mapped, 1 + PREFAULT_AHEAD);
        assert_eq!(
            Arena::bytes_for(1, 10 * per_chunk(), 1),
            10 * 8 + (1 + PREFAULT_AHEAD) * per_chunk() * (HEADER_WORDS as u64 + 1) * 8
        );
    }

    /// The thread ends when stopped, and also when its arena is gone.
    #[test]
    fn the_thread_ends_when_stopped_or_orphaned() {
        let arena = Arc::new(Arena::new(1, 4 * per_chunk()).unwrap());
        let p = start(&arena);
        let t = p.handle.lock().as_ref().unwrap().thread().id();
        drop(arena);
        // Woken, it finds the arena gone and returns.
        p.request();
        let h = p.handle.lock().take().unwrap();
        assert_eq!(h.thread().id(), t);
        wait_for("the orphaned thread to end", || h.is_finished());

        let arena = Arc::new(Arena::new(1, 4 * per_chunk()).unwrap());
        let p = start(&arena);
        p.stop();
        let h = p.handle.lock().take().unwrap();
        wait_for("the stopped thread to end", || h.is_finished());
    }
}
