//! How islands exchange messages.
//!
//! A message is an encoded frame (`coord` encodes the 2PC messages, [`wire`]
//! the remote operations beside them); frames travel in *batches*, one batch
//! per destination per round of a worker's loop, so one hand-off carries many
//! messages. The addresses are [`Endpoint`]s: one mailbox per worker thread
//! of an island, so every message about one transaction branch reaches the
//! worker that holds the branch's state.
//!
//! [`Transport`] is the seam: [`InProc`] (islands as thread groups of one
//! process, bounded lock-free mailboxes) is here; Unix sockets and TCP
//! implement the same trait later, and tests drive the state machines through
//! a simulated one.
//!
//! Batch layout: a sequence of frames `[len: u32 LE][payload: len bytes]`. A
//! batch whose frames do not add up is malformed: the receiver counts it and
//! executes nothing past the bad frame.
//!
//! What the engine assumes of a transport (see [`Transport`]): a batch may be
//! lost (two-phase commit resends what it must, and a remote operation times
//! out), but it is delivered at most once and, between two endpoints, in the
//! order sent. A transport that may deliver a batch twice, or hold one back
//! while later ones overtake it, must say so with
//! [`Transport::redelivery_window`]; the engine then keeps the extra state that
//! makes late copies harmless (see `executor`). A stream transport (Unix socket,
//! TCP) that keeps one connection per pair of endpoints and never resends a
//! batch on another connection meets the default.

pub mod bell;
pub mod handshake;
pub mod join;
pub mod layout;
pub mod peer;
pub mod shm;
pub mod stream;
pub mod uds;
pub mod wire;

pub use bell::Bell;
pub use layout::Layout;
pub use peer::{PeerState, PeerStats};

use crossbeam_queue::ArrayQueue;
use crossbeam_utils::CachePadded;
#[cfg(test)]
use std::sync::atomic::{AtomicU64, Ordering};

/// A mailbox: one worker thread of one island.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint(pub u32);

/// Largest frame accepted (a message is a few hundred bytes; rows up to 4 KiB).
pub const MAX_FRAME: usize = 1 << 20;

/// A batch could not be delivered: the destination's mailbox is full. The
/// batch comes back to the sender, which keeps it and retries (back-pressure).
#[derive(Debug)]
pub struct Full(pub Vec<u8>);

/// Moves batches of frames between endpoints.
pub trait Transport: Send + Sync {
    /// Hands `batch` to `to`'s mailbox without blocking.
    fn send(&self, from: Endpoint, to: Endpoint, batch: Vec<u8>) -> Result<(), Full>;
    /// Takes the next batch addressed to `me`, if any, without blocking.
    fn recv(&self, me: Endpoint) -> Option<(Endpoint, Vec<u8>)>;
    /// An empty buffer for a new batch (recycled when possible).
    fn buffer(&self) -> Vec<u8>;
    /// Gives a consumed batch's buffer back.
    fn recycle(&self, buf: Vec<u8>);
    /// Number of endpoints.
    fn endpoints(&self) -> usize;
    /// The bell of local endpoint `me`: its worker sleeps on it when it has
    /// nothing to do, and the transport rings it after delivering a batch
    /// to `me` (see [`bell`]).
    fn bell(&self, me: Endpoint) -> &Bell;
    /// `None` (the default): every batch is delivered at most once, and in
    /// the order sent between two endpoints. `Some(w)`: a batch may also be
    /// delivered more than once, or after batches sent later, but never
    /// later than `w` after it was sent. The engine then remembers the
    /// transaction branches it finished for longer than `w`, so that a late
    /// copy of a remote operation cannot open a finished branch again (see
    /// `executor`'s module documentation). A transport that can deliver a copy
    /// arbitrarily late cannot be used.
    fn redelivery_window(&self) -> Option<std::time::Duration> {
        None
    }
    /// System calls this transport made since it was made, as (send,
    /// receive): the writes and the wake-ups that move a batch out, and the
    /// reads and wake-ups that take one in (see each transport). Counted
    /// only where a system call was made, so an in-process transport says
    /// (0, 0), the default.
    fn syscalls(&self) -> (u64, u64) {
        (0, 0)
    }

    /// Whether the process of island `island` is known to be down: its
    /// connection closed after it had been up, or nothing was heard from it
    /// for the transport's dead interval. False (the default) for a
    /// transport that cannot tell, and for local islands.
    fn peer_down(&self, island: crate::route::IslandId) -> bool {
        let _ = island;
        false
    }
    /// A number that changes whenever some peer's [`Transport::peer_down`]
    /// may have changed: cheap enough to read every round (one relaxed
    /// load), so that executors look at the peers only when it moves.
    fn peer_epoch(&self) -> u64 {
        0
    }
    /// The incarnation of island `island`'s process, as its last handshake
    /// said (0: none yet, or a transport that cannot tell). An executor that
    /// finds it changed since it last looked, without having seen the
    /// island down in between, knows that the incarnation it was waiting on
    /// died (see `executor/down.rs`).
    fn peer_incarnation(&self, island: crate::route::IslandId) -> u64 {
        let _ = island;
        0
    }
}

/// Appends one frame to a batch.
#[inline]
pub fn push_frame(batch: &mut Vec<u8>, payload: &[u8]) {
    debug_assert!(payload.len() <= MAX_FRAME);
    batch.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    batch.extend_from_slice(payload);
}

/// Appends a frame written in place by `write` (no intermediate buffer).
#[inline]
pub fn push_frame_with(batch: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
    let at = batch.len();
    batch.extend_from_slice(&[0; 4]);
    write(batch);
    let len = (batch.len() - at - 4) as u32;
    batch[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

/// Why a batch stopped decoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("truncated frame header at byte {0}")]
    TruncatedHeader(usize),
    #[error("frame at byte {at} claims {len} bytes, more than the {left} left in the batch")]
    Overrun { at: usize, len: usize, left: usize },
    #[error("frame at byte {at} claims {len} bytes, more than the {MAX_FRAME}-byte limit")]
    TooLarge { at: usize, len: usize },
}

/// Iterates over the frames of a batch. Stops (yielding the error once) at the
/// first malformed frame.
pub struct Frames<'a> {
    batch: &'a [u8],
    at: usize,
    failed: bool,
}

pub fn frames(batch: &[u8]) -> Frames<'_> {
    Frames {
        batch,
        at: 0,
        failed: false,
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<&'a [u8], FrameError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.at == self.batch.len() {
            return None;
        }
        let at = self.at;
        let rest = &self.batch[at..];
        if rest.len() < 4 {
            self.failed = true;
            return Some(Err(FrameError::TruncatedHeader(at)));
        }
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len > MAX_FRAME {
            self.failed = true;
            return Some(Err(FrameError::TooLarge { at, len }));
        }
        if len > rest.len() - 4 {
            self.failed = true;
            return Some(Err(FrameError::Overrun {
                at,
                len,
                left: rest.len() - 4,
            }));
        }
        self.at = at + 4 + len;
        Some(Ok(&rest[4..4 + len]))
    }
}

/// A worker's outgoing batches, one per destination, sent together.
pub struct Outbox {
    pending: Vec<Option<Vec<u8>>>,
    /// Per destination: when the pending batch, holding deferred frames
    /// only, got its first one (µs, at least 1); 0 when it holds a frame
    /// that leaves at the next flush, or nothing. See [`Outbox::batch_deferred`].
    deferred_since: Vec<u64>,
    /// Destinations with a non-empty batch, in first-use order.
    dirty: Vec<Endpoint>,
    /// Buffers of batches this worker received and consumed, reused for the
    /// batches it sends: a buffer then shuttles between two workers without
    /// passing through the transport's shared pool (whose head and tail
    /// every worker would write).
    spare: Vec<Vec<u8>>,
    /// A frame someone waits for was queued since the last flush (see
    /// [`Outbox::batch_lazy`]).
    urgent: bool,
    /// Batches dropped because their destination kept refusing them (see
    /// [`MAX_PENDING`]), since [`Outbox::take_dropped`] last read it.
    dropped: u64,
    /// What this outbox handed to the transport since it was made.
    sent: Sent,
}

/// Frames, batches and bytes an [`Outbox`] handed to its transport, counted
/// when the transport accepts a batch (a batch kept for a full destination
/// counts once, when it leaves; a dropped one never). `bytes` are the
/// batches' own (frame headers and payloads), without what a transport adds
/// around a batch (a stream header, a ring record header).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    pub frames: u64,
    pub batches: u64,
    pub bytes: u64,
}

/// The most a batch kept for a destination that refuses it (a full
/// mailbox, a peer that is down) may grow to. Past it the batch is dropped
/// and counted: the engine tolerates lost batches (two-phase commit resends
/// what it must; a remote operation times out), and a dead peer must not
/// grow a worker's memory without bound.
pub const MAX_PENDING: usize = 4 << 20;

/// Consumed buffers an [`Outbox`] keeps for itself; more go back to the
/// transport's pool.
const SPARE_BUFFERS: usize = 64;

impl Outbox {
    pub fn new(endpoints: usize) -> Outbox {
        Outbox {
            pending: (0..endpoints).map(|_| None).collect(),
            deferred_since: vec![0; endpoints],
            dirty: Vec::new(),
            spare: Vec::new(),
            urgent: false,
            dropped: 0,
            sent: Sent::default(),
        }
    }

    /// Takes back the buffer of a batch this worker received and consumed.
    #[inline]
    pub fn recycle(&mut self, t: &dyn Transport, mut buf: Vec<u8>) {
        if self.spare.len() < SPARE_BUFFERS {
            buf.clear();
            self.spare.push(buf);
        } else {
            t.recycle(buf);
        }
    }

    /// The batch being built for `to` (taken from the transport's pool), for
    /// a frame its receiver or sender waits on.
    #[inline]
    pub fn batch(&mut self, t: &dyn Transport, to: Endpoint) -> &mut Vec<u8> {
        self.urgent = true;
        self.batch_lazy(t, to)
    }

    /// The batch being built for `to`, for a frame that may wait: it leaves
    /// with any other frame for `to`, or once it has waited `hold` µs at a
    /// [`Outbox::flush_holding`] (a plain [`Outbox::flush`] sends it too).
    /// An acknowledgement nobody waits on rides on later traffic this way
    /// instead of costing a batch of its own.
    #[inline]
    pub fn batch_deferred(&mut self, t: &dyn Transport, to: Endpoint, now_us: u64) -> &mut Vec<u8> {
        let fresh = self.pending[to.0 as usize]
            .as_ref()
            .is_none_or(|b| b.is_empty());
        if fresh {
            self.deferred_since[to.0 as usize] = now_us.max(1);
        }
        self.slot(t, to)
    }

    /// The batch being built for `to`, for a frame nobody waits on (a
    /// one-way notice): it leaves with the next urgent frame or at the
    /// caller's next regular flush, so it costs no batch of its own.
    #[inline]
    pub fn batch_lazy(&mut self, t: &dyn Transport, to: Endpoint) -> &mut Vec<u8> {
        self.deferred_since[to.0 as usize] = 0;
        self.slot(t, to)
    }

    #[inline]
    fn slot(&mut self, t: &dyn Transport, to: Endpoint) -> &mut Vec<u8> {
        let slot = &mut self.pending[to.0 as usize];
        if slot.is_none() {
            *slot = Some(self.spare.pop().unwrap_or_else(|| t.buffer()));
        }
        let b = slot.as_mut().expect("just filled");
        if b.len() >= MAX_PENDING {
            b.clear();
            self.dropped += 1;
        }
        if b.is_empty() && !self.dirty.contains(&to) {
            self.dirty.push(to);
        }
        b
    }

    /// Sends every non-empty batch. Batches whose destination is full stay
    /// here for the next flush; returns how many stayed.
    pub fn flush(&mut self, t: &dyn Transport, from: Endpoint) -> usize {
        self.flush_holding(t, from, 0, 0)
    }

    /// As [`Outbox::flush`], but a batch of deferred frames only stays
    /// until it has waited `hold_us` (at `now_us`); it does not count as kept.
    pub fn flush_holding(
        &mut self,
        t: &dyn Transport,
        from: Endpoint,
        now_us: u64,
        hold_us: u64,
    ) -> usize {
        self.urgent = false;
        let mut kept = 0;
        let mut i = 0;
        while i < self.dirty.len() {
            let to = self.dirty[i];
            let since = self.deferred_since[to.0 as usize];
            if since != 0 && hold_us != 0 && now_us < since.saturating_add(hold_us) {
                i += 1;
                continue;
            }
            self.deferred_since[to.0 as usize] = 0;
            let slot = &mut self.pending[to.0 as usize];
            match slot.take() {
                Some(b) if !b.is_empty() => {
                    // Read before the batch is handed over; the frame
                    // headers were just written here and are in cache.
                    let (frames, bytes) = (count_frames(&b), b.len() as u64);
                    match t.send(from, to, b) {
                        Ok(()) => {
                            self.sent.frames += frames;
                            self.sent.batches += 1;
                            self.sent.bytes += bytes;
                            self.dirty.swap_remove(i);
                            continue;
                        }
                        Err(Full(b)) => {
                            *slot = Some(b);
                            kept += 1;
                        }
                    }
                }
                other => {
                    *slot = other;
                    self.dirty.swap_remove(i);
                    continue;
                }
            }
            i += 1;
        }
        kept
    }

    pub fn is_empty(&self) -> bool {
        self.dirty.is_empty()
    }

    /// Batches dropped (see [`MAX_PENDING`]) since the last call.
    #[inline]
    pub fn take_dropped(&mut self) -> u64 {
        std::mem::take(&mut self.dropped)
    }

    /// Whether an urgent frame was queued since the last flush.
    #[inline]
    pub fn urgent(&self) -> bool {
        self.urgent
    }

    /// What this outbox handed to the transport since it was made.
    #[inline]
    pub fn sent(&self) -> Sent {
        self.sent
    }
}

/// The frames of a well-formed batch (the outbox builds them with
/// [`push_frame`]); a malformed tail counts as one frame more.
#[inline]
fn count_frames(batch: &[u8]) -> u64 {
    let mut n = 0;
    let mut at = 0usize;
    while at < batch.len() {
        let len = batch
            .get(at..at + 4)
            .map_or(0, |h| u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize);
        at = at.saturating_add(4).saturating_add(len);
        n += 1;
    }
    n
}

/// A bounded queue of (sender, batch).
type Mailbox = ArrayQueue<(Endpoint, Vec<u8>)>;

/// Batch buffers shared by a transport's senders and receivers: a
/// consumed batch's buffer comes back here and leaves again as a new batch,
/// so steady traffic allocates nothing. Bounded: past its capacity a
/// returned buffer is freed.
pub struct BufferPool(ArrayQueue<Vec<u8>>);

impl BufferPool {
    /// Room for `endpoints * depth` buffers, clamped to 16..=65,536.
    pub fn new(endpoints: usize, depth: usize) -> BufferPool {
        BufferPool(ArrayQueue::new(
            endpoints.saturating_mul(depth).clamp(16, 1 << 16),
        ))
    }

    /// An empty buffer: a recycled one, or a new one of 4 KiB.
    #[inline]
    pub fn take(&self) -> Vec<u8> {
        self.0.pop().unwrap_or_else(|| Vec::with_capacity(4096))
    }

    /// Gives `buf` back, emptied.
    #[inline]
    pub fn give(&self, mut buf: Vec<u8>) {
        buf.clear();
        let _ = self.0.push(buf);
    }
}

/// Islands as thread groups of one process: one bounded lock-free mailbox per
/// endpoint and a shared pool of batch buffers.
pub struct InProc {
    mailboxes: Vec<CachePadded<Inbox>>,
    pool: BufferPool,
}

/// A mailbox and, in tests, the count of batches delivered to it (the count
/// is for the tests' assertions only: in a build that runs transactions it
/// would be a locked read-modify-write per batch on the message path).
struct Inbox {
    queue: Mailbox,
    bell: Bell,
    #[cfg(test)]
    sent: CachePadded<AtomicU64>,
}

impl InProc {
    /// `endpoints` mailboxes of `depth` batches each.
    pub fn new(endpoints: usize, depth: usize) -> InProc {
        InProc {
            mailboxes: (0..endpoints)
                .map(|_| {
                    CachePadded::new(Inbox {
                        queue: ArrayQueue::new(depth.max(1)),
                        bell: Bell::new(),
                        #[cfg(test)]
                        sent: CachePadded::new(AtomicU64::new(0)),
                    })
                })
                .collect(),
            pool: BufferPool::new(endpoints, depth),
        }
    }

    /// Batches sent so far (all endpoints).
    #[cfg(test)]
    pub fn batches_sent(&self) -> u64 {
        self.mailboxes
            .iter()
            .map(|m| m.sent.load(Ordering::Relaxed))
            .sum()
    }
}

impl Transport for InProc {
    #[inline]
    fn send(&self, from: Endpoint, to: Endpoint, batch: Vec<u8>) -> Result<(), Full> {
        let inbox = &self.mailboxes[to.0 as usize];
        match inbox.queue.push((from, batch)) {
            Ok(()) => {
                #[cfg(test)]
                inbox.sent.fetch_add(1, Ordering::Relaxed);
                inbox.bell.ring();
                Ok(())
            }
            Err((_, b)) => Err(Full(b)),
        }
    }

    #[inline]
    fn recv(&self, me: Endpoint) -> Option<(Endpoint, Vec<u8>)> {
        self.mailboxes[me.0 as usize].queue.pop()
    }

    #[inline]
    fn buffer(&self) -> Vec<u8> {
        self.pool.take()
    }

    #[inline]
    fn recycle(&self, buf: Vec<u8>) {
        self.pool.give(buf);
    }

    fn endpoints(&self) -> usize {
        self.mailboxes.len()
    }

    #[inline]
    fn bell(&self, me: Endpoint) -> &Bell {
        &self.mailboxes[me.0 as usize].bell
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::Arc;

    #[test]
    fn frames_round_trip_and_batch_per_destination() {
        let t = InProc::new(3, 4);
        let mut out = Outbox::new(3);
        for i in 0..10u32 {
            let to = Endpoint(1 + i % 2);
            push_frame(out.batch(&t, to), &i.to_le_bytes());
        }
        assert_eq!(out.flush(&t, Endpoint(0)), 0);
        assert!(out.is_empty());
        assert_eq!(t.batches_sent(), 2, "one batch per destination");
        for (me, want) in [(1u32, vec![0u32, 2, 4, 6, 8]), (2, vec![1, 3, 5, 7, 9])] {
            let (from, b) = t.recv(Endpoint(me)).expect("a batch");
            assert_eq!(from, Endpoint(0));
            let got: Vec<u32> = frames(&b)
                .map(|f| u32::from_le_bytes(f.unwrap().try_into().unwrap()))
                .collect();
            assert_eq!(got, want);
            t.recycle(b);
            assert!(t.recv(Endpoint(me)).is_none());
        }
    }

    #[test]
    fn a_full_mailbox_pushes_back() {
        let t = InProc::new(2, 1);
        let mut out = Outbox::new(2);
        push_frame(out.batch(&t, Endpoint(1)), b"a");
        assert_eq!(out.flush(&t, Endpoint(0)), 0);
        push_frame(out.batch(&t, Endpoint(1)), b"b");
        assert_eq!(out.flush(&t, Endpoint(0)), 1, "mailbox of depth 1 is full");
        let one = Sent {
            frames: 1,
            batches: 1,
            bytes: 5,
        };
        assert_eq!(out.sent(), one, "a kept batch is not counted yet");
        push_frame(out.batch(&t, Endpoint(1)), b"c");
        let (_, first) = t.recv(Endpoint(1)).unwrap();
        assert_eq!(frames(&first).count(), 1);
        assert_eq!(out.flush(&t, Endpoint(0)), 0);
        assert_eq!(
            out.sent(),
            Sent {
                frames: 3,
                batches: 2,
                bytes: 15,
            },
            "the kept batch counts once, when it leaves, with its two frames"
        );
        let (_, second) = t.recv(Endpoint(1)).unwrap();
        let got: Vec<&[u8]> = frames(&second).map(|f| f.unwrap()).collect();
        assert_eq!(
            got,
            vec![b"b".as_slice(), b"c".as_slice()],
            "kept frames are sent in order"
        );
    }

    #[test]
    fn a_deferred_frame_waits_for_company_or_its_hold() {
        let t = InProc::new(3, 8);
        let mut out = Outbox::new(3);
        let hold = 1_000;
        push_frame(out.batch_deferred(&t, Endpoint(1), 100), b"conf");
        assert!(!out.urgent(), "a deferred frame is not urgent");
        assert_eq!(out.flush_holding(&t, Endpoint(0), 600, hold), 0);
        assert!(t.recv(Endpoint(1)).is_none(), "alone, it waits its hold");
        assert!(!out.is_empty(), "a held batch keeps the outbox busy");
        // Another frame for the same destination takes it along.
        push_frame(out.batch(&t, Endpoint(1)), b"vote");
        assert_eq!(out.flush_holding(&t, Endpoint(0), 700, hold), 0);
        let (_, b) = t.recv(Endpoint(1)).unwrap();
        let got: Vec<&[u8]> = frames(&b).map(|f| f.unwrap()).collect();
        assert_eq!(got, vec![b"conf".as_slice(), b"vote".as_slice()]);
        assert!(out.is_empty());
        // Alone again: it leaves once the hold has passed, not before.
        push_frame(out.batch_deferred(&t, Endpoint(2), 2_000), b"conf");
        out.flush_holding(&t, Endpoint(0), 2_999, hold);
        assert!(t.recv(Endpoint(2)).is_none());
        out.flush_holding(&t, Endpoint(0), 3_000, hold);
        assert_eq!(frames(&t.recv(Endpoint(2)).unwrap().1).count(), 1);
        // A deferred frame added to a batch that leaves anyway leaves with it,
        // and a plain flush holds nothing.
        push_frame(out.batch_lazy(&t, Endpoint(1)), b"release");
        push_frame(out.batch_deferred(&t, Endpoint(1), 5_000), b"conf");
        push_frame(out.batch_deferred(&t, Endpoint(2), 5_000), b"conf");
        out.flush_holding(&t, Endpoint(0), 5_001, hold);
        assert_eq!(frames(&t.recv(Endpoint(1)).unwrap().1).count(), 2);
        assert!(t.recv(Endpoint(2)).is_none());
        out.flush(&t, Endpoint(0));
        assert!(t.recv(Endpoint(2)).is_some());
        assert!(out.is_empty());
    }

    #[test]
    fn a_refused_destination_grows_no_batch_past_the_cap() {
        let t = InProc::new(2, 1);
        let mut out = Outbox::new(2);
        push_frame(out.batch(&t, Endpoint(1)), b"fills the mailbox");
        assert_eq!(out.flush(&t, Endpoint(0)), 0);
        let frame = vec![7u8; 64 << 10];
        let mut kept_max = 0;
        for _ in 0..(3 * MAX_PENDING / frame.len()) {
            push_frame(out.batch(&t, Endpoint(1)), &frame);
            assert_eq!(out.flush(&t, Endpoint(0)), 1, "nobody reads: it stays");
            kept_max = kept_max.max(out.pending[1].as_ref().map_or(0, Vec::len));
        }
        assert!(
            kept_max <= MAX_PENDING + frame.len() + 4,
            "kept {kept_max} bytes"
        );
        assert!(out.take_dropped() >= 2, "the dropped batches are counted");
        assert_eq!(out.sent().batches, 1, "dropped batches were never sent");
        assert_eq!(out.take_dropped(), 0);
        // Once the peer reads again, what was kept since the last drop goes.
        assert!(t.recv(Endpoint(1)).is_some());
        assert_eq!(out.flush(&t, Endpoint(0)), 0);
        let (_, b) = t.recv(Endpoint(1)).expect("the kept batch");
        assert!(frames(&b).all(|f| f.unwrap() == frame.as_slice()));
        let s = out.sent();
        assert_eq!(s.batches, 2);
        assert_eq!(s.frames, 1 + frames(&b).count() as u64);
    }

    #[test]
    fn ping_pong_across_threads() {
        let t = Arc::new(InProc::new(2, 8));
        let t2 = Arc::clone(&t);
        let n = 2_000u64;
        let h = std::thread::spawn(move || {
            let mut seen = 0;
            while seen < n {
                if let Some((from, b)) = t2.recv(Endpoint(1)) {
                    let mut reply = t2.buffer();
                    for f in frames(&b) {
                        push_frame(&mut reply, f.unwrap());
                        seen += 1;
                    }
                    t2.recycle(b);
                    while let Err(Full(r)) = t2.send(Endpoint(1), from, std::mem::take(&mut reply))
                    {
                        reply = r;
                        std::hint::spin_loop();
                    }
                }
            }
        });
        let mut sum = 0u64;
        for i in 0..n {
            let mut b = t.buffer();
            push_frame(&mut b, &i.to_le_bytes());
            while let Err(Full(r)) = t.send(Endpoint(0), Endpoint(1), b) {
                b = r;
            }
            let (_, r) = loop {
                if let Some(x) = t.recv(Endpoint(0)) {
                    break x;
                }
                std::hint::spin_loop();
            };
            for f in frames(&r) {
                sum += u64::from_le_bytes(f.unwrap().try_into().unwrap());
            }
            t.recycle(r);
        }
        h.join().unwrap();
        assert_eq!(sum, n * (n - 1) / 2);
    }

    proptest! {
        #[test]
        fn garbage_never_panics_and_good_prefixes_decode(payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..8), tail in proptest::collection::vec(any::<u8>(), 0..12)) {
            let mut b = Vec::new();
            for p in &payloads {
                push_frame(&mut b, p);
            }
            let good = b.len();
            b.extend_from_slice(&tail);
            let mut got = vec![];
            let mut err = None;
            for f in frames(&b) {
                match f {
                    Ok(x) => got.push(x.to_vec()),
                    Err(e) => err = Some(e),
                }
            }
            prop_assert!(got.len() >= payloads.len());
            prop_assert_eq!(&got[..payloads.len()], &payloads[..]);
            if tail.is_empty() {
                prop_assert!(err.is_none());
                prop_assert_eq!(got.len(), payloads.len());
            }
            let _ = good;
        }
    }
}
