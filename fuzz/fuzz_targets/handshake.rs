//! The handshake (`islands::transport::handshake`) against a peer that
//! sends arbitrary bytes, on either side of the connection, and the HELLO
//! decoder on its own: no panic, never accepted (the bytes cannot know the
//! secret's answer to a fresh nonce), and no allocation past the message
//! cap (plus room for our own messages).
//!
//! The first input byte picks the side (bit 0: we connected); the rest is
//! what the peer sends.

#![no_main]

#[path = "largest.rs"]
mod largest;

use std::io::{Cursor, Read, Write};

use islands::transport::handshake::{
    build_id, handshake, Expect, Hello, Secret, MAX_MESSAGE, WIRE_VERSION,
};
use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOC: largest::Largest = largest::Largest;

/// The peer: reads come from the input, writes go nowhere.
struct Peer<'a>(Cursor<&'a [u8]>);

impl Read for Peer<'_> {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(b)
    }
}

impl Write for Peer<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, bytes)) = data.split_first() else {
        return;
    };
    let me = Hello {
        wire_version: WIRE_VERSION,
        transport: islands::transport::join::Kind::Uds,
        build_id: build_id(),
        deployment: 0x5eed,
        island: 0,
        incarnation: 1,
        schema: 2,
        catalog: 3,
        workers: vec![2, 2],
    };
    let expect = Expect::matching(&me);
    let secret = Secret::new(b"fuzzing-secret-0123".to_vec()).expect("long enough");
    largest::reset();
    let r = handshake(
        &mut Peer(Cursor::new(bytes)),
        &me,
        &expect,
        &secret,
        first & 1 == 1,
    );
    assert!(r.is_err(), "arbitrary bytes passed the handshake");
    let _ = Hello::decode(bytes);
    assert!(
        largest::largest() <= 4 * MAX_MESSAGE,
        "allocation of {}",
        largest::largest()
    );
});
