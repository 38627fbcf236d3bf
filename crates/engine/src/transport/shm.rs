//! Islands of different processes on one machine, joined by shared memory.
//!
//! Between two island processes there is one [`Segment`] holding two
//! [`Ring`]s, one per direction. [`Shm`] is the [`Transport`] of one island
//! ([`Layout::me`]): a batch for a local endpoint goes to its in-process
//! mailbox; a batch for a remote endpoint is one record pushed into the ring
//! toward its island (one copy, no system call), then the destination's
//! [`Bell`] (in the peer's [`Bells`] segment, which this process maps) is
//! rung, a system call only if the destination sleeps.
//!
//! Receiving: `recv(me)` takes from `me`'s mailbox; when it is empty, the
//! worker drains the incoming rings (one worker at a time per ring) and
//! routes every record to the mailbox of the local endpoint it names,
//! ringing that endpoint's bell, then looks at its mailbox again. Routing
//! everything through the mailboxes keeps the order between two endpoints
//! whichever worker drains. A record whose destination mailbox is full stays
//! in the ring (back-pressure on the peer); a full ring is [`Full`] for the
//! sender, as a full mailbox is in [`super::InProc`].
//!
//! The sender of a record is the peer island's worker the record names,
//! mapped through the [`Layout`]; it is never an endpoint read from the
//! bytes. A record naming a worker the peer does not have, or a destination
//! that is not ours, is refused and counted. See `docs/architecture.md`,
//! "Shared memory".

mod map;
mod ring;
mod segment;
pub mod setup;

pub use map::Mapping;
pub use ring::{
    record_bytes, Consumer, Producer, PushError, Record, Ring, RingError, MAX_CAP, MIN_CAP,
    RECORD_HEADER, RING_HEADER,
};
pub use segment::{
    bells_name, segment_name, Bells, Segment, ShmError, BELLS_HEADER, BELL_STRIDE, SEGMENT_HEADER,
    SHM_DIR, SHM_VERSION,
};

use super::handshake::Hello;
use super::uds::{Attach, Uds, UdsConfig};
use super::{Bell, BufferPool, Endpoint, Full, Layout, Transport};
use crate::route::IslandId;
use crossbeam_queue::ArrayQueue;
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::ops::Range;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

pub use super::peer::{PeerState, PeerStats};

/// The outgoing ring toward one peer and the peer's bells, as set up by
/// one connection (see [`Shm::attach`]). Every mapping it reaches is held by
/// it (the ring and the bells each keep an `Arc` of theirs), and it is only
/// reached under its side's lock: replacing or dropping it under that lock
/// ends every use of the old mappings first (no use after unmap).
struct TxLink {
    ring: Producer,
    bells: Bells,
    /// Kept open (and its file removed when dropped, if this process made it).
    _segment: Arc<Segment>,
}

/// The incoming ring from one peer, as set up by one connection.
struct RxLink {
    ring: Consumer,
    _segment: Arc<Segment>,
}

/// The sending side toward one peer, with its counters (kept under the
/// lock the push takes anyway: no extra atomic operation per batch).
/// `token`: the connection `link` was set up for (0: none yet).
///
/// Islands as processes: a batch sent while the peer is not linked (not
/// connected yet, or reconnecting) waits in `parked`, oldest first, up to
/// [`PARKED_MAX`], and goes into the ring once a connection links it,
/// before any later batch (so the order per pair of endpoints holds). The
/// batches parked were meant for incarnation `incarnation` of the peer (the
/// last one linked; 0: none yet, so whichever links first): a link with
/// another incarnation drops them, as the connection of [`Uds`] drops what
/// it queued for a process that died.
struct TxSide {
    link: Option<TxLink>,
    token: u64,
    incarnation: u64,
    parked: VecDeque<ParkedBatch>,
    bytes: u64,
    batches: u64,
    /// Dropped because the batch is larger than the ring, or the ring broke.
    dropped: u64,
    /// Dropped because `parked` was full.
    dropped_unlinked: u64,
    /// Parked, then dropped: the peer linked as another incarnation.
    dropped_stale: u64,
}

/// A batch waiting for its peer to be linked (see [`TxSide`]).
struct ParkedBatch {
    /// The local worker that sent it.
    worker: u32,
    to: Endpoint,
    batch: Vec<u8>,
}

/// Batches a [`TxSide`] holds for a peer that is not linked; past it they
/// are dropped and counted (the engine tolerates loss, and a dead peer's
/// backlog stays bounded).
pub const PARKED_MAX: usize = 1024;

/// The receiving side from one peer. `scratch`: a buffer holding the copy
/// of a record not yet delivered (its mailbox was full), reused next time.
struct RxSide {
    link: Option<RxLink>,
    token: u64,
    scratch: Option<Vec<u8>>,
    bytes: u64,
    batches: u64,
    refusals: u64,
}

/// Lock order: `tx` before `rx`.
struct Peer {
    island: IslandId,
    /// Endpoints of the peer island.
    range: Range<u32>,
    tx: Mutex<TxSide>,
    rx: Mutex<RxSide>,
    /// `tx.parked.len()`, readable without the lock: a drain pushes parked
    /// batches only when it is not 0.
    parked: AtomicU64,
    /// Rings are linked: set before the incoming ring can be drained, and
    /// cleared with the unlink. A batch is only ever delivered from a
    /// linked peer, so the peer is up ([`Transport::peer_down`]) whenever
    /// one of its batches arrives, even before its connection's handshake
    /// has ended.
    linked: AtomicBool,
    /// The incarnation of the linked (or last linked) peer; 0: unknown.
    /// Set with `linked`, so a batch's sender has its incarnation known
    /// ([`Transport::peer_incarnation`]) when the batch arrives.
    incarnation: AtomicU64,
}

/// How a drain of one ring ended.
enum Drain {
    /// The ring is empty (or broken).
    Empty,
    /// A record waits for a full mailbox.
    Stalled,
}

/// A local endpoint's mailbox: (sender, batch), bounded.
type Mailbox = ArrayQueue<(Endpoint, Vec<u8>)>;

/// One island's transport over shared memory (see the module documentation).
pub struct Shm {
    /// Islands as processes: the Unix-socket connections that authenticate
    /// each peer, set its rings up and tell whether it is alive (see
    /// [`Shm::for_process`]). Empty for islands of one process.
    link: OnceLock<Arc<Uds>>,
    layout: Layout,
    local: Range<u32>,
    bells: Bells,
    mailboxes: Vec<CachePadded<Mailbox>>,
    /// Per island (ours is never linked).
    peers: Vec<Peer>,
    /// The token of the next connection set up ([`Shm::attach`]).
    tokens: AtomicU64,
    /// What a process's segments are made with ([`Shm::for_process`]).
    deployment: u128,
    ring_bytes: usize,
    pool: BufferPool,
    /// Batches for an endpoint outside the layout or of an island not
    /// connected: dropped (the engine tolerates loss) and counted.
    unroutable: CachePadded<AtomicU64>,
    /// The only system calls of this transport: `futex` wakes of sleeping
    /// workers. By a send (of the destination, here or in a peer process),
    /// and by a drain of an incoming ring (of the local worker a record
    /// went to). Added to only after a wake, which costs far more.
    send_wakes: CachePadded<AtomicU64>,
    recv_wakes: CachePadded<AtomicU64>,
    /// Returned by [`Transport::bell`] for an endpoint that is not ours.
    stray: Bell,
}

/// Where and how big: the settings of [`Shm::open`].
#[derive(Clone, Debug)]
pub struct ShmConfig {
    /// Directory of the files (`/dev/shm` by default).
    pub dir: PathBuf,
    pub deployment: u128,
    /// Data bytes of each ring (a power of two).
    pub ring_bytes: usize,
    /// Batches each local mailbox holds.
    pub mailbox_depth: usize,
    /// How long to wait for a peer's files.
    pub wait: Duration,
}

impl ShmConfig {
    pub fn new(deployment: u128) -> ShmConfig {
        ShmConfig {
            dir: PathBuf::from(SHM_DIR),
            deployment,
            ring_bytes: 1 << 22,
            mailbox_depth: 256,
            wait: Duration::from_secs(10),
        }
    }
}

impl Shm {
    /// The transport of island `layout.me()`, with its own bells and no
    /// peer yet (see [`Shm::connect`]).
    pub fn new(layout: Layout, bells: Bells, mailbox_depth: usize) -> Result<Shm, ShmError> {
        let me = layout.me();
        let local = layout.range(me);
        let workers = local.end - local.start;
        if bells.island() != me || bells.workers() != workers {
            return Err(ShmError::Config(format!(
                "bells of island {} with {} workers for island {me} with {workers}",
                bells.island(),
                bells.workers()
            )));
        }
        let depth = mailbox_depth.max(1);
        Ok(Shm {
            link: OnceLock::new(),
            mailboxes: (0..workers)
                .map(|_| CachePadded::new(ArrayQueue::new(depth)))
                .collect(),
            peers: (0..layout.islands())
                .map(|i| Peer {
                    island: i as IslandId,
                    range: layout.range(i as IslandId),
                    tx: Mutex::new(TxSide {
                        link: None,
                        token: 0,
                        incarnation: 0,
                        parked: VecDeque::new(),
                        bytes: 0,
                        batches: 0,
                        dropped: 0,
                        dropped_unlinked: 0,
                        dropped_stale: 0,
                    }),
                    rx: Mutex::new(RxSide {
                        link: None,
                        token: 0,
                        scratch: None,
                        bytes: 0,
                        batches: 0,
                        refusals: 0,
                    }),
                    parked: AtomicU64::new(0),
                    linked: AtomicBool::new(false),
                    incarnation: AtomicU64::new(0),
                })
                .collect(),
            tokens: AtomicU64::new(1),
            deployment: 0,
            ring_bytes: 0,
            pool: BufferPool::new(workers as usize, depth),
            unroutable: CachePadded::new(AtomicU64::new(0)),
            send_wakes: Default::default(),
            recv_wakes: Default::default(),
            stray: Bell::new(),
            local,
            bells,
            layout,
        })
    }

    /// Joins island `layout.me()` to every other island with workers
    /// through files in `cfg.dir`: creates this island's bells, then opens
    /// (or creates) the segment with each peer and opens its bells, waiting
    /// up to `cfg.wait` for them.
    pub fn open(layout: Layout, cfg: &ShmConfig) -> Result<Shm, ShmError> {
        let me = layout.me();
        let bells = Bells::create(&cfg.dir, cfg.deployment, me, layout.workers(me))?;
        let shm = Shm::new(layout, bells, cfg.mailbox_depth)?;
        for island in 0..shm.layout.islands() as IslandId {
            if island == me || shm.layout.workers(island) == 0 {
                continue;
            }
            let seg = Segment::open_or_create(
                &cfg.dir,
                cfg.deployment,
                me,
                island,
                cfg.ring_bytes,
                cfg.wait,
            )?;
            let bells = Bells::open(
                &cfg.dir,
                cfg.deployment,
                island,
                shm.layout.workers(island),
                cfg.wait,
            )?;
            shm.connect(seg, bells)?;
        }
        Ok(shm)
    }

    /// Links the peer `segment.peer()` for good (islands of one process):
    /// batches for its endpoints go into the segment's outgoing ring and
    /// ring its `bells`. Refused if the peer is linked already.
    pub fn connect(&self, segment: Segment, bells: Bells) -> Result<(), ShmError> {
        let island = segment.peer();
        if let Some(p) = self.peers.get(usize::from(island)) {
            if p.tx.lock().link.is_some() {
                return Err(ShmError::Config(format!(
                    "island {island} is already connected"
                )));
            }
        }
        self.attach(segment, bells).map(|_| ())
    }

    /// Links the peer `segment.peer()`, replacing the rings and bells of an
    /// earlier link with it (a peer that reconnected, or restarted as a new
    /// incarnation): records left in the old rings are dropped with them.
    /// Returns the link's token, for [`Shm::detach`].
    pub fn attach(&self, segment: Segment, bells: Bells) -> Result<u64, ShmError> {
        self.attach_as(segment, bells, 0)
    }

    /// [`Shm::attach`] of a peer that said it is incarnation `incarnation`
    /// (0: unknown). The batches parked while it was not linked then go into
    /// the new ring, unless they were for another incarnation (then they
    /// are dropped and counted).
    pub fn attach_as(
        &self,
        segment: Segment,
        bells: Bells,
        incarnation: u64,
    ) -> Result<u64, ShmError> {
        let island = segment.peer();
        let me = self.layout.me();
        if segment.me() != me || island == me || usize::from(island) >= self.layout.islands() {
            return Err(ShmError::Config(format!(
                "a segment of islands {} and {island} for island {me} of {}",
                segment.me(),
                self.layout.islands()
            )));
        }
        if bells.island() != island || bells.workers() != self.layout.workers(island) {
            return Err(ShmError::Config(format!(
                "bells of island {} with {} workers for island {island} with {}",
                bells.island(),
                bells.workers(),
                self.layout.workers(island)
            )));
        }
        let broken = |e: RingError| ShmError::Config(format!("island {island}'s ring: {e}"));
        let ring_tx = segment.outgoing().producer().map_err(broken)?;
        let ring_rx = segment.incoming().consumer().map_err(broken)?;
        let segment = Arc::new(segment);
        let token = self.tokens.fetch_add(1, Ordering::Relaxed);
        let peer = &self.peers[usize::from(island)];
        let mut tx = peer.tx.lock();
        let mut rx = peer.rx.lock();
        tx.link = Some(TxLink {
            ring: ring_tx,
            bells,
            _segment: Arc::clone(&segment),
        });
        tx.token = token;
        if tx.incarnation != 0 && incarnation != 0 && incarnation != tx.incarnation {
            // Parked for the incarnation that died: not for this one.
            let stale = tx.parked.len() as u64;
            tx.dropped_stale += stale;
            for p in std::mem::take(&mut tx.parked) {
                self.recycle(p.batch);
            }
        }
        if incarnation != 0 {
            tx.incarnation = incarnation;
            peer.incarnation.store(incarnation, Ordering::Release);
        }
        peer.linked.store(true, Ordering::Release);
        rx.link = Some(RxLink {
            ring: ring_rx,
            _segment: segment,
        });
        rx.token = token;
        // A record half delivered came from the old link.
        rx.scratch = None;
        drop(rx);
        self.unpark(peer, &mut tx);
        Ok(token)
    }

    /// Pushes the batches parked for `peer` into its ring, oldest first,
    /// while it is linked and has room (what stays waits for the next send
    /// or drain). Returns whether none is left.
    fn unpark(&self, peer: &Peer, tx: &mut TxSide) -> bool {
        let TxSide {
            link,
            parked,
            bytes,
            batches,
            dropped,
            ..
        } = tx;
        let Some(link) = link.as_mut() else {
            return parked.is_empty();
        };
        while let Some(p) = parked.front() {
            match link.ring.try_push(p.worker, p.to.0, &p.batch) {
                Ok(()) => {
                    *batches += 1;
                    *bytes += p.batch.len() as u64;
                    if link
                        .bells
                        .bell(p.to.0 - peer.range.start)
                        .is_some_and(Bell::ring)
                    {
                        self.send_wakes.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(PushError::Full) => break,
                Err(PushError::TooLarge { .. } | PushError::Broken(_)) => *dropped += 1,
            }
            if let Some(p) = parked.pop_front() {
                self.recycle(p.batch);
            }
        }
        peer.parked.store(parked.len() as u64, Ordering::Relaxed);
        parked.is_empty()
    }

    /// Unlinks `island` if its link is still the one `token` names: batches
    /// for it are dropped (and counted) until it links again.
    pub fn detach(&self, island: IslandId, token: u64) {
        let Some(peer) = self.peers.get(usize::from(island)) else {
            return;
        };
        let mut tx = peer.tx.lock();
        let mut rx = peer.rx.lock();
        if tx.token == token {
            tx.link = None;
        }
        if rx.token == token {
            rx.link = None;
            rx.scratch = None;
        }
        peer.linked
            .store(tx.link.is_some() && rx.link.is_some(), Ordering::Release);
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Counters of every peer island with workers: for islands as
    /// processes, every one (its state is its connection's); for islands of
    /// one process, the linked ones.
    pub fn peers(&self) -> Vec<PeerStats> {
        let me = self.layout.me();
        let link: Option<Vec<PeerStats>> = self.link.get().map(|u| u.peers());
        self.peers
            .iter()
            .filter(|p| p.island != me && self.layout.workers(p.island) > 0)
            .filter_map(|p| {
                let tx = p.tx.lock();
                let rx = p.rx.lock();
                let conn = link
                    .as_ref()
                    .and_then(|l| l.iter().find(|c| c.island == p.island));
                if conn.is_none() && tx.link.is_none() {
                    return None;
                }
                let error = rx
                    .link
                    .as_ref()
                    .and_then(|l| l.ring.broken())
                    .or_else(|| tx.link.as_ref().and_then(|l| l.ring.broken()));
                let state = match (&error, conn) {
                    (Some(_), _) => PeerState::Broken,
                    (None, Some(c)) => c.state,
                    (None, None) => PeerState::Up,
                };
                Some(PeerStats {
                    island: p.island,
                    state,
                    bytes_in: rx.bytes,
                    bytes_out: tx.bytes,
                    batches_in: rx.batches,
                    batches_out: tx.batches,
                    dropped: tx.dropped
                        + tx.dropped_unlinked
                        + tx.dropped_stale
                        + conn.map_or(0, |c| c.dropped),
                    dropped_unlinked: tx.dropped_unlinked,
                    dropped_stale: tx.dropped_stale,
                    parked: tx.parked.len() as u64,
                    reconnects: conn.map_or(0, |c| c.reconnects),
                    goodbyes: conn.map_or(0, |c| c.goodbyes),
                    refusals: rx.refusals + conn.map_or(0, |c| c.refusals),
                    last_heard: conn.and_then(|c| c.last_heard),
                    incarnation: conn.map_or(0, |c| c.incarnation),
                    error: error.map(|e| e.to_string()),
                })
            })
            .collect()
    }

    /// Batches dropped because their destination is no connected endpoint.
    pub fn unroutable(&self) -> u64 {
        self.unroutable.load(Ordering::Relaxed)
    }

    #[inline]
    fn local_index(&self, e: Endpoint) -> Option<usize> {
        if self.local.contains(&e.0) {
            Some((e.0 - self.local.start) as usize)
        } else {
            None
        }
    }

    fn drop_unroutable(&self, batch: Vec<u8>) {
        self.unroutable.fetch_add(1, Ordering::Relaxed);
        self.recycle(batch);
    }

    /// Drains every incoming ring no other worker is draining, and pushes
    /// the batches parked for a linked peer whose ring had no room.
    fn drain(&self) {
        for peer in &self.peers {
            if peer.parked.load(Ordering::Relaxed) != 0 {
                if let Some(mut tx) = peer.tx.try_lock() {
                    self.unpark(peer, &mut tx);
                }
            }
            loop {
                let Some(mut rx) = peer.rx.try_lock() else {
                    // Another worker drains this ring; it delivers to us.
                    break;
                };
                let end = self.drain_one(peer, &mut rx);
                drop(rx);
                // A record pushed after our last look but before the unlock
                // would wait for whoever drains next: look once more.
                if matches!(end, Drain::Stalled) || !peer.incoming_waiting() {
                    break;
                }
            }
        }
    }

    fn drain_one(&self, peer: &Peer, rx: &mut RxSide) -> Drain {
        let RxSide {
            link,
            scratch,
            bytes,
            batches,
            refusals,
            ..
        } = rx;
        let Some(link) = link.as_mut() else {
            return Drain::Empty;
        };
        loop {
            let mut buf = scratch.take().unwrap_or_else(|| self.buffer());
            let rec = match link.ring.peek_into(&mut buf) {
                Ok(Some(rec)) => rec,
                Ok(None) | Err(_) => {
                    *scratch = Some(buf);
                    return Drain::Empty;
                }
            };
            let Some(to) = self.local_index(Endpoint(rec.to)) else {
                link.ring.consume();
                *refusals += 1;
                *scratch = Some(buf);
                continue;
            };
            if rec.from >= peer.range.end - peer.range.start {
                link.ring.consume();
                *refusals += 1;
                *scratch = Some(buf);
                continue;
            }
            let from = Endpoint(peer.range.start + rec.from);
            match self.mailboxes[to].push((from, buf)) {
                Ok(()) => {
                    link.ring.consume();
                    *batches += 1;
                    *bytes += u64::from(rec.len);
                    if self.bells.bell(to as u32).is_some_and(Bell::ring) {
                        self.recv_wakes.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err((_, buf)) => {
                    *scratch = Some(buf);
                    return Drain::Stalled;
                }
            }
        }
    }
}

impl Peer {
    /// Whether the incoming ring holds a record no worker is draining.
    fn incoming_waiting(&self) -> bool {
        self.rx
            .try_lock()
            .is_some_and(|rx| rx.link.as_ref().is_some_and(|l| l.ring.has_data()))
    }
}

impl Transport for Shm {
    fn send(&self, from: Endpoint, to: Endpoint, batch: Vec<u8>) -> Result<(), Full> {
        if let Some(i) = self.local_index(to) {
            return match self.mailboxes[i].push((from, batch)) {
                Ok(()) => {
                    if self.bells.bell(i as u32).is_some_and(Bell::ring) {
                        self.send_wakes.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                }
                Err((_, b)) => Err(Full(b)),
            };
        }
        let (Some(worker), Some(island)) = (self.local_index(from), self.layout.island_of(to))
        else {
            self.drop_unroutable(batch);
            return Ok(());
        };
        let peer = &self.peers[usize::from(island)];
        let mut tx = peer.tx.lock();
        if tx.link.is_none() || !tx.parked.is_empty() {
            if self.link.get().is_none() {
                // Islands of one process: a peer not connected is no route.
                drop(tx);
                self.drop_unroutable(batch);
                return Ok(());
            }
            if tx.link.is_some() {
                if !self.unpark(peer, &mut tx) {
                    // Linked, and the ring has no room for the older
                    // batches yet: back-pressure, as a full ring is.
                    return Err(Full(batch));
                }
            } else if tx.parked.len() < PARKED_MAX {
                // Not linked (yet): the batch waits for the link.
                tx.parked.push_back(ParkedBatch {
                    worker: worker as u32,
                    to,
                    batch,
                });
                peer.parked.store(tx.parked.len() as u64, Ordering::Relaxed);
                return Ok(());
            } else {
                tx.dropped_unlinked += 1;
                drop(tx);
                self.recycle(batch);
                return Ok(());
            }
        }
        let Some(link) = tx.link.as_mut() else {
            // Not reached: an unlinked peer parked or dropped the batch above.
            tx.dropped_unlinked += 1;
            drop(tx);
            self.recycle(batch);
            return Ok(());
        };
        match link.ring.try_push(worker as u32, to.0, &batch) {
            Ok(()) => {
                // Rung under the lock: the bells cannot be unmapped by a
                // relink meanwhile.
                let woke = link
                    .bells
                    .bell(to.0 - peer.range.start)
                    .is_some_and(Bell::ring);
                tx.batches += 1;
                tx.bytes += batch.len() as u64;
                drop(tx);
                if woke {
                    self.send_wakes.fetch_add(1, Ordering::Relaxed);
                }
                self.recycle(batch);
                Ok(())
            }
            Err(PushError::Full) => Err(Full(batch)),
            Err(PushError::TooLarge { .. } | PushError::Broken(_)) => {
                tx.dropped += 1;
                drop(tx);
                self.recycle(batch);
                Ok(())
            }
        }
    }

    fn recv(&self, me: Endpoint) -> Option<(Endpoint, Vec<u8>)> {
        let mailbox = &self.mailboxes[self.local_index(me)?];
        if let Some(x) = mailbox.pop() {
            return Some(x);
        }
        self.drain();
        mailbox.pop()
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
        self.layout.endpoints()
    }

    fn bell(&self, me: Endpoint) -> &Bell {
        self.local_index(me)
            .and_then(|i| self.bells.bell(i as u32))
            .unwrap_or(&self.stray)
    }
    fn syscalls(&self) -> (u64, u64) {
        (
            self.send_wakes.load(Ordering::Relaxed),
            self.recv_wakes.load(Ordering::Relaxed),
        )
    }

    /// Islands as processes: not while its rings are linked (its batches
    /// may arrive before its connection's handshake has ended), else as the
    /// [`Uds`] connection of the peer says (closed, refused, or silent past
    /// its dead interval; a closed connection unlinks the rings before it
    /// says so). Islands of one process: never.
    fn peer_down(&self, island: IslandId) -> bool {
        let Some(u) = self.link.get() else {
            return false;
        };
        let linked = self
            .peers
            .get(usize::from(island))
            .is_some_and(|p| p.linked.load(Ordering::Acquire));
        !linked && u.peer_down(island)
    }

    #[inline]
    fn peer_epoch(&self) -> u64 {
        self.link.get().map_or(0, |u| u.peer_epoch())
    }

    /// The incarnation its rings were linked with, known before any of its
    /// batches arrives; else what its connection's handshake said.
    fn peer_incarnation(&self, island: IslandId) -> u64 {
        let Some(u) = self.link.get() else {
            return 0;
        };
        match self.peers.get(usize::from(island)) {
            Some(p) if p.incarnation.load(Ordering::Acquire) != 0 => {
                p.incarnation.load(Ordering::Acquire)
            }
            _ => u.peer_incarnation(island),
        }
    }
}

impl Shm {
    /// The transport of island `uds.layout.me()` run as a process of its
    /// own. Its bells live in a sealed memfd. The [`Uds`] built from `uds`
    /// dials and accepts the peers' connections and authenticates them;
    /// over each connection the accepting side then passes a fresh segment
    /// (the pair's two rings, `ring_bytes` each) and its bells, the dialling
    /// side its bells ([`setup`]), and both link them ([`Shm::attach`]).
    /// The connection stays open, carrying only heartbeats: its loss
    /// unlinks the peer ([`Shm::detach`]) and makes it down; a reconnect (a
    /// restarted island) links fresh rings and bells in place of the old.
    pub fn for_process(
        mut uds: UdsConfig,
        deployment: u128,
        ring_bytes: usize,
        mailbox_depth: usize,
    ) -> Result<Arc<Shm>, ShmError> {
        if !ring_bytes.is_power_of_two() || !(MIN_CAP..=MAX_CAP).contains(&ring_bytes) {
            return Err(ShmError::Config(format!(
                "ring capacity {ring_bytes} is not a power of two in {MIN_CAP}..={MAX_CAP}"
            )));
        }
        let layout = uds.layout.clone();
        let me = layout.me();
        let bells = Bells::create_memfd(deployment, me, layout.workers(me))?;
        let mut shm = Shm::new(layout, bells, mailbox_depth)?;
        shm.deployment = deployment;
        shm.ring_bytes = ring_bytes;
        let shm = Arc::new(shm);
        uds.attach = Some(Arc::new(Linker(Arc::downgrade(&shm))));
        // No batch crosses the socket: its mailboxes stay empty.
        uds.mailbox_depth = 1;
        uds.send_queue = 1;
        let path = uds
            .paths
            .get(usize::from(me))
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let u = Uds::new(uds).map_err(|source| ShmError::Io { path, source })?;
        // Set once, here, before anyone else sees `shm`.
        let _ = shm.link.set(Arc::new(u));
        Ok(shm)
    }

    /// The connection with each peer process (islands as processes only).
    pub fn connections(&self) -> Option<&Arc<Uds>> {
        self.link.get()
    }

    /// Closes the connections with the peer processes (if any) and unlinks
    /// every peer: batches for them are dropped from now on. Idempotent.
    ///
    /// Between processes, first waits (up to [`RINGS_DRAIN`]) until each
    /// peer has taken everything pushed into its ring: the goodbye that the
    /// connection then carries ([`Uds::shutdown`]) makes the peer unlink the
    /// rings, so it must come after the last record, as it does on a socket.
    pub fn shutdown(&self) {
        if let Some(u) = self.link.get() {
            let until = std::time::Instant::now() + RINGS_DRAIN;
            for p in &self.peers {
                while std::time::Instant::now() < until {
                    let drained =
                        p.tx.lock()
                            .link
                            .as_ref()
                            .is_none_or(|l| l.ring.is_drained() || l.ring.broken().is_some());
                    if drained {
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            u.shutdown();
        }
        for p in &self.peers {
            let mut tx = p.tx.lock();
            let mut rx = p.rx.lock();
            tx.link = None;
            let parked = std::mem::take(&mut tx.parked);
            tx.dropped_unlinked += parked.len() as u64;
            p.parked.store(0, Ordering::Relaxed);
            rx.link = None;
            rx.scratch = None;
            drop(rx);
            drop(tx);
            for b in parked {
                self.recycle(b.batch);
            }
        }
    }

    /// Sets the rings of the pair up over `s`, a connection with `island`
    /// that passed the handshake, and links them (see [`Shm::for_process`]).
    fn setup(
        &self,
        island: IslandId,
        incarnation: u64,
        s: &mut UnixStream,
        initiator: bool,
    ) -> Result<u64, String> {
        let me = self.layout.me();
        if island == me || usize::from(island) >= self.layout.islands() {
            return Err(format!("island {island} is no peer of island {me}"));
        }
        let workers = self.layout.workers(island);
        let dep = self.deployment;
        let text = |e: ShmError| e.to_string();
        let mine = self.bells.fd().map_err(|e| e.to_string())?;
        let (segment, bells) = if initiator {
            let (got, fds) = setup::recv(s)?;
            let [seg, theirs]: [std::os::fd::OwnedFd; 2] = fds
                .try_into()
                .map_err(|_| format!("an offer with {} descriptors, not 2", got.fds))?;
            let cap = usize::try_from(got.ring_bytes)
                .ok()
                .filter(|c| c.is_power_of_two() && (MIN_CAP..=MAX_CAP).contains(c))
                .ok_or_else(|| format!("an offer of rings of {} bytes", got.ring_bytes))?;
            let segment = Segment::from_fd(seg, dep, me, island, cap).map_err(text)?;
            let bells = Bells::from_fd(theirs, dep, island, workers).map_err(text)?;
            let answer = setup::Setup {
                fds: 1,
                ring_bytes: 0,
            };
            setup::send(s, answer, &[mine.as_fd()]).map_err(|e| e.to_string())?;
            (segment, bells)
        } else {
            let segment = Segment::create_memfd(dep, me, island, self.ring_bytes).map_err(text)?;
            let seg = segment.fd().map_err(|e| e.to_string())?;
            let offer = setup::Setup {
                fds: 2,
                ring_bytes: self.ring_bytes as u64,
            };
            setup::send(s, offer, &[seg.as_fd(), mine.as_fd()]).map_err(|e| e.to_string())?;
            let (got, fds) = setup::recv(s)?;
            let [theirs]: [std::os::fd::OwnedFd; 1] = fds
                .try_into()
                .map_err(|_| format!("an answer with {} descriptors, not 1", got.fds))?;
            let bells = Bells::from_fd(theirs, dep, island, workers).map_err(text)?;
            (segment, bells)
        };
        let token = self.attach_as(segment, bells, incarnation).map_err(text)?;
        // The peer may have pushed (and rung) before the rings were linked
        // here: every worker looks again.
        for w in 0..self.mailboxes.len() as u32 {
            if self.bells.bell(w).is_some_and(Bell::ring) {
                self.recv_wakes.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(token)
    }
}

/// Longest [`Shm::shutdown`] waits for the peers to take what was pushed
/// into their rings.
const RINGS_DRAIN: Duration = Duration::from_secs(1);

impl Drop for Shm {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// What the [`Uds`] of a [`Shm::for_process`] hands its connections to. A
/// weak reference: the `Uds` is the transport's, and its threads must not
/// keep the transport alive.
struct Linker(Weak<Shm>);

impl Attach for Linker {
    fn connected(&self, peer: &Hello, s: &mut UnixStream, initiator: bool) -> Result<u64, String> {
        let shm = self.0.upgrade().ok_or("the transport is shutting down")?;
        shm.setup(peer.island, peer.incarnation, s, initiator)
    }

    fn closed(&self, island: IslandId, token: u64) {
        if let Some(shm) = self.0.upgrade() {
            shm.detach(island, token);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::frames;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Instant;

    /// A directory of its own under /dev/shm (or the temp directory),
    /// removed with what is left in it.
    struct TestDir(PathBuf);

    impl TestDir {
        fn new(tag: &str) -> TestDir {
            static N: AtomicU64 = AtomicU64::new(0);
            let base = if Path::new(SHM_DIR).is_dir() {
                PathBuf::from(SHM_DIR)
            } else {
                std::env::temp_dir()
            };
            let d = base.join(format!(
                "islands-test-{}-{tag}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&d).unwrap();
            TestDir(d)
        }
    }

    impl Drop for TestDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn deployment() -> u128 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        t ^ (u128::from(std::process::id()) << 96)
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// A pid that is not alive: a child that has exited and been reaped.
    fn dead_pid() -> u32 {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    }

    const W: Duration = Duration::from_millis(300);

    #[test]
    fn a_segment_is_shared_checked_replaced_when_stale_and_removed_on_drop() {
        let d = TestDir::new("seg");
        let dep = deployment();
        let s0 = Segment::open_or_create(&d.0, dep, 0, 1, 4096, W).unwrap();
        let s1 = Segment::open_or_create(&d.0, dep, 1, 0, 4096, W).unwrap();
        assert!(s0.created() && !s1.created());
        assert_eq!(s1.creator(), (0, std::process::id()));
        let name = segment_name(dep, 1, 0);
        assert_eq!(files(&d.0), vec![name.clone()]);
        let meta = std::fs::metadata(d.0.join(&name)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);

        // Each direction is its own ring.
        let mut buf = Vec::new();
        s0.outgoing()
            .producer()
            .unwrap()
            .try_push(0, 7, b"to one")
            .unwrap();
        s1.outgoing()
            .producer()
            .unwrap()
            .try_push(0, 3, b"to zero")
            .unwrap();
        let r = s1
            .incoming()
            .consumer()
            .unwrap()
            .pop_into(&mut buf)
            .unwrap()
            .unwrap();
        assert_eq!((r.to, buf.as_slice()), (7, b"to one".as_slice()));
        let r = s0
            .incoming()
            .consumer()
            .unwrap()
            .pop_into(&mut buf)
            .unwrap()
            .unwrap();
        assert_eq!((r.to, buf.as_slice()), (3, b"to zero".as_slice()));

        // Another ring size: refused, naming the field.
        let e = Segment::open_or_create(&d.0, dep, 1, 0, 8192, W)
            .err()
            .unwrap();
        assert!(
            matches!(
                e,
                ShmError::Mismatch {
                    field: "ring capacity",
                    ..
                }
            ),
            "{e}"
        );
        // Another mode: refused.
        let path = d.0.join(&name);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Segment::open_or_create(&d.0, dep, 1, 0, 4096, W)
            .err()
            .unwrap();
        assert!(e.to_string().contains("mode 0644"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        drop(s1);
        assert!(path.exists(), "only the creator removes the file");
        drop(s0);
        assert!(files(&d.0).is_empty(), "the creator removed it");

        // A file left by a dead creator is replaced.
        let s = Segment::open_or_create(&d.0, dep, 0, 1, 4096, W).unwrap();
        let old = std::fs::metadata(&path).unwrap().ino();
        s.outgoing()
            .producer()
            .unwrap()
            .try_push(0, 1, b"stale")
            .unwrap();
        s.map
            .u32_at(52)
            .unwrap()
            .store(dead_pid(), Ordering::Relaxed);
        // As if the creator had crashed: the file stays.
        std::mem::forget(s);
        let s1 = Segment::open_or_create(&d.0, dep, 1, 0, 4096, W).unwrap();
        assert!(s1.created(), "a stale file is made afresh");
        assert_ne!(std::fs::metadata(&path).unwrap().ino(), old);
        assert!(
            s1.incoming()
                .consumer()
                .unwrap()
                .pop_into(&mut buf)
                .unwrap()
                .is_none(),
            "nothing of the dead creator's rings survives"
        );

        // A symbolic link in the file's place is not followed.
        drop(s1);
        std::os::unix::fs::symlink("/etc/passwd", &path).unwrap();
        assert!(Segment::open_or_create(&d.0, dep, 0, 1, 4096, W).is_err());
        std::fs::remove_file(&path).unwrap();

        assert!(Segment::open_or_create(&d.0, dep, 1, 1, 4096, W).is_err());
        assert!(Segment::open_or_create(&d.0, dep, 0, 1, 1000, W).is_err());
    }

    use std::os::unix::fs::MetadataExt;

    #[test]
    fn memfd_segments_and_bells_check_their_header() {
        let dep = deployment();
        let s0 = Segment::create_memfd(dep, 2, 5, 1024).unwrap();
        let s1 = Segment::from_fd(s0.fd().unwrap(), dep, 5, 2, 1024).unwrap();
        assert_eq!(s1.creator(), (2, std::process::id()));
        s0.outgoing()
            .producer()
            .unwrap()
            .try_push(1, 9, b"hi")
            .unwrap();
        let mut buf = Vec::new();
        let r = s1
            .incoming()
            .consumer()
            .unwrap()
            .pop_into(&mut buf)
            .unwrap()
            .unwrap();
        assert_eq!((r.from, r.to, buf.as_slice()), (1, 9, b"hi".as_slice()));
        let e = Segment::from_fd(s0.fd().unwrap(), dep ^ 1, 5, 2, 1024)
            .err()
            .unwrap();
        assert!(
            matches!(
                e,
                ShmError::Mismatch {
                    field: "deployment (low half)",
                    ..
                }
            ),
            "{e}"
        );
        let e = Segment::from_fd(s0.fd().unwrap(), dep, 5, 3, 1024)
            .err()
            .unwrap();
        assert!(
            matches!(
                e,
                ShmError::Mismatch {
                    field: "first island",
                    ..
                }
            ),
            "{e}"
        );

        // A descriptor whose file could shrink under the mapping is refused.
        let loose = rustix::fs::memfd_create("loose", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&loose, Segment::bytes(1024) as u64).unwrap();
        let e = Segment::from_fd(loose, dep, 5, 2, 1024).err().unwrap();
        assert!(matches!(e, ShmError::Refused { .. }), "{e}");

        let b = Bells::create_memfd(dep, 4, 3).unwrap();
        let p = Bells::from_fd(b.fd().unwrap(), dep, 4, 3).unwrap();
        assert!(p.bell(2).is_some() && p.bell(3).is_none());
        // The peer's view of a bell is the owner's bell.
        let owner = b.bell(1).unwrap();
        owner.prepare_sleep();
        p.bell(1).unwrap().ring();
        assert!(
            owner.sleep(Duration::from_secs(5)),
            "rung through the other mapping"
        );
        let e = Bells::from_fd(b.fd().unwrap(), dep, 4, 2).err().unwrap();
        assert!(matches!(e, ShmError::Mismatch { field: "size", .. }), "{e}");
        let e = Bells::from_fd(b.fd().unwrap(), dep, 3, 3).err().unwrap();
        assert!(
            matches!(
                e,
                ShmError::Mismatch {
                    field: "island",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn bells_are_one_live_owner_s() {
        let d = TestDir::new("bells");
        let dep = deployment();
        let b = Bells::create(&d.0, dep, 0, 2).unwrap();
        let e = Bells::create(&d.0, dep, 0, 2).err().unwrap();
        assert!(matches!(e, ShmError::Busy { island: 0, .. }), "{e}");
        let e = Bells::open(&d.0, dep, 1, 2, Duration::from_millis(20))
            .err()
            .unwrap();
        assert!(matches!(e, ShmError::Io { .. }), "not there: {e}");
        // A dead owner's bells are taken over.
        b.map
            .u32_at(40)
            .unwrap()
            .store(dead_pid(), Ordering::Relaxed);
        std::mem::forget(b);
        let b = Bells::create(&d.0, dep, 0, 2).unwrap();
        drop(b);
        assert!(files(&d.0).is_empty());
    }

    /// One `Shm` per island of `workers`, opened together (each waits for
    /// the others' bells).
    fn islands(dir: &Path, workers: &[u32], ring_bytes: usize) -> (u128, Vec<Arc<Shm>>) {
        let dep = deployment();
        let mut cfg = ShmConfig::new(dep);
        cfg.dir = dir.to_path_buf();
        cfg.ring_bytes = ring_bytes;
        cfg.mailbox_depth = 8;
        cfg.wait = Duration::from_secs(10);
        let hs: Vec<_> = (0..workers.len())
            .map(|i| {
                let (cfg, layout) = (cfg.clone(), Layout::new(workers, i as IslandId));
                std::thread::spawn(move || Shm::open(layout, &cfg).map(Arc::new))
            })
            .collect();
        (
            dep,
            hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect(),
        )
    }

    fn batch(t: &Shm, seq: u64, len: usize) -> Vec<u8> {
        let mut b = t.buffer();
        let mut body = seq.to_le_bytes().to_vec();
        body.resize(len.max(8), seq as u8);
        crate::transport::push_frame(&mut b, &body);
        b
    }

    fn seq_of(b: &[u8]) -> u64 {
        let f = frames(b).next().unwrap().unwrap();
        u64::from_le_bytes(f[..8].try_into().unwrap())
    }

    fn recv_wait(t: &Shm, me: Endpoint) -> (Endpoint, Vec<u8>) {
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(x) = t.recv(me) {
                return x;
            }
            assert!(Instant::now() < end, "nothing for {me:?}");
            std::thread::yield_now();
        }
    }

    #[test]
    fn three_islands_deliver_in_order_with_the_right_sender() {
        let d = TestDir::new("three");
        // Endpoints: island 0: 0, 1; island 1: 2; island 2: 3, 4.
        let (_, t) = islands(&d.0, &[2, 1, 2], 1 << 12);
        let routes = [
            (0usize, Endpoint(1), Endpoint(4)),
            (2, Endpoint(3), Endpoint(0)),
            (1, Endpoint(2), Endpoint(3)),
            (0, Endpoint(0), Endpoint(1)), // local
        ];
        let n = 500u64;
        for seq in 0..n {
            for &(i, from, to) in &routes {
                let b = batch(&t[i], seq, 8 + (seq as usize * 37) % 300);
                // One batch in flight per route: never full.
                assert!(t[i].send(from, to, b).is_ok(), "full at {seq}");
            }
            for &(_, from, to) in &routes {
                let owner = t.iter().position(|s| s.layout().is_local(to)).unwrap();
                let (f, b) = recv_wait(&t[owner], to);
                assert_eq!(f, from, "sender of {seq} to {to:?}");
                assert_eq!(seq_of(&b), seq, "order to {to:?}");
                t[owner].recycle(b);
            }
        }
        let p0 = t[0].peers();
        assert_eq!(p0.len(), 2);
        let to2 = p0.iter().find(|p| p.island == 2).unwrap();
        assert_eq!((to2.batches_out, to2.batches_in, to2.refusals), (n, n, 0));
        assert!(to2.bytes_out > n * 12 && to2.state == PeerState::Up);
        assert_eq!(t[0].unroutable(), 0);
        // An endpoint past the layout is dropped and counted, not an error.
        let b = batch(&t[0], 0, 8);
        assert!(t[0].send(Endpoint(0), Endpoint(99), b).is_ok());
        assert_eq!(t[0].unroutable(), 1);
        drop(t);
        assert!(
            files(&d.0).is_empty(),
            "every file removed: {:?}",
            files(&d.0)
        );
    }

    #[test]
    fn a_full_ring_pushes_back_and_bad_records_are_refused() {
        let d = TestDir::new("full");
        let (dep, t) = islands(&d.0, &[1, 2], 1 << 10);
        let mut sent = 0u64;
        let back = loop {
            match t[0].send(Endpoint(0), Endpoint(2), batch(&t[0], sent, 100)) {
                Ok(()) => sent += 1,
                Err(Full(b)) => break b,
            }
        };
        assert!(
            sent > 0 && sent < 20,
            "{sent} batches of 112 bytes in 1 KiB"
        );
        assert_eq!(seq_of(&back), sent, "the batch comes back whole");
        // The receiver's mailbox holds 8 and the rest stays in the ring.
        for seq in 0..sent {
            let (from, b) = recv_wait(&t[1], Endpoint(2));
            assert_eq!((from, seq_of(&b)), (Endpoint(0), seq));
        }
        assert!(t[0].send(Endpoint(0), Endpoint(2), back).is_ok());
        let _ = recv_wait(&t[1], Endpoint(2));

        // A second producer on the same ring plays a broken island 0.
        let seg = Segment::open_or_create(&d.0, dep, 0, 1, 1 << 10, W).unwrap();
        let mut evil = seg.outgoing().producer().unwrap();
        evil.try_push(5, 2, b"no worker 5 on island 0").unwrap();
        evil.try_push(0, 0, b"endpoint 0 is not island 1's")
            .unwrap();
        evil.try_push(0, 1, b"fine").unwrap();
        let (from, b) = recv_wait(&t[1], Endpoint(1));
        assert_eq!((from, b.as_slice()), (Endpoint(0), b"fine".as_slice()));
        let p = &t[1].peers()[0];
        assert_eq!((p.refusals, p.batches_in), (2, sent + 2));
        // A length past the ring breaks the link: counted, never a panic.
        evil.try_push(0, 1, b"x").unwrap();
        let ring = seg.outgoing();
        let at = SEGMENT_HEADER + RING_HEADER + (evil_tail(&ring) as usize - 16) % 1024;
        seg.map.u32_at(at).unwrap().store(5000, Ordering::Relaxed);
        assert!(t[1].recv(Endpoint(1)).is_none());
        let p = &t[1].peers()[0];
        assert_eq!(p.state, PeerState::Broken);
        assert!(p.error.as_deref().unwrap().contains("5000"), "{p:?}");
    }

    fn evil_tail(r: &Ring) -> u64 {
        r.producer().unwrap().position()
    }

    #[test]
    fn a_sleeping_receiver_is_woken_by_the_other_island() {
        let d = TestDir::new("bell");
        let (_, t) = islands(&d.0, &[1, 1], 1 << 12);
        let (t0, t1) = (Arc::clone(&t[0]), Arc::clone(&t[1]));
        let sleeper = std::thread::spawn(move || {
            let me = Endpoint(1);
            let bell = t1.bell(me);
            let mut woken = Vec::new();
            for _ in 0..3 {
                loop {
                    if let Some((_, b)) = t1.recv(me) {
                        t1.recycle(b);
                        break;
                    }
                    if !bell.prepare_sleep() {
                        // Rung since the last sleep: look again.
                        continue;
                    }
                    if let Some((_, b)) = t1.recv(me) {
                        bell.cancel_sleep();
                        t1.recycle(b);
                        break;
                    }
                    let at = Instant::now();
                    let rung = bell.sleep(Duration::from_secs(5));
                    woken.push((rung, at.elapsed()));
                }
            }
            woken
        });
        for seq in 0..3 {
            // Wait until the receiver sleeps, then send.
            let end = Instant::now() + Duration::from_secs(10);
            while !t[1].bell(Endpoint(1)).is_sleeping() && Instant::now() < end {
                std::thread::yield_now();
            }
            t0.send(Endpoint(0), Endpoint(1), batch(&t0, seq, 8))
                .unwrap();
        }
        let woken = sleeper.join().unwrap();
        assert!(!woken.is_empty());
        // Each sleep was ended by a futex wake of the sending island (a
        // send may also find the receiver between announcing its sleep and
        // its last look); nothing else here makes a system call.
        let wakes = t[0].syscalls().0;
        assert!((woken.len() as u64..=3).contains(&wakes), "{wakes} wakes");
        assert_eq!(t[1].syscalls(), (0, 0));
        for (rung, took) in woken {
            assert!(rung, "woken by the ring, not the 5 s timeout");
            assert!(took < Duration::from_secs(2), "slept {took:?}");
        }
    }

    const CHILD_ENV: &str = "ISLANDS_SHM_TEST_CHILD";

    fn cross_len(seq: u64) -> usize {
        8 + (seq as usize * 37) % 500
    }

    /// The child side of `a_child_process_exchanges_batches_through_dev_shm`:
    /// island 1, echoing every batch to its sender. Runs only when the parent
    /// starts this test binary with the variable set.
    #[test]
    #[ignore = "run by a_child_process_exchanges_batches_through_dev_shm in a child process"]
    fn child_island() {
        let Ok(spec) = std::env::var(CHILD_ENV) else {
            return;
        };
        let parts: Vec<&str> = spec.split(';').collect();
        let mut cfg = ShmConfig::new(u128::from_str_radix(parts[1], 16).unwrap());
        cfg.dir = PathBuf::from(parts[0]);
        cfg.ring_bytes = 1 << 14;
        let n: u64 = parts[2].parse().unwrap();
        let t = Shm::open(Layout::new(&[1, 1], 1), &cfg).unwrap();
        let me = Endpoint(1);
        let bell = t.bell(me);
        let mut echoed = 0;
        while echoed < n {
            let got = match t.recv(me) {
                Some(x) => Some(x),
                None => {
                    bell.prepare_sleep();
                    let x = t.recv(me);
                    if x.is_some() {
                        bell.cancel_sleep();
                    } else {
                        bell.sleep(Duration::from_secs(1));
                    }
                    x
                }
            };
            if let Some((from, mut b)) = got {
                assert_eq!(from, Endpoint(0));
                while let Err(Full(back)) = t.send(me, from, b) {
                    b = back;
                    std::thread::yield_now();
                }
                echoed += 1;
            }
        }
        // Leave when the parent has taken every echo (the rings live on in
        // its mapping either way; this keeps the counters simple).
        let end = Instant::now() + Duration::from_secs(20);
        while t.peers()[0].batches_out < n && Instant::now() < end {
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_child_process_exchanges_batches_through_dev_shm() {
        let d = TestDir::new("proc");
        let dep = deployment();
        let n = 3000u64;
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "transport::shm::tests::child_island",
                "--ignored",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, format!("{};{dep:x};{n}", d.0.display()))
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut cfg = ShmConfig::new(dep);
        cfg.dir = d.0.clone();
        cfg.ring_bytes = 1 << 14;
        let t = Shm::open(Layout::new(&[1, 1], 0), &cfg).unwrap();
        let (me, peer) = (Endpoint(0), Endpoint(1));
        let bell = t.bell(me);
        let (mut sent, mut got) = (0u64, 0u64);
        let end = Instant::now() + Duration::from_secs(120);
        while got < n {
            assert!(Instant::now() < end, "{got} of {n} echoes");
            while sent < n && sent - got < 32 {
                match t.send(me, peer, batch(&t, sent, cross_len(sent))) {
                    Ok(()) => sent += 1,
                    Err(Full(_)) => break,
                }
            }
            let x = t.recv(me).or_else(|| {
                bell.prepare_sleep();
                let x = t.recv(me);
                if x.is_some() {
                    bell.cancel_sleep();
                } else {
                    bell.sleep(Duration::from_millis(500));
                }
                x
            });
            if let Some((from, b)) = x {
                assert_eq!(from, peer);
                assert_eq!(
                    b,
                    batch(&t, got, cross_len(got)),
                    "echo {got} intact, in order"
                );
                t.recycle(b);
                got += 1;
            }
        }
        assert!(child.wait().unwrap().success(), "the child failed");
        let p = &t.peers()[0];
        assert_eq!((p.batches_out, p.batches_in, p.refusals), (n, n, 0));
        assert_eq!(p.bytes_in, p.bytes_out);
    }

    /// Island `me` of two one-worker islands as a process of its own:
    /// sockets in `dir`, a heartbeat every 20 ms, dead after 200 ms.
    fn process(
        dir: &Path,
        secret: &crate::transport::handshake::Secret,
        me: u16,
        incarnation: u64,
    ) -> Arc<Shm> {
        use crate::transport::handshake::{build_id, Hello, WIRE_VERSION};
        let workers = vec![1u32, 1];
        let hello = Hello {
            wire_version: WIRE_VERSION,
            transport: crate::transport::join::Kind::Shm,
            build_id: build_id(),
            deployment: 0x5e7,
            island: me,
            incarnation,
            schema: 1,
            catalog: 2,
            workers: workers.clone(),
        };
        let paths = (0..2).map(|i| dir.join(format!("i{i}.sock"))).collect();
        let mut cfg = UdsConfig::new(Layout::new(&workers, me), paths, secret.clone(), hello);
        cfg.heartbeat = Duration::from_millis(20);
        cfg.dead_after = Duration::from_millis(200);
        Shm::for_process(cfg, 0x5e7, 1 << 12, 8).unwrap()
    }

    fn until(what: &str, mut f: impl FnMut() -> bool) {
        let end = Instant::now() + Duration::from_secs(20);
        while !f() {
            assert!(Instant::now() < end, "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Island 0 keeps sending to island 1 from another thread while island
    /// 1 dies and comes back, again and again, as a new incarnation: each
    /// time island 0 sees it down, then up with fresh rings and bells (the
    /// incarnation it reports is the new one), and batches flow again; the
    /// sender never touches a mapping that was dropped (it would fault).
    #[test]
    fn a_restarted_process_gets_fresh_rings_and_a_closed_one_is_down() {
        let d = TestDir::new("restart");
        let secret = crate::transport::handshake::Secret::random();
        let a = process(&d.0, &secret, 0, 1);
        let stop = Arc::new(AtomicBool::new(false));
        let sender = {
            let (a, stop) = (Arc::clone(&a), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut seq = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let _ = a.send(Endpoint(0), Endpoint(1), batch(&a, seq, 40));
                    seq += 1;
                    if seq.is_multiple_of(64) {
                        std::thread::yield_now();
                    }
                }
            })
        };
        let mut epoch = a.peer_epoch();
        for incarnation in 1..=4u64 {
            let b = process(&d.0, &secret, 1, incarnation);
            until("island 1 up at island 0", || {
                !a.peer_down(1) && a.peers()[0].state == PeerState::Up
            });
            assert_ne!(a.peer_epoch(), epoch, "coming up moves the epoch");
            let p = a.peers()[0].clone();
            assert_eq!(p.incarnation, incarnation, "{p:?}");
            assert_eq!(p.reconnects, incarnation - 1);
            // Batches of this incarnation's rings arrive, from island 0.
            let (from, got) = recv_wait(&b, Endpoint(1));
            assert_eq!(from, Endpoint(0));
            assert_eq!(frames(&got).count(), 1);
            b.recycle(got);
            let bp = &b.peers()[0];
            assert!(bp.batches_in >= 1 && bp.state == PeerState::Up, "{bp:?}");
            epoch = a.peer_epoch();
            // Island 1 goes away: its connection closes, island 0 sees it down
            // and drops what it sends meanwhile.
            drop(b);
            until("island 1 down at island 0", || a.peer_down(1));
            assert_ne!(a.peer_epoch(), epoch, "going down moves the epoch");
            epoch = a.peer_epoch();
            let dropped = a.peers()[0].dropped;
            until("batches for a down peer are dropped", || {
                a.peers()[0].dropped > dropped
            });
        }
        stop.store(true, Ordering::Relaxed);
        sender.join().unwrap();
        assert_eq!(a.unroutable(), 0);
        assert_eq!(a.peers()[0].refusals, 0, "{:?}", a.peers());
    }

    /// Every batch a restarted peer sends arrives while the transport says
    /// that peer is up and names its new incarnation, even the batches it
    /// sent before linking, which go into the ring as soon as the rings are
    /// linked, before its connection's handshake has ended: what receives a
    /// batch (a forwarded call, a 2PC message) never takes its sender for
    /// down or for an earlier incarnation.
    #[test]
    fn a_batch_arrives_only_from_a_peer_that_is_up_in_its_new_incarnation() {
        let d = TestDir::new("arrive-up");
        let secret = crate::transport::handshake::Secret::random();
        let b = process(&d.0, &secret, 1, 1);
        let stop = Arc::new(AtomicBool::new(false));
        let checked = Arc::new(AtomicU64::new(0));
        let receiver = {
            let (b, stop, checked) = (Arc::clone(&b), Arc::clone(&stop), Arc::clone(&checked));
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let Some((from, got)) = b.recv(Endpoint(1)) else {
                        std::hint::spin_loop();
                        continue;
                    };
                    assert_eq!(from, Endpoint(0));
                    // The sender's incarnation is the batch's number.
                    let sent_by = seq_of(&got);
                    let (down, inc) = (b.peer_down(0), b.peer_incarnation(0));
                    assert!(
                        !down && inc == sent_by,
                        "a batch of incarnation {sent_by} arrived while its sender was \
                         down: {down}, incarnation {inc}"
                    );
                    seen.push(sent_by);
                    checked.fetch_add(1, Ordering::Release);
                    b.recycle(got);
                }
                seen
            })
        };
        for incarnation in 1..=12u64 {
            let a = process(&d.0, &secret, 0, incarnation);
            // Sent at once: parked until the rings link, then pushed in.
            for _ in 0..4 {
                a.send(Endpoint(0), Endpoint(1), batch(&a, incarnation, 24))
                    .unwrap();
            }
            until("island 0 up at island 1", || {
                !b.peer_down(0) && b.peers()[0].state == PeerState::Up
            });
            // Checked by the receiver before the sender goes away.
            until("its batches arrive", || {
                checked.load(Ordering::Acquire) >= 4 * incarnation
            });
            drop(a);
            until("island 0 down at island 1", || b.peer_down(0));
        }
        stop.store(true, Ordering::Relaxed);
        let seen = receiver.join().unwrap();
        assert_eq!(seen.len(), 4 * 12, "every batch arrived once");
    }

    /// Rings linked by a connection's handshake, before the handshake has
    /// ended (the transport's connection still says the peer is down):
    /// the peer is up, with the incarnation it linked as, because its
    /// batches can arrive from then on; unlinked, it is down again as its
    /// connection says.
    #[test]
    fn linked_rings_make_their_peer_up_before_its_handshake_ends() {
        let d = TestDir::new("linked-up");
        let secret = crate::transport::handshake::Secret::random();
        let b = process(&d.0, &secret, 1, 1);
        until("island 0, never connected, down at island 1", || {
            b.peer_down(0)
        });
        let segment = Segment::create_memfd(0x5e7, 1, 0, 1 << 12).unwrap();
        let bells = Bells::create_memfd(0x5e7, 0, 1).unwrap();
        let token = b.attach_as(segment, bells, 7).unwrap();
        assert!(!b.peer_down(0), "linked rings: the peer is up");
        assert_eq!(
            b.peer_incarnation(0),
            7,
            "with the incarnation it linked as"
        );
        b.detach(0, token);
        assert!(b.peer_down(0), "unlinked: down, as its connection says");
        assert_eq!(b.peer_incarnation(0), 7, "its last incarnation is kept");
    }

    /// A process sends to a peer that has not linked yet (it is starting,
    /// or restarting): the batches wait, and reach the peer in order once
    /// it links, none dropped. Batches that wait while the peer is down go
    /// to the same incarnation if it comes back, and are dropped (counted
    /// as stale) if another incarnation links instead.
    #[test]
    fn batches_sent_before_a_peer_links_reach_it_once_it_does() {
        let d = TestDir::new("park");
        let secret = crate::transport::handshake::Secret::random();
        let a = process(&d.0, &secret, 0, 1);
        for seq in 0..3 {
            a.send(Endpoint(0), Endpoint(1), batch(&a, seq, 40))
                .unwrap();
        }
        let p = a.peers()[0].clone();
        assert_eq!((p.parked, p.dropped), (3, 0), "{p:?}");
        let b = process(&d.0, &secret, 1, 1);
        for seq in 0..3 {
            let (from, got) = recv_wait(&b, Endpoint(1));
            assert_eq!((from, seq_of(&got)), (Endpoint(0), seq));
            b.recycle(got);
        }
        until("island 1 up at island 0", || !a.peer_down(1));
        let p = a.peers()[0].clone();
        assert_eq!((p.parked, p.dropped, p.batches_out), (0, 0, 3), "{p:?}");

        // Down, then back as the same incarnation (a lost connection):
        // what waited is delivered.
        drop(b);
        until("island 1 down at island 0", || a.peer_down(1));
        a.send(Endpoint(0), Endpoint(1), batch(&a, 10, 40)).unwrap();
        let b = process(&d.0, &secret, 1, 1);
        let (_, got) = recv_wait(&b, Endpoint(1));
        assert_eq!(seq_of(&got), 10);
        b.recycle(got);
        until("island 1 up at island 0", || !a.peer_down(1));

        // Down, then back as a new incarnation: what waited was for the
        // one that died.
        drop(b);
        until("island 1 down at island 0", || a.peer_down(1));
        for seq in 20..22 {
            a.send(Endpoint(0), Endpoint(1), batch(&a, seq, 40))
                .unwrap();
        }
        let b = process(&d.0, &secret, 1, 2);
        until("island 1 up at island 0", || {
            !a.peer_down(1) && a.peers()[0].incarnation == 2
        });
        a.send(Endpoint(0), Endpoint(1), batch(&a, 30, 40)).unwrap();
        let (_, got) = recv_wait(&b, Endpoint(1));
        assert_eq!(seq_of(&got), 30, "a batch for the dead incarnation arrived");
        b.recycle(got);
        let p = a.peers()[0].clone();
        assert_eq!((p.parked, p.dropped_stale, p.dropped), (0, 2, 2), "{p:?}");

        // A peer that never links holds at most PARKED_MAX batches.
        drop(b);
        until("island 1 down at island 0", || a.peer_down(1));
        for seq in 0..PARKED_MAX as u64 + 5 {
            a.send(Endpoint(0), Endpoint(1), batch(&a, seq, 8)).unwrap();
        }
        let p = a.peers()[0].clone();
        assert_eq!(
            (p.parked, p.dropped_unlinked),
            (PARKED_MAX as u64, 5),
            "{p:?}"
        );
        assert_eq!(a.unroutable(), 0);
    }
}
