//! Batches on a byte stream: the framing a transport between processes puts
//! around each batch (a Unix socket, a shared-memory ring).
//!
//! Every batch travels behind a fixed 20-byte header, all little-endian:
//!
//! ```text
//! [magic u8 = 0xB7][version u8 = 1][flags u16]
//! [worker u32]  the sender's worker index within its island
//! [to u32]      the destination endpoint
//! [len u32]     payload bytes, at most MAX_BATCH
//! [crc u32]     crc32c of the 16 bytes before it, then of the payload
//! ```
//!
//! The header names the sender by its worker index within its island, never
//! by a global endpoint: the receiver knows the sender's island from the
//! authenticated connection, and maps (island, worker) to the sender's
//! endpoint with [`sender`], which refuses a worker the island does not have.
//! So bytes in a frame can never impersonate another island.
//!
//! The decoder ([`Decoder`]) works on partial reads: it keeps what arrived,
//! checks a header as soon as its 20 bytes are in (magic, version, flags and
//! the length against the cap) and only then makes room for the payload, so
//! a peer cannot make it allocate more than [`HEADER`] + [`MAX_BATCH`]. The
//! checksum is checked when the whole payload is in. Any error leaves the
//! stream out of step: the receiver closes the connection.
//!
//! The sending side writes the header and the payload from the caller's
//! buffers ([`header`] into a 20-byte array, or [`encode`] appended to a
//! buffer that has room): nothing is allocated per batch.

use super::layout::Layout;
use super::Endpoint;
use crate::route::IslandId;
use std::io::{self, Read};

/// First byte of every header.
pub const MAGIC: u8 = 0xB7;
/// The stream format this code writes and reads.
pub const VERSION: u8 = 1;
/// Bytes of a header.
pub const HEADER: usize = 20;
/// Largest payload accepted (a batch is a round of one worker's frames to one
/// destination: kilobytes, rarely more).
pub const MAX_BATCH: usize = 16 << 20;
/// Flag: a heartbeat, not a batch. Its payload is empty and its destination
/// is 0; it only says that the peer is alive.
pub const FLAG_HEARTBEAT: u16 = 1;
/// Flag: a goodbye, not a batch. Its payload is empty and its destination is
/// 0; the peer stops cleanly and leaves: nothing follows it on the stream,
/// and the receiver counts the peer down at once (as if the connection had
/// closed) rather than after its heartbeats time out.
pub const FLAG_GOODBYE: u16 = 2;
/// Every flag this version knows; a header with another bit set is refused.
pub const KNOWN_FLAGS: u16 = FLAG_HEARTBEAT | FLAG_GOODBYE;

/// Bytes the decoder's buffer starts with.
const READ_CHUNK: usize = 64 << 10;
/// Least room the decoder offers a read.
const MIN_READ: usize = 4 << 10;
/// Most bytes a [`Decoder`] ever allocates: a whole frame at the cap, and
/// the room of one read past it.
pub const MAX_BUFFER: usize = HEADER + MAX_BATCH + READ_CHUNK;

/// Why a stream stopped decoding. Each names the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    #[error("stream header magic: {got:#04x}, expected {MAGIC:#04x}")]
    Magic { got: u8 },
    #[error("stream header version: {got}, this build speaks {VERSION}")]
    Version { got: u8 },
    #[error("stream header flags: {got:#06x} has bits this version does not know")]
    Flags { got: u16 },
    #[error("stream header length: {len} bytes, more than the {MAX_BATCH}-byte cap")]
    Length { len: u64 },
    #[error("stream header length: a heartbeat with a {len}-byte payload")]
    HeartbeatPayload { len: u32 },
    #[error("stream header length: a goodbye with a {len}-byte payload")]
    GoodbyePayload { len: u32 },
    #[error("stream header flags: {got:#06x} is a heartbeat and a goodbye at once")]
    BothControls { got: u16 },
    #[error("stream crc32c: computed {computed:#010x}, frame says {stored:#010x}")]
    Crc { stored: u32, computed: u32 },
    #[error("stream header worker: {worker}, island {island} has {workers} workers")]
    Worker {
        island: IslandId,
        worker: u32,
        workers: u32,
    },
    #[error("stream header destination: endpoint {to} is not one of island {me}'s")]
    Destination { to: u32, me: IslandId },
}

/// The fields of a header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub flags: u16,
    /// The sender's worker index within its island.
    pub worker: u32,
    pub to: Endpoint,
    pub len: u32,
}

/// The header of a batch of `payload` from worker `worker` to `to`.
/// Refuses a payload longer than [`MAX_BATCH`].
pub fn header(
    flags: u16,
    worker: u32,
    to: Endpoint,
    payload: &[u8],
) -> Result<[u8; HEADER], StreamError> {
    if payload.len() > MAX_BATCH {
        return Err(StreamError::Length {
            len: payload.len() as u64,
        });
    }
    let mut h = [0u8; HEADER];
    h[0] = MAGIC;
    h[1] = VERSION;
    h[2..4].copy_from_slice(&flags.to_le_bytes());
    h[4..8].copy_from_slice(&worker.to_le_bytes());
    h[8..12].copy_from_slice(&to.0.to_le_bytes());
    h[12..16].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&h[..16]), payload);
    h[16..20].copy_from_slice(&crc.to_le_bytes());
    Ok(h)
}

/// Appends the header and `payload` to `out` (no allocation when `out` has
/// room for both).
pub fn encode(
    out: &mut Vec<u8>,
    flags: u16,
    worker: u32,
    to: Endpoint,
    payload: &[u8],
) -> Result<(), StreamError> {
    let h = header(flags, worker, to, payload)?;
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
    Ok(())
}

/// A heartbeat's header (see [`FLAG_HEARTBEAT`]).
pub fn heartbeat() -> [u8; HEADER] {
    header(FLAG_HEARTBEAT, 0, Endpoint(0), &[]).expect("an empty payload is under the cap")
}

/// A goodbye's header (see [`FLAG_GOODBYE`]).
pub fn goodbye() -> [u8; HEADER] {
    header(FLAG_GOODBYE, 0, Endpoint(0), &[]).expect("an empty payload is under the cap")
}

/// Checks a header's fixed fields and its length (not the checksum, which
/// needs the payload).
fn parse(h: &[u8; HEADER]) -> Result<Header, StreamError> {
    if h[0] != MAGIC {
        return Err(StreamError::Magic { got: h[0] });
    }
    if h[1] != VERSION {
        return Err(StreamError::Version { got: h[1] });
    }
    let word = |at: usize| u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
    let flags = u16::from_le_bytes([h[2], h[3]]);
    if flags & !KNOWN_FLAGS != 0 {
        return Err(StreamError::Flags { got: flags });
    }
    let len = word(12);
    if len as usize > MAX_BATCH {
        return Err(StreamError::Length {
            len: u64::from(len),
        });
    }
    if flags & FLAG_HEARTBEAT != 0 && flags & FLAG_GOODBYE != 0 {
        return Err(StreamError::BothControls { got: flags });
    }
    if flags & FLAG_HEARTBEAT != 0 && len != 0 {
        return Err(StreamError::HeartbeatPayload { len });
    }
    if flags & FLAG_GOODBYE != 0 && len != 0 {
        return Err(StreamError::GoodbyePayload { len });
    }
    Ok(Header {
        flags,
        worker: word(4),
        to: Endpoint(word(8)),
        len,
    })
}

/// The sender's endpoint: worker `worker` of `island` (the island of the
/// authenticated connection). Refuses a worker index the island does not have.
pub fn sender(layout: &Layout, island: IslandId, worker: u32) -> Result<Endpoint, StreamError> {
    let workers = layout.workers(island);
    if worker >= workers {
        return Err(StreamError::Worker {
            island,
            worker,
            workers,
        });
    }
    Ok(layout.endpoint(island, worker))
}

/// Checks that `to` is one of the receiving island's endpoints.
pub fn destination(layout: &Layout, to: Endpoint) -> Result<Endpoint, StreamError> {
    if !layout.is_local(to) {
        return Err(StreamError::Destination {
            to: to.0,
            me: layout.me(),
        });
    }
    Ok(to)
}

/// Decodes frames from a byte stream that arrives in pieces.
///
/// Invariant: `buf[start..end]` holds bytes received and not yet returned as
/// a frame, at most one incomplete frame; `buf.len()` never exceeds
/// [`MAX_BUFFER`] (a read is offered room only while the frame under way is
/// incomplete, and that frame's length was checked against the cap).
pub struct Decoder {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// A decoding error is final: the stream is out of step.
    failed: Option<StreamError>,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder {
            buf: vec![0; READ_CHUNK],
            start: 0,
            end: 0,
            failed: None,
        }
    }

    /// Bytes received and not yet returned as frames.
    pub fn pending(&self) -> usize {
        self.end - self.start
    }

    /// Bytes allocated for the read buffer (for tests of the cap).
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Makes room after `end` for at least `want` more bytes, moving the
    /// pending bytes to the front first. `want` is at most the rest of a
    /// checked frame or [`MIN_READ`], so the buffer stays under the cap.
    fn reserve(&mut self, want: usize) {
        if self.buf.len() - self.end >= want {
            return;
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() - self.end < want {
            let need = self.end + want;
            self.buf.resize(need.max(READ_CHUNK), 0);
        }
    }

    /// How many more bytes the frame at `start` needs (0: complete), after
    /// checking its header if that is in. Errors are final.
    fn missing(&mut self) -> Result<usize, StreamError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let have = self.end - self.start;
        if have < HEADER {
            return Ok(HEADER - have);
        }
        let h: &[u8; HEADER] = self.buf[self.start..self.start + HEADER]
            .try_into()
            .expect("a header's worth of bytes");
        let hdr = parse(h).inspect_err(|e| self.failed = Some(e.clone()))?;
        Ok((HEADER + hdr.len as usize).saturating_sub(have))
    }

    /// Reads once from `r` into the buffer: at least the rest of the frame
    /// under way, or a chunk that may hold several frames. Returns the bytes
    /// read (0 at the end of the stream). A bad header is an `InvalidData`
    /// error whose inner error is the [`StreamError`]. Take every complete
    /// frame with [`Decoder::next_frame`] before reading again: reading with
    /// a complete frame pending is an error (it would let the buffer grow).
    pub fn read_from<R: Read + ?Sized>(&mut self, r: &mut R) -> io::Result<usize> {
        let missing = self
            .missing()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        if missing == 0 {
            return Err(io::Error::other(
                "a complete frame is pending: take it with next_frame first",
            ));
        }
        // Grow at most twofold per read: a peer makes the buffer large only
        // by sending the bytes, not by claiming a length.
        let want = missing.min(self.buf.len().max(READ_CHUNK)).max(MIN_READ);
        self.reserve(want);
        let n = r.read(&mut self.buf[self.end..])?;
        self.end += n;
        Ok(n)
    }

    /// The next complete frame, if one is in: its header and payload (the
    /// payload borrows the decoder's buffer until the next call). Checks the
    /// checksum. Errors are final.
    pub fn next_frame(&mut self) -> Result<Option<(Header, &[u8])>, StreamError> {
        if self.missing()? > 0 {
            if self.start == self.end {
                self.start = 0;
                self.end = 0;
            }
            return Ok(None);
        }
        let at = self.start;
        let h: [u8; HEADER] = self.buf[at..at + HEADER]
            .try_into()
            .expect("a header's worth of bytes");
        let hdr = parse(&h)?;
        let payload_at = at + HEADER;
        let payload_end = payload_at + hdr.len as usize;
        let stored = u32::from_le_bytes([h[16], h[17], h[18], h[19]]);
        let computed =
            crc32c::crc32c_append(crc32c::crc32c(&h[..16]), &self.buf[payload_at..payload_end]);
        if stored != computed {
            let e = StreamError::Crc { stored, computed };
            self.failed = Some(e.clone());
            return Err(e);
        }
        self.start = payload_end;
        Ok(Some((hdr, &self.buf[payload_at..payload_end])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type Got = Vec<(u16, u32, u32, Vec<u8>)>;

    fn batch(worker: u32, to: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode(&mut out, 0, worker, Endpoint(to), payload).unwrap();
        out
    }

    /// Takes every complete frame.
    fn drain(d: &mut Decoder, got: &mut Got) -> Result<(), StreamError> {
        while let Some((h, p)) = d.next_frame()? {
            got.push((h.flags, h.worker, h.to.0, p.to_vec()));
        }
        Ok(())
    }

    /// Feeds `bytes` through reads of at most `cut` bytes, taking frames
    /// after each read.
    fn feed(d: &mut Decoder, bytes: &[u8], cut: usize) -> Result<Got, StreamError> {
        let mut got = Vec::new();
        for piece in bytes.chunks(cut.max(1)) {
            let mut r = piece;
            while !r.is_empty() {
                drain(d, &mut got)?;
                d.read_from(&mut r).map_err(|e| {
                    e.into_inner()
                        .and_then(|e| e.downcast::<StreamError>().ok())
                        .map(|e| *e)
                        .expect("a stream error")
                })?;
            }
        }
        drain(d, &mut got)?;
        Ok(got)
    }

    #[test]
    fn a_batch_round_trips_and_encoding_reuses_the_buffer() {
        let mut out = Vec::with_capacity(256);
        let cap = out.capacity();
        encode(&mut out, 0, 3, Endpoint(7), b"hello").unwrap();
        out.extend_from_slice(&heartbeat());
        out.extend_from_slice(&goodbye());
        assert_eq!(out.capacity(), cap, "no allocation with room");
        let got = feed(&mut Decoder::new(), &out, 1000).unwrap();
        assert_eq!(
            got,
            vec![
                (0, 3, 7, b"hello".to_vec()),
                (FLAG_HEARTBEAT, 0, 0, Vec::new()),
                (FLAG_GOODBYE, 0, 0, Vec::new())
            ]
        );
    }

    #[test]
    fn each_bad_field_is_named() {
        let good = batch(1, 2, b"abcdef");
        let fed = |b: &[u8]| feed(&mut Decoder::new(), b, 7).map(|_| ());
        assert_eq!(fed(&good), Ok(()));
        let mut b = good.clone();
        b[0] = 0x42;
        assert_eq!(fed(&b), Err(StreamError::Magic { got: 0x42 }));
        let mut b = good.clone();
        b[1] = 9;
        assert_eq!(fed(&b), Err(StreamError::Version { got: 9 }));
        assert!(fed(&b).unwrap_err().to_string().contains("version"));
        let mut b = good.clone();
        b[2] = 0x80;
        assert_eq!(fed(&b), Err(StreamError::Flags { got: 0x80 }));
        let mut b = good.clone();
        b[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            fed(&b),
            Err(StreamError::Length {
                len: u64::from(u32::MAX)
            })
        );
        let mut b = heartbeat().to_vec();
        b[12] = 1;
        b.push(0);
        assert_eq!(fed(&b), Err(StreamError::HeartbeatPayload { len: 1 }));
        let mut b = goodbye().to_vec();
        b[12] = 1;
        b.push(0);
        assert_eq!(fed(&b), Err(StreamError::GoodbyePayload { len: 1 }));
        let mut b = goodbye().to_vec();
        b[2] = (FLAG_HEARTBEAT | FLAG_GOODBYE) as u8;
        assert_eq!(fed(&b), Err(StreamError::BothControls { got: 3 }));
        let mut b = good.clone();
        b[2] = 4; // the first bit this version does not know
        assert_eq!(fed(&b), Err(StreamError::Flags { got: 4 }));
        let mut b = good.clone();
        *b.last_mut().unwrap() ^= 1;
        assert!(matches!(fed(&b), Err(StreamError::Crc { .. })));
        let mut b = good.clone();
        b[5] ^= 1; // the worker field is under the checksum too
        assert!(matches!(fed(&b), Err(StreamError::Crc { .. })));
        assert!(header(0, 0, Endpoint(0), &vec![0; MAX_BATCH + 1]).is_err());
    }

    #[test]
    fn an_error_is_final() {
        let mut b = batch(1, 2, b"x");
        b[0] = 0;
        let mut d = Decoder::new();
        assert!(feed(&mut d, &b, 100).is_err());
        assert!(feed(&mut d, &batch(1, 2, b"y"), 100).is_err());
        assert!(d.next_frame().is_err());
    }

    #[test]
    fn a_length_over_the_cap_is_refused_before_any_allocation() {
        let mut h = [0u8; HEADER];
        h[0] = MAGIC;
        h[1] = VERSION;
        h[12..16].copy_from_slice(&((MAX_BATCH + 1) as u32).to_le_bytes());
        let mut d = Decoder::new();
        let before = d.capacity();
        let mut r: &[u8] = &h;
        d.read_from(&mut r).unwrap();
        let e = d.read_from(&mut r).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("length"), "{e}");
        assert!(matches!(d.next_frame(), Err(StreamError::Length { .. })));
        assert_eq!(d.capacity(), before);
    }

    #[test]
    fn reading_past_a_complete_frame_is_refused() {
        let b = batch(0, 1, b"one");
        let mut d = Decoder::new();
        let mut r: &[u8] = &b;
        d.read_from(&mut r).unwrap();
        let mut more: &[u8] = &b;
        assert!(d.read_from(&mut more).is_err(), "take the frame first");
        assert!(d.next_frame().unwrap().is_some());
        assert!(d.read_from(&mut more).is_ok());
    }

    #[test]
    fn a_large_batch_arrives_through_small_reads() {
        let payload: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        let b = batch(0, 1, &payload);
        let mut d = Decoder::new();
        let got = feed(&mut d, &b, 3001).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].3, payload);
        assert!(d.capacity() <= MAX_BUFFER);
    }

    #[test]
    fn sender_and_destination_follow_the_layout() {
        let l = Layout::new(&[2, 3], 1);
        assert_eq!(sender(&l, 0, 1), Ok(Endpoint(1)));
        assert_eq!(
            sender(&l, 0, 2),
            Err(StreamError::Worker {
                island: 0,
                worker: 2,
                workers: 2
            })
        );
        assert_eq!(destination(&l, Endpoint(4)), Ok(Endpoint(4)));
        assert!(destination(&l, Endpoint(1)).is_err());
        assert!(destination(&l, Endpoint(99)).is_err());
    }

    proptest! {
        #[test]
        fn batches_survive_any_split_into_reads(
            batches in proptest::collection::vec(
                (any::<bool>(), 0u32..64, 0u32..64, proptest::collection::vec(any::<u8>(), 0..300)), 0..12),
            cut in 1usize..97,
        ) {
            let mut stream = Vec::new();
            let mut want = Vec::new();
            for (beat, w, to, p) in &batches {
                if *beat {
                    stream.extend_from_slice(&heartbeat());
                    want.push((FLAG_HEARTBEAT, 0, 0, Vec::new()));
                } else {
                    encode(&mut stream, 0, *w, Endpoint(*to), p).unwrap();
                    want.push((0, *w, *to, p.clone()));
                }
            }
            let mut d = Decoder::new();
            let got = feed(&mut d, &stream, cut).unwrap();
            prop_assert_eq!(got, want);
            prop_assert_eq!(d.pending(), 0);
        }

        #[test]
        fn garbage_never_panics_nor_allocates_past_the_cap(
            bytes in proptest::collection::vec(any::<u8>(), 0..400),
            magic in any::<bool>(),
            cut in 1usize..50,
        ) {
            let mut bytes = bytes;
            if magic && bytes.len() >= 2 {
                // Give garbage a fair chance to pass the first checks.
                bytes[0] = MAGIC;
                bytes[1] = VERSION;
            }
            let mut d = Decoder::new();
            let _ = feed(&mut d, &bytes, cut);
            prop_assert!(d.capacity() <= MAX_BUFFER);
        }
    }
}
