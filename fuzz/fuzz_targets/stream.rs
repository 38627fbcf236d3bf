//! The stream layer's decoder (`islands::transport::stream`) over arbitrary
//! bytes, read in pieces of any size: no panic, a buffer never past
//! `MAX_BUFFER`, no single allocation past it, and every frame it yields
//! within the batch cap.
//!
//! The first input byte sets the size of each read (1..=256); the rest is
//! what a peer sends after the handshake.

#![no_main]

#[path = "largest.rs"]
mod largest;

use std::io::Read;

use islands::transport::stream::{Decoder, MAX_BATCH, MAX_BUFFER};
use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOC: largest::Largest = largest::Largest;

/// Hands out at most `step` bytes per read.
struct Pieces<'a> {
    rest: &'a [u8],
    step: usize,
}

impl Read for Pieces<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.step.min(buf.len()).min(self.rest.len());
        buf[..n].copy_from_slice(&self.rest[..n]);
        self.rest = &self.rest[n..];
        Ok(n)
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, bytes)) = data.split_first() else {
        return;
    };
    largest::reset();
    let mut r = Pieces {
        rest: bytes,
        step: usize::from(first) + 1,
    };
    let mut d = Decoder::new();
    'feed: loop {
        loop {
            match d.next_frame() {
                Ok(Some((_, payload))) => assert!(payload.len() <= MAX_BATCH),
                Ok(None) => break,
                Err(_) => break 'feed,
            }
        }
        match d.read_from(&mut r) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    assert!(d.capacity() <= MAX_BUFFER, "buffer of {}", d.capacity());
    assert!(largest::largest() <= MAX_BUFFER, "allocation of {}", largest::largest());
});
