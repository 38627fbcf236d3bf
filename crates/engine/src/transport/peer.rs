//! What a transport between processes reports about each peer island: the
//! state of its connection and what crossed it ([`PeerStats`]), kept in
//! relaxed atomic counters ([`PeerCounters`]) that only the transport's I/O
//! threads write.

use crate::route::IslandId;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

/// The state of the connection with a peer island.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum PeerState {
    /// Never connected yet: connecting, or waiting for the peer to connect.
    Connecting,
    /// Connected, handshake done.
    Up,
    /// Was up, lost; reconnecting or waiting for the peer.
    Down,
    /// Broken for good: the peer wrote something out of range into a
    /// shared ring; nothing more is read from it or sent on it
    /// ([`PeerStats::error`] says what).
    Broken,
}

/// A snapshot of one peer's connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerStats {
    pub island: IslandId,
    pub state: PeerState,
    /// Bytes received and sent on the connection, stream headers included.
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub batches_in: u64,
    pub batches_out: u64,
    /// Batches for this peer dropped: (`uds`) its send queue was full while
    /// it was not up, a write failed under them, or they were queued for an
    /// incarnation that is gone; (`shm`) too large for the ring, the ring
    /// broken, or one of the two reasons below.
    pub dropped: u64,
    /// (`shm`) Of `dropped`: sent while the peer was not linked, with
    /// [`crate::transport::shm::PARKED_MAX`] batches already waiting for it.
    pub dropped_unlinked: u64,
    /// (`shm`) Of `dropped`: waited for the peer's link, and the peer came
    /// back as another incarnation than the one they were sent to.
    pub dropped_stale: u64,
    /// (`shm`) Batches waiting for the peer's link now.
    pub parked: u64,
    /// Connections established after the first.
    pub reconnects: u64,
    /// Times the peer said goodbye: it stopped cleanly (a stop that drained
    /// its two-phase commits) rather than being lost.
    pub goodbyes: u64,
    /// Handshakes refused (either side's verdict), and connections closed
    /// because a frame broke the stream's rules (bad header, checksum,
    /// foreign worker, destination not local); for `shm`, ring records
    /// refused (a worker the peer does not have, a destination not ours).
    pub refusals: u64,
    /// When a batch or a heartbeat last came from the peer.
    pub last_heard: Option<Instant>,
    /// The peer's incarnation, from its last handshake (0: none yet).
    pub incarnation: u64,
    /// Why the link broke for good, if it did ([`PeerState::Broken`]).
    pub error: Option<String>,
}

/// The live counters behind a [`PeerStats`].
#[derive(Debug)]
pub struct PeerCounters {
    pub island: IslandId,
    state: AtomicU8,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub batches_in: AtomicU64,
    pub batches_out: AtomicU64,
    pub dropped: AtomicU64,
    pub reconnects: AtomicU64,
    pub goodbyes: AtomicU64,
    pub refusals: AtomicU64,
    /// Nanoseconds after `epoch` plus one; 0: never heard.
    last_heard: AtomicU64,
    pub incarnation: AtomicU64,
    epoch: Instant,
}

impl PeerCounters {
    pub fn new(island: IslandId, epoch: Instant) -> PeerCounters {
        PeerCounters {
            island,
            state: AtomicU8::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            batches_in: AtomicU64::new(0),
            batches_out: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            goodbyes: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
            last_heard: AtomicU64::new(0),
            incarnation: AtomicU64::new(0),
            epoch,
        }
    }

    pub fn state(&self) -> PeerState {
        match self.state.load(Ordering::Acquire) {
            0 => PeerState::Connecting,
            1 => PeerState::Up,
            2 => PeerState::Down,
            _ => PeerState::Broken,
        }
    }

    pub fn set_state(&self, s: PeerState) {
        let v = match s {
            PeerState::Connecting => 0,
            PeerState::Up => 1,
            PeerState::Down => 2,
            PeerState::Broken => 3,
        };
        self.state.store(v, Ordering::Release);
    }

    /// Adds `n` to a counter (one writer per counter: a load and a store
    /// would do, but the atomic add keeps the counters right if two threads
    /// ever share one).
    #[inline]
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    pub fn heard(&self) {
        let ns = self
            .epoch
            .elapsed()
            .as_nanos()
            .min(u128::from(u64::MAX - 1)) as u64;
        self.last_heard.store(ns + 1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> PeerStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let heard = get(&self.last_heard);
        PeerStats {
            island: self.island,
            state: self.state(),
            bytes_in: get(&self.bytes_in),
            bytes_out: get(&self.bytes_out),
            batches_in: get(&self.batches_in),
            batches_out: get(&self.batches_out),
            dropped: get(&self.dropped),
            dropped_unlinked: 0,
            dropped_stale: 0,
            parked: 0,
            reconnects: get(&self.reconnects),
            goodbyes: get(&self.goodbyes),
            refusals: get(&self.refusals),
            last_heard: (heard > 0).then(|| self.epoch + Duration::from_nanos(heard - 1)),
            incarnation: get(&self.incarnation),
            error: None,
        }
    }
}
