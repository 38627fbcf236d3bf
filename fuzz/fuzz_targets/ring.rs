//! The shared-memory ring's reader (`islands::transport::shm::Ring`) over a
//! mapping whose every byte a hostile or broken peer wrote (head, tail and
//! records): no panic, no record past the ring's payload cap, and no
//! allocation past twice the ring's capacity. A reader that finds the ring
//! broken stops.
//!
//! The first input byte picks the capacity (`MIN_CAP << (b % 4)`); the
//! rest is the ring's bytes, header first, repeated to fill it.

#![no_main]

#[path = "largest.rs"]
mod largest;

use std::sync::Arc;

use islands::transport::shm::{Mapping, Ring, MIN_CAP};
use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOC: largest::Largest = largest::Largest;

fuzz_target!(|data: &[u8]| {
    let Some((&first, bytes)) = data.split_first() else {
        return;
    };
    if bytes.is_empty() {
        return;
    }
    let cap = MIN_CAP << (first % 4);
    let map = Arc::new(Mapping::anonymous(Ring::bytes(cap)).expect("an anonymous mapping"));
    // SAFETY: the mapping is `Ring::bytes(cap)` bytes long and nobody else
    // holds it yet.
    let all = unsafe { std::slice::from_raw_parts_mut(map.as_ptr(), map.len()) };
    for (i, b) in all.iter_mut().enumerate() {
        *b = bytes[i % bytes.len()];
    }
    let ring = Ring::at(Arc::clone(&map), 0, cap).expect("a ring that fits");
    largest::reset();
    let Ok(mut c) = ring.consumer() else {
        return;
    };
    let mut buf = Vec::new();
    // Each record takes at least 8 bytes: a whole ring's worth, and more
    // to find a reader that loops.
    for _ in 0..(cap / 8 + 2) {
        match c.pop_into(&mut buf) {
            Ok(Some(rec)) => {
                assert!(rec.len as usize <= ring.max_payload());
                assert_eq!(buf.len(), rec.len as usize);
            }
            Ok(None) | Err(_) => break,
        }
    }
    assert!(largest::largest() <= 2 * cap, "allocation of {}", largest::largest());
});
