//! The server's framing layer over arbitrary bytes, before and after
//! login: no panic, every invariant of `islands::server::fuzz_frames`
//! kept, and no allocation larger than a bound set by the message limit.
//!
//! The first input byte picks the phase (bit 0: logged in), the message
//! limit (bits 1-2) and the size of each read (bits 3-7); the rest is what
//! the client sends.

#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use libfuzzer_sys::fuzz_target;

/// The system allocator, recording the largest single allocation.
struct Largest;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Largest = Largest;

/// Message limits to try: tiny, small, PostgreSQL-like, the default.
const LIMITS: [usize; 4] = [64, 4096, 65_536, 1 << 20];

/// The largest allocation allowed: a few times the largest message the
/// phase admits (the input buffer may double), plus what pgwire needs
/// for a message's at most 65 535 parameters or formats (a `u16` count).
fn bound(max: usize) -> usize {
    4 * (max.max(65_539) + 1) + (65_535 * 32)
}

fuzz_target!(|data: &[u8]| {
    let Some((&head, rest)) = data.split_first() else {
        return;
    };
    let logged_in = head & 1 == 1;
    let max = LIMITS[usize::from((head >> 1) & 3)];
    let chunk = 1 + usize::from(head >> 3) * 97;
    LARGEST.store(0, Ordering::Relaxed);
    islands::server::fuzz_frames(rest, logged_in, max, chunk);
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(
        largest <= bound(max),
        "an allocation of {largest} bytes with a message limit of {max}"
    );
});
