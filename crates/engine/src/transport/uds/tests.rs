//! Several `Uds` transports in one process, one per island, each on its own
//! socket path in a temporary directory.

use super::*;
use crate::transport::handshake::{build_id, WIRE_VERSION};
use crate::transport::{frames, push_frame};
use std::io::Read;

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "islands-uds-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn paths(&self, n: usize) -> Vec<PathBuf> {
        (0..n)
            .map(|i| self.0.join(format!("island-{i}.sock")))
            .collect()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const SECRET: &str = "uds-test-secret-0123456789";

fn hello(workers: &[u32], me: IslandId, incarnation: u64) -> Hello {
    Hello {
        wire_version: WIRE_VERSION,
        transport: crate::transport::join::Kind::Uds,
        build_id: build_id(),
        deployment: 0xfeed,
        island: me,
        incarnation,
        schema: 1,
        catalog: 2,
        workers: workers.to_vec(),
    }
}

fn config(
    dir: &TempDir,
    workers: &[u32],
    me: IslandId,
    incarnation: u64,
    secret: &str,
) -> UdsConfig {
    let mut c = UdsConfig::new(
        Layout::new(workers, me),
        dir.paths(workers.len()),
        Secret::new(secret.as_bytes().to_vec()).unwrap(),
        hello(workers, me, incarnation),
    );
    c.send_queue = 8;
    c.mailbox_depth = 8;
    c
}

fn open(dir: &TempDir, workers: &[u32], me: IslandId, incarnation: u64) -> Uds {
    Uds::new(config(dir, workers, me, incarnation, SECRET)).unwrap()
}

/// Waits (polling) until `f` holds; fails after a generous bound, so a
/// loaded machine only makes the test slower.
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn peer(u: &Uds, island: IslandId) -> PeerStats {
    u.peers().into_iter().find(|p| p.island == island).unwrap()
}

/// Sends one frame `payload` from `from` to `to`, retrying while full.
fn send(u: &Uds, from: u32, to: u32, payload: &[u8]) {
    let mut b = u.buffer();
    push_frame(&mut b, payload);
    let end = Instant::now() + Duration::from_secs(30);
    while let Err(Full(back)) = u.send(Endpoint(from), Endpoint(to), b) {
        assert!(Instant::now() < end, "the send queue stayed full");
        b = back;
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Waits for the next batch for `me`, sleeping on its bell.
fn recv(u: &Uds, me: u32) -> (Endpoint, Vec<u8>) {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(x) = u.recv(Endpoint(me)) {
            return x;
        }
        assert!(Instant::now() < end, "no batch for endpoint {me}");
        let bell = u.bell(Endpoint(me));
        bell.prepare_sleep();
        if let Some(x) = u.recv(Endpoint(me)) {
            bell.cancel_sleep();
            return x;
        }
        bell.sleep(Duration::from_millis(50));
    }
}

fn one_frame(b: &[u8]) -> Vec<u8> {
    let f: Vec<&[u8]> = frames(b).map(|f| f.unwrap()).collect();
    assert_eq!(f.len(), 1);
    f[0].to_vec()
}

#[test]
fn ping_pong_across_islands() {
    let dir = TempDir::new("ping");
    let workers = [1, 2];
    let a = open(&dir, &workers, 0, 1);
    let b = open(&dir, &workers, 1, 1);
    // Local batches stay in the process.
    send(&b, 1, 2, b"local");
    assert_eq!(
        recv(&b, 2),
        (Endpoint(1), {
            let mut x = Vec::new();
            push_frame(&mut x, b"local");
            x
        })
    );
    for i in 0..300u32 {
        send(&a, 0, 1 + i % 2, &i.to_le_bytes());
        let (from, got) = recv(&b, 1 + i % 2);
        assert_eq!(from, Endpoint(0), "the sender is island 0's worker 0");
        assert_eq!(one_frame(&got), i.to_le_bytes());
        b.recycle(got);
        send(&b, 1 + i % 2, 0, &(i + 1).to_le_bytes());
        let (from, got) = recv(&a, 0);
        assert_eq!(from, Endpoint(1 + i % 2));
        assert_eq!(one_frame(&got), (i + 1).to_le_bytes());
    }
    let (pa, pb) = (peer(&a, 1), peer(&b, 0));
    assert_eq!(pa.state, PeerState::Up);
    assert_eq!((pa.batches_out, pa.batches_in), (300, 300));
    assert_eq!((pb.batches_out, pb.batches_in), (300, 300));
    assert!(pa.bytes_out >= 300 * (HEADER as u64 + 8));
    assert_eq!((pa.dropped, pa.refusals, pa.reconnects), (0, 0, 0));
    assert_eq!(pa.incarnation, 1);
    assert!(pa.last_heard.is_some());
    assert_eq!(a.peers().len(), 1, "no entry for the island itself");
    // Each batch crossed with at least one write by the sender and one read
    // by the receiver (a write or read may carry several, and heartbeats
    // add theirs).
    for (u, name) in [(&a, "a"), (&b, "b")] {
        let (send, recv) = u.syscalls();
        assert!(send >= 300, "{name}: {send} send system calls");
        assert!(recv >= 1, "{name}: {recv} receive system calls");
        assert!(recv <= 4 * 300 + 100, "{name}: {recv} receive system calls");
    }
}

#[test]
fn a_shutdown_writes_what_is_queued_first() {
    let dir = TempDir::new("drain");
    let workers = [1, 1];
    let a = open(&dir, &workers, 0, 1);
    let b = open(&dir, &workers, 1, 1);
    until("connected", || peer(&b, 0).state == PeerState::Up);
    for i in 0..8u32 {
        send(&b, 1, 0, &i.to_le_bytes());
    }
    drop(b);
    for i in 0..8u32 {
        assert_eq!(one_frame(&recv(&a, 0).1), i.to_le_bytes());
    }
}

#[test]
fn order_is_kept_between_two_endpoints() {
    let dir = TempDir::new("order");
    let workers = [2, 1, 1];
    let us: Vec<Uds> = (0..3).map(|i| open(&dir, &workers, i, 1)).collect();
    // Batches for a peer not yet up may be dropped: start once all are up.
    until("every island is connected", || {
        us.iter()
            .all(|u| u.peers().iter().all(|p| p.state == PeerState::Up))
    });
    let n = 2_000u32;
    let receiver = std::thread::scope(|s| {
        let r = s.spawn(|| {
            // Island 2's only worker hears from island 0's worker 1 and
            // island 1's worker; each sender's sequence arrives in order.
            let mut next = [0u32; 2];
            while next != [n, n] {
                let (from, b) = recv(&us[2], 3);
                for f in frames(&b) {
                    let v = u32::from_le_bytes(f.unwrap().try_into().unwrap());
                    let k = if from == Endpoint(1) { 0 } else { 1 };
                    assert_eq!(from, [Endpoint(1), Endpoint(2)][k]);
                    assert_eq!(v, next[k], "out of order from {from:?}");
                    next[k] += 1;
                }
                us[2].recycle(b);
            }
            next
        });
        s.spawn(|| (0..n).for_each(|i| send(&us[1], 2, 3, &i.to_le_bytes())));
        (0..n).for_each(|i| send(&us[0], 1, 3, &i.to_le_bytes()));
        r.join().unwrap()
    });
    assert_eq!(receiver, [n, n]);
    assert_eq!(peer(&us[2], 0).batches_in, u64::from(n));
    assert_eq!(
        peer(&us[0], 2).dropped,
        0,
        "an up peer pushes back, never drops"
    );
}

#[test]
fn a_peer_that_goes_away_and_comes_back() {
    let dir = TempDir::new("reconnect");
    let workers = [1, 1];
    let a = open(&dir, &workers, 0, 1);
    let b = open(&dir, &workers, 1, 1);
    send(&a, 0, 1, b"first");
    assert_eq!(one_frame(&recv(&b, 1).1), b"first");
    until("island 1 hears island 0", || {
        peer(&b, 0).state == PeerState::Up
    });
    drop(b);
    until("island 0 sees island 1 gone", || {
        peer(&a, 1).state == PeerState::Down
    });
    // While down: the queue (8 batches) fills, then batches are dropped.
    for i in 0..20u32 {
        send(&a, 0, 1, &i.to_le_bytes());
    }
    until("the batches past the queue's cap are dropped", || {
        peer(&a, 1).dropped >= 12
    });
    // Island 1 comes back as a new incarnation: the batches queued for the
    // old one are dropped, and traffic flows again.
    let b = open(&dir, &workers, 1, 2);
    until("island 1 is back", || peer(&a, 1).state == PeerState::Up);
    let back = peer(&a, 1);
    assert_eq!(back.reconnects, 1);
    assert_eq!(back.incarnation, 2);
    assert_eq!(back.dropped, 20, "every batch sent while it was down");
    send(&a, 0, 1, b"again");
    assert_eq!(one_frame(&recv(&b, 1).1), b"again");
    send(&b, 1, 0, b"reply");
    assert_eq!(one_frame(&recv(&a, 0).1), b"reply");
    assert!(
        b.recv(Endpoint(1)).is_none(),
        "nothing of the old incarnation's"
    );
}

/// Connects to island 1 as island 0 by hand: the handshake, then raw frames.
fn raw_island_0(dir: &TempDir, workers: &[u32], secret: &str) -> Result<UnixStream, Refused> {
    let path = &dir.paths(workers.len())[1];
    let mut s = loop {
        match UnixStream::connect(path) {
            Ok(s) => break s,
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let me = hello(workers, 0, 1);
    let mut e = Expect::matching(&me);
    e.peer = Some(1);
    let secret = Secret::new(secret.as_bytes().to_vec()).unwrap();
    handshake::handshake(&mut s, &me, &e, &secret, true)?;
    Ok(s)
}

#[test]
fn a_frame_claiming_a_foreign_worker_is_refused() {
    let dir = TempDir::new("foreign");
    let workers = [2, 1];
    let b = open(&dir, &workers, 1, 1);
    let mut s = raw_island_0(&dir, &workers, SECRET).unwrap();
    // A good frame from worker 1 is delivered as endpoint 1.
    let mut batch = Vec::new();
    push_frame(&mut batch, b"ok");
    let mut out = Vec::new();
    stream::encode(&mut out, 0, 1, Endpoint(2), &batch).unwrap();
    // Then one from worker 2, which island 0 does not have (it would be
    // island 1's endpoint 2 if taken as a global number).
    stream::encode(&mut out, 0, 2, Endpoint(2), &batch).unwrap();
    s.write_all(&out).unwrap();
    let (from, got) = recv(&b, 2);
    assert_eq!(from, Endpoint(1));
    assert_eq!(one_frame(&got), b"ok");
    // The connection is closed, counted, and nothing else is delivered.
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    until("the refusal is counted", || peer(&b, 0).refusals == 1);
    assert!(b.recv(Endpoint(2)).is_none());
    assert_eq!(peer(&b, 0).batches_in, 1);
}

/// A peer that says goodbye is down at once, long before its dead interval
/// (30 s here), although its connection stays open: nothing else could
/// explain it. The goodbye is counted, and nothing after it is delivered.
#[test]
fn a_goodbye_makes_the_peer_down_at_once() {
    let dir = TempDir::new("goodbye");
    let workers = [1, 1];
    let mut c = config(&dir, &workers, 1, 1, SECRET);
    c.dead_after = Duration::from_secs(30);
    let b = Uds::new(c).unwrap();
    let mut s = raw_island_0(&dir, &workers, SECRET).unwrap();
    until("island 0 is up at island 1", || {
        peer(&b, 0).state == PeerState::Up
    });
    let epoch = b.peer_epoch();
    let t = Instant::now();
    let mut batch = Vec::new();
    push_frame(&mut batch, b"late");
    let mut out = stream::goodbye().to_vec();
    stream::encode(&mut out, 0, 0, Endpoint(1), &batch).unwrap();
    s.write_all(&out).unwrap();
    until("island 0 is down at island 1", || b.peer_down(0));
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "down after {:?}: the dead interval, not the goodbye",
        t.elapsed()
    );
    assert_ne!(b.peer_epoch(), epoch, "going down moves the epoch");
    let p = peer(&b, 0);
    assert_eq!(
        (p.state, p.goodbyes, p.refusals),
        (PeerState::Down, 1, 0),
        "{p:?}"
    );
    assert!(b.recv(Endpoint(1)).is_none(), "nothing after a goodbye");
}

/// A shutdown says goodbye to every peer that is up, after what it had
/// queued.
#[test]
fn a_shutdown_says_goodbye_after_what_it_queued() {
    let dir = TempDir::new("bye");
    let workers = [1, 1, 1];
    let us: Vec<Uds> = (0..3).map(|i| open(&dir, &workers, i, 1)).collect();
    until("every island is connected", || {
        us.iter()
            .all(|u| u.peers().iter().all(|p| p.state == PeerState::Up))
    });
    let mut us = us.into_iter();
    let (a, b, c) = (us.next().unwrap(), us.next().unwrap(), us.next().unwrap());
    send(&b, 1, 0, b"before the goodbye");
    b.shutdown();
    assert_eq!(one_frame(&recv(&a, 0).1), b"before the goodbye");
    until("islands 0 and 2 count island 1 down", || {
        a.peer_down(1) && c.peer_down(1)
    });
    assert_eq!(peer(&a, 1).goodbyes, 1, "{:?}", peer(&a, 1));
    assert_eq!(peer(&c, 1).goodbyes, 1, "{:?}", peer(&c, 1));
    assert_eq!(peer(&a, 2).goodbyes, 0, "island 2 stays");
    assert!(!a.peer_down(2));
}

/// A goodbye is a frame: as the first bytes of a connection, before any
/// handshake, it is refused like anything else that is not a handshake.
#[test]
fn a_goodbye_before_the_handshake_is_refused() {
    let dir = TempDir::new("early-bye");
    let workers = [1, 1];
    let b = open(&dir, &workers, 1, 1);
    let path = &dir.paths(2)[1];
    let mut s = loop {
        match UnixStream::connect(path) {
            Ok(s) => break s,
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    // As many goodbyes as a handshake's first message could take.
    let byes: Vec<u8> = (0..64).flat_map(|_| stream::goodbye()).collect();
    let _ = s.write_all(&byes);
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    until("the connection is refused", || {
        b.unattributed_refusals() == 1
    });
    let p = peer(&b, 0);
    assert_eq!((p.goodbyes, p.batches_in), (0, 0), "{p:?}");
    assert_eq!(p.state, PeerState::Connecting);
}

#[test]
fn a_wrong_secret_is_refused() {
    let dir = TempDir::new("secret");
    let workers = [1, 1];
    let a = Uds::new(config(&dir, &workers, 0, 1, "the-right-secret-123")).unwrap();
    let b = Uds::new(config(&dir, &workers, 1, 1, "a-wrong-secret-12345")).unwrap();
    until("both sides refused", || {
        peer(&a, 1).refusals >= 1 && b.unattributed_refusals() >= 1
    });
    assert_eq!(peer(&a, 1).state, PeerState::Connecting);
    assert_eq!(peer(&b, 0).state, PeerState::Connecting);
    // A hand-made island 0 with the wrong secret fails the same way.
    drop(a);
    assert!(matches!(
        raw_island_0(&dir, &workers, "the-right-secret-123"),
        Err(Refused::BadMac)
    ));
}

#[test]
fn bad_configs_are_refused() {
    let dir = TempDir::new("config");
    let mut c = config(&dir, &[1, 1], 0, 1, SECRET);
    c.paths.pop();
    assert!(Uds::new(c).is_err());
    let mut c = config(&dir, &[1, 1], 0, 1, SECRET);
    c.hello.workers = vec![1, 2];
    let e = Uds::new(c).err().unwrap();
    assert!(e.to_string().contains("workers"), "{e}");
    std::fs::write(dir.paths(2)[0].clone(), b"not a socket").unwrap();
    let e = Uds::new(config(&dir, &[1, 1], 0, 1, SECRET)).err().unwrap();
    assert!(e.to_string().contains("not a socket"), "{e}");
}

/// Large batches from two senders fill the socket while the receiver is
/// slow: senders' own writes end in part or not at all, the send thread
/// writes the rest, and every batch arrives whole and in its sender's order.
#[test]
fn large_batches_from_a_full_socket_arrive_whole_and_in_order() {
    let dir = TempDir::new("carry");
    let workers = [2, 1];
    let us: Vec<Uds> = (0..2).map(|i| open(&dir, &workers, i, 1)).collect();
    until("both islands are connected", || {
        us.iter()
            .all(|u| u.peers().iter().all(|p| p.state == PeerState::Up))
    });
    let n = 300u32;
    let body = |sender: u32, i: u32| -> Vec<u8> {
        let len = 20_000 + (i as usize * 7919) % 40_000;
        (0..len)
            .map(|j| (j as u32 ^ i.wrapping_mul(2654435761) ^ sender) as u8)
            .collect()
    };
    std::thread::scope(|s| {
        for sender in 0..2u32 {
            let (u, body) = (&us[0], &body);
            s.spawn(move || (0..n).for_each(|i| send(u, sender, 2, &body(sender, i))));
        }
        // A slow start: the mailbox, then the socket, fill up behind it.
        std::thread::sleep(Duration::from_millis(200));
        let mut next = [0u32; 2];
        while next != [n, n] {
            let (from, b) = recv(&us[1], 2);
            let k = from.0 as usize;
            for f in frames(&b) {
                assert_eq!(
                    f.unwrap(),
                    &body(k as u32, next[k])[..],
                    "batch {} of {k}",
                    next[k]
                );
                next[k] += 1;
            }
            us[1].recycle(b);
        }
    });
    assert_eq!(peer(&us[1], 0).batches_in, u64::from(2 * n));
    assert_eq!(peer(&us[0], 1).dropped, 0);
    assert_eq!(peer(&us[1], 0).refusals, 0);
    assert_eq!(peer(&us[1], 0).reconnects, 0);
}
