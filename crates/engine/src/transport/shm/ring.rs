//! A single-producer/single-consumer ring of variable-length records in a
//! shared mapping: one direction of the link between two island processes.
//!
//! Layout at the ring's offset in the mapping (`#[repr(C)]`, little endian):
//! - `head: u64` (bytes consumed, written by the consumer) on its own
//!   128-byte line, `tail: u64` (bytes produced, written by the producer) on
//!   the next; both only grow;
//! - the data area, `cap` bytes, a power of two. A record at position `p`
//!   sits at `p & (cap - 1)`: `[len u32][from u32][to u32][payload: len]`,
//!   padded to 8 bytes; a record never wraps: when the room left before the
//!   end is too small, the producer writes a skip marker (`len = u32::MAX`)
//!   and the record starts at the beginning of the data area.
//!
//! Each side keeps its own position privately and only *reads* the other's
//! from the mapping, so a broken or hostile peer cannot move our position.
//! Everything read from the mapping is untrusted: the consumer reads each
//! header field once (an atomic load into a local), then checks it against
//! what it knows (its own head, the capacity, the tail it validated). A
//! check that fails breaks the ring: the error is kept and counted and the
//! ring yields nothing more, never a panic, an out-of-bounds read or an
//! allocation of a length that was not checked. The payload is copied out
//! with a raw copy; it is whatever bytes were there, and the batch decoder
//! above validates them.
//!
//! Ordering: the producer writes the record, then stores `tail` (release);
//! the consumer loads `tail` (acquire), reads the record, then stores `head`
//! (release), which the producer loads (acquire) before reusing the bytes.

use super::map::Mapping;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes of a ring's header (head and tail on lines of their own).
pub const RING_HEADER: usize = 256;
/// Bytes of a record's header (`len`, `from`, `to`).
pub const RECORD_HEADER: usize = 12;
const TAIL_AT: usize = 128;
const SKIP: u32 = u32::MAX;
/// Smallest and largest data area.
pub const MIN_CAP: usize = 64;
pub const MAX_CAP: usize = 1 << 31;

/// Bytes a record of `len` payload bytes takes in the data area.
#[inline]
pub fn record_bytes(len: usize) -> usize {
    (RECORD_HEADER + len + 7) & !7
}

/// What the ring's other side did wrong. Once seen, the ring is broken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RingError {
    #[error("the producer's tail {tail} is out of range (consumer head {head}, capacity {cap})")]
    TailOutOfRange { head: u64, tail: u64, cap: u64 },
    #[error("the consumer's head {head} is out of range (producer tail {tail}, capacity {cap})")]
    HeadOutOfRange { head: u64, tail: u64, cap: u64 },
    #[error("record at {at} claims {len} payload bytes: past the {avail} bytes written or the end of the ring ({to_end} bytes)")]
    LengthPastRing {
        at: u64,
        len: u32,
        avail: u64,
        to_end: u64,
    },
    #[error("a skip marker at {at} skips {to_end} bytes, more than the {avail} written")]
    BadSkip { at: u64, to_end: u64, avail: u64 },
}

/// Why a record was not pushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    /// No room now; retry after the consumer has made progress.
    #[error("the ring is full")]
    Full,
    /// The record can never fit in this ring.
    #[error("a record of {len} bytes is larger than the ring's {max} limit")]
    TooLarge { len: usize, max: usize },
    /// The consumer's head is out of range: the ring is broken.
    #[error("the ring is broken: {0}")]
    Broken(RingError),
}

/// Where a ring is: `cap` data bytes after a header at `off` in `map`.
#[derive(Clone, Debug)]
pub struct Ring {
    map: Arc<Mapping>,
    off: usize,
    cap: usize,
}

impl Ring {
    /// Bytes a ring of capacity `cap` takes in a mapping.
    pub fn bytes(cap: usize) -> usize {
        RING_HEADER + cap
    }

    /// A ring at `off` of `map` (128-aligned) with a data area of `cap`
    /// bytes (a power of two in `MIN_CAP..=MAX_CAP`), not yet initialised.
    pub fn at(map: Arc<Mapping>, off: usize, cap: usize) -> Result<Ring, String> {
        if !cap.is_power_of_two() || !(MIN_CAP..=MAX_CAP).contains(&cap) {
            return Err(format!(
                "ring capacity {cap} is not a power of two in {MIN_CAP}..={MAX_CAP}"
            ));
        }
        if !off.is_multiple_of(128)
            || off
                .checked_add(Ring::bytes(cap))
                .is_none_or(|e| e > map.len())
        {
            return Err(format!(
                "a ring of {cap} bytes at offset {off} does not fit a {}-byte mapping",
                map.len()
            ));
        }
        Ok(Ring { map, off, cap })
    }

    /// Zeroes head and tail: an empty ring. Only before either side uses it.
    pub fn reset(&self) {
        self.head().store(0, Ordering::Relaxed);
        self.tail().store(0, Ordering::Release);
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Largest payload a record may have.
    pub fn max_payload(&self) -> usize {
        self.cap - RECORD_HEADER
    }

    fn head(&self) -> &AtomicU64 {
        self.map.u64_at(self.off).expect("checked by Ring::at")
    }

    fn tail(&self) -> &AtomicU64 {
        self.map
            .u64_at(self.off + TAIL_AT)
            .expect("checked by Ring::at")
    }

    /// The producing side, starting at the positions found in the mapping.
    /// The caller makes sure there is one producer per ring.
    pub fn producer(&self) -> Result<Producer, RingError> {
        let tail = self.tail().load(Ordering::Acquire);
        let head = self.head().load(Ordering::Acquire);
        let cap = self.cap as u64;
        if head > tail || tail - head > cap || !tail.is_multiple_of(8) {
            return Err(RingError::HeadOutOfRange { head, tail, cap });
        }
        Ok(Producer {
            ring: self.clone(),
            data: self.data(),
            tail,
            head,
            broken: None,
        })
    }

    /// The consuming side, starting at the positions found in the mapping.
    /// The caller makes sure there is one consumer per ring.
    pub fn consumer(&self) -> Result<Consumer, RingError> {
        let head = self.head().load(Ordering::Acquire);
        let tail = self.tail().load(Ordering::Acquire);
        let cap = self.cap as u64;
        if head > tail || tail - head > cap || !head.is_multiple_of(8) || !tail.is_multiple_of(8) {
            return Err(RingError::TailOutOfRange { head, tail, cap });
        }
        Ok(Consumer {
            ring: self.clone(),
            data: self.data(),
            head,
            tail,
            pending: None,
            broken: None,
        })
    }

    fn data(&self) -> *mut u8 {
        // SAFETY: `Ring::at` checked that the data area is inside the mapping.
        unsafe { self.map.as_ptr().add(self.off + RING_HEADER) }
    }

    /// The word at byte `at` of the data area (callers keep `at` 4-aligned
    /// and `at + 4 <= cap`: records are 8-aligned and never wrap).
    #[inline]
    fn word(&self, at: usize) -> &AtomicU32 {
        debug_assert!(at.is_multiple_of(4) && at + 4 <= self.cap);
        // SAFETY: inside the data area (see above), aligned; the reference
        // lives as long as `self`, which holds the mapping's Arc.
        unsafe { &*(self.data().add(at) as *const AtomicU32) }
    }
}

/// The writing side of a [`Ring`].
pub struct Producer {
    ring: Ring,
    data: *mut u8,
    /// Bytes produced: ours, never read back from the mapping.
    tail: u64,
    /// The consumer's head as last read (validated).
    head: u64,
    broken: Option<RingError>,
}

// SAFETY: the raw pointer points into the mapping the producer keeps alive.
unsafe impl Send for Producer {}

impl Producer {
    /// Appends one record: one copy of `payload` into the ring, no
    /// allocation, no system call. Publishes it (and any skip marker) to the
    /// consumer before returning.
    pub fn try_push(&mut self, from: u32, to: u32, payload: &[u8]) -> Result<(), PushError> {
        if let Some(e) = self.broken {
            return Err(PushError::Broken(e));
        }
        let cap = self.ring.cap as u64;
        if payload.len() > self.ring.max_payload() {
            return Err(PushError::TooLarge {
                len: payload.len(),
                max: self.ring.max_payload(),
            });
        }
        let size = record_bytes(payload.len()) as u64;
        let mut off = self.tail & (cap - 1);
        let to_end = cap - off;
        if to_end < size {
            // The record would wrap: skip to the beginning first.
            if self.room()? < to_end {
                return Err(PushError::Full);
            }
            self.ring.word(off as usize).store(SKIP, Ordering::Relaxed);
            self.tail += to_end;
            self.ring.tail().store(self.tail, Ordering::Release);
            off = 0;
        }
        if self.room()? < size {
            return Err(PushError::Full);
        }
        let at = off as usize;
        self.ring
            .word(at)
            .store(payload.len() as u32, Ordering::Relaxed);
        self.ring.word(at + 4).store(from, Ordering::Relaxed);
        self.ring.word(at + 8).store(to, Ordering::Relaxed);
        // SAFETY: `at + size <= cap` (the record does not wrap), and the
        // consumer does not read these bytes before the tail store below.
        unsafe {
            std::ptr::copy_nonoverlapping(
                payload.as_ptr(),
                self.data.add(at + RECORD_HEADER),
                payload.len(),
            )
        };
        self.tail += size;
        self.ring.tail().store(self.tail, Ordering::Release);
        Ok(())
    }

    /// Free bytes, reading the consumer's head again if the cached one
    /// leaves less than a whole ring's worth of doubt.
    fn room(&mut self) -> Result<u64, PushError> {
        let cap = self.ring.cap as u64;
        let head = self.ring.head().load(Ordering::Acquire);
        if head < self.head || head > self.tail || !head.is_multiple_of(8) {
            let e = RingError::HeadOutOfRange {
                head,
                tail: self.tail,
                cap,
            };
            self.broken = Some(e);
            return Err(PushError::Broken(e));
        }
        self.head = head;
        Ok(cap - (self.tail - head))
    }

    /// Bytes pushed so far (the producer's position).
    pub fn position(&self) -> u64 {
        self.tail
    }

    /// Whether the consumer has taken everything pushed so far.
    pub fn is_drained(&self) -> bool {
        self.ring.head().load(Ordering::Acquire) == self.tail
    }

    pub fn broken(&self) -> Option<RingError> {
        self.broken
    }

    pub fn ring(&self) -> &Ring {
        &self.ring
    }
}

/// One record's header, as read (once) and validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// The sender's worker index on the producing island (unchecked here:
    /// the transport checks it against its layout).
    pub from: u32,
    /// The destination endpoint (unchecked here, as `from`).
    pub to: u32,
    pub len: u32,
}

/// The reading side of a [`Ring`].
pub struct Consumer {
    ring: Ring,
    data: *mut u8,
    /// Bytes consumed: ours, never read back from the mapping.
    head: u64,
    /// The producer's tail as last read (validated).
    tail: u64,
    /// Bytes of the record `peek_into` returned and `consume` has not taken.
    pending: Option<u64>,
    broken: Option<RingError>,
}

// SAFETY: as for `Producer`.
unsafe impl Send for Consumer {}

impl Consumer {
    /// Copies the next record's payload into `buf` (replacing its contents)
    /// and returns its header, without taking it: [`Consumer::consume`]
    /// takes it, another `peek_into` reads it again. `Ok(None)`: empty.
    /// `Err`: the ring is broken (the same error on every later call).
    pub fn peek_into(&mut self, buf: &mut Vec<u8>) -> Result<Option<Record>, RingError> {
        if let Some(e) = self.broken {
            return Err(e);
        }
        match self.peek(buf) {
            Err(e) => {
                self.broken = Some(e);
                self.pending = None;
                Err(e)
            }
            ok => ok,
        }
    }

    fn peek(&mut self, buf: &mut Vec<u8>) -> Result<Option<Record>, RingError> {
        let cap = self.ring.cap as u64;
        loop {
            if self.head == self.tail && !self.refresh()? {
                return Ok(None);
            }
            let off = self.head & (cap - 1);
            let to_end = cap - off;
            let avail = self.tail - self.head;
            let at = off as usize;
            let len = self.ring.word(at).load(Ordering::Relaxed);
            if len == SKIP {
                if avail < to_end {
                    return Err(RingError::BadSkip {
                        at: self.head,
                        to_end,
                        avail,
                    });
                }
                self.head += to_end;
                self.ring.head().store(self.head, Ordering::Release);
                continue;
            }
            let size = record_bytes(len as usize) as u64;
            if size > avail || size > to_end {
                return Err(RingError::LengthPastRing {
                    at: self.head,
                    len,
                    avail,
                    to_end,
                });
            }
            let from = self.ring.word(at + 4).load(Ordering::Relaxed);
            let to = self.ring.word(at + 8).load(Ordering::Relaxed);
            let n = len as usize;
            buf.clear();
            buf.reserve(n);
            // SAFETY: `at + 12 + n <= cap` (checked above against `to_end`),
            // and `buf` has room for `n` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.data.add(at + RECORD_HEADER),
                    buf.as_mut_ptr(),
                    n,
                );
                buf.set_len(n);
            }
            self.pending = Some(size);
            return Ok(Some(Record { from, to, len }));
        }
    }

    /// Reads the producer's tail; `Ok(true)` if there is something new.
    fn refresh(&mut self) -> Result<bool, RingError> {
        let cap = self.ring.cap as u64;
        let tail = self.ring.tail().load(Ordering::Acquire);
        if tail < self.tail || tail - self.head > cap || !tail.is_multiple_of(8) {
            return Err(RingError::TailOutOfRange {
                head: self.head,
                tail,
                cap,
            });
        }
        self.tail = tail;
        Ok(tail != self.head)
    }

    /// Takes the record the last `peek_into` returned (frees its bytes for
    /// the producer).
    pub fn consume(&mut self) {
        if let Some(size) = self.pending.take() {
            self.head += size;
            self.ring.head().store(self.head, Ordering::Release);
        }
    }

    /// `peek_into` then `consume`.
    pub fn pop_into(&mut self, buf: &mut Vec<u8>) -> Result<Option<Record>, RingError> {
        let r = self.peek_into(buf)?;
        self.consume();
        Ok(r)
    }

    /// Whether a record may be waiting (reads the producer's tail; a broken
    /// ring has nothing).
    pub fn has_data(&self) -> bool {
        self.broken.is_none() && self.ring.tail().load(Ordering::Acquire) != self.head
    }

    pub fn broken(&self) -> Option<RingError> {
        self.broken
    }

    pub fn ring(&self) -> &Ring {
        &self.ring
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    fn ring(cap: usize) -> Ring {
        let map = Arc::new(Mapping::anonymous(Ring::bytes(cap)).unwrap());
        let r = Ring::at(map, 0, cap).unwrap();
        r.reset();
        r
    }

    fn payload(seq: u64, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (seq.wrapping_mul(31).wrapping_add(i as u64 * 7)) as u8)
            .collect()
    }

    #[derive(Clone, Debug)]
    enum Op {
        Push(usize),
        Pop,
    }

    type Rec = (u32, u32, Vec<u8>);

    /// The byte accounting of the ring, kept the simple way: a queue of
    /// records and skip markers (`None`), each with its bytes.
    struct Model {
        cap: u64,
        head: u64,
        tail: u64,
        queue: VecDeque<(Option<Rec>, u64)>,
    }

    impl Model {
        /// Whether a push must succeed (a full ring may still have taken a
        /// skip marker).
        fn push(&mut self, rec: Rec) -> bool {
            let size = record_bytes(rec.2.len()) as u64;
            let to_end = self.cap - (self.tail % self.cap);
            if to_end < size {
                if self.cap - (self.tail - self.head) < to_end {
                    return false;
                }
                self.tail += to_end;
                self.queue.push_back((None, to_end));
            }
            if self.cap - (self.tail - self.head) < size {
                return false;
            }
            self.tail += size;
            self.queue.push_back((Some(rec), size));
            true
        }

        /// The consumer frees skip markers as it meets them, on its way to
        /// the next record or to finding the ring empty.
        fn pop(&mut self) -> Option<Rec> {
            while let Some((rec, size)) = self.queue.pop_front() {
                self.head += size;
                if rec.is_some() {
                    return rec;
                }
            }
            None
        }
    }

    proptest! {
        /// A peer that writes anything over the ring (its head, its tail,
        /// its records) cannot make the reader panic, read a record past the
        /// payload cap, or allocate past the ring's size.
        #[test]
        fn a_ring_of_garbage_never_panics_nor_allocates_past_the_ring(
            cap_log in 6u32..10,
            head in prop_oneof![any::<u64>(), (0u64..1 << 20).prop_map(|h| h & !7)],
            ahead in prop_oneof![any::<u64>(), (0u64..2048).prop_map(|d| d & !7)],
            data in proptest::collection::vec(any::<u8>(), 1..1024),
        ) {
            let cap = 1usize << cap_log;
            let map = Arc::new(Mapping::anonymous(Ring::bytes(cap)).unwrap());
            let r = Ring::at(Arc::clone(&map), 0, cap).unwrap();
            // SAFETY: the data area is `cap` bytes inside the mapping, which
            // nothing else uses.
            let area = unsafe { std::slice::from_raw_parts_mut(map.as_ptr().add(RING_HEADER), cap) };
            for (i, b) in area.iter_mut().enumerate() {
                *b = data[i % data.len()];
            }
            r.head().store(head, Ordering::Relaxed);
            r.tail().store(head.wrapping_add(ahead), Ordering::Relaxed);
            if let Ok(mut c) = r.consumer() {
                let mut buf = Vec::new();
                for _ in 0..cap / 8 + 2 {
                    match c.pop_into(&mut buf) {
                        Ok(Some(rec)) => {
                            prop_assert!(rec.len as usize <= r.max_payload());
                            prop_assert_eq!(buf.len(), rec.len as usize);
                        }
                        Ok(None) | Err(_) => break,
                    }
                }
                prop_assert!(buf.capacity() <= 2 * cap, "buffer of {}", buf.capacity());
            }
        }

        #[test]
        fn behaves_as_a_queue_with_its_byte_accounting(
            cap_log in 6u32..10,
            ops in proptest::collection::vec(
                prop_oneof![
                    3 => (0usize..300).prop_map(Op::Push),
                    2 => Just(Op::Pop),
                ],
                1..300,
            ),
        ) {
            let cap = 1usize << cap_log;
            let r = ring(cap);
            let mut p = r.producer().unwrap();
            let mut c = r.consumer().unwrap();
            let mut m = Model { cap: cap as u64, head: 0, tail: 0, queue: VecDeque::new() };
            let mut buf = Vec::new();
            for (seq, op) in ops.into_iter().enumerate() {
                let seq = seq as u64;
                match op {
                    Op::Push(len) => {
                        let body = payload(seq, len);
                        let got = p.try_push(seq as u32, !(seq as u32), &body);
                        if len > cap - RECORD_HEADER {
                            prop_assert_eq!(got, Err(PushError::TooLarge { len, max: cap - RECORD_HEADER }));
                            continue;
                        }
                        let want = m.push((seq as u32, !(seq as u32), body));
                        prop_assert_eq!(got.is_ok(), want, "push of {} at seq {}", len, seq);
                        if let Err(e) = got {
                            prop_assert_eq!(e, PushError::Full);
                        }
                    }
                    Op::Pop => {
                        let got = c.pop_into(&mut buf).unwrap();
                        match m.pop() {
                            None => prop_assert!(got.is_none()),
                            Some((f, t, body)) => {
                                let rec = got.expect("the model has a record");
                                prop_assert_eq!((rec.from, rec.to, rec.len as usize), (f, t, body.len()));
                                prop_assert_eq!(&buf, &body);
                            }
                        }
                    }
                }
            }
            // Everything left comes out in order.
            while let Some((f, t, body)) = m.pop() {
                let rec = c.pop_into(&mut buf).unwrap().expect("a record");
                prop_assert_eq!((rec.from, rec.to), (f, t));
                prop_assert_eq!(&buf, &body);
            }
            prop_assert!(c.pop_into(&mut buf).unwrap().is_none());
            prop_assert!(p.is_drained());
        }

        /// A peer that scribbles anywhere on the ring (header and data) gets
        /// errors, never a panic, an out-of-bounds read or a large allocation.
        #[test]
        fn scribbles_break_the_ring_without_panic(
            pushes in proptest::collection::vec(0usize..100, 0..12),
            scribbles in proptest::collection::vec((0usize..(RING_HEADER + 256), any::<u8>()), 1..16),
        ) {
            let cap = 256;
            let r = ring(cap);
            let mut p = r.producer().unwrap();
            for (i, len) in pushes.iter().enumerate() {
                let _ = p.try_push(i as u32, 0, &payload(i as u64, *len));
            }
            let base = r.map.as_ptr();
            for (at, v) in &scribbles {
                // SAFETY: inside the mapping; racing nobody (one thread).
                unsafe { *base.add(*at) = *v };
            }
            // The consumer attaches after the damage or before it.
            let mut buf = Vec::new();
            if let Ok(mut c) = r.consumer() {
                for _ in 0..40 {
                    match c.pop_into(&mut buf) {
                        Ok(Some(rec)) => prop_assert!(rec.len as usize <= cap - RECORD_HEADER && buf.len() == rec.len as usize),
                        Ok(None) => break,
                        Err(e) => {
                            prop_assert_eq!(c.pop_into(&mut buf), Err(e), "a broken ring stays broken");
                            break;
                        }
                    }
                }
                prop_assert!(buf.capacity() <= cap, "allocated {}", buf.capacity());
            }
            for i in 0..20u32 {
                let _ = p.try_push(i, 0, &payload(u64::from(i), 40));
            }
        }
    }

    #[test]
    fn a_record_larger_than_the_room_before_the_end_skips_to_the_start() {
        let r = ring(64);
        let (mut p, mut c) = (r.producer().unwrap(), r.consumer().unwrap());
        let mut buf = Vec::new();
        p.try_push(1, 2, &[7; 20]).unwrap(); // 32 bytes
        assert_eq!(c.pop_into(&mut buf).unwrap().unwrap().len, 20);
        p.try_push(3, 4, &[8; 20]).unwrap(); // at 32..64
        assert_eq!(
            p.try_push(5, 6, &[9; 28]),
            Err(PushError::Full),
            "40 bytes: 32 free, all at the front"
        );
        c.pop_into(&mut buf).unwrap().unwrap();
        p.try_push(5, 6, &[9; 44]).unwrap(); // 56 bytes at 0
        let rec = c.pop_into(&mut buf).unwrap().unwrap();
        assert_eq!((rec.from, rec.to, rec.len), (5, 6, 44));
        assert_eq!(buf, vec![9; 44]);
        assert!(c.pop_into(&mut buf).unwrap().is_none());
        assert_eq!(
            p.try_push(0, 0, &[0; 53]),
            Err(PushError::TooLarge { len: 53, max: 52 })
        );
    }

    #[test]
    fn a_length_past_the_ring_or_a_tail_out_of_range_is_an_error() {
        let r = ring(128);
        let mut p = r.producer().unwrap();
        let mut c = r.consumer().unwrap();
        p.try_push(0, 0, &[1; 10]).unwrap();
        // The record claims more than the producer wrote.
        r.word(0).store(100, Ordering::Relaxed);
        let mut buf = Vec::new();
        assert!(matches!(
            c.pop_into(&mut buf),
            Err(RingError::LengthPastRing { len: 100, .. })
        ));
        assert!(c.broken().is_some() && !c.has_data());

        let r = ring(128);
        let mut c = r.consumer().unwrap();
        r.tail().store(128 + 8, Ordering::Release);
        assert!(matches!(
            c.pop_into(&mut buf),
            Err(RingError::TailOutOfRange { tail: 136, .. })
        ));
        let r = ring(128);
        let mut p = r.producer().unwrap();
        r.head().store(16, Ordering::Release);
        assert!(matches!(
            p.try_push(0, 0, b"x"),
            Err(PushError::Broken(RingError::HeadOutOfRange {
                head: 16,
                ..
            }))
        ));
    }

    #[test]
    fn two_threads_keep_order_and_lose_nothing() {
        let r = ring(4096);
        let mut p = r.producer().unwrap();
        let mut c = r.consumer().unwrap();
        let n = 200_000u64;
        let producer = std::thread::spawn(move || {
            let mut sum = 0u64;
            let mut body = Vec::new();
            for seq in 0..n {
                let len = 8 + (seq.wrapping_mul(2_654_435_761) % 700) as usize;
                body.clear();
                body.extend_from_slice(&seq.to_le_bytes());
                body.extend((8..len).map(|i| (seq as usize ^ i) as u8));
                sum = sum.wrapping_add(body.iter().map(|&b| u64::from(b)).sum::<u64>());
                while let Err(e) = p.try_push(seq as u32, len as u32, &body) {
                    assert_eq!(e, PushError::Full);
                    std::hint::spin_loop();
                }
            }
            sum
        });
        let mut buf = Vec::new();
        let mut sum = 0u64;
        let mut next = 0u64;
        while next < n {
            match c.pop_into(&mut buf).unwrap() {
                Some(rec) => {
                    assert_eq!(rec.from, next as u32);
                    assert_eq!(rec.len, rec.to);
                    assert_eq!(
                        u64::from_le_bytes(buf[..8].try_into().unwrap()),
                        next,
                        "in order"
                    );
                    sum = sum.wrapping_add(buf.iter().map(|&b| u64::from(b)).sum::<u64>());
                    next += 1;
                }
                None => std::thread::yield_now(),
            }
        }
        assert_eq!(producer.join().unwrap(), sum, "checksum of every payload");
        assert!(c.pop_into(&mut buf).unwrap().is_none());
    }
}
